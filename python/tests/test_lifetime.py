"""Arrays taken from a Plan or a StepOutput stay readable after close() (issue: they segfaulted).

Each case runs in a child interpreter, so a crash is a failed test, not a crashed pytest run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PLAN_AFTER_CLOSE = """
import gc, numpy as np, dcpack
# a workspace of megabytes: the allocator maps it apart and unmaps it when freed
planner = dcpack.Planner(dcpack.Config(scheduler="dp_balanced", data_parallel_size=64, max_sequences=1 << 16,
                                       max_seqlen_per_rank=1 << 16))
lengths = np.array([100 + 37 * (i % 1000) for i in range(40000)], dtype=np.int32)
plan = planner.plan(lengths)
ids, groups, first = plan.ids, plan.group_cp_size, plan.microbatch_first_group
expect = (np.array(ids).tolist(), np.array(groups).tolist(), np.array(first).tolist())
planner.close()
try:
    plan.ids
    raise SystemExit("a Plan view read after close() did not raise StaleViewError")
except dcpack.StaleViewError:
    pass
del planner, plan
gc.collect()
junk = [np.ones(1 << 20) for _ in range(64)]   # reuse what a freed workspace held
got = (ids.tolist(), groups.tolist(), first.tolist())
assert got == expect, "arrays changed after close()"
assert sorted(got[0]) == list(range(40000))
print("OK")
"""

STEP_AFTER_CLOSE = """
import gc, numpy as np, dcpack
config = dcpack.Config(data_parallel_size=2, max_sequences=1 << 14, max_seqlen_per_rank=1 << 16,
                       max_tokens_per_rank=1 << 20)
cluster = dcpack.InprocCluster(config)
lengths = [[64, 128, 32], [96, 16]]

def rank(w):
    args = cluster.args(w)
    samples = [dcpack.Sample(tokens=np.arange(n, dtype=np.int64) + 1000 * w, labels=np.arange(n, dtype=np.int64),
                             loss_mask=np.ones(n, dtype=np.float32), position_ids=np.arange(n, dtype=np.int64))
               for n in lengths[w]]
    stepper = dcpack.Stepper(config)
    out = stepper.step(samples, args)
    mb = out.microbatch(0)
    arrays = (mb.tokens, mb.cu_seqlens, mb.padding_mask, out.plan.ids if out.plan is not None else None)
    expect = [None if a is None else np.array(a).tolist() for a in arrays]
    stepper.close()
    try:
        out.microbatch(0).tokens
        return "a StepOutput read after close() did not raise StaleViewError"
    except dcpack.StaleViewError:
        pass
    del stepper, out, mb
    gc.collect()
    junk = [np.ones(1 << 20) for _ in range(32)]
    got = [None if a is None else a.tolist() for a in arrays]
    return "OK" if got == expect else f"arrays changed after close(): {got} != {expect}"

results = cluster.run(rank)
assert results == ["OK", "OK"], results
print("OK")
"""


@pytest.mark.parametrize("script", [PLAN_AFTER_CLOSE, STEP_AFTER_CLOSE], ids=["plan", "step"])
def test_arrays_outlive_close(script):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (
        f"child exited {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
