#!/usr/bin/env python3
"""Re-fit a committed calibration (python -m dcpack.calibrate's --json) with the current fit, offline.

    python3 bench/calibration/refit_profile.py IN.json OUT.profile [--json OUT.json] [--note TEXT] [--header PROFILE]

Reads the JSON's measured samples (nothing is re-timed), fits them with
dcpack.calibrate.fit_cost_model (form gather: cp_gather.<cp>, the small-microbatch hinge over the
knees the samples can resolve, margin_ppm = p90 error) and writes the profile with the error per CP
size and size class in its comments, the original header kept.  Knees above the smallest measured
tokens per rank are left out (the samples cannot place them): with no microbatch under a candidate
knee, the hinge is not fitted (0) and the comments say so.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from dcpack import calibrate as cal


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--json", default="")
    ap.add_argument("--note", default="")
    ap.add_argument("--header", default="", help="the profile whose comment header is kept (default: IN with "
                                                 ".profile for .json)")
    a = ap.parse_args()
    doc = json.load(open(a.inp, encoding="utf-8"))
    samples = [cal.Sample(**s) for s in doc["samples"]]
    smallest = min(sum(s.lengths) // s.cp for s in samples)
    knees = [k for k in cal.DEFAULT_KNEES if k <= smallest]
    fit = cal.fit_cost_model(samples, doc.get("step_model", "barrier"), form="gather", knees=knees)
    table = cal.error_table(fit, samples)
    header = a.header or (a.inp[:-5] + ".profile" if a.inp.endswith(".json") else "")
    try:
        text = open(header, encoding="utf-8").read() if header else doc.get("profile", "")
    except OSError:
        text = doc.get("profile", "")
    old = [line[2:] for line in text.splitlines() if line.startswith("# ") and "re-fitted" not in line]
    cps = sorted({s.cp for s in samples})
    comments = [f"re-fitted on {time.strftime('%Y-%m-%d')} by bench/calibration/refit_profile.py from the samples of "
                f"{a.inp} (not re-timed); the original header:"] + [f"  {c}" for c in old[:4]] + [
        f"form: gather (cp_gather.<cp> undivided per token, kv 0); knees tried {knees} "
        f"(none above the smallest measured {smallest} tokens per rank); chosen {fit.model.small_knee}"
        + ("" if fit.model.small_slope else ": no hinge fitted (no microbatch small enough to place one)"),
        f"fit: relative error median {100 * fit.median_error:.2f}%, p90 {100 * fit.p90_error:.2f}%, "
        f"worst {100 * fit.worst_error:.2f}%; margin_ppm = the p90", *cal.error_lines(table),
        f"CP sizes measured: {cps}; " + (
            f"CP {min(c for c, h in fit.priced.items() if h == 'extrapolated')}.."
            f"{max(c for c, h in fit.priced.items() if h == 'extrapolated')}: not measured, cp_gather extrapolated "
            f"from the measured sizes as a ring share (cp-1)/cp" if any(h == "extrapolated" for h in fit.priced.values())
            else "no CP term measured"),
        "units: picoseconds (time_unit_ps = 1)"]
    if a.note:
        comments.append(a.note)
    prof = cal.Profile(dataclasses.replace(fit.model), 1)
    cal.write_profile(a.out, prof, comments)
    cal._complete_profile_keys(a.out, prof.cost)
    if a.json:
        doc = dict(doc)
        doc.update({"predicted_ps": [cal.predict(fit.model, s) for s in samples], "errors": fit.errors,
                    "median_error": fit.median_error, "p90_error": fit.p90_error, "worst_error": fit.worst_error,
                    "error_table": table, "form": "gather",
                    "knee_residuals": {str(k): v for k, v in fit.knee_residuals.items()},
                    "priced": {str(k): v for k, v in fit.priced.items()},
                    "profile": open(a.out, encoding="utf-8").read(), "refit_from": a.inp})
        with open(a.json + ".tmp", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        import os
        os.replace(a.json + ".tmp", a.json)
    print(open(a.out, encoding="utf-8").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
