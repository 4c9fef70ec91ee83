"""Planning a step ahead from Python: Planner.gather + Planner.plan (on a thread) -> Stepper.step(plan=...).

Over the in-process communicator (InprocCluster): a step handed the plan made ahead yields exactly the
microbatches of a step that plans itself; a rank that hands in a plan of other lengths (or of another
configuration) makes the step raise InvalidArgumentError on every rank, and the next step works.
"""

from __future__ import annotations

import threading

import dcpack
import numpy as np
import pytest
from conftest import dp_slice, make_batch, read_trace
from test_step import samples_of

FIELDS = ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "cu_seqlens", "cu_seqlens_padded")


def config(scheduler, **kw):
    base = dict(data_parallel_size=2, context_parallel_size=2, scheduler=scheduler, max_sequences=128,
                max_seqlen_per_rank=4096, max_tokens_per_rank=1 << 17)
    base.update(kw)
    return dcpack.Config(**base)


def batches(count, steps):
    out = []
    for k in range(steps):
        lengths = np.minimum(read_trace("mlmdefault_n256_seed1.txt")[k * count:(k + 1) * count], 8192)
        out.append(make_batch(lengths, 4, seed=k))
    return out


def same_outputs(a, b):
    """[] when two step outputs hold the same microbatches bit for bit, else where they differ."""
    if a is None or b is None:
        return [] if a is b else ["one rank received nothing"]
    if len(a.microbatches) != len(b.microbatches):
        return [f"{len(a.microbatches)} vs {len(b.microbatches)} microbatches"]
    out = []
    for m, (x, y) in enumerate(zip(a.microbatches, b.microbatches)):
        for f in FIELDS:
            u, v = getattr(x, f), getattr(y, f)
            if (u is None) != (v is None) or (u is not None and (u.dtype != v.dtype or not np.array_equal(u, v))):
                out.append(f"microbatch {m} {f}")
        for s in ("num_tokens", "max_seqlen", "local_cp_size", "cp_rank", "num_sequences"):
            if getattr(x, s) != getattr(y, s):
                out.append(f"microbatch {m} {s}")
    return out


@pytest.mark.parametrize("scheduler", ["dp_balanced", "dynamic_cp", "balanced"])
def test_plans_made_ahead_give_the_same_steps(scheduler):
    """Three steps; each planned on a thread while the previous one steps; outputs as a self-planning step's."""
    cfg = config(scheduler)
    data = batches(48, 3)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=30000)
    dp, cp = cfg.data_parallel_size, cfg.context_parallel_size

    def rank(w):
        args = cluster.args(w)
        dpxcp = cluster.coordinates(w)[0]
        ids = list(dp_slice(48, dp, dpxcp // cp))
        reference, ahead = dcpack.Stepper(cfg), dcpack.Stepper(cfg)
        planner = dcpack.Planner(cfg.replace(max_tokens_per_rank=0))
        comm = cluster.data_parallel(w)
        diffs, plan_threads = [], []
        result = {}

        def plan_next(k):
            g, _ = planner.gather(comm, [data[k]["padded"][i] for i in ids], step_id=k + 1)

            def run():
                result[k] = planner.plan(g)

            t = threading.Thread(target=run)
            t.start()
            plan_threads.append(t)
            return t

        thread = plan_next(0)
        for k in range(3):
            samples = samples_of(data[k], ids)
            want = reference.step(samples, args).copy()
            thread.join()  # planning of step k overlapped the reference step above
            plan = result.pop(k)
            assert plan.matches()
            got = ahead.step(samples, args, plan=plan)
            assert got.plan == plan  # the step's plan is the copy of the one handed in
            got = got.copy()
            diffs += [f"step {k}: {d}" for d in same_outputs(want, got)]
            if k + 1 < 3:
                thread = plan_next(k + 1)  # the planner is free: the step copied the plan
        return diffs

    for r in cluster.run(rank):
        assert r == []


@pytest.mark.parametrize("wrong", ["other lengths", "another configuration"])
def test_a_wrong_plan_on_one_rank_fails_the_step_on_every_rank(wrong):
    cfg = config("dynamic_cp")
    other_cfg = config("balanced")
    data = batches(40, 1)[0]
    cluster = dcpack.InprocCluster(cfg, timeout_ms=30000)
    dp, cp = cfg.data_parallel_size, cfg.context_parallel_size
    lengths = np.asarray(data["padded"], dtype=np.int32)

    def rank(w):
        args = cluster.args(w)
        ids = list(dp_slice(40, dp, cluster.coordinates(w)[0] // cp))
        samples = samples_of(data, ids)
        stepper = dcpack.Stepper(cfg)
        planner = dcpack.Planner((other_cfg if wrong != "other lengths" and w == 2 else cfg)
                                 .replace(max_tokens_per_rank=0))
        plan = planner.plan(lengths[::-1].copy() if wrong == "other lengths" and w == 2 else lengths)
        try:
            stepper.step(samples, args, plan=plan)
            first = None
        except dcpack.Error as e:
            first = e
        again = stepper.step(samples, args, plan=dcpack.Planner(cfg).plan(lengths))  # the next step works
        return first, len(again.microbatches)

    results = cluster.run(rank)
    for first, n in results:
        assert isinstance(first, dcpack.InvalidArgumentError), first
        assert "rank 2" in str(first) or "plan ahead" in str(first)
        assert n > 0


def test_matches_and_argument_errors():
    cfg = config("balanced")
    lengths = np.asarray(batches(40, 1)[0]["padded"], dtype=np.int32)
    planner = dcpack.Planner(cfg.replace(max_tokens_per_rank=0))
    plan = planner.plan(lengths)
    assert plan.matches() and plan.matches(lengths.tolist())
    assert not plan.matches(lengths[::-1].copy())
    assert not plan.matches(lengths[:-1].copy())
    copy = plan.copy()
    assert copy.matches(lengths)  # a copy keeps its seal
    stepper = dcpack.Stepper(cfg)
    world = dcpack.InprocWorld(1)
    with pytest.raises(dcpack.InvalidArgumentError, match="plan must be a dcpack.Plan"):
        stepper.step([], world=world.comm(0), plan=plan.to_lists())
    planner.plan(lengths[:10].copy())  # the first plan's view is now stale
    with pytest.raises(dcpack.Error):  # the step refuses it (here its missing DPxCP communicator comes first)
        stepper.step([], world=world.comm(0), plan=plan)
    assert stepper.calls == 2  # both refusals counted as this rank's failed steps
    # one rank, its communicators all there: the stale view is what the step refuses, as StaleViewError
    one = config("balanced", data_parallel_size=1, context_parallel_size=1, max_seqlen_per_rank=8192)
    planner_one, stepper_one = dcpack.Planner(one), dcpack.Stepper(one)
    view = planner_one.plan(lengths)
    planner_one.plan(lengths[:10].copy())  # view is now stale
    with pytest.raises(dcpack.StaleViewError, match="stale view"):
        stepper_one.step(samples_of(batches(40, 1)[0], range(40)), dcpack.InprocCluster(one).args(0), plan=view)
    assert stepper_one.calls == 1


def test_a_changed_plan_does_not_match():
    cfg = config("dynamic_cp")
    lengths = np.asarray(batches(40, 1)[0]["padded"], dtype=np.int32)
    copy = dcpack.Planner(cfg).plan(lengths).copy()
    ids = copy.ids
    ids.flags.writeable = True  # the copy owns its arrays
    ids[[0, 1]] = ids[[1, 0]]
    assert not copy.matches(lengths)


def test_gather_errors_are_agreed_over_the_dp_ranks():
    """A negative length on DP rank 1 only: BadLengthError on both ranks; the planners then gather again."""
    cfg = config("dynamic_cp", context_parallel_size=1)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=30000)

    def rank(w):
        planner = dcpack.Planner(cfg.replace(max_tokens_per_rank=0))
        comm = cluster.data_parallel(w)
        try:
            planner.gather(comm, [64, -8] if w == 1 else [64, 128], step_id=1)
            first = None
        except dcpack.Error as e:
            first = e
        g, offsets = planner.gather(comm, [64 * (w + 1), 128], step_id=2)
        return first, g.tolist(), offsets.tolist()

    for first, g, offsets in cluster.run(rank):
        assert isinstance(first, dcpack.BadLengthError), first
        assert g == [64, 128, 128, 128] and offsets == [0, 2, 4]


def test_the_training_thread_runs_while_a_plan_is_made():
    """Planner.plan releases the GIL: the calling thread's Python code runs while another thread plans.

    A balanced plan of 8192 sequences on 1024 ranks takes tens of milliseconds; the main thread
    stamps the clock in a Python loop meanwhile, and some stamps fall inside the planning call (with
    the GIL held through it, none could: a C call that keeps the GIL blocks every other thread)."""
    import time

    rng = np.random.default_rng(7)
    lengths = rng.integers(64, 8192, size=8192).astype(np.int32) // 2 * 2
    cfg = dcpack.Config(scheduler="balanced", data_parallel_size=1024, max_sequences=8192,
                        max_seqlen_per_rank=8192)
    planner = dcpack.Planner(cfg)
    window = {}

    def plan():
        window["start"] = time.perf_counter()
        planner.plan(lengths)
        window["end"] = time.perf_counter()

    thread = threading.Thread(target=plan)
    stamps = []
    thread.start()
    while thread.is_alive():
        stamps.append(time.perf_counter())
    thread.join()
    start, end = window["start"], window["end"]
    assert end - start > 0.005, "the plan was too quick to tell"
    inside = [t for t in stamps if start + 0.1 * (end - start) < t < end - 0.1 * (end - start)]
    assert len(inside) > 10, (len(inside), end - start)
