#!/usr/bin/env python3
"""dcpack.thd on one GPU with online calibration: the timing's cost per step, and step times against dynamic_cp.

    python bench/calibration/online_train_gpu.py [--trace tests/data/workloads/...] [--m 16384] [--tokens 65536]
                                     [--observe 12] [--measure 8] [--reps 3] [--layers 1] [--json OUT]

A THD transformer layer (Llama-8B sizes by default) trains on batches of the trace's lengths (one
rank: CP 1, the plans differ in how the sequences are packed into microbatches).  Three parts:

1. calibration: a ``balanced`` planner that starts from the default cost model plans each step; the
   step runs with a MicrobatchTimer (CUDA events, no synchronisation inside the step) and, at the next
   step, ``Planner.observe`` takes the events; each step's prediction error is that of the model
   before it saw the step;
2. overhead: the same prepared steps with and without the timer (interleaved, ``--reps`` each), and
   the host time of ``timer.collect()`` + ``Planner.observe`` per step, as shares of the step time;
3. step times: for ``--measure`` new batches, dynamic_cp's plan and the calibrated balanced plan
   (still observing), each timed ``--reps`` times (median, wall time with a synchronisation around
   the step only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import dcpack
from dcpack.thd import MicrobatchTimer, ModelConfig, THDBatch, THDTransformer, train_step

ROOT = Path(__file__).resolve().parents[2]   # bench/calibration/ -> the tree


def read_trace(path: Path) -> np.ndarray:
    return np.array([int(x) for x in path.read_text().split() if x.strip().lstrip("-").isdigit()], dtype=np.int64)


def lengths_of(pool: np.ndarray, tokens: int, m: int, rng: np.random.Generator) -> np.ndarray:
    out, total = [], 0
    while total < tokens:
        s = int(min(max(pool[rng.integers(pool.size)], 16), m))
        out.append(s)
        total += s
    return np.array(out, dtype=np.int32)


def batches_of(plan: dcpack.Plan, lengths: np.ndarray, vocab: int, device: torch.device) -> list[THDBatch]:
    g = torch.Generator(device="cpu").manual_seed(int(lengths.sum()))
    out = []
    for m in range(plan.num_microbatches):
        groups = range(plan.microbatch_first_group[m], plan.microbatch_first_group[m + 1])
        ids = np.concatenate([plan.ids[plan.group_first_id[k]:plan.group_first_id[k + 1]] for k in groups])
        ls = [int(lengths[i]) for i in ids]
        n = sum(ls)
        cu = [0]
        for s in ls:
            cu.append(cu[-1] + s)
        tokens = torch.randint(0, vocab, (n,), generator=g)
        pos = torch.cat([torch.arange(s) for s in ls])
        out.append(THDBatch.from_fields(tokens=tokens, labels=torch.roll(tokens, -1), loss_mask=torch.ones(n),
                                        position_ids=pos, padding_mask=torch.zeros(n, dtype=torch.bool),
                                        cu_seqlens=cu, cu_seqlens_padded=cu, max_seqlen=max(ls), local_cp_size=1,
                                        cp_rank=0, device=device))
    return out


def timed(model, batches, timer=None) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    train_step(model, batches, timer=timer)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> int:
    import traceback

    try:
        return run()
    except Exception:  # noqa: BLE001 - print what broke, keep what was written
        traceback.print_exc()
        return 1


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(ROOT / "tests/data/workloads/longsft_n4096_seed1.txt"))
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--observe", type=int, default=12)
    ap.add_argument("--measure", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = torch.device("cuda")
    rng = np.random.default_rng(1)
    pool = read_trace(Path(a.trace))
    mc = ModelConfig(vocab_size=4096, hidden=a.hidden, layers=a.layers, heads=32, kv_heads=8, ffn=a.ffn)
    model = THDTransformer(mc, device=dev)
    cfg = dcpack.Config(scheduler="balanced", max_sequences=4096, max_seqlen_per_rank=a.m, max_microbatches=4096)
    planner = dcpack.Planner(cfg)
    dynamic = dcpack.Planner(cfg.replace(scheduler="dynamic_cp"))
    timer = MicrobatchTimer(dev)
    report: dict = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                    "torch": torch.__version__, "model": vars(mc) | {"dtype": str(mc.dtype)}, "args": vars(a)}
    warm = lengths_of(pool, a.tokens, a.m, rng)
    wb = batches_of(dynamic.plan(warm), warm, mc.vocab_size, dev)
    for _ in range(3):
        timed(model, wb)

    # 1. calibration, observed step by step
    calib = []
    last = None
    for k in range(a.observe + 1):
        if last is not None:
            plan_prev, predicted = last
            t = timer.collect()
            err = float(np.median(np.abs(predicted[:, 0] - t) / t)) if k > 1 else float("nan")
            t0 = time.perf_counter()
            planner.observe(plan_prev, t[:, None])
            obs_ms = (time.perf_counter() - t0) * 1e3
            cal = planner.calibration
            calib.append({"step": k, "microbatches": int(t.size), "error_before": err, "observe_ms": obs_ms,
                          "fit_error": cal["fit_error"], "margin_ppm": cal["margin_ppm"],
                          "identified": cal["identified"], "mean_microbatch_ms": float(t.mean() * 1e3)})
            print(f"observed step {k}: {t.size} microbatches, error of the model before it {err:.2%}, "
                  f"fit {cal['fit_error']:.2%}, margin {cal['margin_ppm']} ppm, observe {obs_ms:.2f} ms", flush=True)
        if k == a.observe:
            break
        lengths = lengths_of(pool, a.tokens, a.m, rng)
        plan = planner.plan(lengths)
        batches = batches_of(plan, lengths, mc.vocab_size, dev)
        predicted = planner.predict(plan)
        timed(model, batches, timer)
        last = (plan, predicted)
    report["calibration"] = calib
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, default=str))

    # 2. overhead of the timing: the same steps with and without the timer, interleaved
    prepared = []
    for _ in range(4):
        lengths = lengths_of(pool, a.tokens, a.m, rng)
        prepared.append(batches_of(dynamic.plan(lengths), lengths, mc.vocab_size, dev))
    with_t, without_t, collect_ms = [], [], []
    spare = MicrobatchTimer(dev)
    for _ in range(a.reps + 2):
        for b in prepared:
            without_t.append(timed(model, b))
            with_t.append(timed(model, b, spare))
            t0 = time.perf_counter()
            spare.collect()
            collect_ms.append((time.perf_counter() - t0) * 1e3)
    step_s = statistics.median(without_t)
    obs = [c["observe_ms"] for c in calib]
    report["overhead"] = {"step_ms_without": step_s * 1e3, "step_ms_with_timer": statistics.median(with_t) * 1e3,
                          "timer_overhead": statistics.median(with_t) / step_s - 1.0,
                          "collect_ms": statistics.median(collect_ms), "observe_ms": statistics.median(obs),
                          "host_share": (statistics.median(collect_ms) + statistics.median(obs)) / (step_s * 1e3)}
    print(f"overhead: step {step_s * 1e3:.1f} ms without the timer, {statistics.median(with_t) * 1e3:.1f} ms "
          f"with ({report['overhead']['timer_overhead']:+.2%}); collect {statistics.median(collect_ms):.3f} ms + "
          f"observe {statistics.median(obs):.3f} ms a step ({report['overhead']['host_share']:.2%} of it)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, default=str))

    # 3. step times: dynamic_cp against the calibrated balanced, still observing
    rows = []
    for k in range(a.measure):
        lengths = lengths_of(pool, a.tokens, a.m, rng)
        dplan = dynamic.plan(lengths)
        db = batches_of(dplan, lengths, mc.vocab_size, dev)
        dmb = dplan.num_microbatches
        d = statistics.median(timed(model, db) for _ in range(a.reps))
        plan = planner.plan(lengths)
        bb = batches_of(plan, lengths, mc.vocab_size, dev)
        bmb = plan.num_microbatches
        times = []
        for r in range(a.reps):
            times.append(timed(model, bb, timer))
            t = timer.collect()
            if r == a.reps - 1:
                planner.observe(plan, t[:, None])  # keep calibrating on what balanced runs
        b = statistics.median(times)
        rows.append({"batch": k, "tokens": int(lengths.sum()), "sequences": int(lengths.size),
                     "dynamic_cp_ms": d * 1e3, "dynamic_cp_microbatches": dmb, "balanced_ms": b * 1e3,
                     "balanced_microbatches": bmb, "change": b / d - 1.0})
        print(f"batch {k}: {lengths.size} sequences, {lengths.sum()} tokens: dynamic_cp {d * 1e3:.1f} ms "
              f"({dmb} mb), balanced online {b * 1e3:.1f} ms ({bmb} mb), {b / d - 1.0:+.2%}", flush=True)
    report["steps"] = rows
    ch = [r["change"] for r in rows]
    report["median_change"] = statistics.median(ch)
    print(f"balanced (online) against dynamic_cp: median {statistics.median(ch):+.2%}, worst {max(ch):+.2%}, "
          f"best {min(ch):+.2%}; final model {planner.cost_model}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
