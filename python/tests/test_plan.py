"""Planning from Python: plans equal the C library's, inputs, views and their lifetime."""

from __future__ import annotations

import array
import gc
import json
import subprocess
import threading

import dcpack
import numpy as np
import pytest
from conftest import GOLDEN, WORKLOADS, plan_hash_program, read_trace

# tests/tools/plan_hash_main.c's configurations: (ranks, max_seqlen, vpp_group, min_cp, seq_cap)
PLAN_HASH_CONFIGS = [(8, 2048, 0, 1, 0), (32, 4096, 0, 1, 0), (32, 8192, 4, 1, 0), (128, 4096, 0, 1, 0),
                     (512, 4096, 0, 1, 0), (24, 4096, 0, 2, 0), (32, 4096, 0, 1, 3)]
SCHEDULERS = ["dp_balanced", "dynamic_cp", "balanced", "balanced/fast"]


def plan_hash_config(ranks, max_seqlen, vpp_group, min_cp, seq_cap, scheduler, n):
    """The dcp_config plan_hash_main.c builds for one line ("balanced/fast": balanced at the fast effort level)."""
    scheduler, _, effort = scheduler.partition("/")
    c = dcpack.Config(scheduler=scheduler, max_sequences=n, max_seqlen_per_rank=max_seqlen, min_cp_size=min_cp,
                      max_sequences_per_microbatch=seq_cap, data_parallel_size=ranks, plan_effort=effort or "full")
    if scheduler == "dp_balanced":
        c = c.replace(data_parallel_size=ranks // 8, context_parallel_size=8)
    if vpp_group > 1:
        c = c.replace(pipeline_parallel_size=2, virtual_pipeline_size=2, microbatch_group_size_per_vp_stage=vpp_group)
    return c


@pytest.mark.parametrize("trace", ["mlmdefault_n256_seed1.txt", "bimodal_n1024_seed1.txt",
                                   "longsft_n1024_seed1.txt", "uniform32k_n256_seed1.txt"])
def test_plans_equal_the_c_programs(trace):
    """Every scheduler x configuration line of dcp_plan_hash: same status, plan hash and makespan."""
    program = plan_hash_program()
    if program is None:
        pytest.skip("dcp_plan_hash not built (set DCPACK_PLAN_HASH or build the C project in build/)")
    out = subprocess.run([program, str(WORKLOADS / trace)], check=True, capture_output=True, text=True).stdout
    expected = [line.split() for line in out.splitlines()]
    lengths = read_trace(trace)
    got = []
    for cfg in PLAN_HASH_CONFIGS:
        for s in SCHEDULERS:
            planner = dcpack.Planner(plan_hash_config(*cfg, s, len(lengths)))
            try:
                plan = planner.plan(lengths)
                status, h, makespan = "DCP_OK", plan.hash(), plan.stats().makespan
            except dcpack.Error as e:
                status, h, makespan = e.status, 0, 0
            got.append((status, f"{h:016x}", str(makespan)))
    assert [(e[-3], e[-2], e[-1]) for e in expected] == got


def golden_cases():
    return sorted(p.name for p in GOLDEN.glob("*.json"))


@pytest.mark.parametrize("name", golden_cases())
def test_golden_reference_plans(name):
    """The reference's own plans (tests/data/golden, test_golden.c's format), rank by rank."""
    g = json.loads((GOLDEN / name).read_text())
    lengths = read_trace(g["trace"])
    cfg = dcpack.Config(max_seqlen_per_rank=g["max_seqlen_per_rank"], min_cp_size=g["min_cp_size"],
                        microbatch_group_size_per_vp_stage=g["microbatch_group_size_per_vp_stage"] or 0,
                        max_sequences=len(lengths))
    if g["scheduler"] == "dp_balanced":
        cfg = cfg.replace(scheduler="dp_balanced", context_parallel_size=g["cp"],
                          data_parallel_size=g["ranks"] // g["cp"])
    else:
        cfg = cfg.replace(scheduler="dynamic_cp", data_parallel_size=g["ranks"])
    plan = dcpack.Planner(cfg).plan(lengths)
    assert plan.to_lists() == g["plan"]
    plan.validate()


def test_plan_arrays_and_helpers():
    lengths = read_trace("mlmdefault_n256_seed1.txt")
    planner = dcpack.Planner(data_parallel_size=8, max_sequences=256, max_seqlen_per_rank=4096)
    plan = planner.plan(lengths)
    nm, ng = plan.num_microbatches, plan.num_groups
    assert plan.microbatch_first_group.shape == (nm + 1,) and plan.microbatch_first_group[-1] == ng
    assert plan.group_first_rank.shape == plan.group_cp_size.shape == (ng,)
    assert plan.group_first_id.shape == (ng + 1,) and plan.ids.shape == (plan.num_ids,)
    assert sorted(plan.ids.tolist()) == list(range(256))
    lists = plan.to_lists()
    assert len(lists) == nm and all(len(row) == 8 for row in lists)
    for m in range(nm):
        for r in range(8):
            assert plan.rank_ids(m, r).tolist() == lists[m][r]
            g = plan.group_of_rank(m, r)
            assert plan.group_first_rank[g] <= r < plan.group_first_rank[g] + plan.group_cp_size[g]
        assert sum(cp for _, cp, _ in plan.groups(m)) == 8
    cps = plan.cp_sizes()
    assert int(cps.sum()) == plan.stats().cp_size_sum
    st = plan.stats()
    assert st.total_tokens == int(lengths.sum()) and st.lower_bound <= st.makespan
    assert 0 < st.efficiency <= 1
    assert plan.violation() is None
    assert len(list(plan)) == nm


def test_step_model_round_trips_and_judges_the_plan():
    """CostModel.step_model round-trips through Config; PlanStats carries both step models' makespans."""
    model = dcpack.CostModel(step_model="dependency")
    c = dcpack.Config(data_parallel_size=8, max_sequences=256, max_seqlen_per_rank=4096, cost=model)
    d = c.to_dict()
    assert d["cost"]["step_model"] == 1
    back = dcpack.Config.from_dict(d)
    assert back.cost.step_model == "dependency" and back.to_dict() == d
    assert dcpack.Config().cost.step_model == "barrier" == dcpack.CostModel().step_model
    assert dcpack.Config(cost={"step_model": 1}).to_dict()["cost"]["step_model"] == 1
    with pytest.raises(dcpack.InvalidConfigError, match="step_model"):
        dcpack.Config(cost=dcpack.CostModel(step_model="fast")).to_dict()
    with pytest.raises(dcpack.InvalidConfigError, match=r"cost.step_model 5 is not barrier\(0\) or dependency\(1\)"):
        dcpack.Config(cost=dcpack.CostModel(step_model=5)).validate()

    lengths = read_trace("longsft_n256_seed1.txt")
    stats = {}
    for name in ("barrier", "dependency"):
        planner = dcpack.Planner(c.replace(cost=dcpack.CostModel(step_model=name), max_seqlen_per_rank=16384))
        plan = planner.plan(lengths)
        st = plan.stats()
        stats[name] = st
        assert st.step_model == name
        assert st.dependency_lower_bound <= st.dependency_makespan <= st.makespan
        assert st.lower_bound <= st.makespan  # the barrier bound; neither bound dominates the other in general
        # the dependency makespan from its definition, rank by rank
        overhead = planner.config.cost.microbatch_overhead
        finish = [0] * 8
        for m in range(plan.num_microbatches):
            for first, cp, ids in plan.groups(m):
                start = max(finish[first:first + cp])
                cost = sum(dcpack.cost(int(lengths[i]), cp) for i in ids)
                finish[first:first + cp] = [start + cost + overhead] * cp
        assert st.dependency_makespan == max(finish)
        chosen = (st.dependency_makespan, st.dependency_lower_bound) if name == "dependency" else \
            (st.makespan, st.lower_bound)
        assert (st.model_makespan, st.model_lower_bound) == chosen
        assert st.efficiency == st.model_lower_bound / st.model_makespan
    # the step model changes what is judged, not the plan (the scheduler does not use it yet)
    b, dep = stats["barrier"], stats["dependency"]
    assert (b.makespan, b.dependency_makespan) == (dep.makespan, dep.dependency_makespan)
    assert dep.dependency_makespan < b.makespan


def test_plan_effort_round_trips_and_fast_is_never_above_dynamic_cp():
    """Config.plan_effort: "full" by default (the C default), round-trips; "fast" plans balanced no
    higher than dynamic_cp and differs from "full" where the search finds more."""
    c = dcpack.Config(scheduler="balanced", data_parallel_size=128, max_sequences=1024, max_seqlen_per_rank=4096)
    assert c.plan_effort == "full" and c.to_dict()["plan_effort"] == 0
    fast = c.replace(plan_effort="fast")
    assert fast.to_dict()["plan_effort"] == 1
    assert dcpack.Config.from_dict(fast.to_dict()).plan_effort == "fast"
    with pytest.raises(dcpack.InvalidConfigError, match="plan_effort 'slow' is not one of full, fast"):
        c.replace(plan_effort="slow").to_dict()
    with pytest.raises(dcpack.InvalidConfigError, match=r"plan_effort 2 is not full\(0\) or fast\(1\)"):
        c.replace(plan_effort=2).validate()
    lengths = read_trace("bimodal_n1024_seed1.txt")
    made = {}
    for name, config in (("dynamic_cp", c.replace(scheduler="dynamic_cp")), ("fast", fast), ("full", c)):
        made[name] = dcpack.Planner(config).plan(lengths).stats().model_makespan
    assert made["full"] <= made["fast"] <= made["dynamic_cp"]
    assert made["full"] < made["fast"]


def test_input_kinds_and_the_plans_own_lengths():
    lengths = read_trace("bimodal_n256_seed1.txt")
    planner = dcpack.Planner(data_parallel_size=16, max_sequences=256, max_seqlen_per_rank=8192)
    reference = planner.plan(lengths).hash()
    plan = planner.plan(lengths)
    # the plan keeps its own read-only copy (test_plan_owns_lengths.py: a refilled input changes nothing)
    assert plan.lengths is not lengths and np.array_equal(plan.lengths, lengths)
    assert not np.shares_memory(plan.lengths, lengths) and not plan.lengths.flags.writeable
    assert planner.plan(lengths.tolist()).hash() == reference
    assert planner.plan(tuple(lengths.tolist())).hash() == reference
    assert planner.plan(lengths.astype(np.int64)).hash() == reference
    assert planner.plan(lengths.astype(np.uint32)).hash() == reference
    strided = np.repeat(lengths, 2)[::2]
    assert not strided.flags.c_contiguous
    assert planner.plan(strided).hash() == reference
    assert planner.plan(array.array("i", lengths.tolist())).hash() == reference  # buffer protocol
    assert planner.plan(np.from_dlpack(lengths)).hash() == reference


def test_torch_cpu_tensor_if_available():
    torch = pytest.importorskip("torch", reason="torch is not installed: CPU tensor input not tested here")
    lengths = read_trace("bimodal_n256_seed1.txt")
    planner = dcpack.Planner(data_parallel_size=16, max_sequences=256, max_seqlen_per_rank=8192)
    reference = planner.plan(lengths).hash()
    t = torch.from_numpy(lengths.copy())
    plan = planner.plan(t)
    assert plan.lengths.__array_interface__["data"][0] != t.data_ptr()  # the plan's own copy
    assert plan.lengths.tolist() == t.tolist()
    assert plan.hash() == reference
    assert planner.plan(t.to(torch.int64)).hash() == reference


def test_view_lifetime():
    lengths = read_trace("mlmdefault_n256_seed1.txt")
    planner = dcpack.Planner(data_parallel_size=8, max_sequences=256, max_seqlen_per_rank=4096)
    plan = planner.plan(lengths)
    ids = plan.ids
    with pytest.raises(ValueError):
        ids[0] = 1  # read-only view
    assert ids.base is not None  # a view, not a copy
    kept = plan.copy()
    first = plan.to_lists()
    assert plan.is_valid_view and kept.is_valid_view
    planner.plan(lengths[:100])
    assert not plan.is_valid_view
    for access in (lambda: plan.ids, lambda: plan.num_microbatches, lambda: plan.hash(), lambda: plan.stats(),
                   lambda: plan.to_lists(), lambda: plan.copy(), lambda: plan.rank_ids(0, 0)):
        with pytest.raises(dcpack.StaleViewError) as e:
            access()
        assert e.value.status == "DCP_ERR_INVALID_ARGUMENT" and "copy()" in str(e.value)
    assert "stale" in repr(plan)
    assert kept.to_lists() == first and kept.is_valid_view
    kept.validate()
    # a failed plan replaces the workspace too: the older view is stale after it
    newer = planner.plan(lengths)
    with pytest.raises(dcpack.BadLengthError):
        planner.plan([5, 0, 3])
    with pytest.raises(dcpack.StaleViewError):
        newer.ids
    # views keep the context alive after the planner is gone
    p2 = dcpack.Planner(data_parallel_size=8, max_sequences=256, max_seqlen_per_rank=4096)
    v = p2.plan(lengths)
    arr = v.ids
    expected = arr.copy()
    del p2, v
    gc.collect()
    assert np.array_equal(arr, expected)
    # close() makes views stale
    p3 = dcpack.Planner(data_parallel_size=8, max_sequences=256, max_seqlen_per_rank=4096)
    v3 = p3.plan(lengths)
    p3.close()
    with pytest.raises(dcpack.StaleViewError):
        v3.ids
    with pytest.raises(dcpack.InvalidArgumentError, match="closed"):
        p3.plan(lengths)


def test_copy_equality_and_hash():
    lengths = read_trace("longsft_n256_seed1.txt")
    planner = dcpack.Planner(data_parallel_size=32, max_sequences=256, max_seqlen_per_rank=8192,
                             scheduler="balanced")
    plan = planner.plan(lengths)
    copy = plan.copy()
    assert copy == plan and copy.hash() == plan.hash() and copy.stats() == plan.stats()
    assert dcpack.Planner(planner.config).plan(lengths).hash() == copy.hash()


def test_planners_in_threads():
    """Planners of their own in several threads at once (the GIL is released while planning)."""
    lengths = read_trace("bimodal_n4096_seed1.txt")
    cfg = dcpack.Config(data_parallel_size=128, max_sequences=4096, max_seqlen_per_rank=8192, scheduler="balanced")
    expected = dcpack.Planner(cfg).plan(lengths).hash()
    hashes = []

    def work():
        p = dcpack.Planner(cfg)
        for _ in range(3):
            hashes.append(p.plan(lengths).hash())

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert hashes == [expected] * 9


def test_config_round_trip_and_names():
    c = dcpack.Config(scheduler="balanced", thd_tail_policy="extend_last", cp_partition="contiguous",
                      fields={"tokens", "labels"}, pad_to_max_seqlen=True)
    d = c.to_dict()
    assert d["scheduler"] == 2 and d["thd_tail_policy"] == 1 and d["cp_partition"] == 1
    assert d["fields"] == dcpack.FIELD_TOKENS | dcpack.FIELD_LABELS and d["pad_to_max_seqlen"] == 1
    assert dcpack.Config.from_dict(d).to_dict() == d
    assert dcpack.Config().num_ranks == 1
    assert dcpack.Config(data_parallel_size=4, context_parallel_size=2).num_ranks == 8
    assert dcpack.Config().workspace_size() > 0
    assert dcpack.cost(4096, 1) == 4096 * 4096 + 49152 * 4096
    assert dcpack.cost(4096, 2) > 0
