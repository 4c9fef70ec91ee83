"""Timing (needs torch and dcpack.thd): the grid's microbatches and whole steps (dcpack.calibrate's second room).

The reference THD transformer forward and backward over one packed microbatch (CUDA events, warm-up, the
median of repeats; wall clock on the CPU), over a torchrun world of CP groups; and steps composed under the
barrier and dependency models against their measured wall time.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._calibrate_fit import CommModel, Profile, Sample, compose_step, length_mixes, plan_groups
from ._errors import InvalidArgumentError

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
        for t in toks:
            if cp * t > max_group_tokens and cp > 1:
                continue
            for name, lengths in length_mixes(t * cp, granule=max(64, 2 * cp)):
                if emulate and name not in ("1x", "2x", "skew"):
                    continue  # long sequences are what runs on wide groups
                if cp > 1 and not emulate and name == "64x":
                    continue
                s = time_sample(thd, model, world, groups, cp, emulate, lengths, vocab, warmup, repeats,
                                f"cp {cp}{' (emulated)' if emulate else ''}, {t} tokens/rank, {name}", comm, layers)
                out.append(s)
                _say(world, f"  {s.label:46s} {(s.time_ps - s.comm_ps) * 1e-9:9.3f} ms"
                            + (f" + {s.comm_ps * 1e-9:.3f} ms priced" if emulate else ""))
    return out


def time_sample(thd: Any, model: Any, world: _World, groups: Any, cp: int, emulate: bool, lengths: Sequence[int],
                vocab: int, warmup: int, repeats: int, label: str, comm: Optional[CommModel] = None,
                layers: int = 1) -> Sample:
    """One grid point: the world's ranks in size/cp groups (or, ``emulate``, each rank alone with
    ``dcpack.thd.LOCAL_REPLAY`` and the collectives priced by ``comm``) run one microbatch of ``lengths``,
    timed by :func:`_time_ms` after ``warmup`` runs of it; the sample's time is the slowest rank's.
    Collective: every rank calls it with the same arguments."""
    if emulate and comm is None:
        raise InvalidArgumentError(f"time_sample: CP {cp} is emulated and needs a communication model")
    first = 0 if emulate else world.rank // cp * cp
    group = thd.LOCAL_REPLAY if emulate else (groups.get(first, cp) if cp > 1 else None)
    batch = synthetic_batch(thd, lengths, cp, 0 if emulate else world.rank - first, group, world.device, vocab)
    world.barrier()
    ms = _time_ms(lambda: thd.forward_backward(model, batch), warmup, repeats, world.device)
    worst = max(world.gather(ms))
    del batch
    comm_ps = comm.microbatch_s(cp, sum(int(x) for x in lengths) // cp, layers) * 1e12 if emulate else 0.0
    return Sample(cp=cp, lengths=tuple(int(x) for x in lengths), time_ps=worst * 1e9 + comm_ps, label=label,
                  comm_ps=comm_ps)


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
