"""dcpack.megatron's Level-1 schedulers against Megatron-LM's own scheduling code.

Needs a Megatron-LM checkout named by DCPACK_MEGATRON_DIR (the code dcpack
matches is at commit d48bd6be0a85 of the dev branch); skipped when unset.
megatron_loader.py says exactly which of Megatron's files run.  The schedulers
are compared on generated batches from tests/data/workloads: 8 to 512 DPxCP
ranks, VPP alignment on and off, min_cp_size, max_num_seqs
(thd_max_packed_sequences), static CP sizes 1 to 8.
"""

from __future__ import annotations

import os
import random
import signal

import dcpack
import dcpack.megatron as dm
import pytest
from conftest import read_trace

MEGATRON = os.environ.get("DCPACK_MEGATRON_DIR")
pytestmark = pytest.mark.skipif(
    not MEGATRON, reason="DCPACK_MEGATRON_DIR is not set: Megatron-LM comparison skipped (point it at a checkout)")

TRACES = [f"{family}_n{n}_seed1.txt" for family in ("mlmdefault", "bimodal", "longsft", "uniform32k")
          for n in (256, 1024)]
REFERENCE_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def megatron():
    import megatron_loader

    ds, _ = megatron_loader.load(MEGATRON)
    return ds


def _fits(trace, ranks, m):
    return int(read_trace(trace).max()) <= ranks * m


def dynamic_cases():
    """Mostly batches that fit (the longest sequence within all ranks), a few that do not."""
    rng = random.Random(2024)
    cases = []
    for ranks in (8, 16, 32, 64, 128, 256, 512):
        for vpp in (None, 2, 4):
            for _ in range(3):
                trace = rng.choice(TRACES)
                options = [m for m in (2048, 4096, 8192, 16384) if _fits(trace, ranks, m)] or [16384]
                cases.append(("dynamic", trace, ranks, 1, rng.choice(options), vpp,
                              rng.choice([c for c in (1, 2, 4, 8) if c <= ranks]), rng.choice((None, 4))))
    cases.append(("dynamic", "bimodal_n4096_seed1.txt", 512, 1, 4096, None, 1, None))
    cases.append(("dynamic", "longsft_n4096_seed1.txt", 128, 1, 8192, 4, 2, None))
    cases.append(("dynamic", "longsft_n256_seed1.txt", 8, 1, 2048, None, 1, None))  # too long for all ranks
    return cases


def dp_balanced_cases():
    rng = random.Random(7)
    cases = []
    for ranks in (8, 16, 32, 64, 128, 256, 512):
        for cp in (1, 2, 4, 8):
            for _ in range(2):
                trace = rng.choice(TRACES)
                options = [m for m in (4096, 8192, 16384, 32768, 65536, 131072) if _fits(trace, cp, m)]
                cases.append(("dp_balanced", trace, ranks // cp, cp, rng.choice(options[:3]),
                              rng.choice((None, 1, 2, 4)), 1, rng.choice((None, 2, 5, 16))))
    cases.append(("dp_balanced", "uniform32k_n4096_seed1.txt", 64, 8, 8192, 4, 1, None))
    cases.append(("dp_balanced", "longsft_n256_seed1.txt", 4, 2, 4096, None, 1, None))  # over-long sequences
    return cases


def case_id(c):
    kind, trace, dp, cp, m, vpp, min_cp, cap = c
    return f"{kind}-{trace.split('_seed')[0]}-dp{dp}-cp{cp}-m{m}-vpp{vpp}-mincp{min_cp}-cap{cap}"


class _ReferenceTimeout(Exception):
    pass


def reference_groups(cls, args, kwargs, pairs):
    """Megatron's plan, or the exception it raised, or _ReferenceTimeout when it runs too long."""
    def on_alarm(signum, frame):
        raise _ReferenceTimeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, REFERENCE_TIMEOUT_S)
    try:
        return cls(*args, **kwargs).get_groups_and_subsamples(list(pairs))
    except _ReferenceTimeout as e:
        return e
    except (AssertionError, IndexError, ValueError, ZeroDivisionError) as e:
        return e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("case", dynamic_cases() + dp_balanced_cases(), ids=case_id)
def test_plans_identical_to_megatron(megatron, case):
    kind, trace, dp, cp, m, vpp, min_cp, cap = case
    lengths = read_trace(trace)
    pairs = [(i, int(s)) for i, s in enumerate(lengths)]
    args = (m, cp, dp, vpp)
    if kind == "dynamic":
        ref_cls, ours_cls, kwargs = megatron.DefaultDynamicCPScheduler, dm.DefaultDynamicCPScheduler, \
            dict(max_num_seqs=cap, min_cp_size=min_cp)
    else:
        ref_cls, ours_cls, kwargs = megatron.DpBalancedScheduler, dm.DpBalancedScheduler, dict(max_num_seqs=cap)
    want = reference_groups(ref_cls, args, kwargs, pairs)
    ours = ours_cls(*args, **kwargs)
    if isinstance(want, _ReferenceTimeout):
        pytest.skip(f"Megatron's scheduler ran past {REFERENCE_TIMEOUT_S} s (a reference hang; docs/planning.md, 'Reference bugs')")
    if isinstance(want, Exception):
        # where the reference asserts or crashes, dcpack reports an error (docs/planning.md, "Reference bugs")
        with pytest.raises((dcpack.InfeasibleError, dcpack.BadLengthError)):
            ours.get_groups_and_subsamples(pairs)
        return
    if kind == "dp_balanced" and int(lengths.max()) > m * cp:
        # the reference emits an over-full pack; dcpack rejects the sequence (docs/planning.md, "Reference bugs")
        with pytest.raises(dcpack.BadLengthError):
            ours.get_groups_and_subsamples(pairs)
        return
    got = ours.get_groups_and_subsamples(pairs)
    assert got == want


def test_ids_that_are_not_positions(megatron):
    """Megatron's dynamic scheduler returns the ids of the pairs, dp_balanced their positions: so do ours."""
    lengths = read_trace("mlmdefault_n256_seed1.txt")
    pairs = [(1000 + 3 * i, int(s)) for i, s in enumerate(lengths)]
    for ref_cls, ours_cls in ((megatron.DefaultDynamicCPScheduler, dm.DefaultDynamicCPScheduler),
                              (megatron.DpBalancedScheduler, dm.DpBalancedScheduler)):
        args = (8192, 2, 8, None)
        assert ours_cls(*args).get_groups_and_subsamples(pairs) == ref_cls(*args).get_groups_and_subsamples(pairs)


def test_install_puts_the_schedulers_in_megatrons_map(megatron):
    original = dict(megatron.scheduler_map)
    lengths = read_trace("bimodal_n1024_seed1.txt")
    pairs = [(i, int(s)) for i, s in enumerate(lengths)]
    previous = dm.install(module=megatron)
    try:
        assert issubclass(megatron.scheduler_map["dp_balanced"], dm.DpBalancedScheduler)
        assert issubclass(megatron.scheduler_map["default_dynamic_cp"], dm.DefaultDynamicCPScheduler)
        # constructed the way wrap_data_iterator does
        for name, kwargs in (("dp_balanced", {}), ("default_dynamic_cp", {"min_cp_size": 2})):
            new = megatron.scheduler_map[name](32768, 4, 16, 4, max_num_seqs=None, **kwargs)
            ref = original[name](32768, 4, 16, 4, max_num_seqs=None, **kwargs)
            assert new.get_groups_and_subsamples(pairs) == ref.get_groups_and_subsamples(pairs)
            assert new.get_required_sample_keys() == ref.get_required_sample_keys()
            assert new.is_dynamic_cp == ref.is_dynamic_cp
    finally:
        dm.uninstall(previous, module=megatron)
    assert megatron.scheduler_map == original
    # balanced under Megatron's dynamic-CP name, with a cost model of one's own
    previous = dm.install({"default_dynamic_cp": "balanced"}, module=megatron, cost=dcpack.CostModel(linear=12 * 8192))
    try:
        s = megatron.scheduler_map["default_dynamic_cp"](8192, 4, 16, None, max_num_seqs=None, min_cp_size=1)
        assert isinstance(s, dm.BalancedScheduler) and s.is_dynamic_cp
        groups = s.get_groups_and_subsamples(pairs)
        assert sorted(i for mb in groups for rank in mb for i in rank) != []
        plan = s.last_plan
        plan.validate()
        assert plan.stats().makespan <= dm.DefaultDynamicCPScheduler(8192, 4, 16, None, cost=dcpack.CostModel(
            linear=12 * 8192)).plan(pairs).stats().makespan
    finally:
        dm.uninstall(previous, module=megatron)
    assert megatron.scheduler_map == original
