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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
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
