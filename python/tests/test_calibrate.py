"""dcpack.calibrate's pure parts: the fit on synthetic measurements, the step composition against the
C library's makespans, and the profile format against the `dcpack cost` program."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

import dcpack
from dcpack import calibrate as cal

# A Llama-8B-layer-like model in picoseconds (issue 31's first look: 87.5 ps per token pair,
# 2.13 us per token), with CP terms of the size an H200 pair shows.
TRUE = dcpack.CostModel(quadratic=88, linear=2_130_000, kv=(0,) + (1_900_000,) * 16, round_latency=150_000_000,
                        microbatch_overhead=700_000_000)


def grid(cps=(1, 2), tokens=(4096, 8192, 16384, 32768)):
    """The calibration grid: every length mix at every token count per rank, on every CP size."""
    out = []
    for cp in cps:
        for t in tokens:
            for name, lengths in cal.length_mixes(t * cp):
                out.append(cal.Sample(cp=cp, lengths=lengths, time_ps=0.0, label=f"cp{cp} {t} {name}"))
    return out


def measured(model, samples, noise=0.0, extra=None, seed=0):
    """Samples timed by `model` (exactly dcp_cost), times (1 + noise * N(0, 1)), plus extra(sample)."""
    rng = random.Random(seed)
    out = []
    for s in samples:
        t = cal.predict(model, s) * (1 + noise * rng.gauss(0, 1)) + (extra(s) if extra else 0)
        out.append(dataclasses.replace(s, time_ps=t))
    return out


def test_length_mixes_pack_exactly_and_vary_s2():
    for t in (4096, 8192, 32768, 65536):
        mixes = cal.length_mixes(t)
        assert all(sum(ls) == t and min(ls) >= 64 and all(s % 64 == 0 for s in ls) for _, ls in mixes)
        sq = [sum(s * s for s in ls) for _, ls in mixes]
        assert max(sq) >= 16 * min(sq) * 0.99, sq  # s^2 and s are far from collinear
    # too few tokens for the finer mixes: those are left out, never a length below the granule
    assert [name for name, _ in cal.length_mixes(256)] == ["1x", "2x", "4x"]
    assert all(sum(ls) == 256 for _, ls in cal.length_mixes(256))
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.length_mixes(100)


def test_exact_data_recovers_the_model():
    """Noise-free times of a known model: every coefficient back within rounding."""
    fit = cal.fit_cost_model(measured(TRUE, grid()))
    m = fit.model
    assert abs(m.quadratic - TRUE.quadratic) <= 1, m
    assert abs(m.linear - TRUE.linear) <= TRUE.linear * 1e-4, m
    assert abs(m.kv[1] - TRUE.kv[1]) <= TRUE.kv[1] * 1e-3, m
    assert abs(m.round_latency - TRUE.round_latency) <= TRUE.round_latency * 1e-3, m
    assert abs(m.microbatch_overhead - TRUE.microbatch_overhead) <= TRUE.microbatch_overhead * 1e-3, m
    assert fit.worst_error < 2e-3, fit.errors
    # kv of unmeasured CP sizes: the largest measured size's
    assert m.kv[0] == 0 and all(k == m.kv[1] for k in m.kv[1:])
    # both branches of the exposed-KV term are present in this grid (so the fit had to find them)
    assert 0 < fit.exposed[2] < sum(len(s.lengths) for s in grid() if s.cp == 2)


def test_noisy_data_recovers_the_model():
    """2% noise per microbatch: coefficients within a few percent, errors at the noise level."""
    fit = cal.fit_cost_model(measured(TRUE, grid(), noise=0.02, seed=3))
    m = fit.model
    assert abs(m.quadratic - TRUE.quadratic) <= 0.05 * TRUE.quadratic, m
    assert abs(m.linear - TRUE.linear) <= 0.05 * TRUE.linear, m
    assert abs(m.kv[1] - TRUE.kv[1]) <= 0.15 * TRUE.kv[1], m
    assert fit.median_error < 0.03 and fit.worst_error < 0.08, (fit.median_error, fit.worst_error)


def test_cp1_only_fits_the_cp1_terms_and_leaves_cp_terms_zero():
    fit = cal.fit_cost_model(measured(TRUE, grid(cps=(1,))))
    assert abs(fit.model.quadratic - 88) <= 1 and fit.model.round_latency == 0 and not any(fit.model.kv)
    assert fit.cp_sizes == (1,)


def test_a_planted_wrong_term_is_detected():
    """Times with a term the model lacks (attention not split over CP; a cubic term) fit badly:
    the worst error is far above what noise alone gives."""
    not_split = measured(TRUE, grid(), extra=lambda s: 88 * sum(x * x for x in s.lengths) * (s.cp - 1) / s.cp)
    assert cal.fit_cost_model(not_split).worst_error > 0.10
    cubic = measured(TRUE, grid(), extra=lambda s: sum(x ** 3 for x in s.lengths) * 2e-3 / s.cp)
    assert cal.fit_cost_model(cubic).worst_error > 0.10
    # the same grid without a planted term stays under 1%
    assert cal.fit_cost_model(measured(TRUE, grid(), noise=0.002)).worst_error < 0.01


def test_predict_is_dcp_cost_plus_overhead():
    s = cal.Sample(cp=2, lengths=(1000, 30000, 64), time_ps=1.0)
    assert cal.predict(TRUE, s) == TRUE.microbatch_overhead + sum(dcpack.cost(x, 2, TRUE) for x in s.lengths)


def test_nnls_matches_a_brute_force_optimum():
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = rng.normal(size=(12, 4))
        b = rng.normal(size=12)
        x = cal.nnls(a, b)
        assert np.all(x >= 0)
        # KKT: the gradient vanishes on positive coefficients, points away on zero ones
        g = a.T @ (a @ x - b)
        assert np.all(np.abs(g[x > 0]) < 1e-8) and np.all(g[x == 0] > -1e-8), (x, g)


def test_fit_rejects_bad_samples():
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.fit_cost_model([])
    with pytest.raises(dcpack.InvalidArgumentError, match="bad sample"):
        cal.fit_cost_model([cal.Sample(cp=3, lengths=(10,), time_ps=1.0)])
    with pytest.raises(dcpack.InvalidArgumentError, match="bad sample"):
        cal.fit_cost_model([cal.Sample(cp=1, lengths=(10,), time_ps=0.0)])


# --------------------------------------------------------------------------
# Step composition against the C library's statistics
# --------------------------------------------------------------------------

MODELS = [
    dcpack.CostModel(),
    TRUE,
    dcpack.CostModel(quadratic=3, linear=10_000, kv=(0,) + (900,) * 3 + (40_000,) * 13, round_latency=7_000_000,
                     microbatch_overhead=123_456_789),
]


@pytest.mark.parametrize("model_index", range(len(MODELS)))
@pytest.mark.parametrize("scheduler", ["dp_balanced", "dynamic_cp", "balanced"])
@pytest.mark.parametrize("step_model", ["barrier", "dependency"])
def test_composed_step_equals_the_library_makespans(model_index, scheduler, step_model):
    """Fed the model's own group costs, compose_step gives exactly dcp_plan_stats' two makespans."""
    model = dataclasses.replace(MODELS[model_index], step_model=step_model)
    rng = np.random.default_rng(7 + model_index)
    checked = 0
    for ranks, m_per_rank in ((4, 8192), (8, 4096), (16, 16384)):
        lengths = np.minimum(rng.lognormal(7.5, 1.2, size=6 * ranks).astype(np.int64) + 1, ranks * m_per_rank)
        cfg = dcpack.Config(scheduler=scheduler, data_parallel_size=ranks, max_seqlen_per_rank=m_per_rank,
                            max_sequences=len(lengths), cost=model)
        if scheduler == "dp_balanced":
            cp = 1
            while cp * m_per_rank < lengths.max():
                cp *= 2
            cfg = cfg.replace(data_parallel_size=ranks // cp, context_parallel_size=cp)
        with dcpack.Planner(cfg) as planner:
            plan = planner.plan(lengths)
            stats = plan.stats()
            barrier, dependency = cal.compose_step(cal.plan_groups(plan), cal.model_group_times(plan, lengths, model),
                                                   overhead=model.microbatch_overhead, num_ranks=ranks)
            assert (barrier, dependency) == (stats.makespan, stats.dependency_makespan), (ranks, scheduler)
            assert dependency <= barrier
            checked += 1
    assert checked == 3


def test_compose_step_small_cases_by_hand():
    # two ranks; mb0: rank 0 slow (5), rank 1 fast (1); mb1: rank 0 fast (1), rank 1 slow (5)
    groups = [[(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    times = [[5, 1], [1, 5]]
    assert cal.compose_step(groups, times) == (10, 6)
    assert cal.compose_step(groups, times, overhead=2) == (14, 10)
    # a CP 2 group in mb1 waits for both ranks
    assert cal.compose_step([[(0, 1), (1, 1)], [(0, 2)]], [[5, 1], [3]]) == (8, 8)
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.compose_step([[(0, 2)]], [[1, 2]])
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.compose_step([[(1, 2)]], [[1]], num_ranks=2)


# --------------------------------------------------------------------------
# Profiles
# --------------------------------------------------------------------------

PROFILE = """# calibrated
time_unit_ps = 1
hidden = 8192
quadratic = 88
kv = 700
kv.16+ = 6000
kv.64 = 9000     # one size
round_latency = 250000
microbatch_overhead = 2000000
step_model = dependency
"""


def test_profile_round_trip_and_defaults():
    p = cal.parse_profile(PROFILE)
    assert p.time_unit_ps == 1 and p.cost.linear == 12 * 8192 and p.cost.quadratic == 88
    assert p.cost.kv[1] == 700 and p.cost.kv[4] == 6000 and p.cost.kv[6] == 9000 and p.cost.kv[7] == 6000
    assert p.cost.step_model == "dependency"
    # kv[0] (CP 1) is never used and no profile line names it alone: it keeps the base's value
    again = cal.parse_profile(cal.format_profile(p, ["a comment"]))
    assert again == dataclasses.replace(p, cost=dataclasses.replace(p.cost, kv=(492,) + p.cost.kv[1:]))
    assert cal.parse_profile("").cost == dcpack.CostModel() and cal.parse_profile("").time_unit_ps is None
    assert p.ms(2_000_000_000) == pytest.approx(2.0)
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.parse_profile("quadratic = 2").ms(1)
    # a Config and the Megatron drop-in take the model
    dcpack.Config(cost=p.cost).validate()
    from dcpack import megatron

    sched = megatron.BalancedScheduler(16384, 1, 8, None, cost=p.cost)
    assert sched.config.cost == p.cost


@pytest.mark.parametrize("line, message", [
    ("time_unit_ps = 0", "x:1: time_unit_ps = 0"),
    ("time_unit_ps = -1", "x:1: time_unit_ps = '-1'"),
    ("kv.3 = 5", "x:1: kv.3: the CP size"),
    ("speed = 5", "x:1: unknown key 'speed'"),
    ("step_model = fast", "x:1: step_model = 'fast'"),
    ("quadratic", "x:1: 'quadratic' is not"),
])
def test_profile_errors_name_the_line(line, message):
    with pytest.raises(dcpack.InvalidConfigError, match=message.replace(".", r"\.").replace("'", "'")):
        cal.parse_profile(line, "x")


def _dcpack_program():
    plan_hash = os.environ.get("DCPACK_PLAN_HASH")
    program = Path(plan_hash).parent / "dcpack" if plan_hash else None
    return program if program and program.is_file() else None


def test_profile_reads_as_the_dcpack_program_reads_it(tmp_path):
    program = _dcpack_program()
    if program is None:
        pytest.skip("the dcpack program of this build is not known (DCPACK_PLAN_HASH unset)")
    path = tmp_path / "p.profile"
    path.write_text(PROFILE)
    out = subprocess.run([str(program), "cost", "--profile", str(path), "--format", "json", "--lengths", "100"],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    p = cal.load_profile(str(path))
    m = doc["model"]
    assert doc["time_unit_ps"] == p.time_unit_ps
    assert (m["quadratic"], m["linear"], m["round_latency"], m["microbatch_overhead"], m["step_model"]) == \
        (p.cost.quadratic, p.cost.linear, p.cost.round_latency, p.cost.microbatch_overhead, p.cost.step_model)
    assert [m["kv"][str(1 << k)] for k in range(1, 17)] == list(p.cost.kv[1:])
    # and what format_profile writes, the program loads to the same model
    path.write_text(cal.format_profile(p))
    again = json.loads(subprocess.run([str(program), "cost", "--profile", str(path), "--format", "json"],
                                      capture_output=True, text=True, check=True).stdout)
    assert again["model"] == m and again["time_unit_ps"] == 1
