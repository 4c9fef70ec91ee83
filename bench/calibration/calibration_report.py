"""Markdown tables of python -m dcpack.calibrate's JSON (--json): the fitted profile, predicted
against measured time per microbatch, and the checked steps (wall against composed and model times).

    python bench/calibration/calibration_report.py one.json [two.json ...]

Prints to stdout; docs/benchmarks.md's calibration section was made with it.
"""

from __future__ import annotations

import json
import statistics
import sys


def profile_keys(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = (x.strip() for x in line.split("=", 1))
            out[k] = v
    return out


def report(path: str) -> None:
    d = json.load(open(path))
    p = profile_keys(d["profile"])
    print(f"### {d['machine']}: {d['ranks']} rank(s), CP sizes {d['cp_sizes']}\n")
    print(f"Model: {d['model']}; torch {d['torch']}.\n")
    kv = ", ".join(f"kv.{c} = {int(p['kv.' + str(c)]):,}" for c in d["cp_sizes"] if c > 1)
    print(f"Fitted (picoseconds): quadratic = {int(p['quadratic']):,} per token pair, linear = "
          f"{int(p['linear']):,} per token, microbatch_overhead = {int(p['microbatch_overhead']):,}"
          + (f", round_latency = {int(p['round_latency']):,}, {kv}" if kv else "") + f"; step_model = {p['step_model']}.\n")
    errs = d["errors"]
    print(f"Per microbatch, predicted against measured ({len(errs)} microbatches): median |error| "
          f"{100 * statistics.median(abs(e) for e in errs):.2f}%, worst {100 * max(abs(e) for e in errs):.2f}%.\n")
    print("| microbatch | measured ms | predicted ms | error |")
    print("|---|---:|---:|---:|")
    for s, pred, e in zip(d["samples"], d["predicted_ps"], errs):
        print(f"| {s['label']} | {s['time_ps'] * 1e-9:.2f} | {pred * 1e-9:.2f} | {100 * e:+.1f}% |")
    print()
    if d["steps"]:
        print("| batch | scheduler | microbatches | CP sizes | wall ms | composed barrier ms | composed dependency ms "
              "| model barrier ms | model dependency ms |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|")
        for r in d["steps"]:
            w = r["wall_ms"]
            print(f"| {r['batch']} ({r['sequences']} seqs, {r['tokens']:,} tokens) | {r['scheduler']} | "
                  f"{r['microbatches']} | {','.join(map(str, r['cp_sizes']))} | {w:.1f} | "
                  f"{r['composed_barrier_ms']:.1f} ({100 * (r['composed_barrier_ms'] / w - 1):+.1f}%) | "
                  f"{r['composed_dependency_ms']:.1f} ({100 * (r['composed_dependency_ms'] / w - 1):+.1f}%) | "
                  f"{r['model_barrier_ms']:.1f} ({100 * (r['model_barrier_ms'] / w - 1):+.1f}%) | "
                  f"{r['model_dependency_ms']:.1f} ({100 * (r['model_dependency_ms'] / w - 1):+.1f}%) |")
        rows = d["steps"]
        for key in ("composed_barrier_ms", "composed_dependency_ms", "model_barrier_ms", "model_dependency_ms"):
            print(f"\n{key}: mean |error| against wall "
                  f"{100 * statistics.mean(abs(r[key] / r['wall_ms'] - 1) for r in rows):.2f}%", end="")
        print("\n")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        report(path)
