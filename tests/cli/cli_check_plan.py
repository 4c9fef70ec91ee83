#!/usr/bin/env python3
"""Check `dcpack plan --format json` output against its contract, independently of the C code.

usage: cli_check_plan.py PLAN_JSON LENGTHS_FILE --ranks N --max-seqlen-per-rank M
                         [--cost COST_JSON] [--static-cp C] [--min-cp-size K] [--vpp-group G]
                         [--max-per-microbatch K] [--scheduler S]

PLAN_JSON is {"plan": [[[ids of rank 0], ...], ...], "stats": {...}}; LENGTHS_FILE holds one length
per line (id = 0-based line).  COST_JSON is `dcpack cost --format json` (default: the default
coefficients).  Every plan invariant is checked, and makespan, lower bound and every
derived statistic are recomputed here from the plan and the lengths, under both step models
(barrier, and dependency: a rank waits only for the ranks of its CP groups, simulated rank by
rank here); efficiency follows the cost model's step_model.
"""
import argparse
import json
import math
import sys

STATS_KEYS = {
    "scheduler": str, "ranks": int, "data_parallel_size": int, "context_parallel_size": int, "cp": int,
    "max_seqlen_per_rank": int, "min_cp_size": int, "vpp_group": int, "max_sequences_per_microbatch": int,
    "trace": str, "cost_model": str, "sequences": int, "total_tokens": int, "microbatches": int,
    "makespan": int, "lower_bound": int, "efficiency": float, "imbalance": float, "idle_fraction": float,
    "padding_waste": float, "mean_cp_size": float, "quad_makespan": int, "busy_sum": int,
    "max_rank_sum": int, "repeat": int, "plan_seconds": float, "plan_seconds_min": float,
    "step_model": str, "dependency_makespan": int, "dependency_lower_bound": int, "model_makespan": int,
    "model_lower_bound": int,
}


def fail(msg):
    print("cli_check_plan: " + msg, file=sys.stderr)
    sys.exit(1)


def default_model():
    return {"quadratic": 1, "linear": 12 * 4096, "round_latency": 491520, "microbatch_overhead": 819200,
            "kv": {str(1 << k): (492 if k <= 3 else 3934) for k in range(1, 17)}}


def cost(model, s, cp):
    quad = model["quadratic"] * s * s
    work = quad + model["linear"] * s
    fixed = 0
    if cp > 1:
        k = 0
        while (1 << k) < cp:
            k += 1
        k = min(k, 16)
        exposed = model["kv"][str(1 << k)] * s * (cp - 1) - quad
        if exposed > 0:
            work += exposed
        fixed = model["round_latency"] * (cp - 1)
    return work // cp + fixed


def lower_bound(model, lengths, n, m, static_cp):
    """The plain barrier bound: the least GPU time of each sequence over the group sizes, plus the overhead
    of the microbatches the tokens need (the reported bound is at least this)."""
    work = 0
    for s in lengths:
        options = [cp for cp in group_sizes(n, static_cp) if s <= cp * m]
        work += min((cp * cost(model, s, cp) for cp in options), default=0)
    micro = -(-sum(lengths) // (n * m))
    return work // n + micro * model["microbatch_overhead"]


def group_sizes(n, static_cp):
    """The CP sizes a group can have: powers of two up to n, n, and a static CP size."""
    sizes, cp = [], 1
    while cp < n:
        sizes.append(cp)
        cp *= 2
    sizes.append(n)
    if static_cp and static_cp not in sizes:
        sizes.append(static_cp)
    return sizes


def dependency_lower_bound(model, lengths, n, m, static_cp):
    """max(ceil(W / n), the longest single run) + overhead x the fewest microbatches (docs/planning.md)."""
    work = longest = 0
    for s in lengths:
        options = [cp for cp in group_sizes(n, static_cp) if s <= cp * m]
        if not options:
            continue
        work += min(cp * cost(model, s, cp) for cp in options)
        longest = max(longest, min(cost(model, s, cp) for cp in options))
    micro = -(-sum(lengths) // (n * m))
    return max(-(-work // n), longest) + micro * model["microbatch_overhead"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan_json")
    ap.add_argument("lengths")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--max-seqlen-per-rank", type=int, required=True)
    ap.add_argument("--cost")
    ap.add_argument("--static-cp", type=int, default=0)
    ap.add_argument("--min-cp-size", type=int, default=1)
    ap.add_argument("--vpp-group", type=int, default=0)
    ap.add_argument("--max-per-microbatch", type=int, default=0)
    ap.add_argument("--scheduler")
    a = ap.parse_args()

    with open(a.plan_json) as f:
        doc = json.load(f)
    lengths = [int(x) for x in open(a.lengths).read().split()]
    model = json.load(open(a.cost))["model"] if a.cost else default_model()
    n, m = a.ranks, a.max_seqlen_per_rank

    if set(doc) != {"plan", "stats"}:
        fail("top-level keys %s, expected plan and stats" % sorted(doc))
    plan, stats = doc["plan"], doc["stats"]
    for key, kind in STATS_KEYS.items():
        if key not in stats:
            fail("stats lacks %s" % key)
        if kind is float and not isinstance(stats[key], (int, float)):
            fail("stats.%s is not a number" % key)
        if kind is int and not isinstance(stats[key], int):
            fail("stats.%s is not an integer" % key)
        if kind is str and not isinstance(stats[key], str):
            fail("stats.%s is not a string" % key)
    if not isinstance(plan, list) or not plan:
        fail("plan is not a non-empty list")

    seen = {}
    makespan = busy = max_rank_sum = quad_makespan = cp_sum = 0
    finish = [0] * n  # the dependency step model: each rank's finish time after the latest microbatch
    for mb, ranks in enumerate(plan):
        if not isinstance(ranks, list) or len(ranks) != n:
            fail("microbatch %d has %s ranks, expected %d" % (mb, len(ranks) if isinstance(ranks, list) else "no", n))
        # consecutive ranks with the same list form a group (COSTMODEL invariants 2 and 3)
        r = 0
        slowest = slowest_quad = 0
        while r < n:
            ids = ranks[r]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                fail("microbatch %d rank %d: not a list of integer ids" % (mb, r))
            if not ids:
                fail("microbatch %d rank %d is empty (invariant 5)" % (mb, r))
            end = r
            while end < n and ranks[end] == ids:
                end += 1
            cp = end - r
            if not a.static_cp and cp & (cp - 1) and cp != n:
                fail("microbatch %d ranks %d-%d: block of %d ranks is neither a power of two nor all ranks"
                     % (mb, r, end - 1, cp))
            if a.static_cp and (cp != a.static_cp or r % a.static_cp):
                fail("microbatch %d ranks %d-%d: dp_balanced blocks must be the static CP size %d"
                     % (mb, r, end - 1, a.static_cp))
            if not a.static_cp and cp < min(a.min_cp_size, n):
                fail("microbatch %d: block of %d ranks below --min-cp-size %d" % (mb, cp, a.min_cp_size))
            if a.max_per_microbatch and len(ids) > a.max_per_microbatch:
                fail("microbatch %d rank %d holds %d sequences > %d" % (mb, r, len(ids), a.max_per_microbatch))
            tokens = 0
            group_cost = group_quad = 0
            for i in ids:
                if i < 0 or i >= len(lengths):
                    fail("microbatch %d: id %d outside the trace's %d sequences" % (mb, i, len(lengths)))
                if i in seen:
                    fail("id %d appears twice (microbatches %d and %d)" % (i, seen[i], mb))
                seen[i] = mb
                tokens += lengths[i]
                group_cost += cost(model, lengths[i], cp)
                group_quad += lengths[i] * lengths[i] // cp
                cp_sum += cp
            if tokens > m * cp:
                fail("microbatch %d ranks %d-%d: %d tokens over %d ranks exceed max_seqlen_per_rank %d"
                     % (mb, r, end - 1, tokens, cp, m))
            slowest = max(slowest, group_cost)
            slowest_quad = max(slowest_quad, group_quad)
            busy += group_cost * cp
            start = max(finish[r:end])
            finish[r:end] = [start + group_cost + model["microbatch_overhead"]] * cp
            r = end
        makespan += slowest + model["microbatch_overhead"]
        max_rank_sum += slowest
        quad_makespan += slowest_quad
    if len(seen) != len(lengths):
        missing = sorted(set(range(len(lengths))) - set(seen))[:5]
        fail("%d of %d ids planned; missing e.g. %s" % (len(seen), len(lengths), missing))
    if a.vpp_group > 1 and len(plan) % a.vpp_group:
        fail("%d microbatches is not a multiple of --vpp-group %d" % (len(plan), a.vpp_group))

    def expect(key, value, tol=None):
        got = stats[key]
        if tol is None and got != value:
            fail("stats.%s = %r, recomputed %r" % (key, got, value))
        if tol is not None and abs(got - value) > tol:
            fail("stats.%s = %r, recomputed %r" % (key, got, value))

    expect("ranks", n)
    expect("max_seqlen_per_rank", m)
    expect("sequences", len(lengths))
    expect("total_tokens", sum(lengths))
    expect("microbatches", len(plan))
    expect("makespan", makespan)
    expect("max_rank_sum", max_rank_sum)
    expect("busy_sum", busy)
    expect("quad_makespan", quad_makespan)
    # the reported bound: at least the plain one recomputed here (work over the ranks plus the
    # token-forced microbatches' overhead), at most the makespan (tests/unit/test_bound.c checks it further)
    plain = lower_bound(model, lengths, n, m, stats["context_parallel_size"])
    lb = stats["lower_bound"]
    if not plain <= lb <= makespan:
        fail("lower_bound %d outside [plain bound %d, makespan %d]" % (lb, plain, makespan))
    dependency = max(finish)
    dlb = dependency_lower_bound(model, lengths, n, m, a.static_cp)
    expect("dependency_makespan", dependency)
    expect("dependency_lower_bound", dlb)
    if not dlb <= dependency <= makespan:
        fail("dependency makespan %d outside [its lower bound %d, the makespan %d]" % (dependency, dlb, makespan))
    step_model = model.get("step_model", "barrier")
    expect("step_model", step_model)
    chosen = (dependency, dlb) if step_model == "dependency" else (makespan, lb)
    expect("model_makespan", chosen[0])
    expect("model_lower_bound", chosen[1])
    expect("efficiency", chosen[1] / chosen[0], 1e-6)
    expect("imbalance", max_rank_sum / (busy / n), 1e-6)
    expect("idle_fraction", 1 - busy / (n * max_rank_sum), 1e-6)
    expect("padding_waste", 1 - sum(lengths) / (len(plan) * n * m), 1e-6)
    expect("mean_cp_size", cp_sum / len(lengths), 1e-6)
    if stats["data_parallel_size"] * stats["context_parallel_size"] != n:
        fail("data_parallel_size x context_parallel_size != ranks")
    if a.static_cp:
        expect("cp", a.static_cp)
        expect("context_parallel_size", a.static_cp)
    if a.scheduler:
        expect("scheduler", a.scheduler)
    if not (stats["plan_seconds"] > 0 and math.isfinite(stats["plan_seconds"])):
        fail("plan_seconds %r is not a positive time" % stats["plan_seconds"])
    if stats["plan_seconds_min"] > stats["plan_seconds"]:
        fail("plan_seconds_min above the median")
    print("ok: %d microbatches, %d ids, makespan %d, lower bound %d, dependency makespan %d, lower bound %d (%s)"
          % (len(plan), len(seen), makespan, lb, dependency, dlb, step_model))


if __name__ == "__main__":
    main()
