"""Level 1 inside Megatron-LM's own wrap_data_iterator: its scheduler, then dcpack's, the same microbatches.

Megatron's ``wrap_data_iterator`` (``megatron/core/datasets/data_schedule.py``,
loaded from the checkout named by DCPACK_MEGATRON_DIR; skipped when unset) runs
twice on every generated batch: once with Megatron's own scheduler from its
``scheduler_map``, once after ``dcpack.megatron.install()`` put dcpack's
schedulers there.  Everything else is Megatron's code both times: fetching the
DP rank's samples, unpacking pre-packed ones, gathering the lengths over the DP
group, the scheduler's ``run`` (``DpBalancedScheduler.run``, which dcpack's
classes call), rerouting the samples to their DPxCP ranks, packing the
microbatches, the FLOPs sums, the TP broadcast of the scalars and the
per-virtual-stage iterators.  The test asserts that the two runs return the
same microbatches (every key, dtype, shape and value), the same number of
microbatches and the same FLOPs sums, on every rank.

Four processes on the CPU, torch.distributed over gloo, in layouts DP 4,
DP 2 x CP 2, CP 4 (dynamic CP pools of 4 ranks) and DP 2 x TP 2.  Stand-ins,
besides those megatron_loader.load_data_path and megatron_harness name (the
process groups of the layout, an emulated PP stage, mtp_on_this_rank, the
rerun iterator): Megatron's CUDA device is the CPU in these processes
(``torch.cuda.current_device()`` returns the CPU device and ``Tensor.cuda()``
returns the tensor), since gloo collectives take CPU tensors.  Needs torch
(any build).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: Megatron's wrap_data_iterator not run")

MEGATRON = os.environ.get("DCPACK_MEGATRON_DIR")
pytestmark = pytest.mark.skipif(
    not MEGATRON, reason="DCPACK_MEGATRON_DIR is not set: Megatron-LM comparison skipped (point it at a checkout)")

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4
LAYOUTS = [(4, 1, 1), (2, 2, 1), (1, 4, 1), (2, 1, 2)]  # (DP, CP, TP)
TRACES = ["mlmdefault_n256_seed1.txt", "bimodal_n256_seed1.txt", "longsft_n256_seed1.txt",
          "uniform32k_n256_seed1.txt"]


def cases_for(dp: int, cp: int, tp: int):
    """(id, spec) of the cases one layout runs.  spec: scheduler, trace, sizes, Megatron options, PP stage."""
    n = dp * cp
    out = []

    def add(name, scheduler, trace, m, **kw):
        spec = dict(scheduler=scheduler, trace=trace, m=m, count=kw.pop("count", 128), pp=kw.pop("pp", 1),
                    pp_rank=kw.pop("pp_rank", 0), packed=kw.pop("packed", 0),
                    max_len=kw.pop("max_len", m * (cp if scheduler == "dp_balanced" else min(n, 2))),
                    dcpack=kw.pop("dcpack", None), options=kw)
        out.append((f"dp{dp}-cp{cp}-tp{tp}-{name}", spec))

    t = TRACES
    add("dp_balanced", "dp_balanced", t[0], 4096)
    add("dp_balanced-long", "dp_balanced", t[1], 16384, count=64)
    add("dp_balanced-cap", "dp_balanced", t[0], 8192, cap=5, alignment=64)
    add("dp_balanced-vpp-stage0", "dp_balanced", t[2], 8192, pp=2, pp_rank=0, vpp=2, vpp_group=2)
    add("dp_balanced-vpp-stage1", "dp_balanced", t[2], 8192, pp=2, pp_rank=1, vpp=2, vpp_group=2)
    add("dp_balanced-pp3-middle", "dp_balanced", t[3], 16384, pp=3, pp_rank=1, count=64)
    add("dp_balanced-pp3-middle-mtp", "dp_balanced", t[0], 8192, pp=3, pp_rank=1, mtp_stages=[(1, 0)])
    add("dp_balanced-prepacked", "dp_balanced", t[0], 8192, packed=4)
    add("dynamic", "default_dynamic_cp", t[0], 4096)
    add("dynamic-long", "default_dynamic_cp", t[1], 16384, count=64)
    if n >= 2:
        add("dynamic-min_cp2", "default_dynamic_cp", t[2], 8192, min_cp=2)
    add("dynamic-cap", "default_dynamic_cp", t[0], 8192, cap=64, alignment=64)
    add("dynamic-vpp-stage1-mtp", "default_dynamic_cp", t[2], 8192, pp=2, pp_rank=1, vpp=2,
        vpp_group=2 if n >= 2 else 1, mtp_stages=[(1, 0)])
    add("dynamic-pp3-last", "default_dynamic_cp", t[3], 32768, pp=3, pp_rank=2, count=64)
    add("dynamic-prepacked", "default_dynamic_cp", t[2], 8192, packed=3)
    # dcpack's balanced planner under Megatron's dynamic-CP name: a different plan, so only what does
    # not depend on the plan is compared (the FLOPs sums; every sequence on its ranks, checked in the worker)
    add("balanced-under-dynamic", "default_dynamic_cp", t[1], 16384, count=64, dcpack="balanced")
    return out


CASES = [c for L in LAYOUTS for c in cases_for(*L)]


def _run_case(ds, dm, ps, groups, layout, spec):
    """Both runs of one case on this rank; returns the list of differences (empty when equal)."""
    from megatron_harness import Batch, differences, drain, megatron_config, set_stage

    o = spec["options"]
    vpp = o.get("vpp")
    set_stage(ps, spec["pp_rank"], spec["pp"], vpp)
    layout.pp, layout.pp_rank = spec["pp"], spec["pp_rank"]
    cfg = megatron_config(layout, spec["scheduler"], spec["m"], **o)
    n = layout.dp * layout.cp
    divisor = 2 * (layout.cp if spec["scheduler"] == "dp_balanced" else n)
    batch = Batch(spec["trace"], spec["count"], spec["max_len"], divisor, seed=len(spec["trace"]),
                  packed=spec["packed"])

    def run():
        if groups.tp_rank == 0:
            items = batch.items(groups.dp_rank, layout.dp)
            it = iter(items)
            source = [it] + [None] * (vpp - 1) if vpp else it
            count = len(items)
        else:
            source = [None] * vpp if vpp else None
            count = len(batch.items(groups.dp_rank, layout.dp))
        iters, num, ssum, sq = ds.wrap_data_iterator(source, cfg, count)
        return drain(iters), num, ssum, sq

    want = run()
    mapping = {spec["scheduler"]: spec["dcpack"]} if spec["dcpack"] else None
    previous = dm.install(mapping, module=ds)
    try:
        installed = ds.scheduler_map[spec["scheduler"]]
        assert installed.__module__ == "dcpack.megatron", installed
        got = run()
    finally:
        dm.uninstall(previous, module=ds)
    if not spec["dcpack"]:
        return differences(want, got, "out")
    # a different planner: the FLOPs sums are the batch's; every sequence reaches its ranks once
    diffs = differences(want[2:], got[2:], "out[2:]")
    if groups.tp_rank == 0:
        mbs = got[0][0] if vpp else got[0]
        if len(mbs) != got[1]:
            diffs.append(f"{len(mbs)} microbatches yielded, {got[1]} announced")
        # each rank of a microbatch's CP group holds its sequences whole (CP slicing comes later)
        tokens = sum(int(mb["cu_seqlens_padded"][-1]) / int(mb["local_cp_size"]) for mb in mbs)
        total = torch.tensor([tokens], dtype=torch.float64)
        torch.distributed.all_reduce(total, group=groups.dp_cp_group)
        if abs(float(total) - float(sum(batch.lengths()))) > 0.5:
            diffs.append(f"tokens over the DPxCP ranks {float(total)} != {sum(batch.lengths())}")
    return diffs


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    sys.path.insert(0, HERE)
    import torch.distributed as dist

    # Megatron's CUDA device is the CPU here (gloo collectives take CPU tensors)
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.Tensor.cuda = lambda self, *a, **k: self

    import dcpack.megatron as dm
    import megatron_loader
    from megatron_harness import Groups, Layout, make_mtp_on_this_rank, make_parallel_state

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    results = {}
    ps = None
    ds = None
    try:
        for dims in LAYOUTS:
            layout = Layout(*dims)
            groups = Groups(layout)
            first = ps is None
            ps = make_parallel_state(groups, into=ps)  # refilled in place: Megatron's code holds this module
            if first:
                ds, _, _ = megatron_loader.load_data_path(MEGATRON, ps, make_mtp_on_this_rank(ps))
            for case_id, spec in cases_for(*dims):
                try:
                    results[case_id] = _run_case(ds, dm, ps, groups, layout, spec)
                except Exception:  # noqa: BLE001 - reported per case
                    results[case_id] = ["exception: " + traceback.format_exc()]
                    raise
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        megatron_loader.unload_data_path()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import torch.multiprocessing as mp

    d = tmp_path_factory.mktemp("megatron_wrap")
    try:
        mp.spawn(_worker, args=(WORLD, str(d / "init"), str(d)), nprocs=WORLD, join=True)
        error = None
    except Exception as e:  # noqa: BLE001 - the cases reached are still reported
        error = str(e)
    merged = {}
    for r in range(WORLD):
        p = d / f"rank{r}.json"
        if p.exists():
            for k, v in json.loads(p.read_text()).items():
                merged.setdefault(k, []).extend(f"rank {r}: {x}" for x in v)
    return merged, error


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_wrap_data_iterator_yields_the_same_microbatches(results, case):
    merged, error = results
    assert case in merged, f"not reached ({error})"
    assert merged[case] == [], "\n".join(merged[case][:8])
