#!/usr/bin/env python3
"""Online calibration replayed from committed timings: after how many steps does it predict as well
as the offline profile?

    python bench/calibration/online_replay.py [--data bench/data/replay_1xh200_2026-11-28.json]
                                  [--profile bench/data/profiles-superseded/llama8b-layer-h200.profile] [--ahead 5] [--json OUT]

The replay's cells (one global batch each, in the file's order) are the steps.  Each cell's replayed
microbatches become observation rows, one per CP group: its CP size, its sequences' padded spans and
the median over the group's timed ranks of compute + comm seconds (groups of identical shape in a
cell, the replay's shape memo, count once).  A planner that starts from the default cost model
observes the steps one by one (``Planner.observe_groups``, the library's fit); after each step its
model predicts the next ``--ahead`` steps' rows, and so does the offline profile (calibrated on the
same GPU by ``python -m dcpack.calibrate``).  Reported: the median relative error of both on those
rows after every step, and the first step after which the online model's error is at most the
profile's and stays there.

Predictions use dcp_cost()'s integer formula (checked against ``dcpack.cost`` on a sample) plus the
small-microbatch hinge and the microbatch overhead, as ``dcp_observe_predict`` computes a group.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # bench/calibration/ -> the tree

import dcpack  # noqa: E402  (the installed package: pip install . builds its C extension)


def load_profile(path: Path) -> dcpack.CostModel:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            values[k] = v
    kv = [0] * 17
    gather = [0] * 17
    for k, v in values.items():
        if k.startswith("kv."):
            kv[int(k[3:]).bit_length() - 1] = int(v)
        if k.startswith("cp_gather."):
            gather[int(k[10:]).bit_length() - 1] = int(v)
    return dcpack.CostModel(quadratic=int(values["quadratic"]), linear=int(values["linear"]),
                            round_latency=int(values.get("round_latency", 0)),
                            microbatch_overhead=int(values["microbatch_overhead"]), kv=tuple(kv),
                            cp_gather=tuple(gather), small_knee=int(values.get("small_knee", 0)),
                            small_slope=int(values.get("small_slope", 0)))


def cost(m: dcpack.CostModel, s: int, cp: int) -> int:
    """dcp_cost(): per-rank cost of s tokens on cp ranks (integers, as the library computes it)."""
    quad = m.quadratic * s * s
    work = quad + m.linear * s
    fixed = 0
    if cp > 1:
        k = min((cp - 1).bit_length(), 16)
        exposed = m.kv[k] * s * (cp - 1) - quad
        if exposed > 0:
            work += exposed
        fixed = m.round_latency * (cp - 1) + m.cp_gather[k] * s
    return work // cp + fixed


def group_time_ps(m: dcpack.CostModel, cp: int, spans: list[int]) -> int:
    total = sum(cost(m, s, cp) for s in spans)
    per_rank = sum(spans) // cp
    if m.small_slope > 0 and per_rank < m.small_knee:
        total += m.small_slope * (m.small_knee - per_rank)
    return total + m.microbatch_overhead


def steps_of(data: dict) -> list[list[tuple[int, list[int], float]]]:
    """Per cell: its groups (cp, spans, seconds)."""
    steps = []
    for row in data["rows"]:
        if "replayed_microbatches" not in row:  # a cell the replay skipped
            continue
        mbs = row["replayed_microbatches"]
        mbs = ast.literal_eval(mbs) if isinstance(mbs, str) else mbs
        entries = [e for batch in mbs for e in (batch if isinstance(batch, list) else [batch])]
        groups: dict[tuple, list[float]] = {}
        for e in entries:
            key = (int(e["cp"]), tuple(int(s) for s in e["spans"]))
            groups.setdefault(key, []).append(float(e["compute_s"]) + float(e.get("comm_s", 0.0)))
        steps.append([(cp, list(spans), statistics.median_low(ts)) for (cp, spans), ts in groups.items()
                      if spans and min(ts) > 0])
    return steps


def median_error(m: dcpack.CostModel, rows, scale_ps: float = 1.0) -> float:
    errs = [abs(group_time_ps(m, cp, spans) * scale_ps * 1e-12 - t) / t for cp, spans, t in rows]
    return statistics.median(errs) if errs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT / "bench/data/replay_1xh200_2026-11-28.json"))
    ap.add_argument("--profile", default=str(ROOT / "bench/data/profiles-superseded/llama8b-layer-h200.profile"))
    ap.add_argument("--ahead", type=int, default=5, help="steps after each one that its model predicts")
    ap.add_argument("--json", default="", help="write the per-step table here")
    a = ap.parse_args()
    data = json.loads(Path(a.data).read_text())
    profile = load_profile(Path(a.profile))
    for s, cp in ((100, 1), (5000, 2), (40000, 16)):  # the formula is the library's
        assert cost(profile, s, cp) == dcpack.cost(s, cp, profile), (s, cp)
    steps = steps_of(data)
    planner = dcpack.Planner(dcpack.Config(max_sequences=8192, max_seqlen_per_rank=65536), max_observations=8192)
    table = []
    reached = None
    print(f"{len(steps)} steps ({sum(len(s) for s in steps)} group rows) from {a.data}")
    print(f"{'step':>4} {'rows':>5} {'online':>8} {'profile':>8}  identified")
    for k, rows in enumerate(steps):
        planner.observe_groups([cp for cp, _, _ in rows], [spans for _, spans, _ in rows], [t for _, _, t in rows])
        future = [r for s in steps[k + 1:k + 1 + a.ahead] for r in s]
        if not future:
            break
        online = median_error(planner.cost_model, future)
        offline = median_error(profile, future)
        cal = planner.calibration
        table.append({"step": k + 1, "rows": len(rows), "online_median_error": online,
                      "profile_median_error": offline, "identified": cal["identified"],
                      "margin_ppm": cal["margin_ppm"]})
        print(f"{k + 1:>4} {len(rows):>5} {online:>8.2%} {offline:>8.2%}  {' '.join(cal['identified'])}")
    for i in range(len(table)):
        if all(t["online_median_error"] <= t["profile_median_error"] for t in table[i:]):
            reached = table[i]["step"]
            break
    onl = [t["online_median_error"] for t in table]
    off = [t["profile_median_error"] for t in table]
    first = next((t["step"] for t in table if t["online_median_error"] <= t["profile_median_error"]), None)
    later = [t for t in table if t["step"] >= 12]
    share = sum(t["online_median_error"] <= t["profile_median_error"] for t in later) / max(1, len(later))
    print(f"online model first at most the offline profile's error after step {first}; from step 12 on in "
          f"{share:.0%} of the windows; for good from step {reached}" if reached else
          f"online model first at most the offline profile's error after step {first}; never for good")
    print(f"median over the replay of the next-{a.ahead}-steps error: online {statistics.median(onl):.2%}, "
          f"profile {statistics.median(off):.2%}; after step 12: online {onl[11]:.2%}, profile {off[11]:.2%}"
          if len(onl) > 11 else "")
    m = planner.cost_model
    print(f"final model (ps): quadratic {m.quadratic}, linear {m.linear}, overhead {m.microbatch_overhead}, "
          f"round_latency {m.round_latency}, cp_gather {list(m.cp_gather[1:7])}, small {m.small_slope}@{m.small_knee}")
    if a.json:
        Path(a.json).write_text(json.dumps({"data": a.data, "profile": a.profile, "ahead": a.ahead,
                                            "first_at_step": first, "reached_at_step": reached,
                                            "share_from_step_12": share, "steps": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
