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
  barrier and the dependency step models (``include/dcpack.h``), the replay of issue 31: fed the
  model's own costs it equals ``dcp_plan_stats``' ``makespan`` and ``dependency_makespan``.
- :func:`load_profile` / :func:`format_profile`: the profile file format of ``dcpack cost``
  (``docs/program.md``), so ``Config(cost=load_profile(path).cost)`` and
  ``dcpack.megatron.install(..., cost=load_profile(path).cost)`` take a calibrated profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._api import CostModel, Plan, cost
from ._errors import InvalidArgumentError, InvalidConfigError

MAX_LOG2_CP = 16
INT64_MAX = (1 << 63) - 1
TIME_UNIT_PS = 1
"""Picoseconds per cost unit of the profiles this module writes."""

# --------------------------------------------------------------------------
# Profiles (the format of programs/cost_profile.c)
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Profile:
    """A cost profile: the model, and picoseconds per cost unit (None: abstract units)."""

    cost: CostModel
    time_unit_ps: Optional[int] = None

    def ms(self, units: int) -> float:
        """A cost (makespan) in milliseconds; needs a time unit."""
        if self.time_unit_ps is None:
            raise InvalidArgumentError("this profile has no time_unit_ps: its costs are not times")
        return units * self.time_unit_ps * 1e-9


def _log2_cp(text: str) -> int:
    if not text.isdigit():
        return -1
    cp = int(text)
    if cp < 2 or cp > (1 << MAX_LOG2_CP) or cp & (cp - 1):
        return -1
    return cp.bit_length() - 1


def parse_profile(text: str, name: str = "<profile>", base: Optional[CostModel] = None) -> Profile:
    """Parse profile lines over ``base`` (default: the default model), as ``dcpack cost --profile`` does.

    Raises :class:`InvalidConfigError` naming ``name:line`` on a bad line.
    """
    m = dataclasses.asdict(base if base is not None else CostModel())
    kv = list(m["kv"])
    unit: Optional[int] = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise InvalidConfigError(f"{name}:{number}: '{line}' is not `key = value`")
        key, value = (x.strip() for x in line.split("=", 1))
        if key == "step_model":
            if value not in ("barrier", "dependency"):
                raise InvalidConfigError(f"{name}:{number}: step_model = '{value}' is not barrier or dependency")
            m["step_model"] = value
            continue
        if not value.isdigit() or int(value) > INT64_MAX:
            raise InvalidConfigError(f"{name}:{number}: {key} = '{value}': values are non-negative integers")
        v = int(value)
        if key == "time_unit_ps":
            if v == 0:
                raise InvalidConfigError(f"{name}:{number}: time_unit_ps = 0: picoseconds per cost unit must be at least 1")
            unit = v
        elif key in ("quadratic", "linear", "round_latency", "microbatch_overhead"):
            m[key] = v
        elif key == "hidden":
            if v > INT64_MAX // 12:
                raise InvalidConfigError(f"{name}:{number}: hidden = {v}: 12 * hidden overflows int64")
            m["linear"] = 12 * v
        elif key == "kv":
            kv = [v] * (MAX_LOG2_CP + 1)
        elif key.startswith("kv."):
            cp_text = key[3:]
            above = cp_text.endswith("+")
            k = _log2_cp(cp_text[:-1] if above else cp_text)
            if k < 0:
                raise InvalidConfigError(f"{name}:{number}: {key}: the CP size after 'kv.' must be a power of two "
                                         f"from 2 to {1 << MAX_LOG2_CP}")
            for j in range(k, MAX_LOG2_CP + 1 if above else k + 1):
                kv[j] = v
        else:
            raise InvalidConfigError(f"{name}:{number}: unknown key '{key}' (quadratic, linear, hidden, round_latency, "
                                     "microbatch_overhead, kv, kv.<cp>, kv.<cp>+, step_model, time_unit_ps)")
    m["kv"] = tuple(kv)
    return Profile(CostModel(**m), unit)


def load_profile(path: str, base: Optional[CostModel] = None) -> Profile:
    """Read a profile file (``dcpack cost --format profile``, or one :func:`write_profile` wrote)."""
    with open(path, encoding="utf-8") as f:
        return parse_profile(f.read(), path, base)


def format_profile(profile: Profile, comments: Sequence[str] = ()) -> str:
    """The profile as file text: ``#`` comment lines, then every key (loads back to the same profile)."""
    m = profile.cost
    step_model = m.step_model if isinstance(m.step_model, str) else ("barrier", "dependency")[m.step_model]
    lines = [f"# {c}" if c else "#" for c in comments]
    if profile.time_unit_ps is not None:
        lines.append(f"time_unit_ps = {profile.time_unit_ps}")
    lines += [f"quadratic = {m.quadratic}", f"linear = {m.linear}", f"round_latency = {m.round_latency}",
              f"microbatch_overhead = {m.microbatch_overhead}"]
    lines += [f"kv.{1 << k} = {m.kv[k]}" for k in range(1, MAX_LOG2_CP + 1)]
    lines.append(f"step_model = {step_model}")
    return "\n".join(lines) + "\n"


def write_profile(path: str, profile: Profile, comments: Sequence[str] = ()) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(format_profile(profile, comments))


# --------------------------------------------------------------------------
# Measured microbatches and the fit
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sample:
    """One measured microbatch group: ``cp`` ranks holding whole sequences of ``lengths`` tokens
    (each rank its 1/cp share), and the time its slowest rank took (forward + backward), in
    picoseconds."""

    cp: int
    lengths: Tuple[int, ...]
    time_ps: float
    label: str = ""


def predict(model: CostModel, sample: Sample) -> int:
    """The model's time of a measured microbatch: its sequences' ``dcp_cost()`` plus ``microbatch_overhead``."""
    return model.microbatch_overhead + sum(cost(s, sample.cp, model) for s in sample.lengths)


def relative_errors(model: CostModel, samples: Sequence[Sample]) -> List[float]:
    """(predicted - measured) / measured for every sample."""
    return [(predict(model, s) - s.time_ps) / s.time_ps for s in samples]


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares, exactly, for the few columns of the cost model.

    Every subset of the columns is solved unconstrained; the best solution with no negative
    coefficient wins (the NNLS optimum is the unconstrained optimum over its positive columns,
    and a subset solution with no negative entry is feasible).  2^columns solves: fine for <= 12.
    """
    rows, cols = a.shape
    if cols > 12:
        raise InvalidArgumentError(f"nnls: {cols} columns is too many for the exact subset search")
    best, best_res = np.zeros(cols), float(np.dot(b, b))
    for size in range(1, cols + 1):
        for subset in itertools.combinations(range(cols), size):
            sub = a[:, subset]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x < 0):
                continue
            r = b - sub @ x
            res = float(np.dot(r, r))
            if res < best_res * (1 - 1e-12):
                best_res, best = res, np.zeros(cols)
                best[list(subset)] = x
    return best


@dataclasses.dataclass
class Fit:
    """The fitted model and how well it predicts the samples it was fitted to."""

    model: CostModel
    cp_sizes: Tuple[int, ...]          # the CP sizes measured (kv.<cp> fitted for these)
    errors: List[float]                # per sample, (predicted - measured) / measured
    exposed: Dict[int, int]            # per CP size > 1: distinct lengths on the exposed-KV branch

    @property
    def median_error(self) -> float:
        return statistics.median(abs(e) for e in self.errors)

    @property
    def worst_error(self) -> float:
        return max(abs(e) for e in self.errors)


def _design(samples: Sequence[Sample], cps: Sequence[int], exposed: Callable[[int, int], bool]) -> np.ndarray:
    """Rows: samples; columns: quadratic, linear, kv per CP size of cps, round_latency, overhead."""
    a = np.zeros((len(samples), 4 + len(cps)))
    for i, smp in enumerate(samples):
        c = smp.cp
        for s in smp.lengths:
            a[i, 1] += s / c
            if c > 1:
                a[i, 2 + len(cps)] += c - 1
                if exposed(s, c):
                    a[i, 2 + cps.index(c)] += s * (c - 1) / c
                    continue
            a[i, 0] += s * s / c
        a[i, 3 + len(cps)] = 1.0
    return a


def _model_of(x: np.ndarray, cps: Sequence[int], step_model: str) -> CostModel:
    """Round a fitted vector to an integer model; kv of CP sizes not measured: the nearest measured
    smaller size's (the largest measured for every size above it), 0 below the smallest measured."""
    ints = [int(round(v)) for v in x]
    kv = [0] * (MAX_LOG2_CP + 1)
    for k in range(1, MAX_LOG2_CP + 1):
        known = [c for c in cps if c <= (1 << k)]
        if known:
            kv[k] = ints[2 + cps.index(max(known))]
    return CostModel(quadratic=ints[0], linear=ints[1], kv=tuple(kv), round_latency=ints[2 + len(cps)],
                     microbatch_overhead=ints[3 + len(cps)], step_model=step_model)


def fit_cost_model(samples: Sequence[Sample], step_model: str = "barrier", iterations: int = 20) -> Fit:
    """Fit the cost model's coefficients to measured microbatches (integer, in the samples' unit).

    Minimises the sum of squared relative errors (each row divided by its measured time) with
    every coefficient >= 0.  The model's exposed-KV term max(0, kv*s*(cp-1) - quadratic*s^2)/cp
    is piecewise: for each sequence on cp > 1 either communication is exposed (the term is
    kv*s*(cp-1)/cp and the attention's s^2 drops out) or hidden (0).  The fit alternates: solve
    with a branch per sequence, reassign each sequence the branch the solution puts it on, until
    no sequence moves; from two starts (all hidden, all exposed), keeping the better.
    Coefficients no sample measures (round_latency and kv without CP > 1 samples) are 0.
    """
    if not samples:
        raise InvalidArgumentError("fit_cost_model: no samples")
    for s in samples:
        if s.cp < 1 or s.cp & (s.cp - 1) or not s.lengths or s.time_ps <= 0 or min(s.lengths) < 1:
            raise InvalidArgumentError(f"fit_cost_model: bad sample {s}")
    cps = sorted({s.cp for s in samples if s.cp > 1})
    w = np.array([1.0 / s.time_ps for s in samples])
    b = np.ones(len(samples))  # measured / measured

    best: Optional[Tuple[float, np.ndarray, Dict[Tuple[int, int], bool]]] = None
    for start in (False, True):
        branch: Dict[Tuple[int, int], bool] = {}
        rule: Callable[[int, int], bool] = lambda s, c, start=start: start
        x = np.zeros(4 + len(cps))
        for _ in range(iterations):
            a = _design(samples, cps, rule) * w[:, None]
            x = nnls(a, b)
            q, kvs = x[0], {c: x[2 + cps.index(c)] for c in cps}
            new = {(s, c): kvs[c] * s * (c - 1) > q * s * s for smp in samples if smp.cp > 1
                   for s, c in ((s, smp.cp) for s in smp.lengths)}
            if new == branch:
                break
            branch = new
            rule = lambda s, c, br=new: br[(s, c)]
        r = _design(samples, cps, rule) * w[:, None] @ x - b
        res = float(r @ r)
        if best is None or res < best[0]:
            best = (res, x, branch)
    assert best is not None
    model = _model_of(best[1], cps, step_model)
    exposed = {c: sum(1 for (s, cc), e in best[2].items() if cc == c and e) for c in cps}
    return Fit(model=model, cp_sizes=tuple([1] + cps), errors=relative_errors(model, samples), exposed=exposed)


# --------------------------------------------------------------------------
# Step composition (replay): a step's time from its groups' times
# --------------------------------------------------------------------------


def compose_step(groups: Sequence[Sequence[Tuple[int, int]]], times: Sequence[Sequence[Any]],
                 overhead: Any = 0, num_ranks: Optional[int] = None) -> Tuple[Any, Any]:
    """A step's time under the barrier and the dependency step models (``include/dcpack.h``).

    ``groups[m]`` lists microbatch m's groups as ``(first_rank, cp_size)`` and ``times[m][g]``
    the time of group g (its slowest rank; measured, or the model's cost).  ``overhead`` is added
    to every group (the model's ``microbatch_overhead``; 0 for measured times, which hold it).

    - barrier: the sum over microbatches of (slowest group + overhead);
    - dependency: a group of microbatch m starts when every one of its ranks finished m-1:
      finish_r(m) = max over ranks q of r's group of finish_q(m-1) + time + overhead, and the
      step ends at the last rank's finish.  Ranks in no group of a microbatch keep their finish.

    Integer times give integer results (no rounding anywhere).
    """
    if len(groups) != len(times):
        raise InvalidArgumentError(f"compose_step: {len(groups)} microbatches of groups, {len(times)} of times")
    n = num_ranks if num_ranks is not None else max((r + c for mb in groups for r, c in mb), default=0)
    finish = [0] * n
    barrier = 0
    for m, (mb, ts) in enumerate(zip(groups, times)):
        if len(mb) != len(ts):
            raise InvalidArgumentError(f"compose_step: microbatch {m} has {len(mb)} groups and {len(ts)} times")
        if not mb:
            continue
        barrier += max(ts) + overhead
        done = []
        for (first, cp), t in zip(mb, ts):
            if first < 0 or cp < 1 or first + cp > n:
                raise InvalidArgumentError(f"compose_step: microbatch {m}: group ({first}, {cp}) outside {n} ranks")
            done.append((first, cp, max(finish[first:first + cp]) + t + overhead))
        for first, cp, d in done:
            finish[first:first + cp] = [d] * cp
    return barrier, max(finish, default=0)


def plan_groups(plan: Plan) -> List[List[Tuple[int, int]]]:
    """A plan's groups as :func:`compose_step` takes them."""
    return [[(r, c) for r, c, _ in plan.groups(m)] for m in range(plan.num_microbatches)]


def model_group_times(plan: Plan, lengths: Sequence[int], model: CostModel) -> List[List[int]]:
    """Every group's cost under ``model`` (the sum of ``dcp_cost()`` of its sequences)."""
    return [[sum(cost(int(lengths[i]), c, model) for i in ids) for _, c, ids in plan.groups(m)]
            for m in range(plan.num_microbatches)]


# --------------------------------------------------------------------------
# The grid of microbatches to time
# --------------------------------------------------------------------------


def length_mixes(tokens: int, granule: int = 64) -> List[Tuple[str, Tuple[int, ...]]]:
    """Packings of ``tokens`` tokens: one sequence, halves, quarters, a skewed mix, many short ones.

    Sums of s^2 differ by up to 16x at equal token counts, so the fit can tell s^2 from s.
    Lengths are multiples of ``granule`` (zigzag cuts every sequence into 2*cp chunks).
    """
    def parts(fracs: Sequence[float]) -> Tuple[int, ...]:
        out = [max(granule, int(tokens * f) // granule * granule) for f in fracs]
        out[0] += tokens - sum(out)
        return tuple(out)

    return [("1x", parts([1.0])), ("2x", parts([0.5, 0.5])), ("4x", parts([0.25] * 4)),
            ("skew", parts([0.5, 0.25, 0.125, 0.125])), ("16x", parts([1 / 16] * 16))]


# --------------------------------------------------------------------------
# Timing (needs torch and the reference transformer)
# --------------------------------------------------------------------------


def _time_ms(fn: Callable[[], None], warmup: int, repeats: int, device: Any) -> float:
    """Median milliseconds of fn() over repeats after warm-up: CUDA events on a GPU, else perf_counter."""
    import torch

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)
