"""Stepper.step(plan=) with TP > 1: ranks that receive by TP broadcast ignore the plan argument.

DP 2 x TP 2 over the in-process cluster: the data ranks (TP rank 0) hand in the plan they made
ahead; the receiving ranks (TP rank 1) hand in anything: a stale view, a plan of other lengths, an
object that is no Plan at all.  The step ignores it there, as documented, so every rank's step
succeeds at once with the microbatches of a step that planned itself, and no rank waits out the
timeout while another raised.  The stepper's call count stays in step on every rank.
"""

from __future__ import annotations

import time

import dcpack
import numpy as np
import pytest
from conftest import dp_slice
from test_plan_ahead import batches, same_outputs
from test_step import samples_of

TIMEOUT_MS = 4000


def config():
    return dcpack.Config(data_parallel_size=2, tensor_parallel_size=2, scheduler="dynamic_cp", max_sequences=128,
                         max_seqlen_per_rank=8192, max_tokens_per_rank=1 << 17)


@pytest.mark.parametrize("given", ["stale view", "other lengths", "not a plan"])
def test_receiving_ranks_ignore_the_plan(given):
    cfg = config()
    data = batches(32, 1)[0]
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)
    dp = cfg.data_parallel_size
    lengths = np.asarray(data["padded"], dtype=np.int32)

    def rank(w):
        args = cluster.args(w)
        dpxcp, tp, _ = cluster.coordinates(w)
        samples = samples_of(data, list(dp_slice(32, dp, dpxcp))) if args.holds_data else None
        planner = dcpack.Planner(cfg.replace(max_tokens_per_rank=0))
        if args.holds_data:
            plan = planner.plan(lengths)
        elif given == "stale view":
            plan = planner.plan(lengths)
            planner.plan(lengths[::-1].copy())  # the first plan is now a stale view
            assert not plan.is_valid_view
        elif given == "other lengths":
            plan = planner.plan(lengths[::-1].copy())
        else:
            plan = {}
        want = dcpack.Stepper(cfg).step(samples, args).copy()
        stepper = dcpack.Stepper(cfg)
        t0 = time.monotonic()
        try:
            got = stepper.step(samples, args, plan=plan).copy()
        except dcpack.Error as e:
            return tp, e, time.monotonic() - t0, None, stepper.calls
        return tp, None, time.monotonic() - t0, same_outputs(want, got), stepper.calls

    results = cluster.run(rank, return_exceptions=True)
    for w, r in enumerate(results):
        assert not isinstance(r, BaseException), f"world rank {w}: {r!r}"
        tp, error, seconds, diffs, calls = r
        assert error is None, f"world rank {w} (TP rank {tp}) raised {error!r} after {seconds:.1f} s"
        assert diffs == [], f"world rank {w}: {diffs}"
        assert seconds < TIMEOUT_MS / 1000 / 2, f"world rank {w} took {seconds:.1f} s"
        assert calls == 1


def test_a_stale_view_on_a_data_rank_still_fails_every_rank_at_once():
    """The other side of the rule: a data rank's plan is checked, and every rank (receivers too) raises."""
    cfg = config()
    data = batches(32, 1)[0]
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)
    lengths = np.asarray(data["padded"], dtype=np.int32)

    def rank(w):
        args = cluster.args(w)
        dpxcp, tp, _ = cluster.coordinates(w)
        samples = samples_of(data, list(dp_slice(32, 2, dpxcp))) if args.holds_data else None
        planner = dcpack.Planner(cfg.replace(max_tokens_per_rank=0))
        plan = planner.plan(lengths)
        if w == 1:  # a data rank
            planner.plan(lengths[::-1].copy())
        t0 = time.monotonic()
        try:
            dcpack.Stepper(cfg).step(samples, args, plan=plan)
        except dcpack.Error as e:
            return e, time.monotonic() - t0
        return None, time.monotonic() - t0

    for w, (error, seconds) in enumerate(cluster.run(rank)):
        assert isinstance(error, dcpack.InvalidArgumentError), f"world rank {w}: {error!r}"
        assert isinstance(error, dcpack.StaleViewError) == (w == 1), f"world rank {w}: {error!r}"
        assert seconds < TIMEOUT_MS / 1000 / 2, f"world rank {w} waited {seconds:.1f} s for {error!r}"
