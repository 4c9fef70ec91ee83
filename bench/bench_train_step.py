#!/usr/bin/env python3
"""Training step time of dcpack.thd's reference transformer on every scheduler's plans of the same batches.

Wall mode (``torchrun --nproc-per-node N bench/bench_train_step.py ...``): for each trace and
``max_seqlen_per_rank`` M, K global batches are cut from the trace (consecutive sequences, lengths
at most N*M, until the batch holds ``--tokens-per-rank`` x N tokens), each scheduler plans and
steps them with dcpack (the CPU data plane, every process stepping all N ranks in-process and
keeping its own microbatches, before any timing), and the model trains on them: forward and
backward of every microbatch with CP attention over the microbatch's CP group (NCCL all-gather of
K/V, reduce-scatter of dK/dV) and the gradient all-reduce over DPxCP at the end.  Every batch
runs once untimed (warm-up of its shapes), then ``--repeat`` times timed.  Reported per scheduler:
the median over the K batches of each batch's median step time (the slowest rank's: the step ends
with the all-reduce), tokens per second, and the plan's predicted makespans (barrier and dependency step
models, cost units of the configured cost model).

Replay mode (``--replay R``, one GPU, also run on rank 0 after the wall runs with R = N): the
plans are made for R ranks, every rank's microbatches run one after another on one GPU (a CP
rank's share with its peers' K/V replaced by its own, ``dcpack.thd.LOCAL_REPLAY``: the same
kernels on the same shapes), each timed, plus the CP communication priced from an all-gather and
a reduce-scatter measured on the GPUs of the wall run (``--comm-table``; a group of c ranks moving
n tokens each is priced as 2 GPUs moving (c-1)*n) and the gradient all-reduce measured there.  The
step time is then *composed* from those per-rank times under the barrier step model (each
microbatch ends when its slowest rank does) and the dependency model (a group starts when all its
ranks finished the previous microbatch), as docs/planning.md defines them.  Composed numbers are
labelled composed.  The replay rows keep every replayed microbatch (its padded spans, CP size,
slots, measured compute time and priced communication) for fitting a cost model.

    torchrun --nproc-per-node 2 bench/bench_train_step.py --out OUT/train_2gpu.json
    python bench/bench_train_step.py --replay 16 --comm-table OUT/train_2gpu.json --out OUT/replay16.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
import torch.distributed as dist

SOURCE = Path(__file__).resolve().parent.parent
WORKLOADS = SOURCE / "tests" / "data" / "workloads"

import dcpack  # noqa: E402
from dcpack.thd import LOCAL_REPLAY, CPGroups, ModelConfig, THDBatch, THDTransformer, forward_backward, \
    train_step  # noqa: E402

SCHEDULERS = ("dp_balanced", "dynamic_cp", "balanced")
FIELDS = dcpack.FIELD_TOKENS | dcpack.FIELD_LABELS | dcpack.FIELD_LOSS_MASK | dcpack.FIELD_POSITION_IDS


def batches_of(trace: str, n: int, m: int, k: int, tokens_per_rank: int) -> List[List[int]]:
    """K global batches of a trace: consecutive sequences, at most N*M tokens, padded to 2N, ~T*N tokens each."""
    lengths = np.loadtxt(WORKLOADS / trace, dtype=np.int64).reshape(-1)
    div = math.lcm(2 * (1 << (n.bit_length() - 1)), 2 * n)
    cap = (n * m) // div * div
    out, i = [], 0
    for _ in range(k):
        b, tot = [], 0
        while tot < tokens_per_rank * n:
            v = int(min(cap, lengths[i % len(lengths)]))
            v = ((v + div - 1) // div) * div
            b.append(v)
            tot += v
            i += 1
        out.append(b)
    return out


def dcpack_config(scheduler: str, n: int, m: int, count: int, lengths: List[int], cost=None) -> dcpack.Config:
    kw = dict(scheduler=scheduler, max_sequences=count, max_seqlen_per_rank=m,
              max_tokens_per_rank=sum(lengths) + 4 * m)
    if scheduler == "dp_balanced":   # the static CP size the longest sequence needs
        cp = 1
        while cp * m < max(lengths):
            cp *= 2
        kw.update(data_parallel_size=n // cp, context_parallel_size=cp)
    else:
        kw.update(data_parallel_size=n, context_parallel_size=1)
    if cost is not None:
        kw["cost"] = cost
    return dcpack.Config(**kw)


def step_all_ranks(config: dcpack.Config, lengths: List[int], seed: int, vocab: int):
    """dcp_step of every rank over the in-process communicator: (plan copy, [rank][microbatch] field dicts)."""
    rng = np.random.default_rng(seed)
    dp, cp = config.data_parallel_size, config.context_parallel_size
    toks = [rng.integers(0, vocab, size=v, dtype=np.int64) for v in lengths]
    masks = [np.ones(v, dtype=np.float32) for v in lengths]
    pos = [np.arange(v, dtype=np.int64) for v in lengths]
    cnt = len(lengths)
    cluster = dcpack.InprocCluster(config, timeout_ms=600000)

    def body(w):
        p = w // cp
        ids = range(cnt * p // dp, cnt * (p + 1) // dp)
        samples = [dcpack.Sample(tokens=toks[i], labels=toks[i], loss_mask=masks[i], position_ids=pos[i]) for i in ids]
        out = dcpack.Stepper(config).step(samples, cluster.args(w), fields=FIELDS)
        return out.copy()
    res = cluster.run(body)
    for r in res:
        if isinstance(r, BaseException):
            raise r
    plan = res[0].plan.copy()
    mbs = [[{k: getattr(o.microbatch(mi), k) for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask",
                                                      "cu_seqlens", "cu_seqlens_padded", "max_seqlen", "local_cp_size",
                                                      "cp_rank")} for mi in range(o.num_microbatches)] for o in res]
    return plan, mbs


def to_batches(mbs_of_rank, rank, groups, partition, device, replay=False):
    out = []
    for d in mbs_of_rank:
        cp = int(d["local_cp_size"])
        group = None if cp == 1 else (LOCAL_REPLAY if replay else groups.get(rank - int(d["cp_rank"]), cp))
        out.append(THDBatch.from_fields(partition=partition, group=group, device=device, **d))
    return out


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---- communication table (wall mode, N >= 2) ----------------------------------------------------------

def measure_comm(mc: ModelConfig, device, model) -> Dict[str, Any]:
    """All-gather and reduce-scatter of n tokens' K/V per rank, and the gradient all-reduce, on this world."""
    world = dist.get_world_size()
    width = 2 * mc.kv_heads * mc.head_dim
    rows = []
    for n in [256 << i for i in range(10)]:
        x = torch.randn(n, width, device=device, dtype=mc.dtype)
        y = torch.empty(world * n, width, device=device, dtype=mc.dtype)
        times = {"all_gather": [], "reduce_scatter": []}
        for rep in range(8):
            for name in times:
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                if name == "all_gather":
                    dist.all_gather_into_tensor(y, x)
                else:
                    dist.reduce_scatter_tensor(x, y)
                sync()
                if rep >= 2:
                    times[name].append(time.perf_counter() - t0)
        rows.append({"tokens_per_rank": n, "bytes_per_rank": n * width * x.element_size(),
                     **{k: statistics.median(v) for k, v in times.items()}})
    flat = torch.zeros(sum(p.numel() for p in model.parameters()), device=device, dtype=mc.dtype)
    ar = []
    for rep in range(8):
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        sync()
        if rep >= 2:
            ar.append(time.perf_counter() - t0)
    return {"world": world, "rows": rows, "grad_allreduce": statistics.median(ar)}


def comm_price(table: Dict[str, Any], cp: int, n: int, layers: int) -> float:
    """Seconds of CP communication of one microbatch on one rank: (all-gather + reduce-scatter) x layers."""
    if cp == 1 or table is None:
        return 0.0
    want = (cp - 1) * n
    rows = table["rows"]
    xs = [r["tokens_per_rank"] for r in rows]

    def interp(key):
        if want <= xs[0]:
            return rows[0][key]
        for a, b in zip(rows, rows[1:]):
            if want <= b["tokens_per_rank"]:
                f = (want - a["tokens_per_rank"]) / (b["tokens_per_rank"] - a["tokens_per_rank"])
                return a[key] + f * (b[key] - a[key])
        return rows[-1][key] * want / xs[-1]
    return layers * (interp("all_gather") + interp("reduce_scatter"))


def compose(plan, times: List[List[float]]) -> Dict[str, float]:
    """Step time from per-rank microbatch times: barrier (sum of slowest) and dependency (groups wait)."""
    n = plan.num_ranks
    barrier = 0.0
    finish = [0.0] * n
    for m in range(plan.num_microbatches):
        barrier += max(times[r][m] for r in range(n))
        new = list(finish)
        for first, size, _ in plan.groups(m):
            ranks = range(int(first), int(first) + int(size))
            start = max(finish[r] for r in ranks)
            t = max(times[r][m] for r in ranks)
            for r in ranks:
                new[r] = start + t
        finish = new
    return {"barrier": barrier, "dependency": max(finish)}


def replay(model, mc, plan, mbs, partition, device, table, reps: int) -> Dict[str, Any]:
    """Every rank's microbatches on this GPU, one after another, each timed (median of reps)."""
    n = len(mbs)
    den = float(sum(float(np.asarray(d["loss_mask"]).sum()) for r in mbs for d in r))
    times, detail = [], []
    for r in range(n):
        bs = to_batches(mbs[r], r, None, partition, device, replay=True)
        row = []
        for m, b in enumerate(bs):
            forward_backward(model, b, den)  # warm-up of this shape
            ts = []
            for _ in range(reps):
                sync()
                t0 = time.perf_counter()
                forward_backward(model, b, den)
                sync()
                ts.append(time.perf_counter() - t0)
            comm = comm_price(table, b.local_cp_size, b.num_tokens, mc.layers)
            row.append(statistics.median(ts) + comm)
            # what a calibration needs: the microbatch's padded spans (before CP slicing), its CP size,
            # this rank's slots, the compute time and the priced communication
            cup = b.cu_seqlens_padded
            detail.append({"rank": r, "microbatch": m, "cp": b.local_cp_size, "slots": b.num_tokens,
                           "spans": [cup[i + 1] - cup[i] for i in range(len(cup) - 1) if cup[i + 1] > cup[i]],
                           "compute_s": statistics.median(ts), "comm_s": comm})
        times.append(row)
        model.zero_grad(set_to_none=True)
    c = compose(plan, times)
    extra = table["grad_allreduce"] if table else 0.0
    return {"composed_barrier_s": c["barrier"] + extra, "composed_dependency_s": c["dependency"] + extra,
            "grad_allreduce_s": extra, "microbatch_times_s": times, "microbatches": detail}


def machine() -> Dict[str, Any]:
    d = {"host": platform.node(), "torch": torch.__version__, "date": datetime.datetime.utcnow().strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name(0)
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="longsft_n4096_seed1.txt,bimodal_n4096_seed1.txt,"
                                        "uniform32k_n4096_seed1.txt,mlmdefault_n4096_seed1.txt")
    ap.add_argument("--max-seqlen", default="8192,32768", help="max_seqlen_per_rank values")
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--steps", type=int, default=5, help="K batches (timed steps) per scheduler")
    ap.add_argument("--repeat", type=int, default=3, help="wall mode: timed steps per batch (median)")
    ap.add_argument("--tokens-per-rank", type=int, default=0, help="tokens per rank per batch (default 2 x M)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--partition", default="zigzag", choices=("zigzag", "contiguous"))
    ap.add_argument("--replay", type=int, default=0, help="R: replay plans for R ranks on this GPU (no torchrun)")
    ap.add_argument("--replay-steps", type=int, default=2, help="batches replayed per scheduler")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--comm-table", default="", help="JSON of a wall run (its comm table prices CP communication)")
    ap.add_argument("--no-check", action="store_true", help="wall mode: skip the composed-vs-wall check")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    wall = a.replay == 0
    if wall:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                timeout=datetime.timedelta(seconds=600))
        rank, n = dist.get_rank(), dist.get_world_size()
    else:
        rank, n = 0, a.replay
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if torch.cuda.is_available() \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mc = ModelConfig(vocab_size=a.vocab, hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                     ffn=a.ffn, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    model = THDTransformer(mc, device)
    groups = CPGroups(n) if wall else None
    table = None
    if wall and n >= 2 and device.type == "cuda":
        table = measure_comm(mc, device, model)
    elif a.comm_table:
        table = json.load(open(a.comm_table)).get("comm")
    result: Dict[str, Any] = {"mode": "wall" if wall else "replay", "ranks": n, "machine": machine(),
                              "model": {k: getattr(mc, k) for k in ("vocab_size", "hidden", "layers", "heads",
                                                                   "kv_heads", "ffn")},
                              "attention": mc.kernel_for(device), "partition": a.partition, "comm": table,
                              "rows": []}
    for trace in a.traces.split(","):
        for m in [int(x) for x in a.max_seqlen.split(",")]:
            tpr = a.tokens_per_rank or 2 * m
            k = a.steps if wall else a.replay_steps
            batches = batches_of(trace, n, m, k, tpr)
            for sched in a.schedulers.split(","):
                row: Dict[str, Any] = {"trace": trace, "max_seqlen_per_rank": m, "scheduler": sched, "ranks": n,
                                       "tokens_per_batch": [sum(b) for b in batches]}
                try:
                    prepared = []
                    for bi, lengths in enumerate(batches):
                        config = dcpack_config(sched, n, m, len(lengths), lengths)
                        plan, mbs = step_all_ranks(config, lengths, seed=bi, vocab=a.vocab)
                        st = plan.stats(lengths)
                        prepared.append((config, plan, mbs, st))
                    row["cp"] = prepared[0][0].context_parallel_size
                    row["microbatches"] = [p[1].num_microbatches for p in prepared]
                    row["predicted_barrier"] = statistics.mean(p[3].makespan for p in prepared)
                    row["predicted_dependency"] = statistics.mean(p[3].dependency_makespan for p in prepared)
                    if wall:
                        steps = []
                        built = [to_batches(p[2][rank], rank, groups, a.partition, device) for p in prepared]
                        for p in prepared:
                            groups.ensure(p[1])
                        for bs in built:  # warm-up: every batch's shapes once
                            train_step(model, bs, group=None)
                        for bs in built:  # each batch a.repeat times, its median
                            ts = []
                            for _ in range(a.repeat):
                                sync()
                                dist.barrier()
                                t0 = time.perf_counter()
                                train_step(model, bs, group=None)
                                sync()
                                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
                                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                                ts.append(float(t))
                            steps.append(statistics.median(ts))
                        row["step_s"] = steps
                        row["median_step_s"] = statistics.median(steps)
                        row["tokens_per_s"] = statistics.mean(sum(b) for b in batches) / row["median_step_s"]
                        if rank == 0 and not a.no_check:
                            comp = [replay(model, mc, p[1], p[2], a.partition, device, table, a.reps)
                                    for p in prepared[:2]]
                            row["composed_barrier_s"] = statistics.median(c["composed_barrier_s"] for c in comp)
                            row["composed_dependency_s"] = statistics.median(c["composed_dependency_s"]
                                                                             for c in comp)
                            row["wall_of_composed_batches_s"] = statistics.median(steps[:2])
                    else:
                        comp = [replay(model, mc, p[1], p[2], a.partition, device, table, a.reps) for p in prepared]
                        row["composed_barrier_s"] = statistics.median(c["composed_barrier_s"] for c in comp)
                        row["composed_dependency_s"] = statistics.median(c["composed_dependency_s"] for c in comp)
                        row["replayed_microbatches"] = [c["microbatches"] for c in comp]
                        row["tokens_per_s_composed_barrier"] = statistics.mean(
                            sum(b) for b in batches) / row["composed_barrier_s"]
                except dcpack.Error as e:
                    row["error"] = f"{type(e).__name__}: {e}"
                if rank == 0:
                    result["rows"].append(row)
                    print(json.dumps({k: v for k, v in row.items() if k not in ("step_s", "replayed_microbatches")}),
                          flush=True)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        print_table(result)
    if wall:
        dist.destroy_process_group()
    return 0


def print_table(result: Dict[str, Any]) -> None:
    wall = result["mode"] == "wall"
    key = "median_step_s" if wall else "composed_barrier_s"
    print(f"\n{result['mode']} on {result['ranks']} ranks, {result['machine']}")
    print("| trace | M | scheduler | CP | step ms | tokens/s | vs dynamic_cp | predicted (barrier) | "
          "predicted vs dynamic_cp |" + (" composed barrier / dependency ms |" if wall else " dependency ms |"))
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = result["rows"]
    for r in rows:
        if "error" in r:
            print(f"| {r['trace']} | {r['max_seqlen_per_rank']} | {r['scheduler']} | | {r['error'][:60]} |")
            continue
        base = next((x for x in rows if x["trace"] == r["trace"] and x["max_seqlen_per_rank"] ==
                     r["max_seqlen_per_rank"] and x["scheduler"] == "dynamic_cp" and "error" not in x), None)
        rel = f"{(r[key] / base[key] - 1) * 100:+.1f}%" if base else "-"
        prel = f"{(r['predicted_barrier'] / base['predicted_barrier'] - 1) * 100:+.1f}%" if base else "-"
        tps = r.get("tokens_per_s", r.get("tokens_per_s_composed_barrier", 0))
        extra = (f"{r.get('composed_barrier_s', float('nan')) * 1e3:.1f} / "
                 f"{r.get('composed_dependency_s', float('nan')) * 1e3:.1f}") if wall else \
            f"{r['composed_dependency_s'] * 1e3:.1f}"
        print(f"| {r['trace'].split('_n')[0]} | {r['max_seqlen_per_rank']} | {r['scheduler']} | {r['cp']} | "
              f"{r[key] * 1e3:.1f} | {tps:,.0f} | {rel} | {r['predicted_barrier']:.3g} | {prel} | {extra} |")


if __name__ == "__main__":
    sys.exit(main())
