"""bench/bench_train_step.py's step composition equals dcpack's own step models when fed the model's costs."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("torch", reason="bench_train_step needs torch")

import dcpack  # noqa: E402
from conftest import SOURCE, read_trace  # noqa: E402


def _bench():
    spec = importlib.util.spec_from_file_location("bench_train_step", SOURCE / "bench" / "bench_train_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(scheduler, n, trace):
    """Compose the model's group costs as measured times; True when the two step models differ."""
    bench = _bench()
    m = 8192
    lengths = [int(v) for v in np.minimum(read_trace(trace)[:96], n * m)]
    lengths = [((v + 2 * n - 1) // (2 * n)) * (2 * n) for v in lengths]
    config = bench.dcpack_config(scheduler, n, m, len(lengths), lengths)
    plan = dcpack.Planner(config).plan(lengths).copy()
    st = plan.stats(lengths)
    overhead = config.cost.microbatch_overhead
    times = [[0.0] * plan.num_microbatches for _ in range(n)]
    for mi in range(plan.num_microbatches):
        for first, size, ids in plan.groups(mi):
            c = sum(dcpack.cost(lengths[i], int(size), config.cost) for i in ids) + overhead
            for r in range(int(first), int(first) + int(size)):
                times[r][mi] = float(c)
    got = bench.compose(plan, times)
    assert got["barrier"] == st.makespan
    assert got["dependency"] == st.dependency_makespan
    return st.makespan != st.dependency_makespan


CASES = [("dynamic_cp", 16, "longsft_n256_seed1.txt"), ("balanced", 16, "bimodal_n256_seed1.txt"),
         ("balanced", 8, "uniform32k_n256_seed1.txt"), ("dp_balanced", 8, "mlmdefault_n256_seed1.txt")]


@pytest.mark.parametrize("scheduler,n,trace", CASES)
def test_composition_of_model_costs_is_dcpacks_makespan(scheduler, n, trace):
    _check(scheduler, n, trace)


def test_the_two_step_models_differ_somewhere_in_these_plans():
    """So the dependency half of the composition is really checked, not equal to the barrier by accident."""
    assert any(_check(*c) for c in CASES)
