"""bench/training/pipeline_compose.py: 1F1B and interleaved 1F1B composed from per-microbatch times, exactly
against hand-computed schedules and against dcpack's C pipeline model (PlanStats.pipeline_makespan)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import dcpack
import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "bench" / "training"
sys.path.insert(0, str(TRAINING))
import pipeline_compose as pc  # noqa: E402


def uniform(stages, chunks, f, b, num):
    kv = stages * chunks
    return [[f] * num for _ in range(kv)], [[b] * num for _ in range(kv)]


def test_one_f_one_b_by_hand():
    # 2 stages, 2 microbatches, every op 2: F0 [0,2]/[2,4], B0 [4,6]/[6,8], F1 [2,4]/[6,8], B1 [8,10]/[10,12]
    f, b = uniform(2, 1, 2, 2, 2)
    assert pc.compose(f, b, 2) == 12
    # equal microbatches: (K + P - 1)(f + b)
    for p in (2, 3, 4):
        for k in (1, 4, 7):
            f, b = uniform(p, 1, 1, 2, k)
            assert pc.compose(f, b, p) == (k + p - 1) * 3
    # unequal: microbatch 0 ops 4, microbatch 1 ops 1 (worked in tests/unit/test_pipeline_model.c): 17
    f = [[4, 1], [4, 1]]
    assert pc.compose(f, f, 2) == 17
    # the last stage's extra work: its ops 3, stage 0's 2: 16
    assert pc.compose([[2, 2], [3, 3]], [[2, 2], [3, 3]], 2) == 16


def test_interleaved_by_hand():
    # 2 stages, 2 chunks, 2 microbatches, every op 2 (tests/unit/test_pipeline_model.c works it through): 20
    f, b = uniform(2, 2, 2, 2, 2)
    assert pc.compose(f, b, 2, 2, 2) == 20
    # schedules.py's own table for PP 2, group 3, 5 microbatches, VP 2
    table = pc.schedule_table(5, 2, 3)
    assert [m for m, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    # a count schedules.py refuses (a last group of 1 < P)
    f, b = uniform(2, 2, 1, 1, 5)
    with pytest.raises(ValueError):
        pc.compose(f, b, 2, 2, 2)


def test_stage_times_split():
    f, b = pc.stage_times([9, 10], [2, 3], stages=2, chunks=1, forward_ppm=500000, first=1, last=2)
    # stage 0: 9 + 2 = 11 -> 5 / 6; 10 + 3 = 13 -> 6 / 7.  stage 1: 9 + 4 = 13 -> 6 / 7; 10 + 6 = 16 -> 8 / 8
    assert f == [[5, 6], [6, 8]] and b == [[6, 7], [7, 8]]


def test_replay_cli(tmp_path):
    replay = {"microbatches": [{"forward": 4.0, "backward": 8.0}, {"forward": 4.0, "backward": 8.0,
                                                                      "last_forward": 1.0}]}
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(replay))
    out = subprocess.run([sys.executable, str(TRAINING / "pipeline_compose.py"), str(path), "--pp", "2",
                          "--vpp", "2"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["composed"] is True
    f, b = pc.replay_times(replay["microbatches"], 2, 1)
    assert f == [[2.0, 2.0], [2.0, 3.0]] and b == [[4.0, 4.0], [4.0, 4.0]]
    assert d["1f1b_ms"] == pc.compose(f, b, 2)
    fv, bv = pc.replay_times(replay["microbatches"], 2, 2)
    assert d["interleaved_ms"] == pc.compose(fv, bv, 2, 2, 2)


def microbatch_inputs(plan, lengths, model):
    """Each microbatch's cost (slowest group + overhead) and largest tokens per rank, as the C model reads them."""
    costs, tokens = [], []
    for m in range(plan.num_microbatches):
        slowest = most = 0
        for _, cp, ids in plan.groups(m):
            c = sum(dcpack.cost(int(lengths[i]), cp, model) for i in ids)
            t = -(-sum(int(lengths[i]) for i in ids) // cp)
            slowest, most = max(slowest, c), max(most, t)
        costs.append(slowest + model.microbatch_overhead)
        tokens.append(most)
    return costs, tokens


@pytest.mark.parametrize("seed", range(12))
def test_against_the_c_model(seed):
    rng = random.Random(seed)
    pp = rng.choice([2, 3, 4, 8])
    vpp = rng.choice([1, 2])
    ranks = rng.choice([4, 8])
    model = dcpack.CostModel(forward_ppm=rng.choice([333333, 250000, 500000]),
                             first_stage_per_token=rng.choice([0, 700]), last_stage_per_token=rng.choice([0, 3000]),
                             pipeline_schedule="interleaved" if vpp > 1 else "1f1b")
    scheduler = rng.choice(["dynamic_cp", "balanced", "dp_balanced"])
    longest = 16384 if scheduler == "dp_balanced" else 16384 * ranks // 2  # dp_balanced: static CP 1
    config = dcpack.Config(scheduler=scheduler, data_parallel_size=ranks,
                           max_sequences=512, max_seqlen_per_rank=16384, pipeline_parallel_size=pp,
                           virtual_pipeline_size=vpp, microbatch_group_size_per_vp_stage=pp if vpp > 1 else 0,
                           cost=model)
    lengths = [rng.randint(64, 2000) if rng.random() < 0.8 else rng.randint(8000, longest)
               for _ in range(rng.randint(20, 200))]
    with dcpack.Planner(config) as planner:
        plan = planner.plan(lengths)
        stats = plan.stats()
        costs, tokens = microbatch_inputs(plan, plan.lengths, model)
    f, b = pc.stage_times(costs, tokens, pp, vpp, model.forward_ppm, model.first_stage_per_token,
                          model.last_stage_per_token)
    if pc.runs(len(costs), pp, vpp, pp):
        assert stats.pipeline_makespan == pc.compose(f, b, pp, vpp, pp)
    else:
        assert stats.pipeline_makespan == 2**63 - 1
    assert 0 < stats.pipeline_lower_bound <= stats.pipeline_makespan
    assert stats.model_makespan == stats.pipeline_makespan


def test_no_pipeline_fields_zero():
    with dcpack.Planner(dcpack.Config(scheduler="dynamic_cp", data_parallel_size=4, max_sequences=64,
                                      max_seqlen_per_rank=8192)) as planner:
        stats = planner.plan([5000, 3000, 100, 9000]).stats()
    assert stats.pipeline_makespan == 0 and stats.pipeline_lower_bound == 0
    assert stats.model_makespan == stats.makespan
