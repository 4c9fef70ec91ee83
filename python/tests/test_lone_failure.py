"""Ranks kept in step by their caller (one InprocCluster.run per step) after a step that failed on one rank
alone: the next step realigns them and succeeds with the right data, never an endless run of timeouts."""

from __future__ import annotations

import time

import dcpack
import numpy as np
import pytest

TOKENS = 8
TIMEOUT_MS = 250  # the cluster's world waits 4 x this


def config():
    return dcpack.Config(scheduler="dp_balanced", data_parallel_size=2, context_parallel_size=1, max_sequences=8,
                         max_seqlen_per_rank=64, max_tokens_per_rank=64)


def sample(base):
    return dcpack.Sample(tokens=np.arange(base, base + TOKENS, dtype=np.int64),
                         labels=np.arange(base + 50, base + 50 + TOKENS, dtype=np.int64),
                         loss_mask=np.ones(TOKENS, dtype=np.float32),
                         position_ids=np.arange(TOKENS, dtype=np.int64))


def base_of(w, k):
    return 1000 * (k + 1) + 100 * w


@pytest.mark.parametrize("how", ["refused", "counted"])
@pytest.mark.parametrize("lone_steps", [1, 2])
def test_ranks_in_lockstep_realign_after_a_lone_failure(lone_steps, how):
    """Rank 0's step is refused by the package (``plan={}``), or rank 0 gives up before ``step()`` and says so
    with ``count_failed_step()``: either way the next step realigns."""
    cfg = config()
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)
    steppers = [dcpack.Stepper(cfg) for _ in range(2)]

    def step(k):
        def rank(w):
            args = cluster.args(w)
            if w == 0 and k < lone_steps:
                if how == "counted":
                    steppers[w].count_failed_step()  # a wrapper gave up on this step before step()
                    raise dcpack.InvalidArgumentError("given up before the step")
                steppers[w].step([sample(base_of(w, k))], args, plan={})  # refused by the package on rank 0 alone
            out = steppers[w].step([sample(base_of(w, k))], args)
            return sorted(np.concatenate([mb.tokens for mb in out.microbatches]).tolist())
        return cluster.run(rank, return_exceptions=True)

    for k in range(lone_steps + 3):
        t0 = time.monotonic()
        results = step(k)
        took = time.monotonic() - t0
        if k < lone_steps:
            assert isinstance(results[0], dcpack.InvalidArgumentError), results
            assert isinstance(results[1], dcpack.DcpTimeoutError), results  # it waited for a step never made
        else:
            # realigned: both ranks step, each on its own sample of this step (dp_balanced), without waiting
            for w in range(2):
                assert not isinstance(results[w], BaseException), (k, results)
                assert results[w] == list(range(base_of(w, k), base_of(w, k) + TOKENS)), (k, w, results[w])
            assert took < 4 * TIMEOUT_MS / 1000, took
        assert [s.calls for s in steppers] == [k + 1, k + 1]
