#!/usr/bin/env python3
"""Training step time of dcpack.thd's reference transformer on every scheduler's plans of the same batches.

Wall mode (``torchrun --nproc-per-node N bench/training/bench_train_step.py ...``): for each trace and
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
slots, measured compute time and priced communication) for fitting a cost model.  ``--replay``
takes a list of rank counts (``8,16,32,64``), or ``--cells TRACE:M:R[:T],...`` names the grid's
cells one by one.  A microbatch whose shape (CP size, padded spans, local slots; and CP rank under
the contiguous partition, where ranks' causal work differs; zigzag gives every rank of a group the
same work) was already timed in the run reuses that time (``--no-shape-memo`` times every one):
the same kernels on the same shapes, so a static CP group is timed once, not once per rank.

Schedulers besides dcpack's three: ``balanced+cal``, ``balanced`` with the cost model of a
calibrated profile (``--cost-profile FILE``, the format ``python -m dcpack.calibrate`` writes);
with a profile every row also gets its plan's makespans under that model
(``predicted_cal_*``, in milliseconds when the profile has ``time_unit_ps``).  ``verl_kk``:
verl's own sequence balancing (``RayPPOTrainer._balance_batch``: Karmarkar-Karp over workloads
24576 s + s^2 into equal-count DP partitions, then ``rearrange_micro_batches`` with
``max_token_len`` = M on every rank), run from verl's source at run time as
bench/planners/bench_vs_verl.py does, from ``--verl DIR`` (or ``DCPACK_VERL_DIR``): a checkout, or a folder
holding just the two files it reads, ``verl/utils/seqlen_balancing.py`` and
``verl/trainer/ppo/ray_trainer.py`` (plus an optional ``COMMIT`` file naming the revision).  Its
micro-batches are CP 1, so the row runs where every sequence fits M (otherwise it is skipped with
the reason); micro-batch m of every rank is step m.  Batches have a sequence count divisible by the
rank count (verl's equal-size partitions need it; every scheduler gets the same batches).

    torchrun --nproc-per-node 2 bench/training/bench_train_step.py --out OUT/train_2gpu.json
    python bench/training/bench_train_step.py --replay 16 --comm-table OUT/train_2gpu.json --out OUT/replay16.json
    python bench/training/bench_train_step.py --replay 8,16,32,64 --comm-table bench/data/comm_2xh200.json \
        --schedulers dp_balanced,dynamic_cp,balanced,balanced+cal,verl_kk --cost-profile my.profile \
        --verl /path/to/verl --out replay.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

try:
    import torch
    import torch.distributed as dist
except ImportError as _missing_torch:  # --help works without torch; a run says what it needs
    if __name__ != "__main__" or not any(a in ("-h", "--help") for a in sys.argv[1:]):
        raise SystemExit(f"bench_train_step.py needs torch (pip install torch): {_missing_torch}") from None

HERE = Path(__file__).resolve().parent   # bench/training/
BENCH = HERE.parent
SOURCE = BENCH.parent
sys.path.insert(0, str(HERE))
WORKLOADS = SOURCE / "tests" / "data" / "workloads"

import dcpack  # noqa: E402
import pipeline_compose  # noqa: E402  (bench/training/pipeline_compose.py: 1F1B and interleaved 1F1B)
import train_step_report  # noqa: E402  (bench/training/train_step_report.py: the markdown tables)
if "torch" in globals():
    import torch.nn.functional as F  # noqa: E402
    from dcpack.thd import LOCAL_REPLAY, CPGroups, ModelConfig, THDBatch, THDTransformer, forward_backward, \
        train_step  # noqa: E402

SCHEDULERS = ("dp_balanced", "dynamic_cp", "balanced")
CALIBRATED = "balanced+cal"      # balanced with --cost-profile's model
VERL_KK = "verl_kk"              # verl's Karmarkar-Karp balancing and micro-batching, CP 1
ALL_SCHEDULERS = SCHEDULERS + (CALIBRATED, VERL_KK)
FIELDS = dcpack.FIELD_TOKENS | dcpack.FIELD_LABELS | dcpack.FIELD_LOSS_MASK | dcpack.FIELD_POSITION_IDS


def trace_path(trace: str) -> Path:
    """A trace by path, or by name in tests/data/workloads or bench/data."""
    for cand in (Path(trace), WORKLOADS / trace, BENCH / "data" / trace):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"trace {trace!r}: not a file, nor in {WORKLOADS} or {BENCH / 'data'}")


def batches_of(trace: str, n: int, m: int, k: int, tokens_per_rank: int) -> List[List[int]]:
    """K global batches of a trace: consecutive sequences, at most N*M tokens, padded to 2N, ~T*N tokens each,
    a multiple of N sequences (verl's equal-count DP partitions need it)."""
    lengths = np.loadtxt(trace_path(trace), dtype=np.int64).reshape(-1)
    div = math.lcm(2 * (1 << (n.bit_length() - 1)), 2 * n)
    cap = (n * m) // div * div
    out, i = [], 0
    for _ in range(k):
        b, tot = [], 0
        while tot < tokens_per_rank * n or len(b) % n:
            v = int(min(cap, lengths[i % len(lengths)]))
            v = ((v + div - 1) // div) * div
            b.append(v)
            tot += v
            i += 1
        out.append(b)
    return out


def dcpack_config(scheduler: str, n: int, m: int, count: int, lengths: List[int], cost=None, pp: int = 1,
                  vpp: int = 1, group: int = 0) -> dcpack.Config:
    """The configuration of a scheduler's plans of a batch on n ranks; with pp > 1 for a pipeline of pp stages
    and vpp model chunks per stage (vpp > 1: Megatron's microbatch group ``group``, default pp, so the
    microbatch count is a multiple of it)."""
    kw = dict(scheduler=scheduler, max_sequences=count, max_seqlen_per_rank=m,
              max_tokens_per_rank=sum(lengths) + 4 * m)
    if pp > 1:
        kw.update(pipeline_parallel_size=pp, virtual_pipeline_size=vpp,
                  microbatch_group_size_per_vp_stage=(group or pp) if vpp > 1 else 0)
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
    n = dp * cp

    def body(w):   # with PP, world rank w is DPxCP rank w % n of stage w // n (every stage steps)
        p = (w % n) // cp
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
                                                      "cp_rank")} for mi in range(o.num_microbatches)] for o in res[:n]]
    for row in mbs:   # the first stage's ranks (the replay runs the whole model on their shapes): a pipeline's
        for d in row:  # first stage gets no labels nor loss mask; the replay's are the tokens and ones
            if d["labels"] is None and d["tokens"] is not None:
                d["labels"] = np.array(d["tokens"], copy=True)
            if d["loss_mask"] is None and d["tokens"] is not None:
                d["loss_mask"] = np.ones(len(d["tokens"]), dtype=np.float32)
    return plan, mbs


def load_cost_profile(path: str):
    """(CostModel, time_unit_ps or None) of a cost profile file (``key = value`` lines, ``#`` comments).

    dcpack.calibrate.load_profile reads it where the package has it; otherwise the same format is read
    here: quadratic, linear, round_latency, microbatch_overhead, kv, kv.<cp>, kv.<cp>+, step_model,
    time_unit_ps (the keys python -m dcpack.calibrate writes).  A bad line raises ValueError naming it.
    """
    try:
        from dcpack.calibrate import load_profile  # type: ignore
    except ImportError:
        load_profile = None
    if load_profile is not None:
        try:
            prof = load_profile(path)
            return prof.cost, prof.time_unit_ps
        except dcpack.InvalidConfigError as e:   # a reader that predates the step's keys: read them here
            if "unknown key" not in str(e):
                raise
    base = dcpack.CostModel()
    fields = {"quadratic": base.quadratic, "linear": base.linear, "round_latency": base.round_latency,
              "microbatch_overhead": base.microbatch_overhead, "step_model": base.step_model}
    kv, unit = list(base.kv), None
    gather = list(base.cp_gather)
    for k in ("small_knee", "small_slope", "margin_ppm"):
        fields[k] = getattr(base, k)
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            key, eq, value = (x.strip() for x in line.partition("="))
            where = f"{path}:{number}"
            if not eq:
                raise ValueError(f"{where}: '{line}' is not `key = value`")
            if key == "step_model":
                if value not in ("barrier", "dependency"):
                    raise ValueError(f"{where}: step_model = '{value}' is not barrier or dependency")
                fields["step_model"] = value
                continue
            if not value.isdigit():
                raise ValueError(f"{where}: {key} = '{value}': values are non-negative integers")
            v = int(value)
            if key == "time_unit_ps":
                if v == 0:
                    raise ValueError(f"{where}: time_unit_ps = 0: picoseconds per cost unit must be at least 1")
                unit = v
            elif key in fields:
                fields[key] = v
            elif key.startswith("cp_gather."):
                cp = int(key[10:]) if key[10:].isdigit() else 0
                if cp < 2 or cp & (cp - 1) or cp.bit_length() - 1 >= len(gather):
                    raise ValueError(f"{where}: {key}: the CP size after 'cp_gather.' must be a power of two")
                gather[cp.bit_length() - 1] = v
            elif key == "kv":
                kv = [v] * len(kv)
            elif key.startswith("kv."):
                cp_text = key[3:].rstrip("+")
                cp = int(cp_text) if cp_text.isdigit() else 0
                k = cp.bit_length() - 1
                if cp < 2 or cp & (cp - 1) or k >= len(kv):
                    raise ValueError(f"{where}: {key}: the CP size after 'kv.' must be a power of two "
                                     f"from 2 to {1 << (len(kv) - 1)}")
                for j in range(k, len(kv) if key.endswith("+") else k + 1):
                    kv[j] = v
            else:
                raise ValueError(f"{where}: unknown key '{key}'")
    return dcpack.CostModel(kv=tuple(kv), cp_gather=tuple(gather), **fields), unit


def plan_groups_of(plan) -> List[List[List[int]]]:
    """A plan's groups as [first rank, CP size] per microbatch (how the times compose)."""
    return [[[int(f), int(c)] for f, c, _ in plan.groups(m)] for m in range(plan.num_microbatches)]


class ListPlan:
    """A plan given as ids[m][r] (a rank's m-th micro-batch, CP 1), read as compose() reads dcpack's plans."""

    def __init__(self, ids: List[List[List[int]]]):
        self.ids = ids
        self.num_ranks = len(ids[0]) if ids else 0
        self.num_microbatches = len(ids)

    def groups(self, m: int):
        return [(r, 1, ids) for r, ids in enumerate(self.ids[m]) if ids]


def model_times(plan, lengths: List[int], cost) -> List[List[float]]:
    """Each rank's modelled microbatch times (its group's dcp_cost sum + microbatch_overhead; 0 where idle):
    compose() of these is the plan's makespan under that model."""
    times = [[0.0] * plan.num_microbatches for _ in range(plan.num_ranks)]
    for m in range(plan.num_microbatches):
        for first, size, ids in plan.groups(m):
            c = sum(dcpack.cost(lengths[i], int(size), cost) for i in ids) + cost.microbatch_overhead
            for r in range(int(first), int(first) + int(size)):
                times[r][m] = float(c)
    return times


def load_verl_kk(folder: str):
    """verl's balancing, loaded from folder by bench/planners/bench_vs_verl.py's loader: (plan function,
    description)."""
    sys.path.insert(0, str(BENCH / "planners"))
    import bench_vs_verl as bv  # noqa: E402  (the verl loader; imports nothing of verl itself)
    desc, sources = bv.read_sources("--verl", folder, None, (bv.VERL_BALANCING, bv.VERL_TRAINER))
    commit = Path(folder) / "COMMIT"
    if commit.is_file() and commit.read_text().strip():
        desc += f" (verl {commit.read_text().strip()[:12]})"
    ns, vdist, vtorch = bv.load_verl(sources)

    def plan(lengths: List[int], ranks: int, max_token_len: int) -> ListPlan:
        ids, _, _, _ = bv.verl_plan(ns, vdist, vtorch, lengths, ranks, max_token_len)
        return ListPlan(ids)
    return plan, desc


def verl_microbatches(plan: ListPlan, lengths: List[int], seed: int, vocab: int):
    """[rank][microbatch] field dicts of a CP-1 plan, as dcpack's step lays out a CP-1 microbatch."""
    rng = np.random.default_rng(seed)
    toks = [rng.integers(0, vocab, size=v, dtype=np.int64) for v in lengths]
    out = []
    for r in range(plan.num_ranks):
        row = []
        for m in range(plan.num_microbatches):
            ids = plan.ids[m][r]
            ls = [lengths[i] for i in ids]
            cu = np.zeros(len(ls) + 1, dtype=np.int32)
            cu[1:] = np.cumsum(ls)
            t = np.concatenate([toks[i] for i in ids]) if ids else np.zeros(0, dtype=np.int64)
            row.append({"tokens": t, "labels": t.copy(), "loss_mask": np.ones(len(t), dtype=np.float32),
                        "position_ids": np.concatenate([np.arange(v, dtype=np.int64) for v in ls]) if ids
                        else np.zeros(0, dtype=np.int64),
                        "padding_mask": np.zeros(len(t), dtype=bool), "cu_seqlens": cu, "cu_seqlens_padded": cu.copy(),
                        "max_seqlen": max(ls, default=0), "local_cp_size": 1, "cp_rank": 0})
        out.append(row)
    return out


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


_COMM_MODELS: Dict[int, Any] = {}


def comm_price(table: Dict[str, Any], cp: int, n: int, layers: int) -> float:
    """Seconds of CP communication of one microbatch on one rank, n tokens on it: the ring model
    (cp-1) x (alpha + beta x bytes) per layer, all-gather and reduce-scatter, fitted to the table
    (dcpack.calibrate.fit_comm_model: the same price the calibration's emulated CP sizes carry)."""
    if cp == 1 or table is None:
        return 0.0
    from dcpack.calibrate import fit_comm_model
    model = _COMM_MODELS.get(id(table))
    if model is None:
        model = _COMM_MODELS[id(table)] = fit_comm_model(table)
    return model.microbatch_s(cp, n, layers)


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


def _rank_key(bs, partition) -> tuple:
    """A rank's list of microbatch shapes (CP size, padded spans, slots; CP rank under contiguous)."""
    return tuple((b.local_cp_size, tuple(int(x) for x in b.cu_seqlens_padded), b.num_tokens,
                  b.cp_rank if partition == "contiguous" else 0) for b in bs)


# the intervals of a microbatch's forward and backward that forward_backward_marked's marks bound, in order,
# and where pipeline_compose.PARTS puts each: the embedding, the layer stack, the head and loss; then back
MARKED = ("first_forward", "forward", "last_forward", "last_backward", "backward", "first_backward")


def forward_backward_marked(model, batch, den, mark) -> "torch.Tensor":
    """dcpack.thd's forward_backward (loss_sum / den, backward), spelled out as THDTransformer.forward and
    loss_sum compute it, calling ``mark()`` at the stage boundaries: after the token embedding's forward,
    after the layer stack's, after the final norm, output head and loss (the forward's end); in the
    backward, when the gradient reaches the layer stack's output (the head and loss are done) and the
    embedding's output (the layer stack is done).  The caller marks the start and the backward's end:
    six intervals, MARKED.  The same kernels in the same order as forward_backward (a test compares the
    two's loss and gradients)."""
    if not len(model.blocks):
        raise ValueError("the marked forward needs at least one layer")
    kernel = model.config.kernel_for(model.device)
    x = model.embed(batch.tokens)
    mark()
    emb = x
    for blk in model.blocks:
        x = blk(x, batch.position_ids, batch.layout, kernel)
    mark()
    logits = model.head(model.norm(x))
    ce = F.cross_entropy(logits.float(), batch.labels, reduction="none")
    loss = (ce * batch.loss_weights()).sum() / den
    mark()
    x.register_hook(lambda g: mark())      # the head's and loss's backward done
    emb.register_hook(lambda g: mark())    # the layer stack's backward done
    loss.backward()
    return loss.detach()


def time_rank(model, bs, den, reps: int, warmup: int, synced: bool = False, split: bool = False):
    """One rank's microbatches run back to back as in a step, ``warmup`` untimed passes (every
    shape of the rank runs in each), then ``reps`` timed passes: per pass, each microbatch's GPU
    time between CUDA events recorded with no host synchronisation in between (the host queues
    ahead as it does in training), and the pass's wall time (perf_counter, synchronised at its two
    ends).  On the CPU perf_counter stands for the events.  ``synced``: the earlier method instead,
    a synchronisation and perf_counter at every mark (it charges each microbatch the host's launch
    time; kept to measure that bias).  ``split`` (the pipeline composition's): each microbatch cut
    into MARKED's six intervals by forward_backward_marked's marks, one chain of events over the
    pass.  Returns (per microbatch the list of reps times, or with ``split`` of reps dicts of MARKED
    whose sum is the microbatch's time; per pass wall seconds)."""
    cuda = torch.cuda.is_available()
    events = cuda and not synced
    per_mb = len(MARKED) if split else 1

    def run(b, mark):
        if split:
            forward_backward_marked(model, b, den, mark)
        else:
            forward_backward(model, b, den)
    for _ in range(warmup):
        for b in bs:
            run(b, lambda: None)
    per = [[] for _ in bs]
    walls = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(per_mb * len(bs) + 1)] if events else []
        marks: List[Any] = []

        def mark():
            if events:
                ev[len(marks)].record()
                marks.append(None)
            else:
                if synced:
                    sync()
                marks.append(time.perf_counter())
        mark()
        for b in bs:
            run(b, mark)
            mark()
        if len(marks) != per_mb * len(bs) + 1:
            raise RuntimeError(f"{len(marks)} marks in a pass of {len(bs)} microbatches: a backward hook did not run")
        if events:
            ev[-1].synchronize()
            gaps = [ev[j].elapsed_time(ev[j + 1]) * 1e-3 for j in range(per_mb * len(bs))]
        else:
            gaps = [marks[j + 1] - marks[j] for j in range(per_mb * len(bs))]
        for i in range(len(bs)):
            per[i].append(dict(zip(MARKED, gaps[per_mb * i:per_mb * (i + 1)])) if split else gaps[i])
        sync()
        walls.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return per, walls


def replay(model, mc, plan, mbs, partition, device, table, reps: int, memo=None, warmup: int = 1,
           synced: bool = False, split: bool = False) -> Dict[str, Any]:
    """Every rank's microbatches on this GPU, rank after rank, each rank's list timed by
    :func:`time_rank` (``warmup`` untimed passes of all its shapes, then the median of ``reps``).

    ``memo`` (a dict kept over a run) maps a rank's whole list of microbatch shapes to its measured
    times: a rank whose list equals one timed before (the ranks of a CP group under zigzag, a
    plan's identical ranks) reuses those times; None times every rank.  The same kernels on the
    same shapes in the same order, so nothing of the step is left out.
    Per pass p, the step composed from pass p's times (``composed_*_passes_s``) gives the spread.

    ``split`` (the pipeline composition's): each microbatch timed in MARKED's six intervals
    (:func:`time_rank` with ``split``; its whole time is their sum), returned as ``rank_parts_s`` (per rank and
    microbatch a dict of pipeline_compose.PARTS, each the median over the passes; None where idle; the
    microbatch's priced CP communication added half to the layer stack's forward, half to its backward)
    and ``rank_parts_passes_s`` (the same of every pass).  The memo then keys a rank by its microbatches'
    shapes in any order (a pipeline plan reorders microbatches) and keeps the six intervals of each."""
    n = len(mbs)
    den = float(sum(float(np.asarray(d["loss_mask"]).sum()) for r in mbs for d in r)) or 1.0
    nm = plan.num_microbatches
    times, detail, timed, outliers, total = [], [], 0, 0, 0
    passes = [[[0.0] * nm for _ in range(n)] for _ in range(reps)]
    parts = [[None] * nm for _ in range(n)]
    parts_passes = [[[None] * nm for _ in range(n)] for _ in range(reps)]
    walls, sums = [], []
    for r in range(n):
        bs = to_batches([d for d in mbs[r] if len(d["tokens"])], r, None, partition, device, replay=True)
        shapes = _rank_key(bs, partition)
        # split: the rank's microbatches sorted by shape (stable), so a reordering finds the same entry
        order = sorted(range(len(bs)), key=lambda i: shapes[i]) if split else list(range(len(bs)))
        key = ("split", tuple(shapes[i] for i in order)) if split else ("rank", synced, shapes)
        if memo is not None and key in memo:
            got, rank_walls = memo[key]
        else:
            got, rank_walls = time_rank(model, [bs[i] for i in order], den, reps, warmup if warmup >= 0 else 1,
                                        synced, split)
            timed += 1
            for ts in got:
                ts = [sum(t.values()) for t in ts] if split else ts
                med = statistics.median(ts)
                outliers += sum(t > 1.5 * med for t in ts)
                total += len(ts)
            if memo is not None:
                memo[key] = (got, rank_walls)
        split_of = [None] * len(bs)
        if split:   # back to the rank's own order; whole times are the six intervals' sums
            for j, i in enumerate(order):
                split_of[i] = got[j]
            per = [[sum(t.values()) for t in ts] for ts in split_of]
        else:
            per = got
        walls.append(statistics.median(rank_walls))
        it = iter(zip(bs, per, split_of))
        row = []
        for m, d in enumerate(mbs[r]):
            if not len(d["tokens"]):       # an idle rank in this microbatch (a CP-1 plan with fewer on it)
                row.append(0.0)
                continue
            b, ts, sp = next(it)
            cup = b.cu_seqlens_padded
            comm = comm_price(table, b.local_cp_size, b.num_tokens, mc.layers)
            compute = statistics.median(ts)
            row.append(compute + comm)
            for p in range(reps):
                passes[p][r][m] = ts[p] + comm
            if sp is not None:
                parts[r][m] = {k: statistics.median(t[k] for t in sp) for k in MARKED}
                for p in range(reps):
                    parts_passes[p][r][m] = dict(sp[p])
                for d in [parts[r][m]] + [parts_passes[p][r][m] for p in range(reps)]:
                    d["forward"] += comm / 2   # the CP all-gather in the forward, reduce-scatter in the backward
                    d["backward"] += comm / 2
            # what a calibration needs: the microbatch's padded spans (before CP slicing), its CP size,
            # this rank's slots, the compute time (median and every timing) and the priced communication
            detail.append({"rank": r, "microbatch": m, "cp": b.local_cp_size, "slots": b.num_tokens,
                           "spans": [cup[i + 1] - cup[i] for i in range(len(cup) - 1) if cup[i + 1] > cup[i]],
                           "compute_s": compute, "compute_all_s": list(ts), "comm_s": comm})
        sums.append(sum(statistics.median(ts) for ts in per))
        times.append(row)
    c = compose(plan, times)
    extra = table["grad_allreduce"] if table else 0.0
    cp_passes = [compose(plan, t) for t in passes]
    return {"composed_barrier_s": c["barrier"] + extra, "composed_dependency_s": c["dependency"] + extra,
            "composed_barrier_passes_s": [x["barrier"] + extra for x in cp_passes],
            "composed_dependency_passes_s": [x["dependency"] + extra for x in cp_passes],
            "grad_allreduce_s": extra, "microbatch_times_s": times, "microbatches": detail, "timed": timed,
            "outliers": outliers, "timings": total,
            # the one-GPU wall check: each rank's back-to-back pass (median) against its microbatches' sum
            "rank_wall_s": walls, "rank_sum_s": sums,
            **({"rank_parts_s": parts, "rank_parts_passes_s": parts_passes} if split else {})}


def pipeline_of(plan, comp: Dict[str, Any], pp: int, vpp: int, group: int) -> Dict[str, Any]:
    """A replayed batch's composed pipeline step (pipeline_compose.pipeline_step of :func:`replay`'s split
    times, in the plan's order) and, per timed pass, the step composed from that pass's times; the
    gradient all-reduce added as the barrier composition adds it."""
    groups = [[(f, c) for f, c in g] for g in plan_groups_of(plan)]
    extra = comp.get("grad_allreduce_s", 0.0)
    one = pipeline_compose.pipeline_step(groups, comp["rank_parts_s"], pp, vpp, group or pp)
    passes = [pipeline_compose.pipeline_step(groups, t, pp, vpp, group or pp)["makespan"] + extra
              for t in comp["rank_parts_passes_s"]]
    return {"composed_pipeline_s": one["makespan"] + extra, "composed_pipeline_passes_s": passes,
            "composed_microbatch_sum_s": one["microbatch_sum"], "composed_pipeline_microbatches_s": one["microbatches"]}


def machine() -> Dict[str, Any]:
    d = {"host": platform.node(), "torch": torch.__version__, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    if torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name(0)
    return d


def write_json(path: str, result: Dict[str, Any]) -> None:
    """Whole or not at all (a run killed while writing leaves the previous version)."""
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


def parse_cells(a, wall_ranks: int) -> List[tuple]:
    """(trace, M, ranks, tokens per rank) of every cell: --cells, or traces x M x ranks."""
    cells = []
    if a.cells:
        for spec in a.cells.split(","):
            parts = spec.split(":")
            if len(parts) not in (3, 4) or not all(x.isdigit() and int(x) > 0 for x in parts[1:]):
                raise SystemExit(f"--cells {spec!r}: expected TRACE:M:RANKS[:TOKENS_PER_RANK] with positive integers")
            m, r = int(parts[1]), int(parts[2])
            cells.append((parts[0], m, r, int(parts[3]) if len(parts) == 4 else (a.tokens_per_rank or 2 * m)))
        return cells
    ranks = [wall_ranks] if wall_ranks else [int(x) for x in a.replay.split(",")]
    for trace in a.traces.split(","):
        for m in [int(x) for x in a.max_seqlen.split(",")]:
            for r in ranks:
                cells.append((trace, m, r, a.tokens_per_rank or 2 * m))
    return cells


def prepare(sched: str, n: int, m: int, batches, a, cal, verl, pp: int = 1, vpp: int = 1, group: int = 0) -> List[tuple]:
    """(plan, [rank][microbatch] fields) of every batch; raises Skip with the reason where the row cannot run.
    pp > 1: planned for that pipeline (the fields: its first stage's ranks')."""
    out = []
    for bi, lengths in enumerate(batches):
        if sched == VERL_KK and pp > 1:
            raise Skip("verl_kk plans no pipeline")
        if sched == VERL_KK:
            if verl is None:
                raise Skip("verl not loaded: give --verl DIR (or DCPACK_VERL_DIR) with verl/utils/seqlen_balancing.py "
                           "and verl/trainer/ppo/ray_trainer.py")
            if max(lengths) > m:
                raise Skip(f"a sequence of {max(lengths)} tokens exceeds max_seqlen_per_rank {m}: verl's "
                           "micro-batches are CP 1")
            plan = verl[0](lengths, n, m)
            out.append((plan, None if a.plan_only else verl_microbatches(plan, lengths, bi, a.vocab), 1))
            continue
        if sched == CALIBRATED and cal is None:
            raise Skip("no calibrated profile: give --cost-profile FILE")
        config = dcpack_config("balanced" if sched == CALIBRATED else sched, n, m, len(lengths), lengths,
                               cost=cal[0] if sched == CALIBRATED else None, pp=pp, vpp=vpp, group=group)
        if a.plan_only:
            plan, mbs = dcpack.Planner(config).plan(lengths).copy(), None
        else:
            plan, mbs = step_all_ranks(config, lengths, seed=bi, vocab=a.vocab)
        out.append((plan, mbs, config.context_parallel_size))
    return out


class Skip(Exception):
    """A row that cannot run here (its reason goes into the row)."""


def predictions(row: Dict[str, Any], prepared, batches, cal) -> None:
    """The plans' makespans under the default model and, with a profile, the calibrated one (mean over batches)."""
    default = dcpack.CostModel()
    comp = [compose(p[0], model_times(p[0], lengths, default)) for p, lengths in zip(prepared, batches)]
    row["predicted_barrier"] = statistics.mean(c["barrier"] for c in comp)
    row["predicted_dependency"] = statistics.mean(c["dependency"] for c in comp)
    if cal is not None:
        comp = [compose(p[0], model_times(p[0], lengths, cal[0])) for p, lengths in zip(prepared, batches)]
        row["predicted_cal_barrier"] = statistics.mean(c["barrier"] for c in comp)
        if cal[1]:  # the lower bound of any plan of these lengths on these ranks under the profile
            n, m = row["ranks"], row["max_seqlen_per_rank"]
            lbs = []
            for lengths in batches:
                cfg = dcpack_config("balanced", n, m, len(lengths), lengths, cost=cal[0])
                with dcpack.Planner(cfg) as planner:
                    st = planner.plan(lengths).stats()
                lbs.append(st.model_lower_bound * cal[1] * 1e-9)
            row["lower_bound_cal_ms"] = lbs
        row["predicted_cal_dependency"] = statistics.mean(c["dependency"] for c in comp)
        if cal[1]:
            row["predicted_cal_barrier_ms"] = row["predicted_cal_barrier"] * cal[1] * 1e-9
            row["predicted_cal_dependency_ms"] = row["predicted_cal_dependency"] * cal[1] * 1e-9


INT64_MAX = 2**63 - 1


def pipeline_inputs(plan, lengths: List[int], cost) -> tuple:
    """Each microbatch's cost (slowest group + overhead) and largest tokens per rank, as dcpack's pipeline
    model reads them (docs/planning.md, pipeline step model): a group's cost is dcpack.calibrate's
    group_cost, its sequences' costs plus the small-microbatch hinge, saturating at INT64_MAX."""
    from dcpack.calibrate import group_cost

    costs, tokens = [], []
    for mi in range(plan.num_microbatches):
        slowest = most = 0
        for _, cp, ids in plan.groups(mi):
            cp = int(cp)
            group = [int(lengths[i]) for i in ids]
            slowest = max(slowest, group_cost(group, cp, cost))
            most = max(most, -(-sum(group) // cp))
        costs.append(min(slowest + max(cost.microbatch_overhead, 0), INT64_MAX))
        tokens.append(most)
    return costs, tokens


def pipeline_predictions(row: Dict[str, Any], prepared, batches, cal, pp: int, vpp: int, group: int) -> None:
    """The plans' pipeline makespans: ``predicted_pipeline_makespan`` the planner's own (PlanStats, under the
    model it planned with: the default one, or the profile's for balanced+cal; in seconds too where that
    has a time unit), per batch, None where Megatron's schedule refuses the count; with a profile,
    ``predicted_cal_pipeline`` every plan's under the profile's model (pipeline_compose over its costs, the
    same model), in seconds where the profile has time_unit_ps."""
    own = []
    for p, lengths in zip(prepared, batches):
        st = p[0].stats(lengths)
        own.append(None if st.pipeline_makespan == INT64_MAX else st.pipeline_makespan)
    row["predicted_pipeline_makespan"] = own
    unit = cal[1] if cal is not None and row["scheduler"] == CALIBRATED else None
    if unit:
        row["predicted_pipeline_makespan_s"] = [None if x is None else x * unit * 1e-12 for x in own]
    if cal is None:
        return
    got = []
    for p, lengths in zip(prepared, batches):
        costs, tokens = pipeline_inputs(p[0], lengths, cal[0])
        if not pipeline_compose.runs(len(costs), pp, vpp, group or pp):
            got.append(None)
            continue
        f, b = pipeline_compose.stage_times(costs, tokens, pp, vpp, cal[0].forward_ppm, cal[0].first_stage_per_token,
                                            cal[0].last_stage_per_token)
        got.append(pipeline_compose.compose(f, b, pp, vpp, group or pp))
    row["predicted_cal_pipeline"] = got
    if cal[1]:
        row["predicted_cal_pipeline_s"] = [None if x is None else x * cal[1] * 1e-12 for x in got]


def ints(text: str, name: str) -> List[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{name} {text!r}: expected comma-separated integers") from None
    if any(x < 1 for x in out):
        raise SystemExit(f"{name} {text!r}: sizes are at least 1")
    return out


def pipeline_grid(a) -> List[tuple]:
    """(P, V) of every pipeline configuration of --pp x --vpp: [(1, 1)] without --pp; P = 1 in --pp is the
    plain replay (no pipeline), once; V > 1 needs P > 1."""
    pps = ints(a.pp, "--pp")
    vpps = ints(a.vpp, "--vpp") or [1]
    if not pps:
        if a.vpp not in ("", "1"):
            raise SystemExit("--vpp needs --pp")
        return [(1, 1)]
    out = []
    for p in pps:
        for v in vpps:
            if p == 1 and (1, 1) not in out:
                out.append((1, 1))
            elif p > 1:
                out.append((p, v))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="longsft_n4096_seed1.txt,bimodal_n4096_seed1.txt,"
                                        "uniform32k_n4096_seed1.txt,mlmdefault_n4096_seed1.txt",
                    help="trace files (paths, or names in tests/data/workloads or bench/data)")
    ap.add_argument("--max-seqlen", default="8192,32768", help="max_seqlen_per_rank values")
    ap.add_argument("--cells", default="", help="TRACE:M:RANKS[:TOKENS_PER_RANK],... instead of traces x M x ranks "
                                                "(RANKS is the world size in wall mode)")
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS), help=f"any of {', '.join(ALL_SCHEDULERS)}")
    ap.add_argument("--cost-profile", default="", help=f"calibrated cost profile for {CALIBRATED} and predicted_cal_*")
    ap.add_argument("--verl", default=os.environ.get("DCPACK_VERL_DIR", ""),
                    help=f"verl checkout or folder of its two balancing files, for {VERL_KK} (env DCPACK_VERL_DIR)")
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
    ap.add_argument("--replay", default="", help="R or R1,R2,...: replay plans for R ranks on this GPU (no torchrun)")
    ap.add_argument("--replay-steps", type=int, default=2, help="batches replayed per scheduler")
    ap.add_argument("--reps", type=int, default=5, help="replay: timed passes per rank (the median counts; >= 5)")
    ap.add_argument("--warmup", type=int, default=1, help="replay: untimed passes of each rank's microbatches "
                                                          "(every shape) before its timed ones")
    ap.add_argument("--no-shape-memo", action="store_true",
                    help="replay: time every rank, even one whose list of shapes was timed before")
    ap.add_argument("--bias-check", type=int, default=0, metavar="K",
                    help="replay: for the first K rows also time batch 0 the earlier way (a synchronisation around "
                         "every microbatch) to measure that method's bias")
    ap.add_argument("--comm-table", default="", help="JSON with a comm table (a wall run's, or bench/data/comm_2xh200.json)")
    ap.add_argument("--no-check", action="store_true", help="wall mode: skip the composed-vs-wall check")
    ap.add_argument("--plan-only", action="store_true", help="plan and predict only: no model, no timing")
    ap.add_argument("--pp", default="", help="replay / plan-only: pipeline sizes P1,P2,... (e.g. 2,4,8): every cell "
                                             "planned for each pipeline and its step composed under 1F1B / "
                                             "interleaved 1F1B (1: the plain replay too; default: no pipeline)")
    ap.add_argument("--vpp", default="1", help="with --pp: virtual pipeline sizes (model chunks per stage), e.g. 1,2")
    ap.add_argument("--vpp-group", type=int, default=0,
                    help="with --vpp > 1: Megatron's microbatch_group_size_per_vp_stage (0: P, Megatron's default)")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds: start no new row after this (0: none)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    start = time.monotonic()

    wall = not a.replay and not a.plan_only
    if wall:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                                timeout=datetime.timedelta(seconds=600))
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 0
        if not a.replay and not a.cells:
            raise SystemExit("--plan-only needs --replay R,... or --cells")
    grid = pipeline_grid(a)
    if wall and grid != [(1, 1)]:
        raise SystemExit("--pp is for --replay and --plan-only")
    scheds = a.schedulers.split(",")
    bad = [x for x in scheds if x not in ALL_SCHEDULERS]
    if bad:
        raise SystemExit(f"--schedulers: unknown {', '.join(bad)} (known: {', '.join(ALL_SCHEDULERS)})")
    cells = parse_cells(a, world)
    cal = load_cost_profile(a.cost_profile) if a.cost_profile else None
    verl, verl_desc = None, "not loaded"
    if VERL_KK in scheds:
        if a.verl:
            verl = load_verl_kk(a.verl)
            verl_desc = verl[1]
        else:
            verl_desc = "not loaded: no --verl DIR nor DCPACK_VERL_DIR"
        print(f"verl: {verl_desc}", flush=True)
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if torch.cuda.is_available() \
        else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mc = ModelConfig(vocab_size=a.vocab, hidden=a.hidden, layers=a.layers, heads=a.heads, kv_heads=a.kv_heads,
                     ffn=a.ffn, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)
    model = None if a.plan_only else THDTransformer(mc, device)
    groups = CPGroups(world) if wall else None
    table = None
    if wall and world >= 2 and device.type == "cuda":
        table = measure_comm(mc, device, model)
    elif a.comm_table:
        table = json.load(open(a.comm_table)).get("comm")
    memo = None if a.no_shape_memo else {}
    if a.replay and a.reps < 5 and device.type == "cuda":
        raise SystemExit(f"--reps {a.reps}: the replay takes the median of at least 5 timings")
    result: Dict[str, Any] = {"mode": "plan" if a.plan_only else ("wall" if wall else "replay"),
                              "ranks": world or sorted({c[2] for c in cells}), "machine": machine(),
                              "model": {k: getattr(mc, k) for k in ("vocab_size", "hidden", "layers", "heads",
                                                                   "kv_heads", "ffn")},
                              "attention": mc.kernel_for(device), "partition": a.partition, "comm": table,
                              "comm_table": a.comm_table or None, "cost_profile": a.cost_profile or None,
                              "cost_profile_time_unit_ps": cal[1] if cal else None, "verl": verl_desc,
                              "reps": a.reps, "warmup": a.warmup, "shape_memo": memo is not None, "rows": []}
    if grid != [(1, 1)]:
        result["pipeline"] = {"grid": grid, "vpp_group": a.vpp_group or "P", "composed": True}
    total, done = len(cells) * len(grid) * len(scheds), 0
    for trace, m, n, tpr, pp, vpp in ((*c, p, v) for c in cells for p, v in grid):
        if wall and n != world:
            raise SystemExit(f"--cells: {trace}:{m}:{n} names {n} ranks; this wall run has {world}")
        k = a.steps if wall else a.replay_steps
        batches = batches_of(trace, n, m, k, tpr)
        for sched in scheds:
            done += 1
            if a.time_limit and time.monotonic() - start > a.time_limit:
                result["time_limit_reached"] = f"after {done - 1} of {total} rows ({time.monotonic() - start:.0f} s)"
                break
            t_row = time.monotonic()
            row: Dict[str, Any] = {"trace": trace, "max_seqlen_per_rank": m, "scheduler": sched, "ranks": n,
                                   "tokens_per_rank_target": tpr, "tokens_per_batch": [sum(b) for b in batches],
                                   "sequences_per_batch": [len(b) for b in batches]}
            if pp > 1:
                row.update(pp=pp, vpp=vpp)
                if vpp > 1:
                    row["vpp_group"] = a.vpp_group or pp
            try:
                prepared = prepare(sched, n, m, batches, a, cal, verl, pp, vpp, a.vpp_group)
                row["cp"] = prepared[0][2]
                row["microbatches"] = [p[0].num_microbatches for p in prepared]
                if sched == VERL_KK:
                    row["over_budget_microbatches"] = [sum(sum(batches[bi][i] for i in ids) > m for mb in p[0].ids
                                                           for ids in mb) for bi, p in enumerate(prepared)]
                predictions(row, prepared, batches, cal)
                if pp > 1:
                    pipeline_predictions(row, prepared, batches, cal, pp, vpp, a.vpp_group)
                row["prepare_s"] = time.monotonic() - t_row
                refused = [f"batch {bi}: {p[0].num_microbatches} microbatches" for bi, p in enumerate(prepared)
                           if pp > 1 and not pipeline_compose.runs(p[0].num_microbatches, pp, vpp, a.vpp_group or pp)]
                if refused:
                    row["pipeline_refused"] = (f"Megatron's interleaved schedule does not run these counts with PP {pp}, "
                                               f"VPP {vpp}, group {a.vpp_group or pp}: " + "; ".join(refused))
                if a.plan_only or refused:
                    pass
                elif pp > 1:
                    comp = [replay(model, mc, p[0], p[1], a.partition, device, table, a.reps, memo, a.warmup,
                                   split=True) for p in prepared]
                    pipes = [pipeline_of(p[0], c, pp, vpp, a.vpp_group) for c, p in zip(comp, prepared)]
                    row["batches"] = [{k: c[k] for k in ("composed_barrier_s", "composed_dependency_s",
                                                         "composed_barrier_passes_s", "composed_dependency_passes_s",
                                                         "outliers", "timings")} | q | {"groups": plan_groups_of(p[0])}
                                      for c, q, p in zip(comp, pipes, prepared)]
                    row["outliers"] = sum(c["outliers"] for c in comp)
                    row["timings"] = sum(c["timings"] for c in comp)
                    row["timed_ranks"] = sum(c["timed"] for c in comp)
                    for key in ("composed_pipeline_s", "composed_microbatch_sum_s", "composed_barrier_s"):
                        row[key] = statistics.mean(q[key] for q in pipes) if key in pipes[0] else \
                            statistics.mean(c[key] for c in comp)
                    row["tokens_per_s_composed_pipeline"] = statistics.mean(sum(b) for b in batches) / \
                        row["composed_pipeline_s"]
                elif wall:
                    steps = []
                    built = [to_batches([d for d in p[1][rank] if len(d["tokens"])], rank, groups, a.partition,
                                        device) for p in prepared]
                    for p in prepared:
                        if not isinstance(p[0], ListPlan):
                            groups.ensure(p[0])
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
                        comp = [replay(model, mc, p[0], p[1], a.partition, device, table, a.reps, warmup=a.warmup)
                                for p in prepared[:2]]
                        row["composed_barrier_s"] = statistics.median(c["composed_barrier_s"] for c in comp)
                        row["composed_dependency_s"] = statistics.median(c["composed_dependency_s"]
                                                                         for c in comp)
                        row["wall_of_composed_batches_s"] = statistics.median(steps[:2])
                else:
                    comp = [replay(model, mc, p[0], p[1], a.partition, device, table, a.reps, memo, a.warmup)
                            for p in prepared]
                    row["batches"] = [{k: c[k] for k in ("composed_barrier_s", "composed_dependency_s",
                                                         "composed_barrier_passes_s", "composed_dependency_passes_s",
                                                         "microbatch_times_s", "rank_wall_s", "rank_sum_s",
                                                         "outliers", "timings")} | {"groups": plan_groups_of(p[0])}
                                      for c, p in zip(comp, prepared)]
                    row["outliers"] = sum(c["outliers"] for c in comp)
                    row["timings"] = sum(c["timings"] for c in comp)
                    walls = [w for c in comp for w, x in zip(c["rank_wall_s"], c["rank_sum_s"]) if x > 0]
                    sums = [x for c in comp for x in c["rank_sum_s"] if x > 0]
                    row["rank_wall_over_sum"] = sum(walls) / sum(sums) if sums else None
                    if done <= a.bias_check:
                        old = [replay(model, mc, p[0], p[1], a.partition, device, table, a.reps, memo, a.warmup,
                                      synced=True) for p in prepared[:1]]
                        row["synced_composed_barrier_s"] = old[0]["composed_barrier_s"]
                        row["synced_composed_dependency_s"] = old[0]["composed_dependency_s"]
                        row["synced_vs_events_batch0"] = old[0]["composed_barrier_s"] / comp[0]["composed_barrier_s"]
                    # the mean over batches: the cells' changes (sums over the same batches) agree with it
                    row["composed_barrier_s"] = statistics.mean(c["composed_barrier_s"] for c in comp)
                    row["composed_dependency_s"] = statistics.mean(c["composed_dependency_s"] for c in comp)
                    row["timed_microbatches"] = sum(c["timed"] for c in comp)
                    row["replayed_microbatches"] = [c["microbatches"] for c in comp]
                    tokens = statistics.mean(sum(b) for b in batches)
                    row["tokens_per_s_composed_barrier"] = tokens / row["composed_barrier_s"]
                    row["tokens_per_s_composed_dependency"] = tokens / row["composed_dependency_s"]
            except Skip as e:
                row["skipped"] = str(e)
            except dcpack.Error as e:
                row["error"] = f"{type(e).__name__}: {e}"
            row["elapsed_s"] = time.monotonic() - t_row
            if rank == 0:
                result["rows"].append(row)
                brief = {k: v for k, v in row.items() if k not in ("step_s", "replayed_microbatches",
                                                                   "tokens_per_batch", "sequences_per_batch")
                         and not (k == "batches" and pp > 1)}
                print(f"[{done}/{total} {time.monotonic() - start:.0f} s] " + json.dumps(brief), flush=True)
                write_json(a.out, result)      # after every row: a run cut short keeps what it measured
        else:
            continue
        break
    result["elapsed_s"] = time.monotonic() - start
    if rank == 0 and result["mode"] == "replay":
        result["cells"] = train_step_report.cell_changes(result["rows"])
        if grid != [(1, 1)]:
            result["pipeline_cells"] = train_step_report.cell_changes(result["rows"], "pipeline")
    if rank == 0:
        write_json(a.out, result)
        print()
        print(train_step_report.markdown(result))
    if wall:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
