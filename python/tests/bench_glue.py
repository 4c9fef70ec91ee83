"""The Python glue of dcpack.megatron's data path on the CPU: what DataPath does per global batch around dcp_step.

    python python/tests/bench_glue.py [--sequences 4096] [--reps 5] [--json OUT]

One rank (DP 1) of the timed batch of test_megatron_gpu.py (the mlmdefault trace, 4,096 sequences), with CPU
tensors in place of CUDA ones: Megatron-style sample dicts ([1, n] tensors, ``padded_seq_len``,
``original_seq_len``) -> ``_samples_from_megatron`` (convert) -> ``Stepper.step`` (the sample table, the
``dcp_step`` call, the output views) -> ``_seq_idx_all`` (PackedSeqParams.seq_idx of every microbatch, where this
version has it).  Prints the median of each part in ms; ``step_c`` is the library's own time (the sum of
``dcp_step_stats``' phases), ``step_glue`` the rest of ``step()``.  Runs against whichever dcpack is importable,
so the same command times two versions.  No GPU: the CUDA path's own costs (device copies, kernel launches) are
not in these numbers; test_megatron_gpu.py's timing (DCPACK_BENCH_OUT) measures them on GPUs.

    python python/tests/bench_glue.py --data-path [--scheduler dynamic_cp] [--train-ms 50] [--reps 5]

times the whole ``DataPath.wrap_data_iterator`` on the host (DataPath with an InprocCluster's StepArgs, DP 1),
with and without ``plan_ahead``, over consecutive copies of the batch, a sleep of ``--train-ms`` between calls
standing for the training step the planning thread overlaps.  Per mode: ``wrap_ms`` (the call, the read ahead of
the next batch included), ``c_step_ms`` (the ``dcp_step`` call), ``step_plan_ms`` (its ``time_plan_ns``: the
gather and, without plan-ahead, the planning; ``step_stage_ms``, ``step_pack_ms`` its other phases), and with plan-ahead ``plan_ms`` (the planning on its thread),
``wait_ms`` (what the call waited for it) and ``gather_ms`` (the gather of the next batch's lengths).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import dcpack
import dcpack.megatron as dm
import numpy as np
import torch

TRACE = Path(__file__).resolve().parent.parent.parent / "tests" / "data" / "workloads" / "mlmdefault_n4096_seed1.txt"


def items_of(lengths):
    out = []
    for i, n in enumerate(lengths):
        out.append({"tokens": torch.arange(n, dtype=torch.int64).view(1, -1) + i,
                    "labels": torch.arange(n, dtype=torch.int64).view(1, -1),
                    "loss_mask": torch.ones(1, n, dtype=torch.float32),
                    "position_ids": torch.arange(n, dtype=torch.int64).view(1, -1),
                    "padded_seq_len": torch.tensor([n]), "original_seq_len": torch.tensor([n])})
    return out


def data_path(a, lengths) -> dict:
    """DataPath.wrap_data_iterator with and without plan_ahead (see the module's docstring)."""
    config = dcpack.Config(scheduler=a.scheduler, data_parallel_size=1, max_sequences=len(lengths),
                           max_seqlen_per_rank=8192, max_tokens_per_rank=int(sum(lengths)) + 8192 * 64,
                           max_microbatches=len(lengths), pad_alignment=64)
    rows = {}
    for ahead in (False, True):
        cluster = dcpack.InprocCluster(config)
        path = dm.DataPath(config, cluster.args(0), plan_ahead=ahead, data_parallel=cluster.data_parallel(0))
        source = iter([item for _ in range(a.reps + 2) for item in items_of(lengths)])
        t = {"wrap_ms": [], "c_step_ms": [], "step_plan_ms": [], "step_stage_ms": [], "step_pack_ms": [],
             "plan_ms": [], "wait_ms": [], "gather_ms": []}
        for rep in range(a.reps + 1):
            t0 = time.perf_counter()
            iters, num, _, _ = path.wrap_data_iterator(source, None, len(lengths))
            t1 = time.perf_counter()
            if rep:
                t["wrap_ms"].append(1e3 * (t1 - t0))
                t["c_step_ms"].append(path.stepper.last_step_ns * 1e-6)
                for phase in ("plan", "stage", "pack"):
                    t[f"step_{phase}_ms"].append(path.last_output.stats[f"time_{phase}_ns"] * 1e-6)
                if ahead and rep > 1:  # rep 1 stepped with the plan made after rep 0
                    for k in ("plan_ms", "wait_ms", "gather_ms"):
                        t[k].append(path.last_plan_ahead[k])
            list(iters)
            time.sleep(a.train_ms / 1e3)  # the training step the planning thread overlaps
        rows["plan_ahead" if ahead else "plain"] = {k: round(statistics.median(v), 2) for k, v in t.items() if v}
        rows["microbatches"] = num
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--data-path", action="store_true", help="time DataPath with and without plan_ahead")
    ap.add_argument("--scheduler", default="dynamic_cp")
    ap.add_argument("--train-ms", type=float, default=50.0)
    a = ap.parse_args()
    if a.data_path:
        lengths = np.loadtxt(TRACE, dtype=np.int64).reshape(-1)[:a.sequences]
        lengths = ((lengths + 1) // 2 * 2).tolist()
        row = data_path(a, lengths)
        row.update(sequences=len(lengths), scheduler=a.scheduler, train_ms=a.train_ms,
                   dcpack=str(Path(dcpack.__file__).parent))
        print(json.dumps(row, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(row, indent=1))
        return
    lengths = np.loadtxt(TRACE, dtype=np.int64).reshape(-1)[:a.sequences]
    lengths = ((lengths + 1) // 2 * 2).tolist()
    items = items_of(lengths)
    config = dcpack.Config(scheduler="dp_balanced", data_parallel_size=1, max_sequences=len(lengths),
                           max_seqlen_per_rank=8192, max_tokens_per_rank=int(sum(lengths)) + 8192 * 64,
                           max_microbatches=len(lengths), pad_alignment=64)
    cluster = dcpack.InprocCluster(config)
    args = cluster.args(0)
    stepper = dcpack.Stepper(config)
    seq_idx = getattr(dm, "_seq_idx_all", None)
    times = {"convert": [], "step": [], "step_c": [], "step_glue": [], "seq_idx": []}
    for rep in range(a.reps + 1):
        t0 = time.perf_counter()
        samples = dm._samples_from_megatron(items, torch.device("cpu"))
        t1 = time.perf_counter()
        out = stepper.step(samples, args)
        t2 = time.perf_counter()
        c = sum(v for k, v in out.stats.items() if k.startswith("time_")) * 1e-9
        if seq_idx is not None:
            # the host output as the torch path sees it: host copies of the padded boundaries
            class Mb:
                def __init__(self, mb):
                    self._tensors = {"cu_seqlens_padded_host": torch.from_numpy(mb.cu_seqlens_padded.copy())}
                    self.num_tokens = mb.num_tokens
            mbs = [Mb(mb) for mb in out.microbatches]
            t3 = time.perf_counter()
            seq_idx(mbs, torch.device("cpu"))
            t4 = time.perf_counter()
        else:
            t3 = t4 = 0.0
        if rep:
            times["convert"].append(t1 - t0)
            times["step"].append(t2 - t1)
            times["step_c"].append(c)
            times["step_glue"].append(t2 - t1 - c)
            times["seq_idx"].append(t4 - t3)
    row = {k: round(1e3 * statistics.median(v), 2) for k, v in times.items()}
    row.update(sequences=len(lengths), tokens=int(sum(lengths)), microbatches=out.num_microbatches,
               dcpack=str(Path(dcpack.__file__).parent))
    print(json.dumps(row, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
