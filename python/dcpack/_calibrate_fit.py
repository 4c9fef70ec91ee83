"""The cost model's fit to measured microbatches, pure and without torch (dcpack.calibrate's first room).

Profiles (the file format of ``dcpack cost``), measured samples and the model's prediction of them, the
non-negative least-squares fit, the CP communication model, step composition (replay), the grid of length
mixes, and the fit's report in words.  ``python/tests/test_calibrate.py`` tests it on synthetic data.
"""

from __future__ import annotations

import dataclasses
import statistics
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


@dataclasses.dataclass(frozen=True)
class Retimed:
    """A sample timed again because its first timing was far off the first fit."""

    label: str
    first_ps: float      # the first timing (with any priced communication)
    again_ps: float      # the second, which the fit then uses
    first_error: float   # the first fit's (predicted - measured) / measured of the first timing


def far_off(fit: Fit, factor: float = 3.0, floor: float = 0.10, most: int = 8) -> List[int]:
    """The samples whose |error| under ``fit`` is above both ``factor`` x the median |error| and ``floor``,
    worst first, at most ``most``: the ones worth timing again before trusting the fit."""
    limit = max(factor * fit.median_error, floor)
    far = [i for i, e in enumerate(fit.errors) if abs(e) > limit]
    return sorted(far, key=lambda i: (-abs(fit.errors[i]), i))[:most]


def retime_far_off(samples: Sequence[Sample], fit: Fit, retime: Callable[[Sample], Sample], factor: float = 3.0,
                   floor: float = 0.10, most: int = 8) -> Tuple[List[Sample], List[Retimed]]:
    """Every sample :func:`far_off` picks timed again by ``retime`` (the same shape, a longer warm-up); the
    second timing replaces the first, whatever it is (a shape that is slow again is slow). Returns the
    samples, in their order, and what was re-timed. Pure but for ``retime``: the same choices on every rank
    (the samples are every rank's slowest time, so every rank fits the same)."""
    out = list(samples)
    done = []
    for i in far_off(fit, factor, floor, most):
        again = retime(out[i])
        if again.cp != out[i].cp or tuple(again.lengths) != tuple(out[i].lengths):
            raise InvalidArgumentError(f"retime: {out[i].label} came back as another shape (cp {again.cp}, "
                                       f"{len(again.lengths)} sequences)")
        done.append(Retimed(out[i].label, out[i].time_ps, again.time_ps, fit.errors[i]))
        out[i] = again
    return out, done


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
