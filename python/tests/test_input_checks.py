"""Inputs the package refused or turned into something else where the library is clearer.

- step([]) on a data rank: the library accepts a rank with no samples, so must the package;
- dcpack.megatron's schedulers check their numbers as Planner and Config do (no float, string or bool
  becomes a length or a size);
- InprocCluster(timeout_ms=...) refuses a value it cannot use, quoting the value given.
"""

from __future__ import annotations

import dcpack
import dcpack.megatron as dm
import numpy as np
import pytest


def _sample(n, base):
    return dcpack.Sample(tokens=np.arange(n, dtype=np.int64) + base, labels=np.arange(n, dtype=np.int64),
                         loss_mask=np.ones(n, dtype=np.float32), position_ids=np.arange(n, dtype=np.int64))


def test_step_with_an_empty_rank():
    config = dcpack.Config(data_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 14)
    cluster = dcpack.InprocCluster(config, timeout_ms=30000)
    lengths = {0: [64, 128, 32], 1: []}

    def rank(w):
        out = dcpack.Stepper(config).step([_sample(n, 1000 * (i + 1)) for i, n in enumerate(lengths[w])],
                                          cluster.args(w))
        return sorted(int(t) for mb in out.microbatches for t in mb.tokens[~mb.padding_mask] if t >= 1000)

    results = cluster.run(rank)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    # every token of rank 0's three samples reaches exactly one rank, rank 1 brought none
    everything = sorted(results[0] + results[1])
    expect = sorted(t for i, n in enumerate(lengths[0]) for t in range(1000 * (i + 1), 1000 * (i + 1) + n))
    assert everything == expect


@pytest.mark.parametrize("bad", [100.9, "100", True, None, np.float64(100.0)])
def test_scheduler_lengths_must_be_ints(bad):
    s = dm.DefaultDynamicCPScheduler(1024, 1, 4, None)
    with pytest.raises(dcpack.InvalidArgumentError, match="lengths must be ints"):
        s.get_groups_and_subsamples([(0, 100), (1, bad), (2, 300)])
    # the scheduler is still usable, and an int length list plans
    assert sum(len(ids) for mb in s.get_groups_and_subsamples([(0, 100), (1, 200)]) for rank in mb
               for ids in [rank]) >= 2


@pytest.mark.parametrize("cls", [dm.DpBalancedScheduler, dm.DefaultDynamicCPScheduler, dm.BalancedScheduler])
@pytest.mark.parametrize("field,value", [("dp_size", 2.5), ("dp_size", "2"), ("cp_size", True),
                                         ("max_seqlen_per_dp_cp_rank", 1024.0), ("max_num_seqs", 3.5)])
def test_scheduler_sizes_must_be_ints(cls, field, value):
    kwargs = dict(max_seqlen_per_dp_cp_rank=1024, cp_size=1, dp_size=2, microbatch_group_size_per_vp_stage=None)
    kwargs[field] = value
    with pytest.raises(dcpack.InvalidConfigError, match=field):
        cls(**kwargs)


def test_scheduler_numpy_ints_still_accepted():
    s = dm.DpBalancedScheduler(np.int64(1024), np.int32(1), np.int64(2), None, max_num_seqs=np.int64(4))
    assert s.config.data_parallel_size == 2 and s.config.max_sequences_per_microbatch == 4
    assert s.get_groups_and_subsamples([(0, np.int64(100)), (1, np.int32(200))])


@pytest.mark.parametrize("timeout", [600000000, -1, 2.5, True])
def test_inproc_cluster_timeout_quotes_the_value_given(timeout):
    config = dcpack.Config(data_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 14)
    with pytest.raises(dcpack.InvalidArgumentError) as e:
        dcpack.InprocCluster(config, timeout_ms=timeout)
    assert f"timeout_ms = {timeout!r}" in str(e.value)
    assert str(4 * 600000000) not in str(e.value)


def test_inproc_cluster_largest_timeout_works():
    config = dcpack.Config(data_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 14)
    dcpack.InprocCluster(config, timeout_ms=(2**31 - 1) // 4)


def test_cluster_run_raises_a_ranks_error():
    config = dcpack.Config(data_parallel_size=2, context_parallel_size=2, max_sequences=16, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 14, scheduler="dp_balanced")
    cluster = dcpack.InprocCluster(config, timeout_ms=30000)

    def rank(w):  # 102 tokens at CP 2: not a multiple of 2 x 2
        return dcpack.Stepper(config).step([_sample(102, 0)], cluster.args(w))

    with pytest.raises(dcpack.BadLengthError, match="divisible"):
        cluster.run(rank)
    results = cluster.run(rank, return_exceptions=True)
    assert len(results) == 4 and all(isinstance(r, dcpack.BadLengthError) for r in results)


def test_one_version_number():
    """The wheel's version (pyproject reads it from include/dcpack.h) is the C library's, as dcpack reports it."""
    import importlib.metadata
    import re
    from pathlib import Path

    header = (Path(__file__).resolve().parents[2] / "include" / "dcpack.h").read_text()
    parts = [re.search(rf"#define DCP_VERSION_{k} (\d+)", header).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert dcpack.__version__ == ".".join(parts)
    try:
        installed = importlib.metadata.version("dcpack")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("dcpack has no installed metadata here (imported from a source tree)")
    assert installed == dcpack.__version__
