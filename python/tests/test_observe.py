"""Online calibration from Python: Planner.observe / predict / cost_model / save_profile (CPU).

A synthetic machine (a planner holding its true model, in picoseconds) times every microbatch of the
plans a planner that starts from the default model makes; after 12 observed steps the planner must
predict the next batches within 5% (median) and plan balanced no slower than dynamic_cp there.
Over an in-process communicator every rank passes only its own row and all refit to one model.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dcpack
from dcpack import _core

RANKS = 8
M = 8192


def truth_model() -> dcpack.CostModel:
    return dcpack.CostModel(quadratic=300, linear=1_500_000, microbatch_overhead=600_000_000, round_latency=0,
                            kv=(0,) * 17, cp_gather=(0,) + (90_000,) * 16, small_knee=4096, small_slope=800_000)


def config(scheduler="balanced", **kw) -> dcpack.Config:
    return dcpack.Config(data_parallel_size=RANKS, scheduler=scheduler, max_sequences=512, max_seqlen_per_rank=M,
                         max_microbatches=256, **kw)


def batch(rng: np.random.Generator) -> np.ndarray:
    out, tokens = [], 0
    while tokens < RANKS * M * 3:
        c = rng.integers(100)
        s = int(rng.integers(64, 2049) if c < 65 else rng.integers(2049, M + 1) if c < 93 else rng.integers(M + 1, 4 * M + 1))
        out.append(s)
        tokens += s
    return np.array(out, dtype=np.int32)


def measured(truth: dcpack.Planner, plan: dcpack.Plan, rng: np.random.Generator) -> np.ndarray:
    t = truth.predict(plan)
    t = t * (1.0 + rng.uniform(-0.02, 0.02, size=t.shape))
    t[rng.random(t.shape) < 0.02] *= 2.5  # stragglers
    return np.where(truth.predict(plan) > 0, t, 0.0)


def calibrated(steps=12, seed=1):
    rng = np.random.default_rng(seed)
    truth = dcpack.Planner(config("dynamic_cp", cost=truth_model()))
    planner = dcpack.Planner(config())
    for _ in range(steps):
        lengths = batch(rng)
        plan = planner.plan(lengths)
        planner.observe(plan, measured(truth, plan, rng))
    return truth, planner, rng


def test_twelve_steps_predict_within_five_percent_and_balanced_is_no_slower():
    truth, planner, rng = calibrated()
    assert planner.calibration["steps"] == 12
    assert {"quadratic", "linear", "microbatch_overhead", "cp_gather.2"} <= set(planner.calibration["identified"])
    assert planner.calibration["rows_used"] < planner.calibration["rows"]  # stragglers left out
    dynamic = dcpack.Planner(config("dynamic_cp"))
    errors, balanced_s, dynamic_s = [], 0.0, 0.0
    for _ in range(6):
        lengths = batch(rng)
        plan = planner.plan(lengths)
        got, want = planner.predict(plan), truth.predict(plan)
        held = want > 0
        assert ((got > 0) == held).all()
        errors.extend((np.abs(got[held] - want[held]) / want[held]).tolist())
        balanced_s += truth.predict(plan).max(axis=1).sum()
        dplan = dynamic.plan(lengths)
        dynamic_s += truth.predict(dplan).max(axis=1).sum()
    assert np.median(errors) < 0.05, np.median(errors)
    assert balanced_s <= dynamic_s, (balanced_s, dynamic_s)
    model = planner.cost_model
    assert abs(model.quadratic - 300) / 300 < 0.15 and abs(model.linear - 1_500_000) / 1_500_000 < 0.1


def test_the_uncalibrated_default_model_misses_so_the_check_means_something():
    rng = np.random.default_rng(2)
    truth = dcpack.Planner(config("dynamic_cp", cost=truth_model()))
    planner = dcpack.Planner(config())
    plan = planner.plan(batch(rng))
    got, want = planner.predict(plan), truth.predict(plan)
    held = want > 0
    ratio = got[held] / want[held]
    scale = ratio.sum() / (ratio * ratio).sum()
    assert np.median(np.abs(scale * got[held] - want[held]) / want[held]) > 0.05


def test_bad_times_are_refused_and_change_nothing():
    rng = np.random.default_rng(3)
    truth = dcpack.Planner(config("dynamic_cp", cost=truth_model()))
    planner = dcpack.Planner(config())
    plan = planner.plan(batch(rng))
    t = measured(truth, plan, rng)
    before = planner.cost_model
    for value, match in ((np.nan, "DCP_OBSERVE_INVALID"), (-1.0, "negative"), (np.inf, "DCP_OBSERVE_INVALID")):
        bad = t.copy()
        bad[0, 0] = value
        with pytest.raises(dcpack.InvalidArgumentError, match=match):
            planner.observe(plan, bad)
    with pytest.raises(dcpack.InvalidArgumentError, match="shape"):
        planner.observe(plan, t[:, :-1])
    assert planner.cost_model == before and planner.calibration["steps"] == 0
    planner.observe(plan, t)
    assert planner.cost_model != before and planner.calibration["steps"] == 1
    # the plan was made under the model before the refit: not this planner's plan any more
    with pytest.raises(dcpack.InvalidArgumentError, match="not a plan this context stepped"):
        planner.observe(plan, t)
    off = dcpack.Planner(config(), max_observations=0)
    with pytest.raises(dcpack.CapacityError, match="max_observations is 0"):
        p = off.plan(batch(rng))
        off.observe(p, np.ones((p.num_microbatches, RANKS)))


def test_save_profile_writes_what_dcpack_plan_reads(tmp_path):
    _, planner, _ = calibrated(steps=4)
    path = tmp_path / "online.profile"
    planner.save_profile(path, comment="a test")
    text = path.read_text()
    assert text.startswith("# dcpack cost profile") and "time_unit_ps = 1" in text
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        k, v = (x.strip() for x in line.split("=", 1))
        values[k] = v
    m = planner.cost_model
    assert int(values["quadratic"]) == m.quadratic and int(values["linear"]) == m.linear
    assert int(values["microbatch_overhead"]) == m.microbatch_overhead
    assert int(values["cp_gather.2"]) == m.cp_gather[1] and int(values["margin_ppm"]) == m.margin_ppm
    if hasattr(_core, "cost_profile_parse"):
        parsed = _core.cost_profile_parse(text.encode(), str(path))
        parsed_cost = parsed[0] if isinstance(parsed, tuple) else parsed
        assert parsed_cost["quadratic"] == m.quadratic


def test_ranks_refit_to_one_model_from_their_own_rows():
    world = dcpack.InprocWorld(4, timeout_ms=20000)
    cfg = dcpack.Config(data_parallel_size=4, scheduler="balanced", max_sequences=512, max_seqlen_per_rank=M,
                        max_microbatches=256)
    truth = dcpack.Planner(cfg.replace(scheduler="dynamic_cp", cost=truth_model()))
    rng = np.random.default_rng(4)
    planners = [dcpack.Planner(cfg) for _ in range(4)]
    results: dict[int, object] = {}

    def run(step_lengths, rows, bad_rank=None):
        def rank(w):
            try:
                plan = planners[w].plan(step_lengths)
                row = rows[:, w].copy()
                if w == bad_rank:
                    row[0] = np.nan
                planners[w].observe(plan, row, comm=world.comm(w), step_id=1)
                results[w] = planners[w].plan(step_lengths[::-1].copy()).hash()
            except dcpack.Error as e:  # noqa: PERF203
                results[w] = e
        threads = [threading.Thread(target=rank, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def rows_of(lengths):  # what the machine measures of the plan every rank makes (rank 0's, the same)
        return measured(truth, planners[0].plan(lengths), rng)

    for step in range(3):
        lengths = batch(rng)[:120]
        run(lengths, rows_of(lengths))
        assert not any(isinstance(r, Exception) for r in results.values()), results
        assert len({r for r in results.values()}) == 1  # the same next plan on every rank
        assert all(p.cost_model == planners[0].cost_model for p in planners)
    before = planners[0].cost_model
    lengths = batch(rng)[:120]
    run(lengths, rows_of(lengths), bad_rank=2)
    assert all(isinstance(r, dcpack.InvalidArgumentError) for r in results.values()), results
    assert "rank 2" in str(results[0]) and "rank 2" in str(results[2])
    assert all(p.cost_model == before for p in planners)


def test_data_path_calibrates_online_on_every_rank_alike():
    """DataPath(..., calibrate="online") on the host path: every rank observes its own microbatch times,
    agreed over the DPxCP communicator, and all ranks' step contexts hold one refit model."""
    pytest.importorskip("torch", reason="torch is not installed: DataPath not run")
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    import dcpack.megatron as dm
    from megatron_harness import Batch, Layout, drain, megatron_config

    layout = Layout(4, 1, 1, pp=1)
    cfg = megatron_config(layout, "default_dynamic_cp", 8192, alignment=64)
    data = [Batch("longsft_n256_seed1.txt", 128, 16384, 8, seed=k + 1) for k in range(4)]
    tokens = max(sum(b.lengths()) for b in data)
    dconfig = dm.config_from_megatron(cfg, max_sequences=1024, max_tokens_per_rank=tokens + 128 * 128 * 4 + 4096,
                                      scheduler="balanced")
    with pytest.raises(dcpack.InvalidConfigError, match="plan_ahead"):
        dm.DataPath(dconfig, dcpack.InprocCluster(dconfig).args(0), calibrate="online", plan_ahead=True)
    cluster = dcpack.InprocCluster(dconfig, timeout_ms=60000)

    def rank(w):
        args = cluster.args(w)
        path = dm.DataPath(dconfig, args, calibrate="online")
        per_step = [b.items(w, 4) for b in data]
        it = iter([item for items in per_step for item in items])
        seen = []
        for _ in range(len(data)):
            iters, num, _, _ = path.wrap_data_iterator(it, cfg, len(per_step[0]))
            drain(iters)
            seen.append(None if path.last_calibration is None else path.last_calibration["steps"])
        return seen, _core.observe_status(path.stepper._ctx)["cost"]

    results = cluster.run(rank, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    assert [s for s, _ in results][0] == [None, 1, 2, 3]
    assert all(c == results[0][1] for _, c in results)
    assert results[0][1] != dcpack.CostModel()._to_dict()
