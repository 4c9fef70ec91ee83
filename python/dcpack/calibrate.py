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

from . import _core
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


def _cost_model(d: Dict[str, Any]) -> CostModel:
    """A CostModel from the binding's cost dict (enumerations by name)."""
    d = dict(d, kv=tuple(d["kv"]), cp_gather=tuple(d["cp_gather"]))
    d["step_model"] = ("barrier", "dependency")[d["step_model"]]
    d["pipeline_schedule"] = ("1f1b", "interleaved")[d["pipeline_schedule"]]
    return CostModel(**d)


def parse_profile(text: "str | bytes", name: str = "<profile>", base: Optional[CostModel] = None) -> Profile:
    """Parse a profile over ``base`` (default: the default model), as ``dcpack cost --profile`` does.

    The reader is the library's (``dcp_cost_profile_parse``): the same byte-level ASCII rules and
    the same messages as the program.  ``text`` is the file's bytes (or a str, taken as its UTF-8).
    Raises :class:`InvalidConfigError` naming ``name:line`` on a bad line.
    """
    if isinstance(text, str):
        try:
            data = text.encode("utf-8", "surrogateescape")  # the bytes a file decoded with surrogateescape held
        except UnicodeEncodeError as e:
            raise InvalidConfigError(f"{name}: a lone surrogate (U+{ord(e.object[e.start]):04X}) at offset {e.start}: "
                                     "a cost profile is UTF-8 text") from None
    else:
        data = bytes(text)
    cost_dict, unit = _core.cost_profile_parse(data, name, None if base is None else base._to_dict())
    return Profile(_cost_model(cost_dict), unit if unit > 0 else None)


def load_profile(path: str, base: Optional[CostModel] = None) -> Profile:
    """Read a profile file (``dcpack cost --format profile``, or one :func:`write_profile` wrote)."""
    with open(path, "rb") as f:
        return parse_profile(f.read(), path, base)


def format_profile(profile: Profile, comments: Sequence[str] = ()) -> str:
    """The profile as file text: ``#`` comment lines, then every key (``dcp_cost_profile_format``)."""
    lines = [f"# {c}" if c else "#" for c in comments]
    text = _core.cost_profile_format(profile.cost._to_dict(), profile.time_unit_ps or 0)
    return "".join(line + "\n" for line in lines) + text


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
    picoseconds.  ``comm_ps``: the part of ``time_ps`` that was priced, not measured (a CP size
    emulated on one GPU: its compute measured with ``dcpack.thd.LOCAL_REPLAY``, its collectives
    priced by :class:`CommModel`); 0 where everything was measured."""

    cp: int
    lengths: Tuple[int, ...]
    time_ps: float
    label: str = ""
    comm_ps: float = 0.0


def _sat(v: int) -> int:
    return INT64_MAX if v > INT64_MAX else v


def sequence_cost(s: int, cp: int, m: CostModel) -> int:
    """``dcp_cost()`` of include/dcpack.h in Python integers, saturated at INT64_MAX:
    ``(q s^2 + l s)/cp + [cp > 1](max(0, kv s (cp-1) - q s^2)/cp + round_latency (cp-1) + cp_gather s)``.
    Independent of the C library, so the fit's predictions do not depend on the build."""
    quad = m.quadratic * s * s
    work = quad + m.linear * s
    fixed = 0
    if cp > 1:
        k = cp.bit_length() - 1
        exposed = m.kv[k] * s * (cp - 1) - quad
        if exposed > 0:
            work += exposed
        fixed = m.round_latency * (cp - 1) + m.cp_gather[k] * s
    return _sat(work // cp + fixed)


def group_cost(lengths: Sequence[int], cp: int, m: CostModel) -> int:
    """A group's cost on each of its ranks in one microbatch, without ``microbatch_overhead``: its
    sequences' costs plus the small-microbatch hinge ``small_slope * max(0, small_knee - t)``,
    t = the group's tokens per rank (sum of lengths // cp), as the library's group cost counts it."""
    total = sum(sequence_cost(int(s), cp, m) for s in lengths)
    t = sum(int(s) for s in lengths) // cp
    if m.small_slope > 0 and t < m.small_knee:
        total += m.small_slope * (m.small_knee - t)
    return _sat(total)


def predict(model: CostModel, sample: Sample) -> int:
    """The model's time of a measured microbatch: its group's cost (:func:`group_cost`) plus
    ``microbatch_overhead``."""
    return _sat(model.microbatch_overhead + group_cost(sample.lengths, sample.cp, model))


def relative_errors(model: CostModel, samples: Sequence[Sample]) -> List[float]:
    """(predicted - measured) / measured for every sample."""
    return [(predict(model, s) - s.time_ps) / s.time_ps for s in samples]


def nnls(a: np.ndarray, b: np.ndarray, iterations: int = 0) -> np.ndarray:
    """Non-negative least squares, min |a x - b| with x >= 0 (Lawson and Hanson's active set).

    Ends at a point satisfying the optimality conditions (zero gradient on the positive
    coefficients, a gradient pointing away on the zero ones), up to a tolerance relative to
    the columns' scale.  Columns are scaled to unit norm first (they span 20 orders of magnitude).
    """
    rows, cols = a.shape
    norms = np.linalg.norm(a, axis=0)
    live = norms > 0
    scale = np.where(live, norms, 1.0)
    a_s = a / scale
    x = np.zeros(cols)
    passive = np.zeros(cols, bool)
    tol = 1e-10 * max(1.0, float(np.linalg.norm(b)))
    for _ in range(iterations or 3 * cols + 10):
        w = a_s.T @ (b - a_s @ x)
        cand = ~passive & live & (w > tol)
        if not cand.any():
            break
        passive[int(np.argmax(np.where(cand, w, -np.inf)))] = True
        while True:
            z = np.zeros(cols)
            idx = np.flatnonzero(passive)
            z[idx] = np.linalg.lstsq(a_s[:, idx], b, rcond=None)[0]
            if np.all(z[idx] > 0):
                x = z
                break
            neg = idx[z[idx] <= 0]
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
    return x / scale


@dataclasses.dataclass
class Fit:
    """The fitted model and how well it predicts the samples it was fitted to."""

    model: CostModel
    cp_sizes: Tuple[int, ...]          # the CP sizes measured (kv.<cp> / cp_gather.<cp> fitted for these)
    errors: List[float]                # per sample, (predicted - measured) / measured
    exposed: Dict[int, int]            # per CP size > 1: distinct lengths on the exposed-KV branch (ring form)
    knee_residuals: Dict[int, float] = dataclasses.field(default_factory=dict)  # per candidate knee: sum sq rel err
    priced: Dict[int, str] = dataclasses.field(default_factory=dict)  # CP size -> how its CP terms were set

    @property
    def median_error(self) -> float:
        return statistics.median(abs(e) for e in self.errors)

    @property
    def worst_error(self) -> float:
        return max(abs(e) for e in self.errors)

    @property
    def p90_error(self) -> float:
        return percentile([abs(e) for e in self.errors], 90)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear between order statistics (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _design(samples: Sequence[Sample], cps: Sequence[int], exposed: Callable[[int, int], bool], form: str,
            knee: int) -> np.ndarray:
    """Rows: samples; columns: quadratic, linear, round_latency, overhead, small_slope (hinge at
    ``knee``), then per CP size of cps: cp_gather (form "gather") or kv (form "ring")."""
    a = np.zeros((len(samples), 5 + len(cps)))
    for i, smp in enumerate(samples):
        c = smp.cp
        for s in smp.lengths:
            a[i, 1] += s / c
            if c > 1:
                a[i, 2] += c - 1
                if form == "gather":
                    a[i, 5 + cps.index(c)] += s
                elif exposed(s, c):
                    a[i, 5 + cps.index(c)] += s * (c - 1) / c
                    continue
            a[i, 0] += s * s / c
        a[i, 3] = 1.0
        a[i, 4] = max(0, knee - sum(smp.lengths) // c)
    return a


def extrapolate_cp(values: Dict[int, float]) -> Callable[[int], float]:
    """A per-CP coefficient at any CP size from the measured ones: a + b (cp-1)/cp fitted by
    non-negative least squares (a ring's per-rank traffic grows as (cp-1)/cp of the group's);
    one measured size c0: all of it taken as ring traffic, v (cp-1)/cp / ((c0-1)/c0)."""
    cps = sorted(values)
    if len(cps) == 1:
        c0, v = cps[0], values[cps[0]]
        return lambda cp: v * ((cp - 1) / cp) / ((c0 - 1) / c0)
    a = np.array([[1.0, (c - 1) / c] for c in cps])
    x = nnls(a, np.array([values[c] for c in cps]))
    return lambda cp: float(x[0] + x[1] * (cp - 1) / cp)


def _model_of(x: np.ndarray, cps: Sequence[int], step_model: str, form: str, knee: int,
              margin_ppm: int) -> Tuple[CostModel, Dict[int, str]]:
    """Round a fitted vector to an integer model.  CP sizes not measured get their per-CP term
    from :func:`extrapolate_cp` over the measured ones (form gather) or the nearest measured
    size's (form ring, whose kv already scales with (cp-1)/cp): never 0 unless every measured one is."""
    ints = [int(round(v)) for v in x]
    per = {c: float(x[5 + cps.index(c)]) for c in cps}
    ext = extrapolate_cp(per) if per else (lambda cp: 0.0)
    table = [0] * (MAX_LOG2_CP + 1)
    priced: Dict[int, str] = {}
    for k in range(1, MAX_LOG2_CP + 1):
        cp = 1 << k
        if cp in per:
            table[k] = ints[5 + cps.index(cp)]
            priced[cp] = "fitted"
        elif per and form == "gather":
            table[k] = int(round(max(0.0, ext(cp))))
            priced[cp] = "extrapolated"
        elif per:  # ring: kv already scales with (cp-1)/cp; the nearest measured size's coefficient
            known = [c for c in cps if c <= cp] or [min(cps)]
            table[k] = ints[5 + cps.index(max(known))]
            priced[cp] = f"as CP {max(known)}"
    slope = ints[4] if knee > 0 else 0
    kw = dict(quadratic=ints[0], linear=ints[1], round_latency=ints[2], microbatch_overhead=ints[3],
              small_knee=knee if slope > 0 else 0, small_slope=slope, margin_ppm=margin_ppm, step_model=step_model)
    if form == "gather":
        kw["cp_gather"] = tuple(table)
        kw["kv"] = (0,) * (MAX_LOG2_CP + 1)
    else:
        kw["kv"] = tuple(table)
    return CostModel(**kw), priced


DEFAULT_KNEES = (0, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
"""Candidate knees of the small-microbatch hinge (tokens per rank); 0: no hinge."""


def _fit_at_knee(samples: Sequence[Sample], cps: Sequence[int], form: str, knee: int,
                 iterations: int) -> Tuple[float, np.ndarray, Dict[Tuple[int, int], bool]]:
    w = np.array([1.0 / s.time_ps for s in samples])
    b = np.ones(len(samples))  # measured / measured
    best: Optional[Tuple[float, np.ndarray, Dict[Tuple[int, int], bool]]] = None
    for start in ((False, True) if form == "ring" and cps else (False,)):
        branch: Dict[Tuple[int, int], bool] = {}
        rule: Callable[[int, int], bool] = lambda s, c, start=start: start
        x = np.zeros(5 + len(cps))
        for _ in range(iterations):
            a = _design(samples, cps, rule, form, knee) * w[:, None]
            x = nnls(a, b)
            if form != "ring":
                break
            q, kvs = x[0], {c: x[5 + cps.index(c)] for c in cps}
            new = {(s, c): kvs[c] * s * (c - 1) > q * s * s for smp in samples if smp.cp > 1
                   for s, c in ((s, smp.cp) for s in smp.lengths)}
            if new == branch:
                break
            branch = new
            rule = lambda s, c, br=new: br[(s, c)]
        r = _design(samples, cps, rule, form, knee) * w[:, None] @ x - b
        res = float(r @ r)
        if best is None or res < best[0]:
            best = (res, x, branch)
    assert best is not None
    return best


def fit_cost_model(samples: Sequence[Sample], step_model: str = "barrier", iterations: int = 20,
                   form: str = "gather", knees: Sequence[int] = DEFAULT_KNEES) -> Fit:
    """Fit the cost model's coefficients to measured microbatches (integer, in the samples' unit).

    Minimises the sum of squared relative errors (each row divided by its measured time) with
    every coefficient >= 0 (:func:`nnls`), over quadratic, linear, round_latency,
    microbatch_overhead, the small-microbatch hinge's slope and one CP term per measured CP size:

    - form "gather" (the default; ``dcpack.thd`` and all-gather CP): ``cp_gather.<cp>`` per token
      of the group's sequences, on every rank (undivided); ``kv`` 0.
    - form "ring" (trainers that overlap a ring with attention): ``kv.<cp>`` of the piecewise
      ``max(0, kv*s*(cp-1) - quadratic*s^2)/cp``: the fit alternates, solving with a branch per
      sequence (exposed or hidden) and reassigning each the branch the solution puts it on,
      from two starts; ``cp_gather`` 0.

    The hinge ``small_slope * max(0, small_knee - tokens_per_rank)`` is linear once the knee is
    fixed: every knee of ``knees`` is tried with the rest fitted by least squares, and the one of
    the smallest residual wins (0, no hinge, is a candidate).  CP sizes not measured get their CP
    term from :func:`extrapolate_cp`.  ``margin_ppm`` is the fit's p90 |relative error|.
    """
    if not samples:
        raise InvalidArgumentError("fit_cost_model: no samples")
    if form not in ("gather", "ring"):
        raise InvalidArgumentError(f"fit_cost_model: form '{form}' is not gather or ring")
    for s in samples:
        if s.cp < 1 or s.cp & (s.cp - 1) or not s.lengths or s.time_ps <= 0 or min(s.lengths) < 1:
            raise InvalidArgumentError(f"fit_cost_model: bad sample {s}")
    if not knees or min(knees) < 0:
        raise InvalidArgumentError(f"fit_cost_model: knees {list(knees)}: non-negative, at least one")
    cps = sorted({s.cp for s in samples if s.cp > 1})
    results = {k: _fit_at_knee(samples, cps, form, k, iterations) for k in sorted(set(knees))}
    knee = min(results, key=lambda k: (results[k][0], k))
    _, x, branch = results[knee]
    model, priced = _model_of(x, cps, step_model, form, knee, 0)
    errors = relative_errors(model, samples)
    margin = int(round(1e6 * percentile([abs(e) for e in errors], 90)))
    model = dataclasses.replace(model, margin_ppm=min(margin, 999_999))
    exposed = {c: sum(1 for (s, cc), e in branch.items() if cc == c and e) for c in cps}
    return Fit(model=model, cp_sizes=tuple([1] + cps), errors=errors, exposed=exposed,
               knee_residuals={k: v[0] for k, v in results.items()}, priced=priced)


SIZE_CLASSES = ((0, 1024, "< 1K"), (1024, 4096, "1K-4K"), (4096, 16384, "4K-16K"), (16384, 1 << 62, ">= 16K"))
"""Microbatch size classes by tokens per rank, for the error report."""


def size_class(sample: Sample) -> str:
    t = sum(sample.lengths) // sample.cp
    return next(name for lo, hi, name in SIZE_CLASSES if lo <= t < hi)


def error_table(fit: Fit, samples: Sequence[Sample]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """|relative error| per CP size and per size class: count, median, p90, worst."""
    def summary(errs: List[float]) -> Dict[str, float]:
        a = [abs(e) for e in errs]
        return {"count": len(a), "median": statistics.median(a), "p90": percentile(a, 90), "worst": max(a)}
    by_cp: Dict[str, List[float]] = {}
    by_class: Dict[str, List[float]] = {}
    for s, e in zip(samples, fit.errors):
        by_cp.setdefault(str(s.cp), []).append(e)
        by_class.setdefault(size_class(s), []).append(e)
    order = [name for _, _, name in SIZE_CLASSES]
    return {"cp": {k: summary(by_cp[k]) for k in sorted(by_cp, key=int)},
            "size_class": {k: summary(by_class[k]) for k in order if k in by_class},
            "all": summary(list(fit.errors))}


# --------------------------------------------------------------------------
# CP communication: a ring model fitted to an all-gather / reduce-scatter table
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CommModel:
    """Seconds of one collective on a ring of ``cp`` ranks, each holding ``n`` tokens of K/V:
    ``(cp-1) * (alpha + beta * n * bytes_per_token)`` (cp-1 ring steps, each moving one rank's
    share: alpha + beta x bytes x (cp-1)/cp of the group's bytes).  A CP microbatch on one rank
    pays, per layer, an all-gather (forward) and a reduce-scatter (backward)."""

    alpha_s: float            # per ring step, all-gather + reduce-scatter together
    beta_s_per_byte: float    # likewise
    bytes_per_token: int
    source: str = ""

    def microbatch_s(self, cp: int, n: int, layers: int) -> float:
        if cp <= 1:
            return 0.0
        return layers * (cp - 1) * (self.alpha_s + self.beta_s_per_byte * n * self.bytes_per_token)


def fit_comm_model(table: Dict[str, Any], source: str = "") -> CommModel:
    """The ring model from a table of all-gather and reduce-scatter times (``bench/training/bench_train_step.py``'s
    ``measure_comm``: rows of tokens_per_rank, bytes_per_rank, all_gather, reduce_scatter seconds on
    ``world`` ranks): alpha and beta by non-negative least squares on relative error."""
    rows = table.get("rows") or []
    world = int(table.get("world", 2))
    if not rows or world < 2:
        raise InvalidArgumentError("fit_comm_model: the table needs rows measured on 2 or more ranks")
    bpt = int(round(rows[0]["bytes_per_rank"] / rows[0]["tokens_per_rank"]))
    a = np.array([[world - 1, (world - 1) * r["bytes_per_rank"]] for r in rows], dtype=float)
    t = np.array([r["all_gather"] + r["reduce_scatter"] for r in rows], dtype=float)
    x = nnls(a / t[:, None], np.ones(len(rows)))
    return CommModel(alpha_s=float(x[0]), beta_s_per_byte=float(x[1]), bytes_per_token=bpt, source=source)


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
    if tokens < granule or tokens % granule:
        raise InvalidArgumentError(f"length_mixes: {tokens} tokens is not a positive multiple of {granule}")

    def parts(fracs: Sequence[float]) -> Tuple[int, ...]:
        out = [int(tokens * f) // granule * granule for f in fracs]
        out[0] += tokens - sum(out)
        return tuple(out)

    mixes = [("1x", parts([1.0])), ("2x", parts([0.5, 0.5])), ("4x", parts([0.25] * 4)),
             ("skew", parts([0.5, 0.25, 0.125, 0.125])), ("16x", parts([1 / 16] * 16)),
             ("64x", parts([1 / 64] * 64))]
    return [(name, ls) for name, ls in mixes if min(ls) >= granule]  # mixes too fine for `tokens` left out


# --------------------------------------------------------------------------
# Timing (needs torch and the reference transformer)
# --------------------------------------------------------------------------


def _time_ms(fn: Callable[[], None], warmup: int, repeats: int, device: Any) -> float:
    """Median milliseconds of fn() over repeats after warm-up: CUDA events between back-to-back runs on a
    GPU (the way bench/training/bench_train_step.py --replay times a rank's microbatches), else perf_counter."""
    import torch

    for _ in range(warmup):
        fn()
    out = []
    if device.type == "cuda":
        # back to back, as a step runs them: an event between runs and no host synchronisation until the
        # end, so the host queues ahead and no run is charged the launch latency of an idle GPU
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
        ev[0].record()
        for i in range(repeats):
            fn()
            ev[i + 1].record()
        ev[-1].synchronize()
        return statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(repeats))
    for _ in range(repeats):
        if False:
            pass
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def _thd():
    """dcpack.thd (the reference THD transformer), or a clear exit when torch or it is missing."""
    try:
        from . import thd
    except ImportError as e:  # torch absent, or a torch without what dcpack.thd needs
        raise SystemExit(f"dcpack.calibrate: timing needs torch and dcpack.thd ({e})") from None
    return thd


def synthetic_batch(thd: Any, lengths: Sequence[int], cp: int, cp_rank: int, group: Any, device: Any, vocab: int,
                    partition: str = "zigzag", seed: int = 0) -> Any:
    """One rank's THD microbatch holding whole sequences of ``lengths`` on a CP group of ``cp``:
    random tokens, every slot a real token (no padding), RoPE positions from the layout."""
    import torch

    cu = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])
    n = int(cu[-1]) // cp
    pos, _ = thd.layout(cu.tolist(), n, cp, cp_rank, partition)
    position_ids = pos - cu[np.searchsorted(cu, pos, side="right") - 1]
    g = torch.Generator().manual_seed(seed)
    return thd.THDBatch.from_fields(
        tokens=torch.randint(vocab, (n,), generator=g), labels=torch.randint(vocab, (n,), generator=g),
        loss_mask=np.ones(n, np.float32), position_ids=position_ids, padding_mask=np.zeros(n, bool),
        cu_seqlens=cu, cu_seqlens_padded=cu, max_seqlen=int(max(lengths)), local_cp_size=cp, cp_rank=cp_rank,
        partition=partition, group=group, device=device)


class _World:
    """This process's place: rank, size, device, and the reductions the timing needs (no-ops alone)."""

    def __init__(self, device_arg: str) -> None:
        import torch
        import torch.distributed as dist

        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device_arg == "auto":
            device_arg = "cuda" if torch.cuda.is_available() else "cpu"
        if device_arg == "cuda":
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(int(os.environ.get("DCPACK_CALIBRATE_THREADS", "1")))  # steadier CPU times
        self.dist = dist
        if self.size > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    def barrier(self) -> None:
        if self.size > 1:
            self.dist.barrier()

    def gather(self, value: float) -> List[float]:
        """Every rank's value, in rank order."""
        if self.size == 1:
            return [value]
        import torch

        t = torch.zeros(self.size, dtype=torch.float64, device=self.device)
        t[self.rank] = value
        self.dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        if self.size > 1:
            self.dist.destroy_process_group()


def _say(world: _World, *args: Any) -> None:
    if world.rank == 0:
        print(*args, flush=True)


def measure_grid(thd: Any, model: Any, world: _World, groups: Any, cps: Sequence[int], tokens: Sequence[int],
                 vocab: int, warmup: int, repeats: int, emulated: Sequence[int] = (), emulated_tokens: Sequence[int] = (),
                 comm: Optional[CommModel] = None, max_group_tokens: int = 1 << 18,
                 layers: int = 1) -> List[Sample]:
    """Time every grid point: for each CP size, the world's ranks form size/cp groups that all run the
    same packing at once (as in a step); a point's time is the slowest rank's median of ``repeats``
    after ``warmup`` untimed runs of that very shape (every shape is warmed up).

    ``emulated``: CP sizes larger than the world, timed on rank 0 alone with ``dcpack.thd.LOCAL_REPLAY``
    (the rank's share of the group's work on the group's shapes, its peers' K/V its own) plus the
    collectives priced by ``comm`` (:class:`CommModel`); their samples carry that price in ``comm_ps``.
    Groups of more than ``max_group_tokens`` tokens are left out (their time is seconds)."""
    out = []
    plan = [(cp, False, tokens) for cp in cps] + [(cp, True, emulated_tokens or tokens) for cp in emulated]
    for cp, emulate, toks in plan:
        if emulate and comm is None:
            raise InvalidArgumentError(f"measure_grid: CP {cp} is emulated and needs a communication model")
        first = 0 if emulate else world.rank // cp * cp
        group = thd.LOCAL_REPLAY if emulate else (groups.get(first, cp) if cp > 1 else None)
        for t in toks:
            if cp * t > max_group_tokens and cp > 1:
                continue
            for name, lengths in length_mixes(t * cp, granule=max(64, 2 * cp)):
                if emulate and name not in ("1x", "2x", "skew"):
                    continue  # long sequences are what runs on wide groups
                if cp > 1 and not emulate and name == "64x":
                    continue
                batch = synthetic_batch(thd, lengths, cp, 0 if emulate else world.rank - first, group,
                                        world.device, vocab)
                world.barrier()
                ms = _time_ms(lambda: thd.forward_backward(model, batch), warmup, repeats, world.device)
                worst = max(world.gather(ms))
                comm_ps = comm.microbatch_s(cp, t, layers) * 1e12 if emulate else 0.0
                s = Sample(cp=cp, lengths=tuple(int(x) for x in lengths), time_ps=worst * 1e9 + comm_ps,
                           label=f"cp {cp}{' (emulated)' if emulate else ''}, {t} tokens/rank, {name}",
                           comm_ps=comm_ps)
                out.append(s)
                _say(world, f"  {s.label:46s} {worst:9.3f} ms" + (f" + {comm_ps * 1e-9:.3f} ms priced" if emulate else ""))
                del batch
    return out


def report_lines(fit: Fit, samples: Sequence[Sample]) -> List[str]:
    lines = [f"{'microbatch':46s} {'measured ms':>12s} {'predicted ms':>13s} {'error':>8s}"]
    for s, e in zip(samples, fit.errors):
        lines.append(f"{s.label:46s} {s.time_ps * 1e-9:12.3f} {predict(fit.model, s) * 1e-9:13.3f} {100 * e:+7.2f}%")
    lines.append(f"relative error: median {100 * fit.median_error:.2f}%, p90 {100 * fit.p90_error:.2f}%, "
                 f"worst {100 * fit.worst_error:.2f}% over {len(samples)} microbatches")
    lines += error_lines(error_table(fit, samples))
    return lines


def error_lines(table: Dict[str, Dict[str, Dict[str, float]]]) -> List[str]:
    """The error table in words: one line per CP size and per size class."""
    out = []
    for what, title in (("cp", "CP"), ("size_class", "tokens/rank")):
        for k, v in table[what].items():
            out.append(f"error at {title} {k}: median {100 * v['median']:.2f}%, p90 {100 * v['p90']:.2f}%, "
                       f"worst {100 * v['worst']:.2f}% ({v['count']} microbatches)")
    return out


# --------------------------------------------------------------------------
# Steps: composed (barrier, dependency) against measured wall time
# --------------------------------------------------------------------------


def step_batches(count: int, ranks: int, max_seqlen: int, microbatches: int, granule: int = 64,
                 seed: int = 1) -> List[Tuple[str, np.ndarray]]:
    """Long-context batches of about ``microbatches`` x ranks x max_seqlen tokens: lognormal (a long
    tail, some sequences over one rank's share) and bimodal (many short, a few very long)."""
    rng = np.random.default_rng(seed)
    budget = microbatches * ranks * max_seqlen
    cap = ranks * max_seqlen
    out = []
    for k in range(count):
        if k % 2 == 0:
            name = "lognormal"
            draw = lambda: rng.lognormal(math.log(max_seqlen / 4), 1.0)
        else:
            name = "bimodal"
            draw = lambda: rng.uniform(0.5, 2.0) * max_seqlen if rng.random() < 0.15 else rng.uniform(256, 2048)
        lengths: List[int] = []
        while sum(lengths) < budget * 0.9:
            lengths.append(int(min(cap, max(granule, round(draw() / granule) * granule))))
        out.append((f"{name}-{k}", np.asarray(lengths, dtype=np.int64)))
    return out


def measure_steps(thd: Any, model: Any, world: _World, groups: Any, profile: Profile, max_seqlen: int,
                  microbatches: int, batches: int, steps: int, vocab: int, warmup: int,
                  repeats: int) -> List[Dict[str, Any]]:
    """Plan each batch with dynamic_cp, balanced and balanced laid out for the dependency step model
    ("balanced/dependency"), under the calibrated profile; then per plan:

    - replay: every microbatch's groups timed alone (a barrier before each microbatch, the median
      of ``repeats``), a group's time its slowest rank's; the gradient all-reduce timed alone;
    - composed: :func:`compose_step` of the replayed times under both step models, plus the
      all-reduce;
    - wall: ``steps`` real steps (no barrier between microbatches: a rank waits only for its CP
      groups' collectives and the final all-reduce), the median of the slowest rank's time;
    - model: the plan's makespans under the calibrated profile, in ms.
    """
    from ._api import Config, Planner

    out = []
    for name, lengths in step_batches(batches, world.size, max_seqlen, microbatches):
        for scheduler, step_model in (("dynamic_cp", "barrier"), ("balanced", "barrier"), ("balanced", "dependency")):
            cfg = Config(scheduler=scheduler, data_parallel_size=world.size, max_seqlen_per_rank=max_seqlen,
                         max_sequences=len(lengths), cost=dataclasses.replace(profile.cost, step_model=step_model))
            with Planner(cfg) as planner:
                plan = planner.plan(lengths).copy()
                stats = plan.stats(lengths)
            mine = []  # (microbatch, first rank, cp, batch) of this rank
            for m in range(plan.num_microbatches):
                for first, cp, ids in plan.groups(m):
                    if first <= world.rank < first + cp and len(ids):
                        ls = [int(lengths[i]) for i in ids]
                        group = groups.get(first, cp) if cp > 1 else None
                        mine.append((m, first, cp, synthetic_batch(thd, ls, cp, world.rank - first, group,
                                                                   world.device, vocab, seed=m)))
            # replay: each microbatch alone
            rank_ms = [[0.0] * world.size for _ in range(plan.num_microbatches)]
            by_mb = {m: b for m, _, _, b in mine}
            for m in range(plan.num_microbatches):
                world.barrier()
                ms = 0.0
                if m in by_mb:
                    b = by_mb[m]
                    ms = _time_ms(lambda: thd.forward_backward(model, b), warmup, repeats, world.device)
                rank_ms[m] = world.gather(ms)
            world.barrier()
            allreduce_ms = _time_ms(lambda: thd.allreduce_gradients(model) if world.size > 1 else None,
                                    warmup, repeats, world.device)
            allreduce_ms = max(world.gather(allreduce_ms))
            grp = plan_groups(plan)
            times = [[max(rank_ms[m][r] for r in range(first, first + cp)) for first, cp in grp[m]]
                     for m in range(plan.num_microbatches)]
            barrier_ms, dependency_ms = compose_step(grp, times, num_ranks=world.size)

            def step() -> None:
                for _, _, _, b in mine:
                    thd.forward_backward(model, b)
                if world.size > 1:
                    thd.allreduce_gradients(model)

            walls = []
            for k in range(warmup + steps):
                world.barrier()
                world.sync()
                t0 = time.perf_counter()
                step()
                world.sync()
                wall = max(world.gather((time.perf_counter() - t0) * 1e3))
                if k >= warmup:
                    walls.append(wall)
            row = {
                "batch": name, "scheduler": scheduler if step_model == "barrier" else f"{scheduler}/{step_model}",
                "sequences": int(len(lengths)),
                "tokens": int(lengths.sum()), "longest": int(lengths.max()),
                "microbatches": plan.num_microbatches,
                "cp_sizes": sorted({cp for g in grp for _, cp in g}),
                "wall_ms": statistics.median(walls), "wall_ms_all": walls,
                "composed_barrier_ms": barrier_ms + allreduce_ms,
                "composed_dependency_ms": dependency_ms + allreduce_ms,
                "allreduce_ms": allreduce_ms,
                "model_barrier_ms": profile.ms(stats.makespan) if profile.time_unit_ps else None,
                "model_dependency_ms": profile.ms(stats.dependency_makespan) if profile.time_unit_ps else None,
            }
            out.append(row)
            _say(world, f"  {name:12s} {row['scheduler']:21s} {plan.num_microbatches:3d} mbs  wall {row['wall_ms']:9.2f} ms"
                        f"  composed barrier {row['composed_barrier_ms']:9.2f}  dependency "
                        f"{row['composed_dependency_ms']:9.2f}  model barrier {row['model_barrier_ms'] or 0:9.2f}"
                        f"  dependency {row['model_dependency_ms'] or 0:9.2f}")
            del mine, by_mb
    return out


def which_step_model(rows: Sequence[Dict[str, Any]]) -> Tuple[str, float, float]:
    """The step model whose composed time is nearer the wall time (mean absolute relative error)."""
    if not rows:
        raise InvalidArgumentError("which_step_model: no steps")
    b = statistics.mean(abs(r["composed_barrier_ms"] / r["wall_ms"] - 1) for r in rows)
    d = statistics.mean(abs(r["composed_dependency_ms"] / r["wall_ms"] - 1) for r in rows)
    return ("dependency" if d < b else "barrier"), b, d


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
    for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "warmup", "repeats", "steps"):
        if getattr(a, name) < (0 if name == "warmup" else 1):
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
                           "profile": open(a.out, encoding="utf-8").read(), "steps": rows, "step_model": chosen},
                          f, indent=1)
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
