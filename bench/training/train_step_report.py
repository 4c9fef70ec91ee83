#!/usr/bin/env python3
"""Markdown tables of bench/training/bench_train_step.py's JSON, as docs/benchmarks.md shows them.

    python3 bench/training/train_step_report.py OUT/replay.json [MORE.json ...]

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


def _pipe(r: Dict[str, Any]) -> bool:
    """A pipeline row (bench_train_step.py --pp): composed under 1F1B / interleaved 1F1B, tabled apart."""
    return "pp" in r


def _pcell(r: Dict[str, Any]) -> tuple:
    return _cell(r) + (r.get("pp", 1), r.get("vpp", 1))


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
    pipe_rows = [r for r in result["rows"] if _pipe(r)]
    rows: List[Dict[str, Any]] = [r for r in result["rows"] if not _pipe(r)]
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
    if result["mode"] != "plan" and rows:
        out += ["", summary(result)]
    if result["mode"] == "replay" and any("batches" in r for r in rows):
        out += ["", "Per cell against `dynamic_cp` (composed barrier, bootstrap 95% interval over batches and "
                    "timed passes):", "", ci_table(result)]
    if pipe_rows:
        out += ["", pipeline_table(result)]
    return "\n".join(out)


def _mean(xs) -> Optional[float]:
    xs = [x for x in (xs or []) if x is not None]
    return sum(xs) / len(xs) if xs else None


def pipeline_table(result: Dict[str, Any]) -> str:
    """The pipeline rows: per cell, P, V and scheduler the composed pipeline step (1F1B, interleaved with
    V > 1), the sum of its microbatches' times, the planner's predicted pipeline makespan under the
    profile (where it gives a unit) and the change against dynamic_cp with its bootstrap 95% interval.
    The planner prices every stage as the whole profiled model, the composition gives each stage 1/P of
    the replayed model: the prediction is shown divided by P, in the composition's units."""
    rows = [r for r in result["rows"] if _pipe(r)]
    cells = {(c["trace"], c["max_seqlen_per_rank"], c["ranks"], c["pp"], c["vpp"], c["scheduler"]): c
             for c in (result.get("pipeline_cells") or cell_changes(result["rows"], "pipeline"))}
    out = ["Pipeline step (composed: per-stage times from the replayed microbatches under Megatron-LM's 1F1B, "
           "interleaved with VPP > 1):", "",
           "| trace | M | ranks | PP | VPP | scheduler | microbatches | composed pipeline (ms) | microbatch sum (ms) "
           "| predicted (calibrated, ms, / PP) | vs dynamic_cp | 95% interval |", "|" + "---|" * 12]
    for r in rows:
        head = (f"| {_name(r['trace'])} | {r['max_seqlen_per_rank']} | {r['ranks']} | {r['pp']} | {r['vpp']} | "
                f"{r['scheduler']} | {', '.join(str(v) for v in r.get('microbatches', []))} |")
        if not _ok(r) or "pipeline_refused" in r:
            out.append(head + f" {r.get('skipped') or r.get('error') or r.get('pipeline_refused')} | | | | |")
            continue
        pred = _mean(r.get("predicted_cal_pipeline_s"))
        pred = None if pred is None else pred / r["pp"]
        c = cells.get((_name(r["trace"]), r["max_seqlen_per_rank"], r["ranks"], r["pp"], r["vpp"], r["scheduler"]))
        vs = "" if c is None else f"{100 * c['change']:+.1f}%"
        ci = "" if c is None else f"{100 * c['ci95'][0]:+.1f}% .. {100 * c['ci95'][1]:+.1f}%"
        out.append(head + f" {_ms(r.get('composed_pipeline_s'))} | {_ms(r.get('composed_microbatch_sum_s'))} | "
                          f"{_ms(pred)} | {vs} | {ci} |")
    return "\n".join(out)


def changes(result: Dict[str, Any], scheduler: str) -> List[tuple]:
    """(cell, barrier change, dependency change or None) of scheduler against dynamic_cp, every cell with both."""
    wall = result["mode"] == "wall"
    rows = [r for r in result["rows"] if _ok(r) and not _pipe(r)]
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


def _bootstrap(base: List[List[float]], other: List[List[float]], draws: int = 2000, seed: int = 1) -> tuple:
    """95% interval of sum(other) / sum(base) - 1 over paired batches: each draw resamples the
    batches (with replacement, the same ones for both) and, per batch, one timed pass of each."""
    import random

    rng = random.Random(seed)
    k = len(base)
    out = []
    for _ in range(draws):
        idx = [rng.randrange(k) for _ in range(k)]
        b = sum(rng.choice(base[i]) for i in idx)
        o = sum(rng.choice(other[i]) for i in idx)
        out.append(o / b - 1)
    out.sort()
    return out[int(0.025 * draws)], out[int(0.975 * draws) - 1]


def cell_changes(rows: List[Dict[str, Any]], model: str = "barrier") -> List[Dict[str, Any]]:
    """Per cell and compared scheduler against dynamic_cp: the change of the composed step (sum over
    the cell's batches), its bootstrap 95% interval (over batches and timed passes), and the
    headroom captured, (dynamic_cp - other) / (dynamic_cp - lower bound), the lower bound that of
    the calibrated profile's model for the same lengths and ranks (mean over the batches).
    ``model`` "pipeline": the pipeline rows (--pp), composed_pipeline_s per cell, PP and VPP (no headroom);
    otherwise the rows without a pipeline."""
    pipe = model == "pipeline"
    ok = [r for r in rows if _ok(r) and "batches" in r and _pipe(r) == pipe and "pipeline_refused" not in r]
    base = {_pcell(r): r for r in ok if r["scheduler"] == BASE}
    out = []
    for r in ok:
        b = base.get(_pcell(r))
        if b is None or r is b:
            continue
        key = f"composed_{model}_s"
        passes = f"composed_{model}_passes_s"
        bx = sum(x[key] for x in b["batches"])
        rx = sum(x[key] for x in r["batches"])
        lo, hi = _bootstrap([x[passes] for x in b["batches"]], [x[passes] for x in r["batches"]])
        d = {"trace": _name(r["trace"]), "max_seqlen_per_rank": r["max_seqlen_per_rank"], "ranks": r["ranks"],
             "scheduler": r["scheduler"], "batches": len(r["batches"]), "step_model": model,
             "base_s": bx / len(b["batches"]), "other_s": rx / len(r["batches"]),
             "change": rx / bx - 1, "ci95": [lo, hi], "outliers": r.get("outliers", 0) + b.get("outliers", 0),
             "timings": r.get("timings", 0) + b.get("timings", 0)}
        if pipe:
            d.update(pp=r["pp"], vpp=r["vpp"])
            out.append(d)
            continue
        lb = r.get("lower_bound_cal_ms") or b.get("lower_bound_cal_ms")
        if lb:
            lbs = sum(lb) / len(lb) * 1e-3
            d["lower_bound_s"] = lbs
            gap = d["base_s"] - lbs
            d["headroom_captured"] = (d["base_s"] - d["other_s"]) / gap if gap > 0 else None
        out.append(d)
    return out


def _lb(c: Dict[str, Any]) -> str:
    return f"{1e3 * c['lower_bound_s']:.1f}" if "lower_bound_s" in c else ""


def ci_table(result: Dict[str, Any]) -> str:
    """The cells' changes with their intervals and the headroom captured, as markdown."""
    cells = result.get("cells") or cell_changes(result["rows"])
    if not cells:
        return ""
    out = ["| trace | M | ranks | scheduler | dynamic_cp (ms) | other (ms) | change | 95% interval | lower bound (ms) "
           "| headroom captured | outliers / timings |", "|" + "---|" * 11]
    for c in sorted(cells, key=lambda c: (c["scheduler"], c["ranks"], c["max_seqlen_per_rank"], c["trace"])):
        h = c.get("headroom_captured")
        out.append(f"| {c['trace']} | {c['max_seqlen_per_rank']} | {c['ranks']} | {c['scheduler']} | "
                   f"{c['base_s'] * 1e3:.1f} | {c['other_s'] * 1e3:.1f} | {100 * c['change']:+.1f}% | "
                   f"{100 * c['ci95'][0]:+.1f}% .. {100 * c['ci95'][1]:+.1f}% | "
                   f"{_lb(c)} | "
                   f"{'' if h is None else f'{100 * h:.0f}%'} | {c['outliers']} / {c['timings']} |")
    return "\n".join(out)


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
