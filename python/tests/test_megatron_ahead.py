"""dcpack.megatron.DataPath with plan_ahead=True yields exactly what it yields without, on the CPU.

DataPath runs on the host here (``groups``: an InprocCluster's StepArgs, one thread per rank, the
microbatches CPU tensors).  Several global batches in a row go through ``wrap_data_iterator`` on every
rank, once without plan-ahead and once with it (the next batch read a call early, its lengths gathered
over the DP communicator and planned on a thread): every microbatch yielded (every key, dtype, shape and
value), their number and order, the FLOPs sums are equal, per batch.  A rank whose plan made ahead is of
other lengths makes the step raise InvalidArgumentError on every rank.  Needs torch (any build);
Megatron-LM is not imported (wrap_data_iterator does not need it).
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: DataPath not run")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dcpack  # noqa: E402
import dcpack.megatron as dm  # noqa: E402
from megatron_harness import Batch, Layout, differences, drain, megatron_config  # noqa: E402

STEPS = 3
TRACES = ["mlmdefault_n256_seed1.txt", "longsft_n256_seed1.txt", "bimodal_n256_seed1.txt"]

# (id, layout (DP, CP, TP), PP stage of PP, Megatron scheduler, dcpack scheduler or None, options, packed)
CASES = [
    ("dp2-cp2-dp_balanced", (2, 2, 1), 1, "dp_balanced", None, {}, 0),
    ("dp2-cp2-dynamic", (2, 2, 1), 1, "default_dynamic_cp", None, {"alignment": 64}, 0),
    ("dp2-cp2-balanced", (2, 2, 1), 1, "default_dynamic_cp", "balanced", {}, 0),
    ("dp4-dynamic-prepacked", (4, 1, 1), 1, "default_dynamic_cp", None, {"alignment": 64}, 3),
    ("dp2-tp2-dp_balanced-cap", (2, 1, 2), 1, "dp_balanced", None, {"cap": 6, "alignment": 64}, 0),
    ("dp2-pp2-vpp2-dynamic", (2, 1, 1), 2, "default_dynamic_cp", None, {"vpp": 2, "vpp_group": 2, "alignment": 64}, 0),
]


def setup(case):
    _, (dp, cp, tp), pp, scheduler, dcpack_scheduler, options, packed = case
    layout = Layout(dp, cp, tp, pp=pp)
    m = 8192
    cfg = megatron_config(layout, scheduler, m, **options)
    n = dp * cp
    count = 32 * dp
    max_len = m * (cp if scheduler == "dp_balanced" else min(n, 2))
    data = [Batch(TRACES[k % len(TRACES)], count, max_len, 2 * n, seed=k + 1, packed=packed) for k in range(STEPS)]
    tokens = max(sum(b.lengths()) for b in data)
    dconfig = dm.config_from_megatron(cfg, max_sequences=1024, max_tokens_per_rank=tokens + count * 128 * n + 4096,
                                      scheduler=dcpack_scheduler)
    return cfg, dconfig, data


def cluster_holds_data(case, w):
    (dp, cp, tp), pp = case[1], case[2]
    return (w // (dp * cp)) % tp == 0


def run(case, plan_ahead, plant=None):
    """Every rank's microbatches (cloned), per global batch: {world rank: [(microbatches, num, sums), ...]}."""
    cfg, dconfig, data = setup(case)
    cluster = dcpack.InprocCluster(dconfig, timeout_ms=60000)
    dp, cp = dconfig.data_parallel_size, dconfig.context_parallel_size
    vpp = cfg.virtual_pipeline_model_parallel_size

    def rank(w):
        args = cluster.args(w)
        dpxcp, tp, pp = cluster.coordinates(w)
        path = dm.DataPath(dconfig, args, plan_ahead=plan_ahead, data_parallel=cluster.data_parallel(w))
        if plant is not None:
            plant(w, path)
        per_step = [b.items(dpxcp // cp, dp) for b in data]
        count = len(per_step[0])
        it = iter([item for items in per_step for item in items]) if args.holds_data else None
        source = ([it] + [None] * (vpp - 1) if vpp else it) if it is not None else ([None] * vpp if vpp else None)
        out = []
        for _ in range(STEPS):
            iters, num, ssum, sq = path.wrap_data_iterator(source, cfg, count)
            mbs = drain(iters)  # views until the next call: cloned
            mbs = [[{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in mb.items()} for mb in stage]
                   for stage in mbs] if vpp else [{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                                   for k, v in mb.items()} for mb in mbs]
            out.append((mbs, num, ssum, sq))
        return out, path.last_plan_ahead

    return cluster.run(rank, return_exceptions=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_plan_ahead_yields_the_same_microbatches(case):
    want = run(case, plan_ahead=False)
    got = run(case, plan_ahead=True)
    for w, (a, b) in enumerate(zip(want, got)):
        assert not isinstance(a, BaseException), f"rank {w} without plan-ahead: {a!r}"
        assert not isinstance(b, BaseException), f"rank {w} with plan-ahead: {b!r}"
        (outs_a, _), (outs_b, ahead) = a, b
        assert len(outs_a) == STEPS and sum(out[1] for out in outs_a) > STEPS
        diffs = differences(outs_a, outs_b, f"rank {w}")
        assert diffs == [], "\n".join(diffs[:8])
        if cluster_holds_data(case, w):  # the last batch's plan was made ahead, on the thread, and used
            assert ahead is not None and ahead["planned"] and ahead["plan_ms"] > 0, ahead
        else:
            assert ahead is None


def test_a_plan_of_other_lengths_on_one_rank_fails_every_rank():
    """Rank 1's planner plans the gathered lengths reversed: the step that gets that plan raises
    InvalidArgumentError on every rank, never a batch cut by another plan."""
    case = CASES[1]

    def plant(w, path):
        if w == 1:
            plan = path._planner.plan
            path._planner.plan = lambda lengths: plan(lengths[::-1].copy())

    results = run(case, plan_ahead=True, plant=plant)
    for w, r in enumerate(results):
        assert isinstance(r, dcpack.InvalidArgumentError), f"rank {w}: {r!r}"
        assert "rank 1" in str(r) or "plan ahead" in str(r), str(r)


def test_plan_ahead_needs_a_dp_communicator():
    case = CASES[0]
    _, dconfig, _ = setup(case)
    cluster = dcpack.InprocCluster(dconfig)
    with pytest.raises(dcpack.InvalidArgumentError, match="DP communicator"):
        dm.DataPath(dconfig, cluster.args(0), plan_ahead=True)
