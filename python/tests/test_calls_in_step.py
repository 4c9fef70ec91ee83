"""Calls in step and CP sibling checks from Python: OutOfStepError on every rank, resync, step ids,
the context's call count, and Config.skip_sibling_data_check."""

from __future__ import annotations

import dcpack
import numpy as np
import pytest
from dcpack import _core

TOKENS = 8


def config(dp=2, cp=1, **kw):
    base = dict(scheduler="dp_balanced", data_parallel_size=dp, context_parallel_size=cp, max_sequences=8,
                max_seqlen_per_rank=64, max_tokens_per_rank=64)
    base.update(kw)
    return dcpack.Config(**base)


def sample(base, n=TOKENS, tokens_dtype=np.int64):
    return dcpack.Sample(tokens=np.arange(base, base + n, dtype=tokens_dtype),
                         labels=np.arange(base + 50, base + 50 + n, dtype=np.int64),
                         loss_mask=np.ones(n, dtype=np.float32), position_ids=np.arange(n, dtype=np.int64))


def good(w):
    return [sample(100 * (w + 1))]


def all_raise(results, cls):
    assert all(isinstance(r, cls) for r in results), results
    return results


def test_out_of_step_error_class():
    assert dcpack.OutOfStepError.code == -19 and dcpack.OutOfStepError.status == "DCP_ERR_OUT_OF_STEP"
    assert dcpack.status_name(-19) == "DCP_ERR_OUT_OF_STEP"
    assert dcpack.error_class(-19) is dcpack.OutOfStepError
    assert dcpack.error_class("DCP_ERR_OUT_OF_STEP") is dcpack.OutOfStepError
    assert issubclass(dcpack.OutOfStepError, dcpack.Error)


def lone_failure(stepper, args, how):
    """One rank's step fails on that rank alone, before any collective."""
    if how == "python":  # refused by the package: int32 tokens
        with pytest.raises(dcpack.InvalidArgumentError, match="int64"):
            stepper.step([sample(1, tokens_dtype=np.int32)], args)
    elif how == "binding":  # refused by the C binding: not a communicator
        with pytest.raises(dcpack.InvalidArgumentError, match="communicator"):
            stepper.step(good(0), world="not a communicator", data_context_parallel=args.data_context_parallel)
    elif how == "keywords":  # a StepArgs field that does not exist
        with pytest.raises(TypeError):
            stepper.step(good(0), world=args.world, no_such_argument=1)
    elif how == "step_id":  # a step id outside uint64
        with pytest.raises(dcpack.InvalidArgumentError, match="step_id"):
            stepper.step(good(0), args, step_id=-1)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["python", "binding", "keywords", "step_id"])
def test_a_lone_failure_puts_every_rank_out_of_step_until_resync(how):
    cfg = config()
    cluster = dcpack.InprocCluster(cfg, timeout_ms=20000)
    log = {}

    def rank(w):
        args = cluster.args(w)
        stepper = dcpack.Stepper(cfg)
        assert stepper.calls == 0
        if w == 0:
            lone_failure(stepper, args, how)
            assert stepper.calls == 1  # counted, as the library counts a call that fails here alone
        # rank 0's second step meets rank 1's first: different call counts, no data paired
        with pytest.raises(dcpack.OutOfStepError) as e:
            stepper.step(good(w), args)
        log[w] = e.value.message
        # out of step: refused at once, no collective (rank 1 does not wait for anyone)
        for _ in range(2):
            with pytest.raises(dcpack.OutOfStepError, match="resync"):
                stepper.step(good(w), args)
        stepper.resync(7)
        assert stepper.calls == 7
        out = stepper.step(good(w), args)
        assert stepper.calls == 8
        return out.copy()

    results = cluster.run(rank, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    assert log[0] and log[1]
    # after the resync the step is right: dp_balanced, each DP rank computes on its own sample
    for w, out in enumerate(results):
        tokens = np.concatenate([mb.tokens for mb in out.microbatches])
        assert sorted(tokens.tolist()) == list(range(100 * (w + 1), 100 * (w + 1) + TOKENS))


def test_step_ids_that_differ_across_ranks():
    cfg = config()
    cluster = dcpack.InprocCluster(cfg, timeout_ms=20000)

    def rank(w):
        args = cluster.args(w)
        stepper = dcpack.Stepper(cfg)
        try:
            stepper.step(good(w), args, step_id=1 + w)  # rank 0 says step 1, rank 1 step 2
        except dcpack.OutOfStepError as e:
            first = e
        else:
            raise AssertionError("the step with different step ids succeeded")
        # the stepper refuses, even with matching ids, until resync
        with pytest.raises(dcpack.OutOfStepError):
            stepper.step(good(w), args, step_id=3)
        stepper.resync(0)
        ids = []
        for step in (3, 4):
            args.step_id = step  # through StepArgs this time
            out = stepper.step(good(w), args)
            ids.append(out.num_sequences)
        assert stepper.calls == 2
        return first

    results = all_raise(cluster.run(rank, return_exceptions=True), dcpack.OutOfStepError)
    assert all(r.message for r in results)


def test_a_rank_a_step_ahead_is_caught_by_its_step_id():
    """Both ranks made the same number of calls, but rank 1's loop is one batch ahead: the ids say so."""
    cfg = config()
    cluster = dcpack.InprocCluster(cfg, timeout_ms=20000)

    def rank(w):
        args = cluster.args(w)
        stepper = dcpack.Stepper(cfg)
        stepper.step(good(w), args, step_id=1)
        return stepper.step(good(w), args, step_id=2 if w == 0 else 3)

    all_raise(cluster.run(rank, return_exceptions=True), dcpack.OutOfStepError)


def test_calls_count_every_step():
    cfg = config(dp=1)
    world = dcpack.InprocWorld(1, timeout_ms=5000)
    comm = world.comm(0)
    stepper = dcpack.Stepper(cfg)
    assert stepper.calls == 0
    stepper.step(good(0), world=comm, data_context_parallel=comm)
    assert stepper.calls == 1
    # a step the library refuses (agreed over the one-rank world) counts too
    with pytest.raises(dcpack.CorruptInputError):
        s = sample(1)
        s.cu_seqlens = np.array([1, TOKENS], dtype=np.int32)  # not starting at 0
        stepper.step([s], world=comm, data_context_parallel=comm)
    assert stepper.calls == 2
    stepper.step(good(0), world=comm, data_context_parallel=comm, step_id=(1 << 64) - 1)
    assert stepper.calls == 3
    for bad in (-1, 1 << 64, "3", 1.0, True):
        with pytest.raises(dcpack.InvalidArgumentError):
            stepper.resync(bad)
        with pytest.raises(dcpack.InvalidArgumentError):
            stepper.step(good(0), world=comm, data_context_parallel=comm, step_id=bad)
    assert stepper.calls == 3 + 5  # the refused steps count, the refused resyncs do not
    stepper.resync((1 << 64) - 1)
    assert stepper.calls == (1 << 64) - 1
    stepper.resync()
    assert stepper.calls == 0
    stepper.close()
    assert stepper.calls == 0
    with pytest.raises(dcpack.InvalidArgumentError, match="closed"):
        stepper.resync(0)


def test_a_failed_step_in_python_makes_the_previous_output_stale():
    cfg = config(dp=1)
    world = dcpack.InprocWorld(1, timeout_ms=5000)
    comm = world.comm(0)
    stepper = dcpack.Stepper(cfg)
    out = stepper.step(good(0), world=comm, data_context_parallel=comm)
    assert out.is_valid_view
    with pytest.raises(dcpack.InvalidArgumentError):
        stepper.step([sample(1, tokens_dtype=np.int32)], world=comm, data_context_parallel=comm)
    assert not out.is_valid_view


def test_planner_calls_and_resync():
    planner = dcpack.Planner(data_parallel_size=2, max_sequences=8, max_seqlen_per_rank=64)
    planner.plan([10, 20, 30, 40])
    assert planner.calls == 0  # planning is local: no multi-rank call
    planner.resync(5)
    assert planner.calls == 5
    with pytest.raises(dcpack.InvalidArgumentError):
        planner.resync(-2)


def test_skip_sibling_data_check_round_trips():
    assert dcpack.Config().skip_sibling_data_check == 0 == _core.config_default()["skip_sibling_data_check"]
    for v in (0, 1, True):
        c = dcpack.Config(skip_sibling_data_check=v, max_tokens_per_rank=64)
        d = c.to_dict()
        assert d["skip_sibling_data_check"] == int(v)
        assert _core.Context(d).config["skip_sibling_data_check"] == int(v)  # through dcp_config and back
        assert dcpack.Config.from_dict(d).to_dict() == d
    with pytest.raises(dcpack.InvalidConfigError, match="skip_sibling_data_check"):
        dcpack.Config(skip_sibling_data_check="yes").to_dict()
    with pytest.raises(dcpack.InvalidConfigError, match="skip_sibling_data_check"):
        dcpack.Config(skip_sibling_data_check=1 << 40).to_dict()


def sibling_step(skip, differ):
    """DP 1 x CP 2: both ranks are CP siblings of one DP rank and must hold the same input."""
    cfg = config(dp=1, cp=2, skip_sibling_data_check=skip)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=20000)

    def rank(w):
        base = 900 if (differ and w == 1) else 100
        out = dcpack.Stepper(cfg).step([sample(base)], cluster.args(w))
        return out.microbatch(0).tokens.copy()

    return cluster.run(rank, return_exceptions=True)


def test_cp_siblings_with_different_tokens_fail_on_every_rank():
    results = all_raise(sibling_step(skip=0, differ=True), dcpack.CorruptInputError)
    assert all("CP siblings" in r.message for r in results), [r.message for r in results]


def test_cp_siblings_step_when_equal_or_with_the_check_skipped():
    # zigzag over CP 2: rank 0 holds chunks 0 and 3 of the 8 tokens, rank 1 chunks 1 and 2
    want = [[100, 101, 106, 107], [102, 103, 104, 105]]
    results = sibling_step(skip=0, differ=False)
    assert [r.tolist() for r in results] == want
    # skipped: only the lengths are compared, so different contents go through (the documented trade)
    results = sibling_step(skip=1, differ=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    assert [len(r) for r in results] == [4, 4]
