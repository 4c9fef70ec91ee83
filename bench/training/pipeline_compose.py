#!/usr/bin/env python3
"""Compose a pipeline step from per-microbatch forward and backward times (composed, not measured).

Megatron-LM's schedules (megatron/core/pipeline_parallel/schedules.py) as a longest path: P
stages, V model chunks per stage (virtual stage k = chunk * P + stage), each stage running its
ops in the schedule's order; a forward waits for the forward of the virtual stage before, a
backward for the backward of the virtual stage after (the last virtual stage's for its own
forward); communication is free.

- 1F1B (V = 1): stage r runs P - r - 1 warm-up forwards, then one forward one backward, then
  the remaining backwards.
- Interleaved 1F1B (V > 1): the schedule table takes the microbatches in groups of
  ``group`` (Megatron's microbatch_group_size_per_vp_stage, default P), every chunk in turn
  within a group; stage r warms up 2 (P - r - 1) + (V - 1) group virtual microbatches;
  backwards run the table in order with the chunk reversed.

This is the same model as dcpack's C pipeline model (core/pipeline_model.c), written apart
from it: python/tests/test_pipeline_compose.py checks the two against each other and both
against hand-computed schedules.

Library use::

    compose(forward, backward, stages, chunks=1, group=None) -> makespan
        forward[k][m], backward[k][m]: virtual stage k's time for microbatch m (any numbers)
    stage_times(costs, tokens, stages, chunks=1, forward_ppm=333333, first=0, last=0)
        -> forward, backward: dcpack's split of per-microbatch costs (integers, as the C model)
    pipeline_step(groups, rank_times, stages, chunks=1, group=None) -> {"makespan", ...}
        a replayed plan (bench_train_step.py --replay --pp): per-rank times of each microbatch's layer
        stack, embedding and head + loss, forward and backward; a microbatch's part is its slowest rank's

CLI::

    pipeline_compose.py replay.json --pp 4 [--vpp 2] [--group G]
        replay.json: {"microbatches": [{"forward": ms, "backward": ms,
                      "first_forward": ms, "first_backward": ms,     (optional: stage 0's extra)
                      "last_forward": ms, "last_backward": ms}, ...]}  (optional: the last stage's)
        each microbatch's forward/backward is its time through the whole model (all layers);
        a virtual stage takes 1/(P V) of it, the first and last add their extra.
    pipeline_compose.py grid [--dcpack build/dcpack] [--out FILE]
        dcpack plan --pp over the benchmark grid: dynamic_cp's and balanced's pipeline makespans
        and lower bounds (docs/benchmarks.md, Pipeline step (composed)).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path


def schedule_table(num_microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of each virtual microbatch, as schedules.py's get_schedule_table."""
    table: list[tuple[int, int]] = []
    lo = 0
    while lo < num_microbatches:
        hi = num_microbatches if lo + group >= num_microbatches else lo + group
        table.extend((m, c) for c in range(chunks) for m in range(lo, hi))
        if hi == num_microbatches:
            break
        lo = hi
    return table


def runs(num_microbatches: int, stages: int, chunks: int, group: int) -> bool:
    """Whether schedules.py runs this count (interleaved: at least a group, the last group full or >= P)."""
    if chunks == 1:
        return True
    rest = num_microbatches % group
    return num_microbatches >= group and (rest == 0 or rest >= stages)


def stage_ops(num_microbatches: int, stages: int, chunks: int, group: int, rank: int) -> list[tuple[bool, int, int]]:
    """Stage `rank`'s ops in order: (forward?, microbatch, chunk)."""
    total = num_microbatches * chunks
    if chunks == 1:
        table = [(m, 0) for m in range(num_microbatches)]
        warm = stages - rank - 1
    else:
        table = schedule_table(num_microbatches, chunks, group)
        warm = (stages - rank - 1) * 2 + (chunks - 1) * group
    warm = min(warm, total)
    ops = [(True, *table[v]) for v in range(warm)]
    for k in range(total - warm):
        ops.append((True, *table[warm + k]))
        m, c = table[k]
        ops.append((False, m, chunks - 1 - c))
    for k in range(total - warm, total):
        m, c = table[k]
        ops.append((False, m, chunks - 1 - c))
    return ops


def compose(forward, backward, stages: int, chunks: int = 1, group: int | None = None):
    """The makespan of the schedule (numbers as given: ints stay exact).  forward[k][m], backward[k][m]
    for virtual stage k = chunk * stages + stage.  Raises ValueError where schedules.py refuses the count."""
    kv = stages * chunks
    if len(forward) != kv or len(backward) != kv:
        raise ValueError(f"need {kv} virtual stages of times, got {len(forward)} and {len(backward)}")
    num = len(forward[0])
    if num == 0:
        return 0
    group = max(group or stages, stages)
    if not runs(num, stages, chunks, group):
        raise ValueError(f"schedules.py does not run {num} microbatches with {stages} stages, "
                         f"{chunks} chunks and group {group}")
    ops = [stage_ops(num, stages, chunks, group, r) for r in range(stages)]
    f_end: dict[tuple[int, int], object] = {}
    b_end: dict[tuple[int, int], object] = {}
    nxt = [0] * stages
    clock = [0] * stages
    left = sum(len(o) for o in ops)
    while left:
        moved = False
        for r in range(stages):
            while nxt[r] < len(ops[r]):
                fwd, m, c = ops[r][nxt[r]]
                k = c * stages + r
                if fwd:
                    ready = 0 if k == 0 else f_end.get((k - 1, m))
                else:
                    ready = f_end.get((k, m)) if k == kv - 1 else b_end.get((k + 1, m))
                if ready is None:
                    break
                end = max(ready, clock[r]) + (forward[k][m] if fwd else backward[k][m])
                (f_end if fwd else b_end)[(k, m)] = end
                clock[r] = end
                nxt[r] += 1
                left -= 1
                moved = True
        if not moved:
            raise RuntimeError("the schedule deadlocked")  # never for a count runs() accepts
    return max(clock)


def stage_times(costs, tokens, stages: int, chunks: int = 1, forward_ppm: int = 333333, first: int = 0,
                last: int = 0):
    """dcpack's split (core/pipeline_model.h): virtual stage k of microbatch m takes costs[m] // V, plus
    first * tokens[m] on k = 0 and last * tokens[m] on k = P V - 1; forward_ppm / 1e6 of it forward
    (rounded down), the rest backward.  Integers, as the C model (without its saturation)."""
    kv = stages * chunks
    fwd = [[0] * len(costs) for _ in range(kv)]
    bwd = [[0] * len(costs) for _ in range(kv)]
    for m, (c, t) in enumerate(zip(costs, tokens)):
        for k in range(kv):
            w = c // chunks + (first * t if k == 0 else 0) + (last * t if k == kv - 1 else 0)
            f = w * forward_ppm // 1000000
            fwd[k][m], bwd[k][m] = f, w - f
    return fwd, bwd


def replay_times(microbatches, stages: int, chunks: int):
    """Per virtual stage times from a replay's per-microbatch whole-model times (see the CLI)."""
    kv = stages * chunks
    fwd = [[mb["forward"] / kv for mb in microbatches] for _ in range(kv)]
    bwd = [[mb["backward"] / kv for mb in microbatches] for _ in range(kv)]
    for m, mb in enumerate(microbatches):
        fwd[0][m] += mb.get("first_forward", 0.0)
        bwd[0][m] += mb.get("first_backward", 0.0)
        fwd[kv - 1][m] += mb.get("last_forward", 0.0)
        bwd[kv - 1][m] += mb.get("last_backward", 0.0)
    return fwd, bwd


# ---- a replay's per-rank stage times composed into a pipeline step ----

PARTS = ("forward", "backward", "first_forward", "first_backward", "last_forward", "last_backward")
"""A replayed microbatch's times on one rank: the layer stack's forward and backward (all layers), the first
stage's extra work (token embedding) forward and backward, the last stage's (final norm, output head and
loss) forward and backward."""


def microbatch_times(groups, rank_times):
    """Per microbatch, each of PARTS the largest over the microbatch's ranks (they run in parallel: the
    slowest sets it), each part on its own.

    groups[m]: the microbatch's groups as (first rank, CP size) (bench_train_step.plan_groups_of);
    rank_times[r][m]: rank r's times of microbatch m, a dict of PARTS (None or absent: r is idle in m)."""
    out = []
    for m, gs in enumerate(groups):
        ranks = [r for first, size in gs for r in range(int(first), int(first) + int(size))]
        got = [rank_times[r][m] for r in ranks if rank_times[r][m] is not None]
        out.append({k: max((t.get(k, 0.0) for t in got), default=0.0) for k in PARTS})
    return out


def pipeline_step(groups, rank_times, stages: int, chunks: int = 1, group: int | None = None) -> dict:
    """The composed pipeline step of a replayed plan, in the plan's microbatch order: each microbatch's
    times from :func:`microbatch_times`, virtual stage k of microbatch m taking 1/(P V) of its layer stack
    plus the embedding on k = 0 and the head and loss on k = P V - 1 (:func:`replay_times`), under 1F1B
    (chunks 1) or interleaved 1F1B with microbatch group ``group`` (default: stages).

    Returns {"makespan", "microbatch_sum" (every microbatch's forward and backward, extras included, one
    after another), "microbatches" (microbatch_times)}; raises ValueError where schedules.py refuses the
    count."""
    mbs = microbatch_times(groups, rank_times)
    f, b = replay_times(mbs, stages, chunks)
    span = compose(f, b, stages, chunks, group)
    return {"makespan": span, "microbatch_sum": math.fsum(mb[k] for mb in mbs for k in PARTS),
            "microbatches": mbs}


# ---- the benchmark grid through dcpack plan --pp ----

FAMILIES = ["longsft", "bimodal", "uniform32k", "pareto", "mlmdefault"]


def trace_path(root: Path, family: str) -> Path:
    if family == "pareto":
        return root / "bench" / "data" / "pareto_n4096_seed1.txt"
    return root / "tests" / "data" / "workloads" / f"{family}_n1024_seed1.txt"


def batch(lengths: list[int], tokens: int) -> list[int]:
    """The first sequences of a trace up to `tokens` tokens (one global batch)."""
    out, total = [], 0
    for s in lengths:
        if total + s > tokens and out:
            break
        out.append(s)
        total += s
    return out


def plan_stats(dcpack: str, trace: Path, scheduler: str, ranks: int, m: int, pp: int, vpp: int,
               profile: str | None) -> dict:
    cmd = [dcpack, "plan", "--trace", str(trace), "--scheduler", scheduler, "--ranks", str(ranks),
           "--max-seqlen-per-rank", str(m), "--pp", str(pp), "--vpp", str(vpp), "--format", "json", "--summary",
           "--repeat", "1"]
    if profile:
        cmd += ["--cost", profile]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    d = json.loads(r.stdout)
    return d["stats"] if "stats" in d else d


def grid(args) -> int:
    root = Path(__file__).resolve().parents[2]   # bench/training/ -> the tree
    profiles = [None] + sorted(str(p) for p in (root / "bench" / "profiles").glob("*.profile"))
    rows = []
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        lengths = [int(x) for x in trace_path(root, family).read_text().split()]
        for ranks in (16, 32):
            for target in (8, 16):
                # M: the batch's tokens fill `target` microbatches of `ranks` ranks at 7/8 of M
                m = 8192 if family == "mlmdefault" else 32768
                longest_ok = [s for s in lengths if s <= ranks * m]
                seqs = batch(longest_ok, target * ranks * m * 7 // 8)
                path = tmp / f"{family}_r{ranks}_k{target}.txt"
                path.write_text("\n".join(map(str, seqs)) + "\n")
                for pp in (2, 4, 8):
                    for vpp in (1, 2):
                        for profile in profiles:
                            try:
                                dyn = plan_stats(args.dcpack, path, "dynamic_cp", ranks, m, pp, vpp, profile)
                                bal = plan_stats(args.dcpack, path, "balanced", ranks, m, pp, vpp, profile)
                            except RuntimeError as e:
                                print(f"skip: {e}", file=sys.stderr)
                                continue
                            rows.append({
                                "family": family, "ranks": ranks, "target_microbatches": target, "m": m,
                                "sequences": len(seqs), "pp": pp, "vpp": vpp,
                                "profile": Path(profile).stem if profile else "default",
                                "dynamic_cp_microbatches": dyn["microbatches"],
                                "balanced_microbatches": bal["microbatches"],
                                "dynamic_cp": dyn["pipeline_makespan"], "balanced": bal["pipeline_makespan"],
                                "balanced_lower_bound": bal["pipeline_lower_bound"],
                                "dynamic_cp_lower_bound": dyn["pipeline_lower_bound"],
                            })
                            r = rows[-1]
                            print(f"{family:10s} N{ranks:<3d} K{target:<3d} PP{pp} VPP{vpp} {r['profile']:24s} "
                                  f"gain {1 - r['balanced'] / r['dynamic_cp']:+.3f} "
                                  f"to bound {r['balanced'] / r['balanced_lower_bound'] - 1:.3f}", flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "grid":
        ap = argparse.ArgumentParser(prog="pipeline_compose.py grid")
        ap.add_argument("--dcpack", default="build/dcpack")
        ap.add_argument("--out", default="pipeline_grid.json")
        ap.add_argument("--tmp", default="/tmp/pipeline_grid")
        return grid(ap.parse_args(argv[1:]))
    ap = argparse.ArgumentParser(description="Compose 1F1B and interleaved pipeline steps from a replay JSON "
                                             "(composed, not measured)")
    ap.add_argument("replay")
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--vpp", type=int, default=1)
    ap.add_argument("--group", type=int, default=0, help="interleaved microbatch group (default: --pp)")
    a = ap.parse_args(argv)
    mbs = json.loads(Path(a.replay).read_text())["microbatches"]
    out = {"composed": True, "pp": a.pp, "microbatches": len(mbs)}
    f1, b1 = replay_times(mbs, a.pp, 1)
    out["1f1b_ms"] = compose(f1, b1, a.pp)
    if a.vpp > 1:
        fv, bv = replay_times(mbs, a.pp, a.vpp)
        try:
            out["interleaved_ms"] = compose(fv, bv, a.pp, a.vpp, a.group or a.pp)
        except ValueError as e:
            out["interleaved_ms"] = None
            out["interleaved_refused"] = str(e)
        out["vpp"] = a.vpp
    out["one_stage_ms"] = math.fsum(mb["forward"] + mb["backward"] for mb in mbs)  # the microbatches one after another
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
