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
    fit = cal.fit_cost_model(measured(TRUE, grid()), form="ring", knees=(0,))
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
    fit = cal.fit_cost_model(measured(TRUE, grid(), noise=0.02, seed=3), form="ring", knees=(0,))
    m = fit.model
    assert abs(m.quadratic - TRUE.quadratic) <= 0.05 * TRUE.quadratic, m
    assert abs(m.linear - TRUE.linear) <= 0.05 * TRUE.linear, m
    assert abs(m.kv[1] - TRUE.kv[1]) <= 0.15 * TRUE.kv[1], m
    assert fit.median_error < 0.03 and fit.worst_error < 0.08, (fit.median_error, fit.worst_error)


def test_cp1_only_fits_the_cp1_terms_and_leaves_cp_terms_zero():
    fit = cal.fit_cost_model(measured(TRUE, grid(cps=(1,))), form="ring")
    assert abs(fit.model.quadratic - 88) <= 1 and fit.model.round_latency == 0 and not any(fit.model.kv)
    assert fit.cp_sizes == (1,)


def test_a_planted_wrong_term_is_detected():
    """Times with a term the model lacks (attention not split over CP; a cubic term) fit badly:
    the worst error is far above what noise alone gives."""
    not_split = measured(TRUE, grid(), extra=lambda s: 88 * sum(x * x for x in s.lengths) * (s.cp - 1) / s.cp)
    assert cal.fit_cost_model(not_split, form="ring").worst_error > 0.10
    cubic = measured(TRUE, grid(), extra=lambda s: sum(x ** 3 for x in s.lengths) * 2e-3 / s.cp)
    assert cal.fit_cost_model(cubic, form="ring").worst_error > 0.10
    # the same grid without a planted term stays under 1%
    assert cal.fit_cost_model(measured(TRUE, grid(), noise=0.002), form="ring").worst_error < 0.01


def test_predict_is_dcp_cost_plus_overhead():
    s = cal.Sample(cp=2, lengths=(1000, 30000, 64), time_ps=1.0)
    assert cal.predict(TRUE, s) == TRUE.microbatch_overhead + sum(dcpack.cost(x, 2, TRUE) for x in s.lengths)
    for x in (1, 63, 1000, 30000, 1 << 20):
        for cp in (1, 2, 4, 64):
            assert cal.sequence_cost(x, cp, TRUE) == dcpack.cost(x, cp, TRUE), (x, cp)


# --------------------------------------------------------------------------
# The step's terms: an undivided CP gather term, a small-microbatch hinge
# --------------------------------------------------------------------------

def _gather_table(a, b):
    """cp_gather of a ring: a + b (cp-1)/cp per token at every CP size."""
    return (0,) + tuple(int(round(a + b * ((1 << k) - 1) / (1 << k))) for k in range(1, 17))


# One H200's Llama-8B layer with all-gather CP: ~75 ns per token of the group's sequence on every
# rank, 4 ms fixed per microbatch, 1.1 us per token below a 4096-token knee.
GATHER = dcpack.CostModel(quadratic=88, linear=2_950_000, kv=(0,) * 17, cp_gather=_gather_table(40_000, 60_000),
                          round_latency=0, microbatch_overhead=4_000_000_000, small_knee=4096,
                          small_slope=1_100_000)
SMALL = (256, 512, 1024, 2048, 4096, 8192, 16384)


def test_sequence_and_group_cost_by_hand():
    m = dcpack.CostModel(quadratic=2, linear=10, kv=(0,) + (7,) * 16, cp_gather=(0, 3) + (5,) * 15, round_latency=100,
                         microbatch_overhead=0, small_knee=1000, small_slope=4)
    # cp 1: (2*100^2 + 10*100) = 21000; cp 2: (20000 + 1000 + max(0, 7*100*1 - 20000))/2 + 100 + 3*100
    assert cal.sequence_cost(100, 1, m) == 21000
    assert cal.sequence_cost(100, 2, m) == 10500 + 100 + 300
    # exposed branch at cp 4, s = 10: quad 200, kv 7*10*3 = 210 -> +10; (200 + 100 + 10)/4 + 300 + 50
    assert cal.sequence_cost(10, 4, m) == 310 // 4 + 300 + 50
    # the hinge: 2 sequences of 300 on cp 2 -> 300 tokens per rank, 700 short of the knee
    assert cal.group_cost((300, 300), 2, m) == 2 * cal.sequence_cost(300, 2, m) + 4 * 700
    assert cal.group_cost((1000,), 1, m) == cal.sequence_cost(1000, 1, m)       # at the knee: nothing
    big = dataclasses.replace(m, quadratic=1 << 40)
    assert cal.sequence_cost(1 << 20, 1, big) == cal.INT64_MAX                    # saturates
    assert cal.predict(dataclasses.replace(m, microbatch_overhead=cal.INT64_MAX), cal.Sample(1, (5,), 1.0)) == \
        cal.INT64_MAX


def test_library_cost_has_the_gather_term_when_built_with_it():
    """cal.sequence_cost is the form include/dcpack.h documents; where this build's dcp_cost has the
    cp_gather term, both agree exactly."""
    if dcpack.cost(10000, 4, GATHER) == dcpack.cost(10000, 4, dataclasses.replace(GATHER, cp_gather=(0,) * 17)):
        pytest.skip("this build's dcp_cost predates cp_gather")
    for x in (64, 1000, 30000, 1 << 20):
        for cp in (1, 2, 8, 64):
            assert cal.sequence_cost(x, cp, GATHER) == dcpack.cost(x, cp, GATHER), (x, cp)


def gather_grid(cps=(1, 2, 4, 8), tokens=SMALL):
    out = []
    for cp in cps:
        for t in tokens:
            for name, lengths in cal.length_mixes(t * cp, granule=max(64, 2 * cp)):
                out.append(cal.Sample(cp=cp, lengths=lengths, time_ps=0.0, label=f"cp{cp} {t} {name}"))
    return out


def test_gather_fit_recovers_the_hinge_cp_gather_and_overhead():
    fit = cal.fit_cost_model(measured(GATHER, gather_grid()))
    m = fit.model
    assert m.small_knee == GATHER.small_knee, fit.knee_residuals
    assert abs(m.small_slope - GATHER.small_slope) <= GATHER.small_slope * 1e-3, m
    assert abs(m.microbatch_overhead - GATHER.microbatch_overhead) <= GATHER.microbatch_overhead * 1e-3, m
    assert abs(m.quadratic - GATHER.quadratic) <= 1 and abs(m.linear - GATHER.linear) <= GATHER.linear * 1e-3, m
    for k in (1, 2, 3):
        assert abs(m.cp_gather[k] - GATHER.cp_gather[k]) <= GATHER.cp_gather[k] * 1e-3, (k, m.cp_gather)
    assert not any(m.kv) and fit.worst_error < 2e-3
    # CP sizes not measured: extrapolated from 2, 4, 8 along a + b (cp-1)/cp; never 0
    assert all(fit.priced[1 << k] == "extrapolated" for k in range(4, 17))
    for k in range(4, 17):
        assert abs(m.cp_gather[k] - GATHER.cp_gather[k]) <= GATHER.cp_gather[k] * 0.01, (k, m.cp_gather)
    # the margin is the fit's p90 |error|
    assert m.margin_ppm == round(1e6 * fit.p90_error)


def test_gather_fit_with_noise_and_the_margin():
    fit = cal.fit_cost_model(measured(GATHER, gather_grid(), noise=0.01, seed=5))
    m = fit.model
    assert m.small_knee in (3072, 4096, 6144), fit.knee_residuals
    assert abs(m.microbatch_overhead - GATHER.microbatch_overhead) <= 0.1 * GATHER.microbatch_overhead, m
    assert all(abs(m.cp_gather[k] - GATHER.cp_gather[k]) <= 0.25 * GATHER.cp_gather[k] for k in (1, 2, 3)), m
    assert 5_000 < m.margin_ppm < 30_000, m.margin_ppm       # ~1.6 sigma of 1% noise
    table = cal.error_table(fit, measured(GATHER, gather_grid(), noise=0.01, seed=5))
    assert set(table["cp"]) == {"1", "2", "4", "8"}
    assert list(table["size_class"]) == ["< 1K", "1K-4K", "4K-16K", ">= 16K"]
    assert sum(v["count"] for v in table["cp"].values()) == len(fit.errors) == table["all"]["count"]


def test_planted_errors_make_the_gather_fit_fail():
    samples = measured(GATHER, gather_grid())
    # without the hinge the small microbatches cannot be fitted
    assert cal.fit_cost_model(samples, knees=(0,)).worst_error > 0.10
    # without the undivided term (the ring form's kv cannot express it) CP groups are mispredicted
    assert cal.fit_cost_model(samples, form="ring").worst_error > 0.05
    # a term the model lacks (attention not split over the group: per-CP linear terms cannot absorb s^2)
    bad = measured(GATHER, gather_grid(), extra=lambda s: 88 * sum(x * x for x in s.lengths) * (s.cp - 1) / s.cp)
    assert cal.fit_cost_model(bad).worst_error > 0.05
    # and a planted wrong coefficient in the fitted model shows in the errors
    fit = cal.fit_cost_model(samples)
    wrong = dataclasses.replace(fit.model, cp_gather=tuple(2 * g for g in fit.model.cp_gather))
    assert max(abs(e) for e in cal.relative_errors(wrong, samples)) > 0.05


def test_cp1_only_gather_fit_leaves_cp_terms_unpriced_and_says_so():
    fit = cal.fit_cost_model(measured(GATHER, gather_grid(cps=(1,))))
    assert not any(fit.model.cp_gather) and fit.priced == {}


def test_comm_model_recovers_alpha_and_beta():
    alpha, beta, bpt = 30e-6, 2.5e-12, 4096
    rows = [{"tokens_per_rank": n, "bytes_per_rank": n * bpt, "all_gather": (alpha + beta * n * bpt) / 2,
             "reduce_scatter": (alpha + beta * n * bpt) / 2} for n in (256 << i for i in range(10))]
    c = cal.fit_comm_model({"world": 2, "rows": rows})
    assert c.alpha_s == pytest.approx(alpha, rel=1e-6) and c.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert c.bytes_per_token == bpt
    # a ring of 8 moving 1000 tokens per rank: 7 steps of one rank's share, per layer
    assert c.microbatch_s(8, 1000, 2) == pytest.approx(2 * 7 * (alpha + beta * 1000 * bpt))
    assert c.microbatch_s(1, 1000, 2) == 0.0
    with pytest.raises(dcpack.InvalidArgumentError):
        cal.fit_comm_model({"world": 1, "rows": rows})


def test_extrapolate_cp_is_a_ring_share():
    f = cal.extrapolate_cp({2: 10.0 + 5.0 * 0.5, 4: 10.0 + 5.0 * 0.75})
    assert f(64) == pytest.approx(10.0 + 5.0 * 63 / 64)
    assert cal.extrapolate_cp({2: 7.0})(2) == 7.0
    assert cal.extrapolate_cp({2: 7.0})(1024) == pytest.approx(7.0 * 2 * 1023 / 1024)


def test_nnls_matches_a_brute_force_optimum():
    rng = np.random.default_rng(1)
    for trial in range(40):
        a = rng.normal(size=(12, 4 + trial % 6)) * (10.0 ** rng.integers(-6, 7, size=4 + trial % 6))
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


def test_far_off_shapes_are_timed_again_and_the_fit_recovers():
    """Two timings caught 2-3x slow (as two of the H100 calibration's were): the first fit is pulled off by
    them; timed again they come back at the model's time, the refit is exact again, and only they were
    re-timed. A shape slow again stays as timed (it is the shape's own cost)."""
    clean = measured(GATHER, gather_grid())
    slow = {3: 2.4, 11: 3.0}
    first = [dataclasses.replace(s, time_ps=s.time_ps * slow.get(i, 1.0)) for i, s in enumerate(clean)]
    fit = cal.fit_cost_model(first)
    assert fit.worst_error > 0.5 and fit.p90_error > 2e-3
    assert set(cal.far_off(fit)) == set(slow), cal.far_off(fit)
    asked = []

    def again(s):
        asked.append(s.label)
        return next(c for c in clean if c.label == s.label)
    samples, done = cal.retime_far_off(first, fit, again)
    assert sorted(asked) == sorted(first[i].label for i in slow) and len(done) == 2
    assert [d.label for d in done] == [first[i].label for i in sorted(slow, key=lambda i: -abs(fit.errors[i]))]
    assert all(d.first_ps > d.again_ps for d in done) and all(d.first_error < -0.5 for d in done)
    assert [s.time_ps for s in samples] == [s.time_ps for s in clean]
    refit = cal.fit_cost_model(samples)
    assert refit.worst_error < 2e-3 and refit.model.small_knee == GATHER.small_knee
    # slow again: kept as timed, reported
    samples2, done2 = cal.retime_far_off(first, fit, lambda s: s)
    assert [s.time_ps for s in samples2] == [s.time_ps for s in first] and len(done2) == 2
    # most, floor and a clean fit: nothing to re-time
    assert len(cal.far_off(fit, most=1)) == 1
    assert cal.far_off(cal.fit_cost_model(clean)) == []
    assert cal.far_off(fit, floor=10.0) == []
    # a retime that answers with another shape is refused
    with pytest.raises(dcpack.InvalidArgumentError, match="another shape"):
        cal.retime_far_off(first, fit, lambda s: dataclasses.replace(s, cp=s.cp * 2))
