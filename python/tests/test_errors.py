"""Every error path raises the exception of its dcp_status, with the status name and a message."""

from __future__ import annotations

import dcpack
import numpy as np
import pytest
from dcpack import _core

STATUSES = {
    -1: ("DCP_ERR_NULL_POINTER", dcpack.NullPointerError),
    -2: ("DCP_ERR_INVALID_ARGUMENT", dcpack.InvalidArgumentError),
    -3: ("DCP_ERR_INVALID_CONFIG", dcpack.InvalidConfigError),
    -4: ("DCP_ERR_OVERFLOW", dcpack.DcpOverflowError),
    -5: ("DCP_ERR_WORKSPACE_TOO_SMALL", dcpack.WorkspaceTooSmallError),
    -6: ("DCP_ERR_CAPACITY", dcpack.CapacityError),
    -7: ("DCP_ERR_BAD_LENGTH", dcpack.BadLengthError),
    -8: ("DCP_ERR_INFEASIBLE", dcpack.InfeasibleError),
    -9: ("DCP_ERR_INVALID_PLAN", dcpack.InvalidPlanError),
    -10: ("DCP_ERR_CORRUPT_INPUT", dcpack.CorruptInputError),
    -11: ("DCP_ERR_FIELD_MISMATCH", dcpack.FieldMismatchError),
    -12: ("DCP_ERR_COMM", dcpack.CommError),
    -13: ("DCP_ERR_TIMEOUT", dcpack.DcpTimeoutError),
    -15: ("DCP_ERR_ALLOC", dcpack.AllocError),
    -16: ("DCP_ERR_CUDA", dcpack.CudaError),
    -17: ("DCP_ERR_NCCL", dcpack.NcclError),
    -18: ("DCP_ERR_UNSUPPORTED", dcpack.UnsupportedError),
    -19: ("DCP_ERR_OUT_OF_STEP", dcpack.OutOfStepError),
}


@pytest.mark.parametrize("code", sorted(STATUSES))
def test_one_class_per_status(code):
    name, cls = STATUSES[code]
    assert dcpack.status_name(code) == name  # the C library's own name
    assert cls.status == name and cls.code == code and issubclass(cls, dcpack.Error)
    assert dcpack.error_class(code) is cls and dcpack.error_class(name) is cls
    e = cls("msg")
    assert e.status == name and e.message == "msg" and str(e) == f"{name}: msg"


def planner(**kw):
    base = dict(data_parallel_size=4, max_sequences=16, max_seqlen_per_rank=1024)
    base.update(kw)
    return dcpack.Planner(**base)


def expect(cls, fn, match=None):
    with pytest.raises(cls, match=match) as e:
        fn()
    assert e.value.status == cls.status
    assert e.value.message  # every error says what went wrong
    return e.value


def test_invalid_config():
    e = expect(dcpack.InvalidConfigError, lambda: planner(data_parallel_size=0))
    assert "data_parallel_size" in e.message
    expect(dcpack.InvalidConfigError, lambda: planner(min_cp_size=3), match="min_cp_size")
    expect(dcpack.InvalidConfigError, lambda: planner(scheduler="fastest"), match="scheduler")
    expect(dcpack.InvalidConfigError, lambda: planner(max_sequences="many"), match="max_sequences")
    expect(dcpack.InvalidConfigError, lambda: planner(max_sequences=1 << 40), match="outside")
    expect(dcpack.InvalidConfigError, lambda: planner(fields={"pixels"}), match="pixels")
    expect(dcpack.InvalidConfigError, lambda: planner(cost=dcpack.CostModel(kv=(1, 2))), match="kv")
    expect(dcpack.InvalidConfigError, lambda: planner(cost=dcpack.CostModel(linear=-1)), match="linear")
    with pytest.raises(TypeError):
        dcpack.Config(no_such_field=1)
    expect(dcpack.InvalidArgumentError, lambda: dcpack.Planner("not a config"))


def test_overflow():
    expect(dcpack.DcpOverflowError, lambda: planner(data_parallel_size=1 << 15, context_parallel_size=1 << 15))


def test_capacity():
    e = expect(dcpack.CapacityError, lambda: planner().plan([10] * 17))
    assert "17" in e.message


def test_bad_lengths():
    p = planner()
    expect(dcpack.BadLengthError, lambda: p.plan([10, -3, 5]), match="-3")
    expect(dcpack.BadLengthError, lambda: p.plan([10, 0, 5]))
    expect(dcpack.BadLengthError, lambda: p.plan([10, 4 * 1024 + 1]))  # longer than all ranks together
    expect(dcpack.BadLengthError, lambda: p.plan(np.array([10, 1 << 40])), match="int32")
    expect(dcpack.BadLengthError, lambda: p.plan([10, 1 << 70]))


def test_bad_arguments():
    p = planner()
    expect(dcpack.InvalidArgumentError, lambda: p.plan([]), match="empty")
    expect(dcpack.InvalidArgumentError, lambda: p.plan(np.array([1.5, 2.0])), match="integer dtype")
    expect(dcpack.InvalidArgumentError, lambda: p.plan(np.array([True, False])), match="integer dtype")
    expect(dcpack.InvalidArgumentError, lambda: p.plan(np.ones((2, 2), dtype=np.int32)), match="one-dimensional")
    expect(dcpack.InvalidArgumentError, lambda: p.plan([1, 2.5]), match="ints")
    expect(dcpack.InvalidArgumentError, lambda: p.plan("12"))
    expect(dcpack.InvalidArgumentError, lambda: p.plan(12))
    expect(dcpack.InvalidArgumentError, lambda: p.plan(None))
    plan = p.plan([100, 200, 300, 400])
    expect(dcpack.InvalidArgumentError, lambda: plan.rank_ids(5, 0))
    expect(dcpack.InvalidArgumentError, lambda: plan.groups(-1))


def test_infeasible():
    # dp_balanced: too few sequences to reach a multiple of the DP size
    p = planner(scheduler="dp_balanced", data_parallel_size=4)
    expect(dcpack.InfeasibleError, lambda: p.plan([1000, 1000]))


def test_invalid_plan():
    p = planner()
    plan = p.plan([100, 200, 300, 400, 500, 600, 700, 800])
    broken = plan.copy()
    ids = broken._arrays["ids"]
    ids.flags.writeable = True
    ids[0], ids[1] = ids[1], ids[1]  # one id twice, another missing
    v = broken.violation()
    assert v is not None and v.invariant == 1 and v.message
    e = expect(dcpack.InvalidPlanError, broken.validate)
    assert e.violation == v


def test_unsupported_without_cuda():
    if dcpack.HAVE_CUDA:
        pytest.skip("built with CUDA")
    expect(dcpack.UnsupportedError, lambda: _core.cuda_workspace_size(dcpack.Config(max_tokens_per_rank=10).to_dict()))
    expect(dcpack.UnsupportedError, _core.nccl_unique_id)
    assert dcpack.cuda_device_count() == 0


def one_rank_step(samples, fields=None, config_fields=None, **cfg):
    base = dict(max_sequences=16, max_seqlen_per_rank=1024, max_tokens_per_rank=4096)
    base.update(cfg)
    if config_fields is not None:
        base["fields"] = config_fields
    config = dcpack.Config(**base)
    world = dcpack.InprocWorld(1, timeout_ms=5000)
    comm = world.comm(0)
    return dcpack.Stepper(config).step(samples, world=comm, data_context_parallel=comm, fields=fields)


def fields_of(n, **over):
    s = dict(tokens=np.arange(n, dtype=np.int64), labels=np.arange(n, dtype=np.int64),
             loss_mask=np.ones(n, dtype=np.float32), position_ids=np.arange(n, dtype=np.int64))
    s.update(over)
    return s


def test_step_bad_arguments_in_python():
    ok = one_rank_step([dcpack.Sample(**fields_of(16))])
    assert ok.num_sequences == 1
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16, tokens=np.arange(16, dtype=np.int32)))]), match="int64")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16, labels=np.arange(32, dtype=np.int64)[::2]))]), match="contiguous")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16, loss_mask=np.ones(15, dtype=np.float32)))]), match="15")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16, loss_mask=[1.0] * 16))]), match="numpy")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16), original_length=17)]), match="original_length")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(tokens=np.arange(4, dtype=np.int64))], fields=dcpack.FIELD_ALL), match="lacks labels")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step(dcpack.Sample(**fields_of(16))), match="list")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([{"tokenz": 1}]), match="unknown keys")
    expect(dcpack.InvalidArgumentError, lambda: one_rank_step([dcpack.Sample(**fields_of(16), cu_seqlens=np.array([0, 16], dtype=np.int64))]), match="int32")


def test_step_errors_from_the_library():
    # cu_seqlens not starting at 0
    e = expect(dcpack.CorruptInputError, lambda: one_rank_step([dcpack.Sample(**fields_of(16), cu_seqlens=np.array([1, 16], dtype=np.int32))]))
    assert "cu_seqlens" in e.message
    # more samples than max_sequences
    expect(dcpack.CapacityError, lambda: one_rank_step([dcpack.Sample(**fields_of(8)) for _ in range(17)]))
    # planning only (max_tokens_per_rank 0): the step refuses
    expect(dcpack.CapacityError, lambda: one_rank_step([dcpack.Sample(**fields_of(8))], max_tokens_per_rank=0))
    # a stepping configuration without all four fields is refused when the Stepper is made
    expect(dcpack.InvalidConfigError, lambda: one_rank_step([dcpack.Sample(**fields_of(8))], fields=dcpack.FIELD_ALL, config_fields=dcpack.FIELD_TOKENS), match="lack labels")
    # no world communicator
    config = dcpack.Config(max_sequences=4, max_tokens_per_rank=64)
    expect(dcpack.NullPointerError, lambda: dcpack.Stepper(config).step([dcpack.Sample(**fields_of(8))], world=None))
    # wrong communicator type
    expect(dcpack.InvalidArgumentError, lambda: dcpack.Stepper(config).step([dcpack.Sample(**fields_of(8))], world="comm"), match="communicator")


def test_comm_fault_and_timeout_agree_on_every_rank():
    cfg = dcpack.Config(data_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024, max_tokens_per_rank=4096)
    for fault, cls in ((dcpack.FAULT_RETURN_ERROR, dcpack.CommError), (dcpack.FAULT_NEVER_ARRIVE, dcpack.DcpTimeoutError)):
        cluster = dcpack.InprocCluster(cfg, timeout_ms=300)
        cluster._lanes[0].inject_fault(1, fault)

        def rank(w):
            args = cluster.args(w)
            return dcpack.Stepper(cfg).step([dcpack.Sample(**fields_of(8 + w))], args)

        results = cluster.run(rank, return_exceptions=True)
        assert all(isinstance(r, cls) for r in results), results
    # a lone rank of two waits out its timeout
    world = dcpack.InprocWorld(2, timeout_ms=200)
    expect(dcpack.DcpTimeoutError, lambda: dcpack.Stepper(cfg).step([dcpack.Sample(**fields_of(8))], world=world.comm(0), data_context_parallel=world.comm(0)))


def test_field_mismatch_between_ranks():
    cfg = dcpack.Config(data_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024, max_tokens_per_rank=4096)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=2000)

    def rank(w):
        s = fields_of(8)
        if w == 1:
            s.pop("labels")
        return dcpack.Stepper(cfg).step([dcpack.Sample(**s)], cluster.args(w))

    results = cluster.run(rank, return_exceptions=True)
    assert all(isinstance(r, dcpack.FieldMismatchError) for r in results), results


def test_world_arguments():
    expect(dcpack.InvalidArgumentError, lambda: dcpack.InprocWorld(0))
    expect(dcpack.InvalidArgumentError, lambda: dcpack.InprocWorld(2, timeout_ms=-1))
    w = dcpack.InprocWorld(2)
    expect(dcpack.InvalidArgumentError, lambda: w.comm(2))
    expect(dcpack.InvalidArgumentError, lambda: w.comm("0"))
    c = w.comm(1)
    assert (c.rank, c.size, c.kind) == (1, 2, "inproc")
