"""Level 2 against Megatron-LM's reference data path on GPUs: dcpack.megatron.DataPath, bit for bit.

The same global batch goes through

(a) Megatron's reference path, loaded from the checkout named by
    DCPACK_MEGATRON_DIR (skipped when unset): ``wrap_data_iterator`` with its
    own scheduler (fetch, gather the lengths over the DP group, schedule,
    ``reroute_samples_to_dcp_ranks``, ``build_packed_microbatches``, the TP
    broadcast of the scalars, the per-virtual-stage iterators), then
    ``get_batch_on_this_rank_for_sequence_packing`` for every microbatch of
    every virtual stage (padding mask, sanitising, THD tail padding, CP slicing,
    the TP broadcast, ``PackedSeqParams``, ``pad_sequence_for_thd``), all of it
    over torch.distributed with NCCL on CUDA tensors; and

(b) dcpack's Level 2: ``dcpack.megatron.DataPath`` put in place by
    ``install_data_path`` (one ``dcp_step`` through dcpack.torch and dcpack's
    NCCL communicators, then ``DataPath.get_batch``).

Both are called the way ``megatron/training/training.py`` and
``pretrain_gpt.py`` call them: through the names ``wrap_data_iterator`` and
``get_batch_on_this_rank_for_sequence_packing`` of two namespaces that stand
for those modules, before and after ``install_data_path``.  Every output must
be equal bit for bit: tokens, labels, loss_mask, position_ids, padding_mask
(types, shapes, dtypes, devices; None where the stage gets no field), every
field of ``PackedSeqParams`` (tensors bit for bit, ints, the CP group the same
object), the number of microbatches and the FLOPs sums.  Where dcpack differs
on purpose (the FLOPs sums Megatron broadcasts to TP ranks > 0 as float32;
docs/python.md) the test checks the documented difference instead.

One process per GPU (DCPACK_TEST_GPUS caps the count; up to 8), or under
``torchrun --nproc_per_node=N python -m pytest ...`` one process per rank as
torchrun starts them.  The (DP, CP, TP) layouts are every split of the ranks
(megatron_harness.layouts_for); PP stages are emulated (megatron_harness).
Zigzag CP slicing with CP > 1 needs TransformerEngine's
``thd_get_partitioned_indices``; without TransformerEngine those cases are
skipped with a message.  Skipped without torch, CUDA, a CUDA build of dcpack.

DCPACK_BENCH_OUT=<file>: the timing case (Megatron's path against dcpack's on
the mlmdefault trace of 4096 sequences, on the first layout) writes its
table there as JSON; dcpack's time is split into the C step (``c_step_ms``:
the ``dcp_step`` call, GPU work included) and the Python glue around it
(``glue_ms``); ``dcpack_plan_ahead`` times the same with ``DataPath(plan_ahead=True)`` over
consecutive copies of the batch (the planning on its thread: ``plan_ms``; what the step waited for
it: ``wait_ms``; each run's outputs checked equal to Megatron's).  DCPACK_BENCH_PROFILE=1 adds a cProfile of one dcpack run
(``profile``: the 20 functions with the most own time).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from datetime import timedelta

import dcpack
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: Megatron's data path not compared")
MEGATRON = os.environ.get("DCPACK_MEGATRON_DIR")
if not MEGATRON:
    pytest.skip("DCPACK_MEGATRON_DIR is not set: Megatron-LM comparison skipped (point it at a checkout)",
                allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: Megatron's data path not compared on GPUs", allow_module_level=True)
if not (dcpack.HAVE_CUDA and dcpack.HAVE_NCCL):
    pytest.skip("dcpack was built without CUDA/NCCL (reinstall with DCPACK_CUDA=1): Megatron comparison skipped",
                allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def world_size() -> int:
    if TORCHRUN:
        return int(os.environ["WORLD_SIZE"])
    return int(os.environ.get("DCPACK_TEST_GPUS", min(torch.cuda.device_count(), 8)))


def cases_for(dp: int, cp: int, tp: int):
    """(id, spec) of the cases of one layout: schedulers, padding, tail policies, partitions, PP/VPP/MTP stages."""
    n = dp * cp
    out = []

    def add(name, scheduler, trace, m, **kw):
        spec = dict(scheduler=scheduler, trace=trace, m=m, count=kw.pop("count", 64 * dp), pp=kw.pop("pp", 1),
                    pp_rank=kw.pop("pp_rank", 0), packed=kw.pop("packed", 0),
                    max_len=kw.pop("max_len", m * (cp if scheduler == "dp_balanced" else min(n, 2))), options=kw)
        static = scheduler == "dp_balanced"
        spec["needs_te"] = kw.get("partition", "zigzag") == "zigzag" and (cp > 1 if static else n > 1)
        out.append((f"dp{dp}-cp{cp}-tp{tp}-{name}", spec))

    mlm, bim, sft, uni = ("mlmdefault_n256_seed1.txt", "bimodal_n256_seed1.txt", "longsft_n256_seed1.txt",
                          "uniform32k_n256_seed1.txt")
    for sched, short in (("dp_balanced", "dpb"), ("default_dynamic_cp", "dyn")):
        add(f"{short}-nopad", sched, mlm, 8192)
        add(f"{short}-nopad-cap", sched, mlm, 8192, cap=6 if sched == "dp_balanced" else 256)
        add(f"{short}-align64-dummy", sched, sft, 8192, alignment=64)
        add(f"{short}-align64-extend", sched, sft, 8192, alignment=64, tail="extend_last")
        add(f"{short}-align64-dummy-contiguous", sched, bim, 16384, alignment=64, partition="contiguous")
        add(f"{short}-align128-extend-contiguous-cap", sched, mlm, 8192, alignment=128, tail="extend_last",
            partition="contiguous", cap=8 if sched == "dp_balanced" else 256)
        add(f"{short}-max-cap", sched, mlm, 8192, alignment="max", cap=8 if sched == "dp_balanced" else 256)
        add(f"{short}-cudagraph-cap", sched, mlm, 8192, alignment=64, cuda_graph="local",
            cap=8 if sched == "dp_balanced" else 256)
        for r, kind in ((0, "first"), (1, "middle"), (2, "last")):
            add(f"{short}-pp3-{kind}", sched, uni, 32768, alignment=64, pp=3, pp_rank=r, count=32 * dp)
        add(f"{short}-pp3-middle-mtp", sched, mlm, 8192, alignment=64, pp=3, pp_rank=1, mtp_stages=[(1, 0)])
        group = 2 if sched == "dp_balanced" or n >= 2 else 1
        for r in (0, 1):
            add(f"{short}-vpp2-stage{r}", sched, sft, 8192, alignment=64, pp=2, pp_rank=r, vpp=2, vpp_group=group)
        add(f"{short}-vpp2-stage1-mtp", sched, sft, 8192, alignment=64, pp=2, pp_rank=1, vpp=2, vpp_group=group,
            mtp_stages=[(1, 0)])
        add(f"{short}-prepacked", sched, mlm, 8192, alignment=64, packed=4)
    return out


def all_cases(world: int):
    from megatron_harness import layouts_for

    return [c for L in layouts_for(world) for c in cases_for(L.dp, L.cp, L.tp)]


sys.path.insert(0, HERE)
CASES = all_cases(world_size())

BENCH = [("dp_balanced", dict(alignment=64)), ("default_dynamic_cp", dict(alignment=64))]
BENCH_TRACE, BENCH_M, BENCH_REPS = "mlmdefault_n4096_seed1.txt", 8192, 3


# --------------------------------------------------------------------------
# one case on this rank
# --------------------------------------------------------------------------

def drive(training, gpt, mtp_on_this_rank, cfg, source, count):
    """What training.py and pretrain_gpt.py do with the packed data path for one global batch.

    Returns ([get_batch output for every (virtual stage, microbatch)], microbatches, seqlen sum, squared sum).
    """
    iters, num, ssum, sq = training.wrap_data_iterator(source, cfg, count)
    vpp = cfg.virtual_pipeline_model_parallel_size
    outs = []
    for v in (range(vpp) if vpp else [None]):
        it = iters[v] if vpp else iters
        for _ in range(num):
            outs.append(gpt.get_batch_on_this_rank_for_sequence_packing(
                it, vpp_size=vpp, mtp_on_this_rank=mtp_on_this_rank(cfg, ignore_virtual=False, vp_stage=v),
                vp_stage=v, dynamic_cp=cfg.dynamic_context_parallel, config=cfg))
    return outs, num, ssum, sq


class Env:
    """This rank's Megatron modules, stand-in parallel_state, process groups and dcpack communicators of a layout."""

    def __init__(self, layout, ds, ps, groups, dc_groups, mtp_fn, make_path) -> None:
        self.layout, self.ds, self.ps, self.groups, self.dc_groups = layout, ds, ps, groups, dc_groups
        self.mtp_fn, self.make_path = mtp_fn, make_path


def prepare(env, spec):
    import dcpack.megatron as dm
    from megatron_harness import Batch, megatron_config, mtp_bits, set_stage

    o = spec["options"]
    L = env.layout
    L.pp, L.pp_rank = spec["pp"], spec["pp_rank"]
    set_stage(env.ps, spec["pp_rank"], spec["pp"], o.get("vpp"))
    cfg = megatron_config(L, spec["scheduler"], spec["m"], **o)
    n = L.dp * L.cp
    batch = Batch(spec["trace"], spec["count"], spec["max_len"], 2 * n, seed=len(spec["trace"]) + spec["count"],
                  packed=spec["packed"])
    tokens = sum(batch.lengths())
    # room for the padding: a microbatch pads to max_seqlen_per_dp_cp_rank ("max", CUDA graphs) or by less
    # than 128 x CP slots (alignments up to 128)
    to_max = o.get("alignment") == "max" or (o.get("alignment") is not None and o.get("cuda_graph", "none") != "none")
    capacity = tokens + spec["count"] * (spec["m"] if to_max else 128 * n) + 4096
    dconfig = dm.config_from_megatron(cfg, max_sequences=max(1024, spec["count"]), max_tokens_per_rank=capacity)
    path = env.make_path(dconfig, env.dc_groups, mtp_bits(cfg, spec["pp_rank"]), spec["pp_rank"])
    return cfg, batch, path


def source_for(env, cfg, batch):
    """This rank's data iterator as Megatron's training hands it over (None on TP ranks > 0), and the count."""
    vpp = cfg.virtual_pipeline_model_parallel_size
    items = batch.items(env.groups.dp_rank, env.layout.dp)
    if env.groups.tp_rank != 0:
        return ([None] * vpp if vpp else None), len(items)
    it = iter(items)
    return ([it] + [None] * (vpp - 1) if vpp else it), len(items)


def run_case(env, spec):
    """Both paths on this rank; the list of differences."""
    import types

    import dcpack.megatron as dm
    from megatron_harness import differences

    cfg, batch, path = prepare(env, spec)
    ds = env.ds
    training = types.SimpleNamespace(wrap_data_iterator=ds.wrap_data_iterator)
    gpt = types.SimpleNamespace(get_batch_on_this_rank_for_sequence_packing=ds.get_batch_on_this_rank_for_sequence_packing)
    want = drive(training, gpt, env.mtp_fn, cfg, *source_for(env, cfg, batch))
    torch.cuda.synchronize()
    previous = dm.install_data_path(path, training_module=training, gpt_module=gpt)
    try:
        assert training.wrap_data_iterator == path.wrap_data_iterator
        got = drive(training, gpt, env.mtp_fn, cfg, *source_for(env, cfg, batch))
    finally:
        dm.uninstall_data_path(previous)
    assert training.wrap_data_iterator is ds.wrap_data_iterator
    diffs = differences(want[:2], got[:2], "out")
    # the FLOPs sums: exact on dcpack's side; Megatron's TP ranks > 0 get them through a float32 broadcast
    exact = [float(sum(batch.lengths())), float(sum(p * p for p in batch.lengths()))]
    if [got[2], got[3]] != exact or type(got[2]) is not float:
        diffs.append(f"dcpack's FLOPs sums {got[2:]} != {exact}")
    if env.groups.tp_rank == 0 or env.layout.tp == 1:
        diffs += differences(want[2:], got[2:], "sums")
    else:
        import numpy as np

        rounded = [float(np.float32(v)) for v in exact]
        if list(want[2:]) != rounded:
            diffs.append(f"Megatron's broadcast sums {want[2:]} != float32 {rounded}")
    return diffs, len(want[0])


def time_paths(env, scheduler, options):
    """Megatron's path and dcpack's on the same batch, timed in this run; also checked equal."""
    import dcpack.megatron as dm
    from megatron_harness import differences

    spec = dict(scheduler=scheduler, trace=BENCH_TRACE, m=BENCH_M, count=4096, pp=1, pp_rank=0, packed=0,
                max_len=BENCH_M, options=dict(options))
    cfg, batch, path = prepare(env, spec)
    import types

    ds = env.ds
    ref = types.SimpleNamespace(wrap_data_iterator=ds.wrap_data_iterator,
                                get_batch_on_this_rank_for_sequence_packing=ds.get_batch_on_this_rank_for_sequence_packing)
    ours = types.SimpleNamespace(wrap_data_iterator=ds.wrap_data_iterator,
                                 get_batch_on_this_rank_for_sequence_packing=ds.get_batch_on_this_rank_for_sequence_packing)
    dm.install_data_path(path, training_module=ours, gpt_module=ours)
    # dcpack's path planning each global batch a call ahead (DataPath(plan_ahead=True)): its iterator holds
    # the batch once per run and once more (the read ahead of the last run), so every call but the first
    # steps with a plan made on the planning thread during the previous call's get_batch loop
    ahead_path = None
    paths = [("megatron", ref), ("dcpack", ours)]
    if env.dc_groups is not None and getattr(env.dc_groups, "data_parallel", None) is not None:
        ahead_path = dm.DataPath(path.config, env.dc_groups, plan_ahead=True)
        ahead_ns = types.SimpleNamespace(wrap_data_iterator=ds.wrap_data_iterator,
                                         get_batch_on_this_rank_for_sequence_packing=ds.get_batch_on_this_rank_for_sequence_packing)
        dm.install_data_path(ahead_path, training_module=ahead_ns, gpt_module=ahead_ns)
        paths.append(("dcpack_plan_ahead", ahead_ns))
        ahead_items = []
        if env.groups.tp_rank == 0:
            for _ in range(BENCH_REPS + 2):
                ahead_items += batch.items(env.groups.dp_rank, env.layout.dp)
        ahead_source = iter(ahead_items) if env.groups.tp_rank == 0 else None
    times = {name: [] for name, _ in paths}
    c_step = []  # dcpack: wall time of the dcp_step call inside wrap_data_iterator (the rest is Python glue)
    c_step_ahead, ahead_stats = [], []
    diffs = []
    for rep in range(BENCH_REPS + 1):
        for name, ns in paths:
            source, count = source_for(env, cfg, batch)
            if name == "dcpack_plan_ahead":
                source = ahead_source
            torch.distributed.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            iters, num, ssum, sq = ns.wrap_data_iterator(source, cfg, count)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            outs = [ns.get_batch_on_this_rank_for_sequence_packing(iters, vpp_size=None, mtp_on_this_rank=False,
                                                                   vp_stage=None,
                                                                   dynamic_cp=cfg.dynamic_context_parallel,
                                                                   config=cfg) for _ in range(num)]
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            if rep > 0:
                times[name].append((t1 - t0, t2 - t1))
                if name == "dcpack":
                    c_step.append(path.stepper._stepper.last_step_ns * 1e-9)
                if name == "dcpack_plan_ahead":
                    c_step_ahead.append(ahead_path.stepper._stepper.last_step_ns * 1e-9)
                    if ahead_path.last_plan_ahead is not None:
                        ahead_stats.append(dict(ahead_path.last_plan_ahead))
            if name == "megatron":
                want = (outs, num, ssum, sq)
            elif rep == 0 or name == "dcpack_plan_ahead":  # every run planning ahead (from run 1 on, with a plan
                # made ahead) is checked too
                diffs += differences(want, (outs, num, ssum, sq), f"bench {name} run {rep}")
            del outs, iters
    profile = None
    if os.environ.get("DCPACK_BENCH_PROFILE"):  # what remains of dcpack's Python time, by function (one run)
        import cProfile
        import io
        import pstats

        source, count = source_for(env, cfg, batch)
        torch.distributed.barrier()
        prof = cProfile.Profile()
        prof.enable()
        iters, num, ssum, sq = ours.wrap_data_iterator(source, cfg, count)
        outs = [ours.get_batch_on_this_rank_for_sequence_packing(iters, vpp_size=None, mtp_on_this_rank=False,
                                                                 vp_stage=None, dynamic_cp=cfg.dynamic_context_parallel,
                                                                 config=cfg) for _ in range(num)]
        torch.cuda.synchronize()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)
        profile = text.getvalue().splitlines()
        del outs, iters
    n_tokens = sum(batch.lengths())
    row = {"scheduler": scheduler, "options": options, "sequences": batch.count, "tokens": n_tokens,
           "microbatches": num, "equal": not diffs}
    for name in times:
        w = [a for a, _ in times[name]]
        g = [b for _, b in times[name]]
        tot = [a + b for a, b in times[name]]
        row[name] = {"wrap_ms": 1e3 * statistics.median(w), "get_batch_ms": 1e3 * statistics.median(g),
                     "total_ms": 1e3 * statistics.median(tot), "runs": [round(1e3 * t, 3) for t in tot]}
    # dcpack's time split: the C step (dcp_step, GPU work included: it waits for its stream) and the Python
    # glue around it (sample conversion, the sample table, output views, get_batch), run by run
    glue = [a + b - c for (a, b), c in zip(times["dcpack"], c_step)]
    row["dcpack"].update({"c_step_ms": 1e3 * statistics.median(c_step), "glue_ms": 1e3 * statistics.median(glue),
                          "glue_wrap_ms": 1e3 * statistics.median([a - c for (a, _), c in zip(times["dcpack"], c_step)]),
                          "c_step_runs": [round(1e3 * t, 3) for t in c_step]})
    if ahead_path is not None:
        # with plan-ahead the step's own planning is gone (c_step_ms: the step handed the plan, which checks it);
        # the planning ran on the thread (plan_ms) while get_batch ran, the step waited wait_ms for it, and the
        # next batch's read ahead (its sample conversion and the gather of its lengths, gather_ms) is in wrap_ms
        glue_a = [a + b - c for (a, b), c in zip(times["dcpack_plan_ahead"], c_step_ahead)]
        row["dcpack_plan_ahead"].update({
            "c_step_ms": 1e3 * statistics.median(c_step_ahead), "glue_ms": 1e3 * statistics.median(glue_a),
            "c_step_runs": [round(1e3 * t, 3) for t in c_step_ahead],
            "plan_ms": statistics.median([st["plan_ms"] for st in ahead_stats]) if ahead_stats else None,
            "wait_ms": statistics.median([st["wait_ms"] for st in ahead_stats]) if ahead_stats else None,
            "gather_ms": statistics.median([st["gather_ms"] for st in ahead_stats]) if ahead_stats else None})
    if profile is not None:
        row["dcpack"]["profile"] = profile
    return row, diffs


# --------------------------------------------------------------------------
# the processes
# --------------------------------------------------------------------------

def make_gpu_path(dconfig, dc_groups, mtp_bits, pp_rank):
    """dcpack's DataPath on this GPU for an emulated PP stage (its world communicator: the ranks that exist)."""
    import dcpack.megatron as dm

    dc_groups.pipeline_rank = pp_rank
    return dm.DataPath(dconfig, dc_groups, mtp_virtual_stages=mtp_bits)


def worker(rank, world, init_file, out_dir, make_path=make_gpu_path, device="cuda", backend="nccl"):
    sys.path.insert(0, HERE)
    import megatron_loader
    import torch.distributed as dist
    from megatron_harness import Groups, layouts_for, make_mtp_on_this_rank, make_parallel_state

    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    init = "env://" if init_file is None else f"file://{init_file}"
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=300))
    results, bench = {}, []
    have_te = megatron_loader.have_transformer_engine()
    ps = ds = None
    try:
        for layout in layouts_for(world):
            groups = Groups(layout)
            first = ps is None
            ps = make_parallel_state(groups, into=ps)  # refilled in place: Megatron's code holds this module
            if first:
                ds, _, _ = megatron_loader.load_data_path(MEGATRON, ps, make_mtp_on_this_rank(ps))
            dc_groups = None
            if device == "cuda":
                import dcpack.torch as dt

                base = dcpack.Config(data_parallel_size=layout.dp, context_parallel_size=layout.cp,
                                     tensor_parallel_size=layout.tp, max_sequences=8192, max_seqlen_per_rank=8192)
                # the DP communicator for DataPath(plan_ahead=True) in the timed batch (the same on every rank)
                dc_groups = dt.NcclGroups(base, dp_cp_rank=groups.dp_cp_rank, tp_rank=groups.tp_rank, pp_rank=0,
                                          data_parallel=bool(os.environ.get("DCPACK_BENCH_OUT")))
            env = Env(layout, ds, ps, groups, dc_groups, make_mtp_on_this_rank(ps), make_path)
            for case_id, spec in cases_for(layout.dp, layout.cp, layout.tp):
                if spec["needs_te"] and not have_te:
                    results[case_id] = {"skip": "zigzag CP slicing with CP > 1 needs TransformerEngine "
                                                "(transformer_engine_torch), not installed"}
                    continue
                try:
                    diffs, nmb = run_case(env, spec)
                    results[case_id] = {"diffs": diffs, "outputs": nmb}
                except Exception:  # noqa: BLE001 - reported per case, then the run stops (collectives are off)
                    results[case_id] = {"diffs": ["exception: " + traceback.format_exc()]}
                    raise
            if not bench and os.environ.get("DCPACK_BENCH_OUT"):
                for scheduler, options in BENCH:
                    row, diffs = time_paths(env, scheduler, options)
                    row["layout"] = repr(layout)
                    row["device"] = torch.cuda.get_device_name() if device == "cuda" else device
                    bench.append(row)
                    results[f"bench-{repr(layout)}-{scheduler}"] = {"diffs": diffs}
            if dc_groups is not None:
                dc_groups.close()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump({"results": results, "bench": bench}, f)
        megatron_loader.unload_data_path()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("megatron_gpu")
    world = world_size()
    error = None
    try:
        if TORCHRUN:
            ranks = [int(os.environ["RANK"])]
            worker(ranks[0], world, None, str(d))
        else:
            import torch.multiprocessing as mp

            ranks = list(range(world))
            mp.spawn(worker, args=(world, str(d / "init"), str(d)), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001 - the cases reached are still reported
        error = str(e)
    merged, bench = {}, []
    for r in ranks:
        p = d / f"rank{r}.json"
        if not p.exists():
            continue
        data = json.loads(p.read_text())
        for k, v in data["results"].items():
            m = merged.setdefault(k, {"diffs": []})
            if "skip" in v:
                m["skip"] = v["skip"]
            m["diffs"] += [f"rank {r}: {x}" for x in v.get("diffs", [])]
        if r == 0:
            bench = data["bench"]
    out = os.environ.get("DCPACK_BENCH_OUT")
    if out and bench:
        with open(out, "w") as f:
            json.dump(bench, f, indent=1)
    return merged, error


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_data_path_bitwise_equal_to_megatron(results, case):
    merged, error = results
    assert case in merged, f"not reached ({error})"
    if "skip" in merged[case]:
        pytest.skip(merged[case]["skip"])
    assert merged[case]["diffs"] == [], "\n".join(merged[case]["diffs"][:10])


@pytest.mark.skipif(not os.environ.get("DCPACK_BENCH_OUT"), reason="DCPACK_BENCH_OUT not set: no timing")
def test_timed_batch_is_equal_too(results):
    merged, error = results
    keys = [k for k in merged if k.startswith("bench-")]
    assert keys, f"timing not reached ({error})"
    for k in keys:
        assert merged[k]["diffs"] == [], (k, merged[k]["diffs"][:10])
