"""Packed, CP-sliced training through dcp_step equals unpacked per-sequence training (dcpack.thd).

Each case plans and steps three global batches with dcpack (one scheduler, CP
partition, THD padding setting and trace family), trains :class:`dcpack.thd.THDTransformer`
on every rank's microbatches (CP attention over the microbatch's CP group,
gradients summed over DPxCP), and compares, on rank 0, against the same model
trained in one process on each sequence alone, unpacked, with plain causal
attention:

- the loss of step 1,
- every parameter's gradient after step 1,
- every parameter's change after three SGD (momentum) steps.

Run by ``test_thd_equality.py`` on the CPU (gloo, 1 to 4 spawned processes) and,
unchanged, on GPUs::

    torchrun --nproc-per-node N python/tests/thd_equality.py --device cuda --out result.json

Microbatches come from dcpack's CPU step (``--source inproc``: every process
steps all N ranks over the in-process communicator, deterministically, and keeps
its own) or from ``dcpack.torch.CudaStepper`` (``--source cuda``).  Planted
errors (the ``planted`` cases) corrupt one rank's microbatch of step 1 the way a
wrong data plane would; the comparison must then fail:

- ``swap_chunks``: a zigzag CP rank holds its two chunks of a span in the wrong order;
- ``shift_position``: one real token's position id off by one;
- ``pad_in_loss``: a padding slot counted as a real token in the loss;
- ``pad_in_attention``: a padding slot moved before its span's last real token
  (that token attends to it);
- ``cu_off_by_one``: one ``cu_seqlens_padded`` boundary one short, so a padding
  token heads the next sequence.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE.parent.parent / "tests" / "data" / "workloads"

try:
    import torch
    import torch.distributed as dist

    import dcpack  # noqa: E402
    from dcpack.thd import CPGroups, ModelConfig, THDBatch, THDTransformer, train_step  # noqa: E402
except ImportError as _missing:
    # run as a program: --help works without torch, anything else says what to install
    if __name__ != "__main__":
        raise
    if not any(a in ("-h", "--help") for a in sys.argv[1:]):
        raise SystemExit(f"thd_equality.py needs torch and dcpack.thd: {_missing}") from None

FAMILIES = ("mlmdefault", "longsft", "bimodal", "uniform32k")
PLANTS = ("swap_chunks", "shift_position", "pad_in_loss", "pad_in_attention", "cu_off_by_one")
STEPS = 3
LR, MOMENTUM = 0.1, 0.9
M = 16            # max_seqlen_per_rank of the small batches (tokens)
VOCAB = 97

# Tolerances (relative to the largest magnitude of the compared quantity).
# fp32: packed and unpacked runs sum the same terms in different orders (GEMMs over a whole
# microbatch against per-sequence GEMMs, partial gradients summed over ranks, CP pieces of a
# softmax's keys gathered); each sum of k fp32 terms carries about sqrt(k) * 6e-8 relative error,
# k <= a few thousand here, so ~1e-6.  The bounds sit 10x above that; every planted error moves
# the compared quantities by 1e-3 or more (test_thd_equality.py checks each one fails).
FP32_TOL = {"loss": 1e-5, "grad": 1e-4, "update": 2e-3}
# bf16 (GPU, varlen kernel, bf16 parameters): 8 mantissa bits, ~4e-3 per rounding, several roundings
# deep; measured on 2 x H200 (2026-11-28): loss <= 1.2e-4, gradients <= 1.7e-2.  Updates are not
# compared: with bf16 parameters and no fp32 master copy an SGD step smaller than half a weight's
# bf16 ulp is lost (a norm weight at 1.0 has an ulp of 2^-7), so the fp32 reference's updates cannot
# be reproduced.  Planted errors are an fp32 check (some move gradients by only 3e-2).
BF16_TOL = {"loss": 1e-3, "grad": 4e-2, "update": math.inf}


def case_name(c: Dict[str, Any]) -> str:
    s = f"{c['scheduler']}" + (f"_cp{c['cp']}" if c["scheduler"] == "dp_balanced" else "")
    s += f"_{c['partition']}_pad{c['pad']}" + ("_extend" if c.get("tail") == "extend_last" else "")
    s += f"_{c['family']}_w{c['world']}"
    return s + (f"+{c['plant']}" if c.get("plant") else "")


def matrix(world: int, full: bool = True) -> List[Dict[str, Any]]:
    """The cases of one world size: every scheduler, CP partition and padding setting, over the families."""
    kinds = [("dp_balanced", 1)]
    if world % 2 == 0:
        kinds.append(("dp_balanced", 2))
    kinds += [("dynamic_cp", 1), ("balanced", 1)]
    out = []
    k = 0
    for scheduler, cp in kinds:
        cp_capable = (cp > 1) or (scheduler != "dp_balanced" and world > 1)
        for partition in (("zigzag", "contiguous") if cp_capable else ("zigzag",)):
            for pad in (0, 8):
                fams = FAMILIES if full else (FAMILIES[k % len(FAMILIES)],)
                for fam in fams:
                    out.append(dict(world=world, scheduler=scheduler, cp=cp, partition=partition, pad=pad,
                                    tail="append_dummy", family=fam))
                k += 1
    # the other THD tail policy once per world
    out.append(dict(world=world, scheduler="dynamic_cp" if world > 1 else "dp_balanced", cp=1, partition="zigzag",
                    pad=8, tail="extend_last", family=FAMILIES[world % len(FAMILIES)]))
    return out


def planted(world: int) -> List[Dict[str, Any]]:
    """One case per planted error (CP 2 zigzag where a chunk swap needs it)."""
    out = []
    for plant in PLANTS:
        if plant == "swap_chunks" and world < 2:
            continue
        if plant == "cu_off_by_one" and world % 2:
            continue  # these batches put one sequence per CP-1 microbatch on 1 and 3 ranks: no boundary to move
        if plant == "swap_chunks":
            c = dict(scheduler="dynamic_cp", cp=1, partition="zigzag", pad=0, family="longsft")
        elif plant == "cu_off_by_one":  # CP 1 microbatches holding several sequences
            c = dict(scheduler="dp_balanced", cp=1, partition="zigzag", pad=8, family="mlmdefault")
        else:
            c = dict(scheduler="dynamic_cp", cp=1, partition="zigzag", pad=8, family="mlmdefault")
        out.append(dict(world=world, tail="append_dummy", plant=plant, **c))
    return out


# ---- batches -------------------------------------------------------------------------------------

def global_batch(c: Dict[str, Any], step: int) -> Dict[str, list]:
    """A small global batch from the trace family: lengths scaled so the 90th percentile is M tokens."""
    world = c["world"]
    trace = np.loadtxt(WORKLOADS / f"{c['family']}_n256_seed1.txt", dtype=np.int64).reshape(-1)
    group = c["cp"] if c["scheduler"] == "dp_balanced" else world
    cap = M * group
    count = 5 * world
    raw = trace[(step * count) % (len(trace) - count):][:count]
    scale = M / float(np.percentile(trace, 90))
    original = [int(min(cap, max(1, math.ceil(v * scale)))) for v in raw]
    # every padded span a multiple of 2x any CP group a sequence can get (docs/step.md): the powers of
    # two up to the world and, for the full-group fallback, the world itself
    divisor = math.lcm(2 * (1 << (world.bit_length() - 1)), 2 * world)
    padded = [min(cap, ((v + divisor - 1) // divisor) * divisor) for v in original]
    rng = np.random.default_rng(1000 * step + len(case_name(c)))
    b: Dict[str, list] = {"original": original, "padded": padded, "tokens": [], "labels": [], "loss_mask": [],
                          "position_ids": []}
    for o, p in zip(original, padded):
        b["tokens"].append(rng.integers(1, VOCAB, size=p, dtype=np.int64))
        b["labels"].append(rng.integers(0, VOCAB, size=p, dtype=np.int64))
        mask = (rng.random(p) < 0.8).astype(np.float32)   # some tokens out of the loss, as a prompt would be
        mask[0] = 1.0
        b["loss_mask"].append(mask)
        b["position_ids"].append(np.arange(p, dtype=np.int64))
    return b


def dcpack_config(c: Dict[str, Any], count: int) -> dcpack.Config:
    world = c["world"]
    dp, cp = (world // c["cp"], c["cp"]) if c["scheduler"] == "dp_balanced" else (world, 1)
    return dcpack.Config(scheduler=c["scheduler"], data_parallel_size=dp, context_parallel_size=cp,
                         max_sequences=count, max_seqlen_per_rank=M, max_tokens_per_rank=1 << 14,
                         pad_alignment=c["pad"], thd_tail_policy=c["tail"], cp_partition=c["partition"])


def dp_ids(n: int, dp: int, p: int) -> range:
    return range(n * p // dp, n * (p + 1) // dp)


def samples_of(config: dcpack.Config, batch: Dict[str, list], dpxcp: int, device: Any = None) -> list:
    ids = dp_ids(len(batch["padded"]), config.data_parallel_size, dpxcp // config.context_parallel_size)

    def f(x):
        return torch.as_tensor(x, device=device) if device is not None else x
    return [dcpack.Sample(tokens=f(batch["tokens"][i]), labels=f(batch["labels"][i]),
                          loss_mask=f(batch["loss_mask"][i]), position_ids=f(batch["position_ids"][i]),
                          original_length=batch["original"][i]) for i in ids]


def inproc_microbatches(config: dcpack.Config, batch: Dict[str, list], rank: int):
    """(plan copy, this rank's microbatches as numpy dicts): dcp_step of all ranks over the in-process communicator."""
    cluster = dcpack.InprocCluster(config, timeout_ms=60000)

    def body(w):
        out = dcpack.Stepper(config).step(samples_of(config, batch, w), cluster.args(w))
        return out.copy()
    res = cluster.run(body)
    for r in res:
        if isinstance(r, BaseException):
            raise r
    out = res[rank]
    return out.plan.copy(), [_fields(out.microbatch(m)) for m in range(out.num_microbatches)]


def _fields(mb) -> Dict[str, Any]:
    d = {k: getattr(mb, k) for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask")}
    host = getattr(mb, "cu_seqlens_padded_host", None)
    d["cu_seqlens_padded"] = np.asarray(host if host is not None else mb.cu_seqlens_padded).astype(np.int64)
    hc = getattr(mb, "cu_seqlens_host", None)
    d["cu_seqlens"] = np.asarray(hc if hc is not None else mb.cu_seqlens).astype(np.int64)
    for k in ("max_seqlen", "local_cp_size", "cp_rank"):
        d[k] = int(getattr(mb, k))
    return d


class CudaSource:
    """Microbatches from dcpack.torch.CudaStepper (dcpack's NCCL communicators), one stepper per configuration."""

    def __init__(self) -> None:
        import dcpack.torch as dt
        self.dt = dt
        self._steppers: Dict[str, Any] = {}

    def __call__(self, config: dcpack.Config, batch: Dict[str, list], rank: int, device: Any):
        key = json.dumps(config.to_dict(), sort_keys=True, default=str)
        if key not in self._steppers:
            groups = self.dt.NcclGroups(config, dp_cp_rank=rank, device=device)
            self._steppers[key] = self.dt.CudaStepper(config, groups)
        out = self._steppers[key].step(samples_of(config, batch, rank, device)).clone()
        return out.plan, [_fields(out.microbatch(m)) for m in range(out.num_microbatches)]


# ---- planted errors --------------------------------------------------------------------------------

def _np(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v.cpu().numpy().copy() if isinstance(v, torch.Tensor) else
                (v.copy() if isinstance(v, np.ndarray) else v)) for k, v in d.items()}


def _site(plant: str, d: Dict[str, Any]) -> Optional[Any]:
    """Where ``plant`` can corrupt this microbatch (None: it cannot)."""
    pad = np.asarray(d["padding_mask"].cpu() if isinstance(d["padding_mask"], torch.Tensor) else d["padding_mask"])
    cup = [int(v) for v in d["cu_seqlens_padded"]]
    cu = [int(v) for v in d["cu_seqlens"]]
    if plant == "swap_chunks":
        if d["local_cp_size"] < 2:
            return None
        cp = d["local_cp_size"]
        for i in range(len(cup) - 1):
            if cup[i + 1] - cup[i] >= 2 * cp:
                return (cup[i] // cp, (cup[i + 1] - cup[i]) // (2 * cp))
        return None
    if plant == "shift_position":
        real = np.flatnonzero(~pad)
        return int(real[len(real) // 2]) if len(real) else None
    if plant == "pad_in_loss":
        slots = np.flatnonzero(pad)
        return int(slots[0]) if len(slots) else None
    if plant == "pad_in_attention":
        # CP 1: a span whose last real token is followed by a padding slot
        if d["local_cp_size"] != 1:
            return None
        for i in range(len(cup) - 1):
            for j in range(cup[i], cup[i + 1] - 1):
                if not pad[j] and pad[j + 1]:
                    return j
        return None
    if plant == "cu_off_by_one":
        # CP 1: a span ending in padding, followed by a span with real tokens; moving the boundary one
        # slot earlier puts that padding token at the head of the next sequence
        if d["local_cp_size"] != 1:
            return None
        for i in range(1, len(cup) - 1):
            if pad[cup[i] - 1] and cup[i + 1] > cup[i] and not pad[cup[i]:cup[i + 1]].all():
                return i
        return None
    raise ValueError(plant)


def _corrupt(plant: str, d: Dict[str, Any], site: Any) -> Dict[str, Any]:
    d = _np(d)
    if plant == "swap_chunks":      # the slicer took chunk 2cp-1-r before chunk r
        o, c = site
        for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
            a = d[k]
            a[o:o + 2 * c] = np.concatenate([a[o + c:o + 2 * c], a[o:o + c]])
    elif plant == "shift_position":  # one position id off by one
        d["position_ids"][site] += 1
    elif plant == "pad_in_loss":     # a padding slot counted as a real token in the loss
        d["padding_mask"][site] = False
        d["loss_mask"][site] = 1.0
        d["labels"][site] = 1
    elif plant == "pad_in_attention":  # a padding slot before its span's last real token, which then attends to it
        j = site
        for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
            d[k][j], d[k][j + 1] = d[k][j + 1].copy(), d[k][j].copy()
    elif plant == "cu_off_by_one":  # cu_seqlens_padded one short: a padding token joins the next sequence
        d["cu_seqlens_padded"][site] -= 1
    return d


# ---- the run -----------------------------------------------------------------------------------------

def reference(mc: ModelConfig, batches: List[Dict[str, list]], device: Any):
    """Unpacked per-sequence training in one process: (loss of step 1, grads of step 1, parameter changes)."""
    model = THDTransformer(mc, device)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss1 = grads1 = None
    for s, b in enumerate(batches):
        model.zero_grad(set_to_none=False)
        den = float(sum(float(b["loss_mask"][i][:o].astype(np.float64).sum()) for i, o in enumerate(b["original"])))
        total = 0.0
        for i, o in enumerate(b["original"]):
            t = torch.as_tensor(b["tokens"][i][:o], device=device)
            logits = model.forward_dense(t, torch.as_tensor(b["position_ids"][i][:o], device=device))
            ce = torch.nn.functional.cross_entropy(logits.float(), torch.as_tensor(b["labels"][i][:o], device=device),
                                                   reduction="none")
            loss = (ce * torch.as_tensor(b["loss_mask"][i][:o], device=device)).sum() / torch.tensor(
                den, dtype=torch.float64).float()
            loss.backward()
            total += float(loss.detach())
        if s == 0:
            loss1 = total
            grads1 = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    return loss1, grads1, {n: (p.detach() - w0[n]) for n, p in model.named_parameters()}


def _rel_all(got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """Per parameter: max |got - want| over max(max |want|, 1e-3 x the largest |want| of any parameter).

    The floor keeps a parameter whose reference value is exactly zero up to rounding (wq's gradient
    when every sequence of a batch has one token: a softmax over one key) from dividing noise by noise.
    """
    top = max(float(w.abs().max()) for w in want.values())
    return {n: float((got[n].float() - w.float()).abs().max()) / max(float(w.abs().max()), 1e-3 * top, 1e-30)
            for n, w in want.items()}


def run_case(c: Dict[str, Any], rank: int, world: int, device: torch.device, mc: ModelConfig, groups: CPGroups,
             source: Any) -> Optional[Dict[str, Any]]:
    batches = [global_batch(c, s) for s in range(STEPS)]
    config = dcpack_config(c, len(batches[0]["padded"]))
    model = THDTransformer(mc, device)
    w0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss1 = grads1 = None
    info = {"microbatches": [], "cp_sizes": set(), "planted_at": None}
    for s, b in enumerate(batches):
        plan, mbs = source(config, b, rank) if not isinstance(source, CudaSource) else source(config, b, rank, device)
        groups.ensure(plan)
        if s == 0 and c.get("plant"):
            sites = [_site(c["plant"], d) for d in mbs]
            first = next((m for m, x in enumerate(sites) if x is not None), 1 << 20)
            key = torch.tensor([first * world + rank if first < (1 << 20) else 1 << 40], dtype=torch.int64,
                               device=device)
            dist.all_reduce(key, op=dist.ReduceOp.MIN)
            key = int(key)
            if key < (1 << 40) and key % world == rank:
                m = key // world
                mbs[m] = _corrupt(c["plant"], mbs[m], sites[m])
            info["planted_at"] = None if key >= (1 << 40) else (key // world, key % world)
        thd = [THDBatch.from_fields(partition=c["partition"], device=device,
                                    group=groups.get(rank - d["cp_rank"], d["local_cp_size"]), **d) for d in mbs]
        info["microbatches"].append(len(thd))
        info["cp_sizes"].update(d["local_cp_size"] for d in mbs)
        loss = train_step(model, thd)
        if s == 0:
            loss1 = loss
            grads1 = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    delta = {n: (p.detach() - w0[n]) for n, p in model.named_parameters()}
    if rank != 0:
        return None
    # the reference in fp32 on the same device
    ref_loss, ref_grads, ref_delta = reference(mc.replace(dtype=torch.float32, attention="math"), batches, device)
    g, u = _rel_all(grads1, ref_grads), _rel_all(delta, ref_delta)
    return {
        "case": case_name(c), "plant": c.get("plant"), "planted_at": info["planted_at"],
        "microbatches": info["microbatches"], "cp_sizes": sorted(info["cp_sizes"]),
        "loss": loss1, "ref_loss": ref_loss, "loss_rel": abs(loss1 - ref_loss) / abs(ref_loss),
        "grad_rel": max(g.values()), "update_rel": max(u.values()), "worst_grad": max(g, key=g.get),
    }


def verdict(r: Dict[str, Any], tol: Dict[str, float]) -> bool:
    """True when a result is within every tolerance."""
    return r["loss_rel"] <= tol["loss"] and r["grad_rel"] <= tol["grad"] and r["update_rel"] <= tol["update"]


def worker(rank: int, world: int, backend: str, device_kind: str, init: str, cases: List[Dict[str, Any]],
           out_path: str, dtype: str, kernel: str, source_kind: str) -> None:
    if device_kind == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
    mc = ModelConfig(vocab_size=VOCAB, hidden=32, layers=2, heads=4, kv_heads=2, ffn=48,
                     dtype=torch.float32 if dtype == "fp32" else torch.bfloat16, attention=kernel)
    groups = CPGroups(world)
    source = CudaSource() if source_kind == "cuda" else inproc_microbatches
    results = []
    for c in cases:
        if c["world"] != world:
            continue
        t0 = time.monotonic()
        try:
            r = run_case(c, rank, world, device, mc, groups, source)
        except Exception as e:  # noqa: BLE001 - reported per case; the run goes on
            r = {"case": case_name(c), "plant": c.get("plant"), "error": f"{type(e).__name__}: {e}"}
            if rank != 0:
                print(f"rank {rank}: {r['error']}", file=sys.stderr, flush=True)
        if rank == 0:
            r["seconds"] = round(time.monotonic() - t0, 3)
            results.append(r)
        dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"world": world, "device": device_kind, "dtype": dtype, "kernel": kernel,
                       "source": source_kind, "results": results}, f, indent=1)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--kernel", default="math", choices=("math", "varlen"))
    ap.add_argument("--source", default="inproc", choices=("inproc", "cuda"))
    ap.add_argument("--cases", default="all", choices=("all", "small"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cases = matrix(world, full=a.cases == "all") + (planted(world) if a.dtype == "fp32" else [])
    worker(rank, world, "nccl" if a.device == "cuda" else "gloo", a.device, "env://", cases, a.out, a.dtype,
           a.kernel, a.source)
    if rank != 0:
        return 0
    tol = FP32_TOL if a.dtype == "fp32" else BF16_TOL
    bad = 0
    for r in json.load(open(a.out))["results"]:
        ok = "error" not in r and verdict(r, tol)
        want = r["plant"] is None
        status = "ok" if ok == want else "WRONG"
        bad += ok != want
        print(f"{status:5} {r['case']:60} " + (r.get("error") or
              f"loss {r['loss_rel']:.2e} grad {r['grad_rel']:.2e} update {r['update_rel']:.2e} cp {r['cp_sizes']}"))
    print(f"{'PASS' if not bad else 'FAIL'}: {bad} case(s) wrong, world {world}, {a.device}, {a.dtype}, {a.kernel}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
