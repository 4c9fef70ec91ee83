#!/usr/bin/env python3
"""Markdown tables of bench/bench_train_step.py's JSON, as docs/benchmarks.md shows them.

    python3 bench/train_step_report.py OUT/replay.json [MORE.json ...]

Replay (composed) results: one table, a row per trace x M x ranks x scheduler: the composed step
time under the barrier and the dependency step models (ms), tokens per second (barrier), the change
against `dynamic_cp` of the same cell (barrier / dependency), the plan's predicted barrier makespan
under the default cost model (cost units) and its change against `dynamic_cp`, and, where the run
had a calibrated profile, the predicted barrier / dependency makespans under it (ms where the
profile has a time unit).  Then a summary table: `balanced`, `balanced+cal` and `verl_kk` against
`dynamic_cp` per cell, and their ranges.  Wall results: the measured step time instead of the composed one.
Skipped and failed rows are listed with their reason.  Standard library only.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional

BASE = "dynamic_cp"
COMPARED = ("balanced", "balanced+cal")


def _name(trace: str) -> str:
    return trace.rsplit("/", 1)[-1].split("_n")[0]


def _cell(r: Dict[str, Any]) -> tuple:
    return (r["trace"], r["max_seqlen_per_rank"], r["ranks"])


def _pct(x: Optional[float], base: Optional[float]) -> str:
    if x is None or not base:
        return ""
    return f"{(x / base - 1) * 100:+.1f}%"


def _ms(x: Optional[float]) -> str:
    return "" if x is None else f"{x * 1e3:.1f}"


def _measured(r: Dict[str, Any], wall: bool) -> tuple:
    """(barrier-or-wall seconds, dependency seconds or None) of a row."""
    if wall:
        return r.get("median_step_s"), None
    return r.get("composed_barrier_s"), r.get("composed_dependency_s")


def _ok(r: Dict[str, Any]) -> bool:
    return "error" not in r and "skipped" not in r


def markdown(result: Dict[str, Any]) -> str:
    wall = result["mode"] == "wall"
    rows: List[Dict[str, Any]] = result["rows"]
    base = {_cell(r): r for r in rows if r["scheduler"] == BASE and _ok(r)}
    cal = any("predicted_cal_barrier" in r for r in rows)
    cal_ms = any("predicted_cal_barrier_ms" in r for r in rows)
    m = result.get("machine", {})
    out = [f"{result['mode']} on {result['ranks']} ranks, {m.get('gpu', 'no GPU')} ({m.get('host', '?')}, torch "
           f"{m.get('torch', '?')}, {m.get('date', '?')})" + ("" if wall else "; composed, not measured as a step")]
    if result.get("cost_profile"):
        out.append(f"calibrated profile: {result['cost_profile']}")
    if result.get("verl"):
        out.append(f"verl: {result['verl']}")
    if result.get("time_limit_reached"):
        out.append(f"time limit reached {result['time_limit_reached']}")
    out.append("")
    t = "step (ms)" if wall else "composed barrier / dependency (ms)"
    head = (f"| trace | M | ranks | scheduler | CP | microbatches | {t} | tokens/s | vs {BASE} | predicted | "
            f"predicted vs {BASE} |")
    checked = wall and any("composed_barrier_s" in r for r in rows)
    if checked:
        head += " composed barrier / dependency (ms) |"
    if cal:
        head += " calibrated model " + ("(ms)" if cal_ms else "(units)") + " barrier / dependency |"
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    notes = []
    for r in rows:
        if not _ok(r):
            notes.append(f"- {_name(r['trace'])} M {r['max_seqlen_per_rank']} ranks {r['ranks']} {r['scheduler']}: "
                         + (r.get("skipped") or r.get("error")))
            continue
        b = base.get(_cell(r))
        x, dep = _measured(r, wall)
        bx, bdep = _measured(b, wall) if b else (None, None)
        vs = _pct(x, bx) + ("" if wall or dep is None or bdep is None else f" / {_pct(dep, bdep)}")
        if r is b:
            vs = ""
        tps = r.get("tokens_per_s", r.get("tokens_per_s_composed_barrier"))
        step = _ms(x) if wall else f"{_ms(x)} / {_ms(dep)}"
        pvs = "" if r is b or not b else _pct(r["predicted_barrier"], b["predicted_barrier"])
        line = (f"| {_name(r['trace'])} | {r['max_seqlen_per_rank']} | {r['ranks']} | {r['scheduler']} | {r['cp']} | "
                f"{', '.join(str(v) for v in r['microbatches'])} | {step} | "
                f"{'' if tps is None else f'{tps:,.0f}'} | {vs} | {r['predicted_barrier']:.3g} | {pvs} |")
        if checked:
            line += f" {_ms(r.get('composed_barrier_s'))} / {_ms(r.get('composed_dependency_s'))} |"
        if cal:
            if "predicted_cal_barrier_ms" in r:
                line += f" {r['predicted_cal_barrier_ms']:.1f} / {r['predicted_cal_dependency_ms']:.1f} |"
            elif "predicted_cal_barrier" in r:
                line += f" {r['predicted_cal_barrier']:.3g} / {r['predicted_cal_dependency']:.3g} |"
            else:
                line += " |"
        out.append(line)
    if notes:
        out += ["", "Not run:"] + notes
    if result["mode"] != "plan":
        out += ["", summary(result)]
    return "\n".join(out)


def changes(result: Dict[str, Any], scheduler: str) -> List[tuple]:
    """(cell, barrier change, dependency change or None) of scheduler against dynamic_cp, every cell with both."""
    wall = result["mode"] == "wall"
    rows = [r for r in result["rows"] if _ok(r)]
    base = {_cell(r): r for r in rows if r["scheduler"] == BASE}
    out = []
    for r in rows:
        b = base.get(_cell(r))
        if r["scheduler"] != scheduler or b is None:
            continue
        x, dep = _measured(r, wall)
        bx, bdep = _measured(b, wall)
        if x is None or bx is None:
            continue
        out.append((_cell(r), x / bx - 1, None if dep is None or bdep is None else dep / bdep - 1))
    return out


def summary(result: Dict[str, Any]) -> str:
    """Per cell, each compared scheduler (and verl_kk) against dynamic_cp; then each one's range."""
    what = "measured" if result["mode"] == "wall" else "composed"
    names = [s for s in COMPARED + ("verl_kk",) if changes(result, s)]
    if not names:
        return f"(no cell with both `{BASE}` and a compared scheduler)"
    per = {s: {c: (b, d) for c, b, d in changes(result, s)} for s in names}
    cells = sorted({c for s in names for c in per[s]}, key=lambda c: (c[2], c[1], c[0]))
    head = "| trace | M | ranks | " + " | ".join(f"`{s}` vs `{BASE}`" for s in names) + " |"
    out = [f"Against `{BASE}` ({what} step time, barrier / dependency step model; negative is faster):", "",
           head, "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        vals = []
        for s in names:
            v = per[s].get(c)
            vals.append("" if v is None else f"{v[0] * 100:+.1f}%" + ("" if v[1] is None else f" / {v[1] * 100:+.1f}%"))
        out.append(f"| {_name(c[0])} | {c[1]} | {c[2]} | " + " | ".join(vals) + " |")
    out.append("")
    for s in names:
        bs = [v[0] for v in per[s].values()]
        out.append(f"`{s}`: {min(bs) * 100:+.1f}% to {max(bs) * 100:+.1f}% (barrier); slower in "
                   f"{sum(b > 0 for b in bs)} of {len(bs)} cells.")
    return "\n".join(out)


def main(argv: List[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    for path in argv:
        with open(path, encoding="utf-8") as f:
            print(markdown(json.load(f)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
