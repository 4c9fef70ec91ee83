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
    if tokens < granule or tokens % granule:
        raise InvalidArgumentError(f"length_mixes: {tokens} tokens is not a positive multiple of {granule}")

    def parts(fracs: Sequence[float]) -> Tuple[int, ...]:
        out = [int(tokens * f) // granule * granule for f in fracs]
        out[0] += tokens - sum(out)
        return tuple(out)

    mixes = [("1x", parts([1.0])), ("2x", parts([0.5, 0.5])), ("4x", parts([0.25] * 4)),
             ("skew", parts([0.5, 0.25, 0.125, 0.125])), ("16x", parts([1 / 16] * 16))]
    return [(name, ls) for name, ls in mixes if min(ls) >= granule]  # mixes too fine for `tokens` left out


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
                 vocab: int, warmup: int, repeats: int) -> List[Sample]:
    """Time every grid point: for each CP size, the world's ranks form size/cp groups that all run the
    same packing at once (as in a step); a point's time is the slowest rank's median."""
    out = []
    for cp in cps:
        first = world.rank // cp * cp
        group = groups.get(first, cp) if cp > 1 else None
        for t in tokens:
            for name, lengths in length_mixes(t * cp, granule=max(64, 2 * cp)):
                batch = synthetic_batch(thd, lengths, cp, world.rank - first, group, world.device, vocab)
                world.barrier()
                ms = _time_ms(lambda: thd.forward_backward(model, batch), warmup, repeats, world.device)
                worst = max(world.gather(ms))
                s = Sample(cp=cp, lengths=tuple(int(x) for x in lengths), time_ps=worst * 1e9,
                           label=f"cp {cp}, {t} tokens/rank, {name}")
                out.append(s)
                _say(world, f"  {s.label:36s} {worst:9.3f} ms")
                del batch
    return out


def report_lines(fit: Fit, samples: Sequence[Sample]) -> List[str]:
    lines = [f"{'microbatch':36s} {'measured ms':>12s} {'predicted ms':>13s} {'error':>8s}"]
    for s, e in zip(samples, fit.errors):
        lines.append(f"{s.label:36s} {s.time_ps * 1e-9:12.3f} {predict(fit.model, s) * 1e-9:13.3f} {100 * e:+7.2f}%")
    lines.append(f"relative error: median {100 * fit.median_error:.2f}%, worst {100 * fit.worst_error:.2f}% "
                 f"over {len(samples)} microbatches")
    return lines


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
    p.add_argument("--tokens", type=_ints, default=[4096, 8192, 16384, 32768],
                   help="tokens per rank of the grid's microbatches (default 4096,8192,16384,32768)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="timed runs per microbatch; the median counts (default 5)")
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
    return a


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

    samples = measure_grid(thd, model, world, groups, cps, a.tokens, a.vocab, a.warmup, a.repeats)
    fit = fit_cost_model(samples, "barrier")
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
        comments = [f"dcpack cost profile, calibrated by python -m dcpack.calibrate on {time.strftime('%Y-%m-%d')}",
                    f"machine: {a.machine or name}, {world.size} rank(s); torch {torch.__version__}",
                    f"model: {what}",
                    f"grid: CP sizes {cps}, tokens per rank {a.tokens}, {len(samples)} microbatches; "
                    f"median of {a.repeats} after {a.warmup} warm-up",
                    f"fit: relative error median {100 * fit.median_error:.2f}%, worst {100 * fit.worst_error:.2f}%",
                    "units: picoseconds (time_unit_ps = 1): quadratic per token pair, linear per token"]
        if 1 < cps[-1] < (1 << MAX_LOG2_CP):
            comments.append(f"kv above CP {cps[-1]} repeats the largest measured size's (not measured)")
        if cps == [1]:
            comments.append("kv and round_latency: not measured (CP 1 only), 0")
        write_profile(a.out, profile, comments)
        print(f"wrote {a.out} (step_model = {chosen})", flush=True)
        if a.json:
            import json

            with open(a.json, "w", encoding="utf-8") as f:
                json.dump({"model": what, "machine": a.machine or name, "ranks": world.size,
                           "torch": torch.__version__, "cp_sizes": cps, "tokens": a.tokens,
                           "samples": [dataclasses.asdict(s) for s in samples],
                           "predicted_ps": [predict(fit.model, s) for s in samples], "errors": fit.errors,
                           "median_error": fit.median_error, "worst_error": fit.worst_error,
                           "profile": format_profile(profile), "steps": rows, "step_model": chosen}, f, indent=1)
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
