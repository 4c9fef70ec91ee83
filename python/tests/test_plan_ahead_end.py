"""DataPath(plan_ahead=True) when a DP rank's data ends early, and when a plan made ahead is lost.

The read-ahead (``dcpack.megatron._ReadAhead``, no torch) runs here on the in-process DP
communicator, one thread per DP rank, with plain dicts as samples: a rank whose iterator ends (or
raises) still takes part in the gather of the next batch's lengths and says so, so every rank
learns at once which ranks have no next batch, instead of its peers waiting out the communicator's
timeout and then losing plan-ahead silently.  A gather that fails for another reason is counted and
warned of.  With torch, DataPath itself (DP 2 x TP 2, on the host): the call after the last full
global batch raises at once on every rank, the TP ranks that receive included.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import dcpack
import dcpack.megatron as dm
import numpy as np
import pytest

TIMEOUT_MS = 4000
FAST = TIMEOUT_MS / 1000 / 2  # well inside one timeout: nobody waited for a peer that never came


def config(dp=2):
    return dcpack.Config(data_parallel_size=dp, scheduler="dynamic_cp", max_sequences=64, max_seqlen_per_rank=4096,
                         max_tokens_per_rank=0)


def lengths_of(items):
    return np.array([it["n"] for it in items], dtype=np.int32)


def source(dp_rank, batches, fail_at=None):
    """Two samples a microbatch, two microbatches a batch; ``fail_at``: raise ValueError at that batch."""
    for b in range(batches):
        for m in range(2):
            if fail_at == b:
                raise ValueError(f"DP rank {dp_rank}: unreadable shard")
            yield [{"n": 64 * (1 + dp_rank + b + m)}, {"n": 32 * (1 + m)}]


def run_readers(counts, fail=None, dp=2, reads=None):
    """Each DP rank reads ahead ``reads`` batches (default max(counts)); its iterator holds counts[r] batches.
    Returns per rank: [(seconds, ahead) per read] and the reader's lost count."""
    cfg = config(dp)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)
    reads = reads or max(counts)

    def rank(w):
        reader = dm._ReadAhead(dcpack.Planner(cfg), cluster.data_parallel(w), lengths_of)
        it = source(w, counts[w], fail_at=(fail or {}).get(w))
        out = []
        for _ in range(reads):
            t0 = time.monotonic()
            ahead = reader.read(it, 2)
            ahead.join()
            out.append((time.monotonic() - t0, ahead))
            if ahead.missing:
                break
        return out, reader.lost

    return cluster.run(rank)


def test_an_early_end_on_one_rank_is_agreed_at_once():
    """DP rank 1 holds 2 batches, rank 0 holds 3: the third read ahead says so on both ranks, at once."""
    results = run_readers([3, 2])
    for w, (reads, lost) in enumerate(results):
        assert len(reads) == 3, f"rank {w}: {len(reads)} reads"
        for k, (seconds, ahead) in enumerate(reads):
            assert seconds < FAST, f"rank {w} read {k} took {seconds:.1f} s"
            if k < 2:
                assert ahead.plan is not None and not ahead.missing, (w, k, ahead.plan_error)
        last = reads[-1][1]
        assert last.missing and last.ended == [1] and last.failed == [] and last.plan is None
        err = last.end_error()
        assert isinstance(err, StopIteration)
        if w == 0:
            assert last.error is None and len(last.items) == 4  # its own batch was read, then dropped
            assert "DP rank(s) [1]" in str(err) and "data ended" in str(err)
        else:
            assert err is last.error  # the iterator's own StopIteration
        assert lost == 0  # an end of data is not a lost plan


def test_every_rank_ending_together_is_agreed_too():
    results = run_readers([2, 2], reads=3)
    for w, (reads, lost) in enumerate(results):
        assert [a.missing for _, a in reads] == [False, False, True]
        last = reads[-1][1]
        assert last.ended == [0, 1] and isinstance(last.error, StopIteration)
        assert max(s for s, _ in reads) < FAST


def test_an_iterator_that_raises_on_one_rank_is_agreed_at_once():
    results = run_readers([3, 3, 3], fail={2: 1}, dp=3)
    for w, (reads, _) in enumerate(results):
        assert len(reads) == 2 and max(s for s, _ in reads) < FAST
        last = reads[-1][1]
        assert last.failed == [2] and last.ended == []
        err = last.end_error()
        if w == 2:
            assert isinstance(err, ValueError) and "unreadable shard" in str(err)
        else:
            assert isinstance(err, RuntimeError) and "DP rank(s) [2] raised" in str(err)


def test_a_bad_batch_is_no_end_of_data():
    """A gather that fails for another reason (more sequences than max_sequences on rank 0): both ranks agree
    it is no end of data; the batch has no plan made ahead, and losing it is counted and warned of."""
    cfg = config().replace(max_sequences=3)
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)

    def rank(w):
        reader = dm._ReadAhead(dcpack.Planner(cfg), cluster.data_parallel(w), lengths_of)
        t0 = time.monotonic()
        ahead = reader.read(source(w, 1), 2 if w == 0 else 1)  # rank 0: 4 sequences
        ahead.join()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reader.lose(ahead.plan_error)
        return time.monotonic() - t0, ahead, reader.lost, caught

    for w, (seconds, ahead, lost, caught) in enumerate(cluster.run(rank)):
        assert seconds < FAST
        assert not ahead.missing and ahead.plan is None
        assert isinstance(ahead.plan_error, dcpack.CapacityError), ahead.plan_error
        assert lost == 1 and len(caught) == 1 and issubclass(caught[0].category, RuntimeWarning)
        assert "not planned ahead" in str(caught[0].message) and "CapacityError" in str(caught[0].message)


def test_a_negative_length_is_not_taken_for_an_end_of_data():
    """Only the read-ahead's own marker is negative: a sample whose padded length is negative gathers none."""
    cfg = config()
    cluster = dcpack.InprocCluster(cfg, timeout_ms=TIMEOUT_MS)

    def rank(w):
        reader = dm._ReadAhead(dcpack.Planner(cfg), cluster.data_parallel(w),
                               (lambda items: np.array([-64], dtype=np.int32)) if w == 1 else lengths_of)
        ahead = reader.read(source(w, 1), 2)
        ahead.join()
        return ahead

    for ahead in cluster.run(rank):
        assert not ahead.missing and ahead.plan is not None  # rank 1 gathered no lengths: its conversion raises


# ---------------------------------------------------------------------------------------------------------
# DataPath itself (needs torch)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("plan_ahead", [True, False], ids=["plan_ahead", "no_plan_ahead"])
def test_datapath_stops_every_rank_at_once_when_one_dp_rank_ends_early(plan_ahead):
    """DP 2 x TP 2 on the host: DP rank 1's iterator holds 2 global batches, DP rank 0's 3.  The third call
    raises at once on every rank.  With plan_ahead: StopIteration on both data ranks (the peer's names DP
    rank 1), and no plan was lost.  Without: StopIteration on DP rank 1, which steps without input, so DP
    rank 0 raises the step's agreed NullPointerError saying why.  The TP ranks that receive raise that
    NullPointerError either way."""
    torch = pytest.importorskip("torch", reason="torch is not installed: DataPath not run")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from megatron_harness import Batch, Layout, drain, megatron_config

    layout = Layout(2, 1, 2)
    m = 8192
    cfg = megatron_config(layout, "dp_balanced", m, alignment=64)
    data = [Batch("mlmdefault_n256_seed1.txt", 64, m, 4, seed=k + 1) for k in range(3)]
    tokens = max(sum(b.lengths()) for b in data)
    dconfig = dm.config_from_megatron(cfg, max_sequences=1024, max_tokens_per_rank=tokens + 64 * 128 * 2 + 4096)
    cluster = dcpack.InprocCluster(dconfig, timeout_ms=TIMEOUT_MS)

    def rank(w):
        args = cluster.args(w)
        dpxcp, _, _ = cluster.coordinates(w)
        path = dm.DataPath(dconfig, args, plan_ahead=plan_ahead, data_parallel=cluster.data_parallel(w))
        batches = data if dpxcp == 0 else data[:2]
        per_step = [b.items(dpxcp, 2) for b in batches]
        count = len(per_step[0])
        it = iter([item for items in per_step for item in items]) if args.holds_data else None
        times = []
        for _ in range(3):
            t0 = time.monotonic()
            try:
                iters, _, _, _ = path.wrap_data_iterator(it, cfg, count)
            except BaseException as e:  # noqa: BLE001 - the end
                times.append(time.monotonic() - t0)
                return args.holds_data, dpxcp, times, e, getattr(path, "plan_ahead_lost", None)
            drain(iters)
            times.append(time.monotonic() - t0)
        return args.holds_data, dpxcp, times, None, getattr(path, "plan_ahead_lost", None)

    for w, r in enumerate(cluster.run(rank, return_exceptions=True)):
        assert not isinstance(r, BaseException), f"rank {w}: {r!r}"
        holds, dp_rank, times, error, lost = r
        assert len(times) == 3 and max(times) < FAST, f"rank {w}: calls took {times}"
        if holds and (plan_ahead or dp_rank == 1):
            assert isinstance(error, StopIteration), f"rank {w}: {error!r}"
        else:
            assert isinstance(error, dcpack.NullPointerError), f"rank {w}: {error!r}"
            assert "global batch is missing" in str(error), f"rank {w}: {error!r}"
        assert lost == 0
