"""bench/training/bench_train_step.py's step composition equals dcpack's own step models when fed the model's costs."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("torch", reason="bench_train_step needs torch")

import dcpack  # noqa: E402
from conftest import SOURCE, read_trace  # noqa: E402

TRAINING = SOURCE / "bench" / "training"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_train_step", TRAINING / "bench_train_step.py")
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


# ---- the rows and tools of part 3's replay grid (verl_kk, balanced+cal, cells, the report) ----------------

import json  # noqa: E402
import os  # noqa: E402

VERL = os.environ.get("DCPACK_VERL_DIR", "/work/ref/verl")


def _verl_or_skip():
    if not os.path.isfile(os.path.join(VERL, "verl", "utils", "seqlen_balancing.py")):
        pytest.skip(f"no verl checkout at {VERL} (set DCPACK_VERL_DIR)")
    return _bench().load_verl_kk(VERL)


def test_batches_hold_a_multiple_of_the_ranks_and_fit_the_cap():
    bench = _bench()
    for n, m in ((8, 8192), (16, 2048), (64, 32768)):
        for b in bench.batches_of("pareto_n4096_seed1.txt", n, m, 2, 2 * m):
            assert len(b) % n == 0
            assert sum(b) >= 2 * m * n
            assert max(b) <= n * m and all(v % (2 * n) == 0 for v in b)


def test_trace_path_names_the_missing_trace():
    with pytest.raises(FileNotFoundError, match="no_such_trace.txt"):
        _bench().trace_path("no_such_trace.txt")


@pytest.mark.parametrize("n,m,trace", [(8, 8192, "mlmdefault_n4096_seed1.txt"), (16, 32768, "uniform32k_n4096_seed1.txt")])
def test_verl_rows_place_every_sequence_once_and_fields_match(n, m, trace):
    bench = _bench()
    plan_fn, _ = _verl_or_skip()
    lengths = bench.batches_of(trace, n, m, 1, 2 * m)[0]
    plan = plan_fn(lengths, n, m)
    assert plan.num_ranks == n
    placed = sorted(i for mb in plan.ids for ids in mb for i in ids)
    assert placed == list(range(len(lengths)))
    # equal-count DP partitions (verl's _balance_batch, equal_size=True)
    per_rank = [sum(len(plan.ids[mi][r]) for mi in range(plan.num_microbatches)) for r in range(n)]
    assert len(set(per_rank)) == 1
    mbs = bench.verl_microbatches(plan, lengths, seed=0, vocab=97)
    for r in range(n):
        for mi, d in enumerate(mbs[r]):
            ls = [lengths[i] for i in plan.ids[mi][r]]
            assert list(np.diff(d["cu_seqlens"])) == ls and len(d["tokens"]) == sum(ls)
            assert list(d["cu_seqlens_padded"]) == list(d["cu_seqlens"])
            starts = np.flatnonzero(d["position_ids"] == 0)
            assert list(starts) == list(d["cu_seqlens"][:-1])
            assert d["max_seqlen"] == max(ls, default=0) and d["local_cp_size"] == 1


def test_verl_prediction_equals_bench_vs_verl_makespan():
    """compose(model_times) of verl's plan = bench_vs_verl's own (independent) makespan formula."""
    import sys
    bench = _bench()
    plan_fn, _ = _verl_or_skip()
    sys.path.insert(0, str(SOURCE / "bench" / "planners"))
    import bench_vs_verl as bv
    n, m = 8, 8192
    lengths = bench.batches_of("mlmdefault_n4096_seed1.txt", n, m, 1, 2 * m)[0]
    plan = plan_fn(lengths, n, m)
    model = dcpack.CostModel()
    got = bench.compose(plan, bench.model_times(plan, lengths, model))["barrier"]
    want = bv.CostModel({"quadratic": model.quadratic, "linear": model.linear, "round_latency": model.round_latency,
                         "microbatch_overhead": model.microbatch_overhead,
                         "kv": {str(1 << k): v for k, v in enumerate(model.kv)}}).makespan(plan.ids, lengths)
    assert got == want


PROFILE = """# a calibrated-style profile, picoseconds
time_unit_ps = 1
quadratic = 88
linear = 2130000
round_latency = 20000000
microbatch_overhead = 9000000000
kv.2 = 300000
kv.4+ = 400000
step_model = dependency
"""


def test_cost_profile_is_read_with_its_time_unit(tmp_path):
    bench = _bench()
    p = tmp_path / "cal.profile"
    p.write_text(PROFILE)
    model, unit = bench.load_cost_profile(str(p))
    assert unit == 1
    assert (model.quadratic, model.linear, model.round_latency, model.microbatch_overhead) == \
        (88, 2130000, 20000000, 9000000000)
    assert model.kv[1] == 300000 and all(v == 400000 for v in model.kv[2:])
    assert model.step_model == "dependency"
    p.write_text(PROFILE + "kv.3 = 5\n")
    with pytest.raises(ValueError, match=r"cal.profile:10: kv.3"):
        bench.load_cost_profile(str(p))


def test_calibrated_plans_differ_from_the_default_where_the_model_does(tmp_path):
    """A profile equal to the default model plans the same; the calibrated one (overhead 4 orders larger)
    plans fewer microbatches somewhere and never a worse makespan under its own model."""
    bench = _bench()
    d = dcpack.CostModel()
    same = tmp_path / "default.profile"
    same.write_text(f"quadratic = {d.quadratic}\nlinear = {d.linear}\nround_latency = {d.round_latency}\n"
                    f"microbatch_overhead = {d.microbatch_overhead}\n"
                    + "".join(f"kv.{1 << k} = {d.kv[k]}\n" for k in range(1, len(d.kv))))
    cal = tmp_path / "cal.profile"
    cal.write_text(PROFILE.replace("step_model = dependency", "step_model = barrier"))
    differ = 0
    for trace in ("mlmdefault_n4096_seed1.txt", "longsft_n4096_seed1.txt", "pareto_n4096_seed1.txt"):
        n, m = 16, 8192
        lengths = bench.batches_of(trace, n, m, 1, 2 * m)[0]
        plans = {}
        for name, path in (("default", None), ("same", same), ("cal", cal)):
            cost = bench.load_cost_profile(str(path))[0] if path else None
            config = bench.dcpack_config("balanced", n, m, len(lengths), lengths, cost=cost)
            plans[name] = dcpack.Planner(config).plan(lengths).copy()
        ids = {k: [[list(g[2]) for g in p.groups(mi)] for mi in range(p.num_microbatches)] for k, p in plans.items()}
        assert ids["same"] == ids["default"]
        calm = bench.load_cost_profile(str(cal))[0]
        mk = {k: bench.compose(p, bench.model_times(p, lengths, calm))["barrier"] for k, p in plans.items()}
        assert mk["cal"] <= mk["default"]
        differ += ids["cal"] != ids["default"]
    assert differ >= 1


def test_replay_memo_times_each_shape_once():
    """A static CP group's ranks share one shape: with the memo, one timing per distinct shape."""
    import torch
    from dcpack.thd import ModelConfig, THDTransformer
    bench = _bench()
    n, m = 4, 256
    lengths = bench.batches_of("longsft_n4096_seed1.txt", n, m, 1, 512)[0]
    config = bench.dcpack_config("dp_balanced", n, m, len(lengths), lengths)
    plan, mbs = bench.step_all_ranks(config, lengths, seed=0, vocab=64)
    mc = ModelConfig(vocab_size=64, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64, dtype=torch.float32)
    model = THDTransformer(mc, torch.device("cpu"))
    shapes = {(int(d["local_cp_size"]), tuple(int(x) for x in d["cu_seqlens_padded"]), len(d["tokens"]))
              for r in mbs for d in r if len(d["tokens"])}
    memo = {}
    got = bench.replay(model, mc, plan, mbs, "zigzag", torch.device("cpu"), None, 1, memo, 0)
    # the memo holds a rank's whole list of shapes: ranks of a static CP group share one list
    lists = {tuple((int(d["local_cp_size"]), tuple(int(x) for x in d["cu_seqlens_padded"]), len(d["tokens"]))
                   for d in r if len(d["tokens"])) for r in mbs}
    assert got["timed"] == len(lists) == len([k for k in memo if isinstance(k, tuple) and k[0] == "rank"])
    assert config.context_parallel_size > 1 and len(lists) < len(mbs) and len(shapes) < sum(len(r) for r in mbs)
    again = bench.replay(model, mc, plan, mbs, "zigzag", torch.device("cpu"), None, 1, memo, 0)
    assert again["timed"] == 0 and again["microbatch_times_s"] == got["microbatch_times_s"]


def _report():
    spec = importlib.util.spec_from_file_location("train_step_report", TRAINING / "train_step_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_report_of_the_16_rank_replay_gives_the_logged_changes():
    """bench/data/replay16_h200_2026-11-28.json: balanced -6.2 / -7.6 / -4.3% (docs/benchmarks-log.md)."""
    rep = _report()
    result = json.loads((SOURCE / "bench" / "data" / "replay16_h200_2026-11-28.json").read_text())
    ch = {c[0].split("_n")[0]: round(b * 100, 1) for c, b, _ in rep.changes(result, "balanced")}
    assert ch == {"longsft": -6.2, "bimodal": -7.6, "uniform32k": -4.3}
    md = rep.markdown(result)
    assert "| longsft | 8192 | 16 | balanced | 1 | 3 | 129.7 / 129.7 | 2,025,201 | -6.2% / -6.2% | 1.43e+09 | -8.4% |" in md
    assert "| bimodal | 8192 | 16 | -7.6% / -7.6% |" in md
    assert "`balanced`: -7.6% to -4.3% (barrier); slower in 0 of 3 cells." in md


def test_verl_microbatches_train_as_dcpacks_do():
    """The same sequences and tokens packed by verl and by dcpack (CP 1): the model's summed loss is equal
    (fp32, math kernel; 1e-5 relative: only the summation order differs), and replay times verl's plan."""
    import torch
    from dcpack.thd import ModelConfig, THDBatch, THDTransformer, loss_sum
    bench = _bench()
    plan_fn, _ = _verl_or_skip()
    n, m = 4, 256
    lengths = [int(v) for v in np.random.default_rng(3).integers(1, 24, size=24) * 8]
    plan = plan_fn(lengths, n, m)
    vm = bench.verl_microbatches(plan, lengths, seed=5, vocab=64)
    config = bench.dcpack_config("dynamic_cp", n, m, len(lengths), lengths)
    _, dm = bench.step_all_ranks(config, lengths, seed=5, vocab=64)
    mc = ModelConfig(vocab_size=64, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64, dtype=torch.float32,
                     attention="math")
    model = THDTransformer(mc, torch.device("cpu"))

    def total(mbs):
        with torch.no_grad():
            return sum(float(loss_sum(model, THDBatch.from_fields(**d))) for r in mbs for d in r if len(d["tokens"]))
    assert all(int(d["local_cp_size"]) == 1 for r in dm for d in r)
    got, want = total(vm), total(dm)
    assert abs(got - want) <= 1e-5 * abs(want)
    res = bench.replay(model, mc, plan, vm, "zigzag", torch.device("cpu"), None, 1, {}, 0)
    assert len(res["microbatch_times_s"]) == n and res["composed_barrier_s"] > 0


def test_the_one_gpu_script_runs_end_to_end_tiny(tmp_path):
    """bench/training/train_replay_gpu.sh with TINY=1 (a tiny model, M / 32, no build) on the grid's first cell:
    the rows of every scheduler, the calibrated predictions, the report written.  One cell and a budget far
    above its rows' time, so a loaded machine (the sanitizer job's) cannot cut it; the budget's own stop is
    the next two tests'."""
    import subprocess
    import sys
    prof = tmp_path / "cal.profile"
    prof.write_text(PROFILE)
    verl = VERL if os.path.isdir(VERL) else str(tmp_path / "no-verl")
    env = dict(os.environ, TINY="1", BUDGET="400", ROW_S="100", BATCHES="1", REPS="1",
               CELLS="longsft_n4096_seed1.txt:256:16:512",
               SCHEDULERS="dp_balanced,dynamic_cp,balanced,balanced+cal,verl_kk", PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(TRAINING / "train_replay_gpu.sh"), str(out), str(prof), verl],
                       env=env, capture_output=True, text=True, timeout=420)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "replay.json").read_text())
    assert [row["scheduler"] for row in result["rows"]] == ["dp_balanced", "dynamic_cp", "balanced", "balanced+cal",
                                                            "verl_kk"]
    assert {(row["trace"], row["ranks"], row["max_seqlen_per_rank"], row["tokens_per_rank_target"])
            for row in result["rows"]} == {("longsft_n4096_seed1.txt", 16, 256, 512)}
    assert all("composed_barrier_s" in row and "predicted_cal_barrier_ms" in row for row in result["rows"][:4])
    assert "skipped" in result["rows"][4]
    assert "time_limit_reached" not in result
    md = (out / "replay.md").read_text()
    assert "| longsft | 256 | 16 | balanced+cal |" in md and "Against `dynamic_cp`" in md
    summary = (out / "replay_summary.txt").read_text()
    assert "bench: exit 0" in summary, summary


def test_the_replay_starts_no_row_past_its_time_limit(tmp_path):
    """bench_train_step.py --time-limit: past the limit no new row starts, and the result says after how many of
    how many rows it stopped (a limit already spent when the first row would start: none of them)."""
    import subprocess
    import sys
    out = tmp_path / "replay.json"
    r = subprocess.run([sys.executable, str(TRAINING / "bench_train_step.py"), "--replay", "8",
                        "--cells", "longsft_n4096_seed1.txt:256:16:512,pareto_n4096_seed1.txt:256:8:512",
                        "--schedulers", "dynamic_cp,balanced", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                        "--ffn", "128", "--vocab", "256", "--replay-steps", "1", "--reps", "1",
                        "--time-limit", "1e-9", "--out", str(out)],
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert result["rows"] == []
    assert result["time_limit_reached"].startswith("after 0 of 4 rows"), result["time_limit_reached"]


def test_the_one_gpu_script_notes_a_bench_its_timeout_stopped(tmp_path):
    """A row that outlasts ROW_S is stopped by the script's timeout: the rows written so far stay, replay.json
    says it was stopped, the script ends 0; a bench that fails otherwise ends the script with its status."""
    import subprocess
    import sys
    fake = tmp_path / "python"
    # bench_train_step.py writes one row and hangs (or fails); everything else is the real interpreter
    fake.write_text(f"""#!/bin/bash
if [[ "$1" == *bench_train_step.py ]]; then
  out=""; prev=""
  for a in "$@"; do [ "$prev" = --out ] && out="$a"; prev="$a"; done
  echo '{{"mode": "replay", "rows": [{{"trace": "t", "scheduler": "dynamic_cp"}}]}}' > "$out"
  [ "$FAKE_FAIL" = 1 ] && exit 3
  exec sleep 60
fi
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    for fail, want in (("0", 0), ("1", 3)):
        env = dict(os.environ, TINY="1", BUDGET="6", ROW_S="1", PYTHON=str(fake), FAKE_FAIL=fail)
        out = tmp_path / f"out{fail}"
        r = subprocess.run(["bash", str(TRAINING / "train_replay_gpu.sh"), str(out), str(tmp_path / "none"),
                            str(tmp_path / "no-verl")], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == want, r.stdout + r.stderr
        result = json.loads((out / "replay.json").read_text())
        assert [row["scheduler"] for row in result["rows"]] == ["dynamic_cp"]
        if fail == "0":
            assert "stopped by the" in result["time_limit_reached"] and "after 1 rows" in result["time_limit_reached"]
            assert "bench: stopped by its timeout" in r.stdout
        else:
            assert "time_limit_reached" not in result and "bench: exit 3" in r.stdout


def test_the_one_gpu_script_refuses_a_budget_with_no_room_for_a_row(tmp_path):
    """A BUDGET that cannot fit one row of ROW_S seconds is refused with the reason, not an empty report."""
    import subprocess
    env = dict(os.environ, TINY="1", BUDGET="40", ROW_S="60")
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(TRAINING / "train_replay_gpu.sh"), str(out), str(tmp_path / "none"),
                        str(tmp_path / "no-verl")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "BUDGET 40 s leaves no time for a row of ROW_S 60 s" in r.stdout
    assert not (out / "replay.json").exists()


# ---- the pipeline composition (--pp) -------------------------------------------------------------------

def test_pipeline_of_composes_a_replays_split_times_by_hand():
    """bench_train_step.pipeline_of on synthetic split times (test_replay_pipeline.py's 1F1B case: 23, plus the
    gradient all-reduce), per pass too."""
    bench = _bench()
    plan = bench.ListPlan([[[0], [1]], [[2], [3]]])   # two microbatches, each on ranks 0 and 1 (CP 1)

    def t(f, b, ff, fb, lf, lb):
        return dict(forward=f, backward=b, first_forward=ff, first_backward=fb, last_forward=lf, last_backward=lb)
    parts = [[t(4, 6, 1, 1, 2, 1), t(2, 4, 1, 1, 2, 2)], [t(3, 8, 0.5, 1, 1, 2), t(1, 3, 1, 1, 1, 1)]]
    comp = {"rank_parts_s": parts, "rank_parts_passes_s": [parts, parts], "grad_allreduce_s": 0.5}
    got = bench.pipeline_of(plan, comp, 2, 1, 0)
    assert got["composed_pipeline_s"] == 23.5 and got["composed_pipeline_passes_s"] == [23.5, 23.5]
    assert got["composed_microbatch_sum_s"] == 30


def test_the_marked_forward_backward_is_forward_backward():
    """The split timing's forward and backward compute dcpack.thd.forward_backward's loss and gradients,
    and mark six intervals per microbatch."""
    import torch
    from dcpack.thd import ModelConfig, THDBatch, THDTransformer, forward_backward
    bench = _bench()
    n, m = 2, 256
    lengths = bench.batches_of("longsft_n4096_seed1.txt", n, m, 1, 256)[0]
    config = bench.dcpack_config("dynamic_cp", n, m, len(lengths), lengths)
    _, mbs = bench.step_all_ranks(config, lengths, seed=0, vocab=64)
    mc = ModelConfig(vocab_size=64, hidden=32, layers=2, heads=2, kv_heads=1, ffn=64, dtype=torch.float32,
                     attention="math")
    batch = THDBatch.from_fields(group=bench.LOCAL_REPLAY, **mbs[0][0])
    model = THDTransformer(mc, torch.device("cpu"))
    want = forward_backward(model, batch, 3.0)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    marks = []
    got = bench.forward_backward_marked(model, batch, 3.0, lambda: marks.append(1))
    assert len(marks) == 5 and float(got) == float(want)
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))
    per, walls = bench.time_rank(model, [batch, batch], 3.0, 2, 0, split=True)
    assert len(per) == 2 and len(walls) == 2 and all(len(ts) == 2 for ts in per)
    assert all(set(d) == set(bench.MARKED) and all(v >= 0 for v in d.values()) for ts in per for d in ts)
    # the same timer unsplit: one time per microbatch and pass, as the plain replay reads it
    for synced in (False, True):
        plain, _ = bench.time_rank(model, [batch, batch, batch], 3.0, 3, 1, synced=synced)
        assert len(plain) == 3 and all(len(ts) == 3 and all(isinstance(t, float) and t > 0 for t in ts)
                                       for ts in plain)


def test_the_replay_composes_a_pipeline_end_to_end_tiny(tmp_path):
    """--replay --pp 2 --vpp 1,2 on one tiny cell: pipeline rows with the composed step (per pass), the
    microbatch sum, the planner's predicted pipeline makespans (seconds under the profile), the cells'
    changes against dynamic_cp; the plain rows' keys unchanged (--pp 1)."""
    import subprocess
    import sys
    prof = tmp_path / "cal.profile"
    # a small-microbatch hinge that binds in every group (M 256 < knee): the planner's own pipeline
    # makespan charges it, so the bench's prediction from the same profile must too
    prof.write_text(PROFILE + "small_knee = 4096\nsmall_slope = 1000000\n")
    out = tmp_path / "replay.json"
    r = subprocess.run([sys.executable, str(TRAINING / "bench_train_step.py"), "--replay", "8",
                        "--cells", "longsft_n4096_seed1.txt:256:8:512", "--pp", "1,2", "--vpp", "1,2",
                        "--schedulers", "dynamic_cp,balanced+cal", "--cost-profile", str(prof),
                        "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "256",
                        "--replay-steps", "1", "--reps", "2", "--out", str(out)],
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    plain = [row for row in result["rows"] if "pp" not in row]
    pipe = [row for row in result["rows"] if "pp" in row]
    assert len(plain) == 2 and len(pipe) == 4
    assert all("composed_barrier_s" in row and "composed_pipeline_s" not in row for row in plain)
    for row in pipe:
        assert row["pp"] == 2 and row["composed_pipeline_s"] > 0, row
        assert 0 < row["composed_pipeline_s"] < row["composed_microbatch_sum_s"] + 1e-9
        assert len(row["batches"][0]["composed_pipeline_passes_s"]) == 2
        assert all(x is not None and x > 0 for x in row["predicted_cal_pipeline_s"])
        if row["scheduler"] == "balanced+cal":   # its own plan's stats are the profile's model: the same number
            assert row["predicted_pipeline_makespan"] == row["predicted_cal_pipeline"]
    assert {(c["pp"], c["vpp"]) for c in result["pipeline_cells"]} == {(2, 1), (2, 2)}
    assert all("pp" not in c for c in result["cells"])
    assert "Pipeline step (composed" in r.stdout
