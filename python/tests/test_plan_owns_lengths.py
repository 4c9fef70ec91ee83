"""A Plan owns the lengths it planned: refilling the caller's buffer afterwards changes nothing.

``Planner.plan`` reads int32 contiguous input in place (numpy, the buffer protocol, DLPack, a CPU
tensor).  A trainer that reuses one buffer for every batch refills it after planning; the plan's
``lengths``, ``stats()``, ``matches()``, ``validate()`` and ``copy()`` must still be those of the
batch it planned, not of whatever the buffer holds now.
"""

from __future__ import annotations

import array

import dcpack
import numpy as np
import pytest

LENGTHS = [100, 36, 64, 8, 48, 16]  # total 272


def planner():
    return dcpack.Planner(data_parallel_size=4, scheduler="dynamic_cp", max_sequences=64, max_seqlen_per_rank=256)


def reference():
    """What a plan of LENGTHS reports when nothing touches its input."""
    plan = planner().plan(list(LENGTHS)).copy()
    return plan, plan.stats()


def buffers():
    """(name, make a buffer holding LENGTHS, refill it with other values in place)."""
    def numpy_buffer():
        buf = np.array(LENGTHS, dtype=np.int32)
        return buf, lambda: buf.__setitem__(slice(None), 8)

    def array_buffer():  # the buffer protocol: np.asarray(memoryview) shares the memory
        buf = array.array("i", LENGTHS)
        def refill():
            for k in range(len(buf)):
                buf[k] = 8
        return buf, refill

    def dlpack_buffer():
        buf = np.array(LENGTHS, dtype=np.int32)

        class Exporter:  # only __dlpack__: the DLPack path of as_lengths
            def __dlpack__(self, **kw):
                return buf.__dlpack__(**kw)

            def __dlpack_device__(self):
                return buf.__dlpack_device__()

        return Exporter(), lambda: buf.__setitem__(slice(None), 8)

    return [("numpy", numpy_buffer), ("buffer", array_buffer), ("dlpack", dlpack_buffer)]


@pytest.mark.parametrize("name,make", buffers(), ids=[b[0] for b in buffers()])
def test_refilling_the_input_leaves_the_plan_alone(name, make):
    expected_plan, expected = reference()
    assert expected.total_tokens == 272
    buf, refill = make()
    plan = planner().plan(buf)
    refill()  # the next batch goes into the same buffer
    assert plan.lengths.tolist() == LENGTHS
    stats = plan.stats()
    assert stats.total_tokens == 272, stats
    assert stats == expected
    assert plan.matches()
    assert plan.matches(LENGTHS)
    assert not plan.matches([8] * len(LENGTHS))
    assert plan.violation() is None
    copy = plan.copy()
    assert copy.lengths.tolist() == LENGTHS and copy.matches(LENGTHS) and copy.stats() == expected
    assert plan == expected_plan


def test_a_plans_lengths_cannot_be_changed_through_it():
    plan = planner().plan(np.array(LENGTHS, dtype=np.int32))
    assert not plan.lengths.flags.writeable
    with pytest.raises(ValueError):
        plan.lengths[0] = 8
    copy = plan.copy()
    assert not copy.lengths.flags.writeable
    assert copy.stats().total_tokens == 272


def test_a_cpu_tensor_refilled_leaves_the_plan_alone():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    t = torch.tensor(LENGTHS, dtype=torch.int32)
    plan = planner().plan(t)
    t.fill_(8)
    assert plan.lengths.tolist() == LENGTHS and plan.stats().total_tokens == 272 and plan.matches()


def test_the_megatron_schedulers_plans_own_their_lengths():
    """DcpackPackingScheduler.plan: its plan (and last_plan) keep the batch's lengths."""
    import dcpack.megatron as dm

    s = dm.DefaultDynamicCPScheduler(256, 1, 4, None)
    pairs = [(i, n) for i, n in enumerate(LENGTHS)]
    plan = s.plan(pairs)
    other = s.plan([(i, 8) for i in range(len(LENGTHS))])
    assert plan.lengths.tolist() == LENGTHS and plan.stats().total_tokens == 272 and plan.matches()
    assert other.stats().total_tokens == 48
