"""Calibrate the step cost model to a GPU: time microbatches, fit the coefficients, write a profile.

    python -m dcpack.calibrate --layers L --hidden H --heads A --kv-heads K --ffn F \\
        [--max-cp C] [--tokens 4096,8192,16384,32768] --out my.profile
    torchrun --nproc-per-node 2 -m dcpack.calibrate ... --max-cp 2 --out my.profile

Times the reference THD transformer (:mod:`dcpack.thd`) forward and backward over one packed
microbatch per grid point (CUDA events, warm-up, the median of repeats; wall clock on the CPU),
over several token counts per rank and length mixes (one sequence, halves, quarters, a skewed
mix, many short ones: s^2 and s are not collinear), at CP 1 and, under ``torchrun`` with
``--max-cp`` > 1, at every power-of-two CP size up to it with the CP communication (each rank of
the group holds its zigzag share; a group's time is its slowest rank's).  Then fits the cost
model of ``include/dcpack.h`` (``quadratic``, ``linear``, ``kv.<cp>``, ``round_latency``,
``microbatch_overhead``) by non-negative least squares on relative error, in integer picoseconds,
writes the profile (``time_unit_ps = 1``: ``dcpack plan --cost FILE`` prints makespans in ms) and
reports, per microbatch, predicted against measured time.

Everything below the timing is pure and tested on synthetic data (``python/tests/test_calibrate.py``):

- :func:`fit_cost_model`: the fit; :func:`predict` the model's time of a measured microbatch
  (exactly ``dcp_cost()`` summed, plus ``microbatch_overhead``).
- :func:`compose_step`: a step's time from every group's time in every microbatch, under the
  barrier and the dependency step models (``include/dcpack.h``), a replay: fed the
  model's own costs it equals ``dcp_plan_stats``' ``makespan`` and ``dependency_makespan``.
- :func:`load_profile` / :func:`format_profile`: the profile file format of ``dcpack cost``
  (``docs/program.md``), so ``Config(cost=load_profile(path).cost)`` and
  ``dcpack.megatron.install(..., cost=load_profile(path).cost)`` take a calibrated profile.

Its rooms: ``_calibrate_fit`` (profiles, the fit, composition: pure), ``_calibrate_timing`` (GPU
timing of microbatches and steps), and this module, the command line; every name of the first two
is also a name of this one.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from ._api import CostModel
from ._calibrate_fit import (  # noqa: F401  (the module's names, as before its split)
    CommModel,
    DEFAULT_KNEES,
    Fit,
    INT64_MAX,
    MAX_LOG2_CP,
    Profile,
    Retimed,
    SIZE_CLASSES,
    Sample,
    TIME_UNIT_PS,
    _cost_model,
    _design,
    _fit_at_knee,
    _model_of,
    _sat,
    compose_step,
    error_lines,
    error_table,
    extrapolate_cp,
    far_off,
    fit_comm_model,
    fit_cost_model,
    format_profile,
    group_cost,
    length_mixes,
    load_profile,
    model_group_times,
    nnls,
    parse_profile,
    percentile,
    plan_groups,
    predict,
    relative_errors,
    report_lines,
    retime_far_off,
    sequence_cost,
    size_class,
    write_profile,
)
from ._calibrate_timing import (  # noqa: F401  (the module's names, as before its split)
    _World,
    _say,
    _thd,
    _time_ms,
    measure_grid,
    measure_steps,
    step_batches,
    synthetic_batch,
    time_sample,
    which_step_model,
)

# the public classes and functions of its rooms say they are dcpack.calibrate's, where they are used from
for _obj in [v for k, v in globals().items() if not k.startswith("_") and getattr(v, "__module__", "") in
             ("dcpack._calibrate_fit", "dcpack._calibrate_timing")]:
    _obj.__module__ = __name__
del _obj


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _ints(text: str) -> List[int]:
    try:
        out = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': positive integers, at least one")
    return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dcpack.calibrate",
                                description="Fit the cost model to measured microbatch times of the reference THD "
                                            "transformer; write a cost profile in picoseconds.")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary (embedding and output head; default 32000)")
    p.add_argument("--max-cp", type=int, default=1, help="largest CP size timed, a power of two <= the world "
                                                         "size (default 1)")
    p.add_argument("--tokens", type=_ints, default=[256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
                   help="tokens per rank of the grid's microbatches (default 256,...,32768: small ones for the hinge)")
    p.add_argument("--emulate-cp", type=int, default=0,
                   help="also price every power-of-two CP size above the world's up to this one: compute timed "
                        "with dcpack.thd.LOCAL_REPLAY on rank 0, collectives priced by the ring model fitted to "
                        "--comm-table (default 0: none)")
    p.add_argument("--emulated-tokens", type=_ints, default=[1024, 2048, 4096, 8192, 16384],
                   help="tokens per rank of the emulated CP sizes' microbatches")
    p.add_argument("--comm-table", default="", help="JSON with a 'comm' table of all-gather / reduce-scatter times "
                                                    "(bench/data/comm_2xh200.json), for --emulate-cp")
    p.add_argument("--form", choices=("gather", "ring"), default="gather",
                   help="the CP term fitted: gather (cp_gather.<cp>, undivided; all-gather CP as dcpack.thd) or "
                        "ring (kv.<cp>, overlapped with attention)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of every shape before its timing (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per microbatch, at least 5; the median "
                                                          "counts (default 5)")
    p.add_argument("--retime", type=int, default=8, metavar="N",
                   help="time again, after a longer warm-up, up to N shapes whose first timing is off the first fit "
                        "by more than 3 x its median error and 10%%, then fit again (default 8; 0: off)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="auto: bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--step-model", choices=("auto", "barrier", "dependency"), default="auto",
                   help="the profile's step_model; auto: the one whose composed step time is nearer the measured "
                        "wall time (with --check-steps), else barrier")
    p.add_argument("--check-steps", type=int, default=0, metavar="B",
                   help="also time B batches' real steps (dynamic_cp, balanced, balanced laid out for dependency) against the composed "
                        "barrier and dependency times (default 0: none)")
    p.add_argument("--max-seqlen", type=int, default=16384, help="max_seqlen_per_rank of --check-steps' plans")
    p.add_argument("--microbatches", type=int, default=6, help="about this many microbatches per checked step")
    p.add_argument("--steps", type=int, default=3, help="timed steps per checked plan (default 3)")
    p.add_argument("--machine", default="", help="what ran it, for the profile's header")
    p.add_argument("--out", required=True, help="the profile to write")
    p.add_argument("--json", default=None, help="also write every measurement and the fit here")
    a = p.parse_args(argv)
    if a.max_cp < 1 or a.max_cp & (a.max_cp - 1):
        p.error(f"--max-cp {a.max_cp} is not a power of two")
    for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "warmup", "repeats", "steps", "retime"):
        if getattr(a, name) < (0 if name in ("warmup", "retime") else 1):
            p.error(f"--{name.replace('_', '-')} {getattr(a, name)} is out of range")
    if a.repeats < 5 and a.device != "cpu":
        p.error(f"--repeats {a.repeats}: a GPU calibration takes the median of at least 5 timings")
    if a.emulate_cp and (a.emulate_cp & (a.emulate_cp - 1) or not a.comm_table):
        p.error(f"--emulate-cp {a.emulate_cp}: a power of two, with --comm-table")
    return a


NEW_KEYS = ("small_knee", "small_slope", "margin_ppm")


def _complete_profile_keys(path: str, model: CostModel) -> None:
    """Append the step terms (cp_gather.<cp>, small_knee, small_slope, margin_ppm) where the profile
    writer of this build does not write them yet, so a profile always holds the whole fitted model."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    keys = {line.split("=", 1)[0].strip() for line in text.splitlines() if "=" in line and not line.startswith("#")}
    extra = [f"cp_gather.{1 << k} = {model.cp_gather[k]}" for k in range(1, MAX_LOG2_CP + 1)
             if f"cp_gather.{1 << k}" not in keys]
    extra += [f"{k} = {getattr(model, k)}" for k in NEW_KEYS if k not in keys]
    if extra:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(extra) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parse_args(argv)
    thd = _thd()
    import torch

    world = _World(a.device)
    if a.max_cp > world.size:
        _say(world, f"dcpack.calibrate: --max-cp {a.max_cp} needs as many ranks; {world.size} here "
                    f"(torchrun --nproc-per-node {a.max_cp})")
        world.close()
        return 2
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(
        a.dtype, torch.bfloat16 if world.device.type == "cuda" else torch.float32)
    config = thd.ModelConfig(vocab_size=a.vocab, hidden=a.hidden, layers=a.layers, heads=a.heads,
                             kv_heads=a.kv_heads, ffn=a.ffn, dtype=dtype)
    model = thd.THDTransformer(config, device=world.device)
    groups = thd.CPGroups(world.size) if world.size > 1 else None
    cps = [c for c in (1 << k for k in range(17)) if c <= a.max_cp]
    what = (f"layers {a.layers}, hidden {a.hidden}, heads {a.heads}, kv heads {a.kv_heads}, ffn {a.ffn}, "
            f"vocab {a.vocab}, {str(dtype).replace('torch.', '')}, attention {config.kernel_for(world.device)}")
    name = torch.cuda.get_device_name(world.device) if world.device.type == "cuda" else "CPU"
    _say(world, f"dcpack.calibrate: {what}; {world.size} rank(s) on {name}; CP sizes {cps}; tokens/rank {a.tokens}")

    comm = None
    if a.emulate_cp:
        import json

        with open(a.comm_table, encoding="utf-8") as f:
            doc = json.load(f)
        comm = fit_comm_model(doc["comm"] if "comm" in doc else doc, source=a.comm_table)
        _say(world, f"communication: ring model from {a.comm_table} ({(doc.get('machine') or {}).get('gpu', '?')}): "
                    f"alpha {comm.alpha_s * 1e6:.2f} us per ring step, beta {comm.beta_s_per_byte * 1e12:.3f} ps "
                    f"per byte (all-gather + reduce-scatter)")
    emulated = [c for c in (1 << k for k in range(17)) if cps[-1] < c <= a.emulate_cp]
    samples = measure_grid(thd, model, world, groups, cps, a.tokens, a.vocab, a.warmup, a.repeats,
                           emulated=emulated, emulated_tokens=a.emulated_tokens, comm=comm, layers=a.layers)
    fit = fit_cost_model(samples, "barrier", form=a.form)
    retimed: List[Retimed] = []
    if a.retime > 0:
        # a shape far off the first fit is timed once more after a longer warm-up before the fit is trusted:
        # a timing that caught something other than the shape's own cost must not set the margin
        def again(s: Sample) -> Sample:
            return time_sample(thd, model, world, groups, s.cp, s.cp > cps[-1], s.lengths, a.vocab,
                               2 * a.warmup + 1, a.repeats, s.label, comm, a.layers)

        samples, retimed = retime_far_off(samples, fit, again, most=a.retime)
        for r in retimed:
            _say(world, f"  re-timed {r.label:37s} {r.first_ps * 1e-9:9.3f} -> {r.again_ps * 1e-9:9.3f} ms "
                        f"(first fit {100 * r.first_error:+.1f}%)")
        if retimed:
            fit = fit_cost_model(samples, "barrier", form=a.form)
    lines = report_lines(fit, samples)
    for line in lines:
        _say(world, line)

    rows: List[Dict[str, Any]] = []
    chosen = a.step_model if a.step_model != "auto" else "barrier"
    profile = Profile(fit.model, TIME_UNIT_PS)
    if a.check_steps:
        _say(world, f"steps: {a.check_steps} batch(es), max_seqlen_per_rank {a.max_seqlen}, {world.size} rank(s)")
        rows = measure_steps(thd, model, world, groups, profile, a.max_seqlen, a.microbatches, a.check_steps,
                             a.steps, a.vocab, a.warmup, a.repeats)
        best, err_b, err_d = which_step_model(rows)
        _say(world, f"composed vs wall, mean |relative error|: barrier {100 * err_b:.2f}%, dependency "
                    f"{100 * err_d:.2f}% -> {best} predicts these steps better")
        if a.step_model == "auto":
            chosen = best
    profile = Profile(dataclasses.replace(fit.model, step_model=chosen), TIME_UNIT_PS)

    if world.rank == 0:
        table = error_table(fit, samples)
        measured = [c for c in cps]
        comments = [f"dcpack cost profile, calibrated by python -m dcpack.calibrate on {time.strftime('%Y-%m-%d')}",
                    f"machine: {a.machine or name}, {world.size} rank(s); torch {torch.__version__}",
                    f"model: {what}",
                    f"grid: CP sizes {cps} measured, {emulated or 'none'} emulated; tokens per rank {a.tokens}"
                    f"{f' (emulated: {a.emulated_tokens})' if emulated else ''}; {len(samples)} microbatches; "
                    f"median of {a.repeats} after {a.warmup} warm-up runs of every shape",
                    f"form: {a.form} ({'cp_gather.<cp> undivided per token, kv 0' if a.form == 'gather' else 'kv.<cp> overlapped, cp_gather 0'}); "
                    f"small-microbatch knee {fit.model.small_knee} chosen from {list(DEFAULT_KNEES)} by residual",
                    f"fit: relative error median {100 * fit.median_error:.2f}%, p90 {100 * fit.p90_error:.2f}%, "
                    f"worst {100 * fit.worst_error:.2f}%; margin_ppm = the p90",
                    f"re-timed before the fit (far off the first fit): "
                    + ("; ".join(f"{r.label} {r.first_ps * 1e-9:.3f} -> {r.again_ps * 1e-9:.3f} ms" for r in retimed)
                       if retimed else ("none" if a.retime > 0 else "off (--retime 0)")),
                    *error_lines(table),
                    "units: picoseconds (time_unit_ps = 1): quadratic per token pair, linear per token"]
        if emulated:
            comments.append(f"CP {emulated}: compute measured on this GPU with dcpack.thd.LOCAL_REPLAY (the rank's "
                            f"share on the group's shapes), collectives NOT measured here: priced by the ring model "
                            f"(cp-1) x (alpha + beta x bytes per rank) fitted to {a.comm_table}, alpha "
                            f"{comm.alpha_s * 1e6:.2f} us, beta {comm.beta_s_per_byte * 1e12:.3f} ps/byte")
        ext = sorted(c for c, how in fit.priced.items() if how == "extrapolated")
        if ext:
            comments.append(f"CP {ext[0]}..{ext[-1]}: not timed; the CP term extrapolated as a + b (cp-1)/cp "
                            f"from the fitted sizes {sorted(c for c, h in fit.priced.items() if h == 'fitted')}")
        if cps == [1] and not emulated:
            comments.append("CP terms: no CP size measured or emulated (CP 1 only): 0 (pass --emulate-cp)")
        del measured
        write_profile(a.out, profile, comments)
        _complete_profile_keys(a.out, profile.cost)
        print(f"wrote {a.out} (step_model = {chosen})", flush=True)
        if a.json:
            import json

            with open(a.json, "w", encoding="utf-8") as f:
                json.dump({"model": what, "machine": a.machine or name, "ranks": world.size,
                           "torch": torch.__version__, "cp_sizes": cps, "emulated_cp_sizes": emulated,
                           "tokens": a.tokens, "emulated_tokens": a.emulated_tokens if emulated else [],
                           "form": a.form, "warmup": a.warmup, "repeats": a.repeats,
                           "comm_model": dataclasses.asdict(comm) if comm else None,
                           "samples": [dataclasses.asdict(s) for s in samples],
                           "predicted_ps": [predict(fit.model, s) for s in samples], "errors": fit.errors,
                           "median_error": fit.median_error, "p90_error": fit.p90_error,
                           "worst_error": fit.worst_error, "error_table": table,
                           "knee_residuals": {str(k): v for k, v in fit.knee_residuals.items()},
                           "priced": {str(k): v for k, v in fit.priced.items()},
                           "retimed": [dataclasses.asdict(r) for r in retimed],
                           "profile": open(a.out, encoding="utf-8").read(), "steps": rows, "step_model": chosen},
                          f, indent=1)
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
