"""dcpack.thd trained on dcp_step's microbatches equals unpacked per-sequence training (CPU, gloo, 1 to 4 ranks).

The cases and the comparison are in thd_equality.py (which also runs unchanged on
GPUs under torchrun).  Each world size is one set of spawned processes running all
its cases; results are compared here against the fp32 tolerances stated there.
Planted errors (a swapped zigzag chunk, one shifted position id, a padding slot in
the loss, a padding token in a real sequence's attention, a cu_seqlens_padded boundary
one short) must fail the comparison.

``DCPACK_THD_WORLDS`` (default "1,2,3,4") picks the world sizes; ``DCPACK_THD_CASES``
"all" runs every trace family for every setting (default "small": one family per
setting, the families rotating across settings).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="dcpack.thd needs torch")
import torch.multiprocessing as mp  # noqa: E402

import thd_equality as te  # noqa: E402

WORLDS = [int(w) for w in os.environ.get("DCPACK_THD_WORLDS", "1,2,3,4").split(",") if w]
FULL = os.environ.get("DCPACK_THD_CASES", "small") == "all"
_RESULTS = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cases(world):
    return te.matrix(world, full=FULL) + te.planted(world)


def results(world):
    """Run every case of one world size once (spawned gloo processes); results by case name."""
    if world not in _RESULTS:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "result.json")
            mp.spawn(te.worker, args=(world, "gloo", "cpu", f"tcp://127.0.0.1:{_free_port()}", _cases(world), out,
                                      "fp32", "math", "inproc"), nprocs=world, join=True)
            with open(out) as f:
                _RESULTS[world] = {r["case"]: r for r in json.load(f)["results"]}
    return _RESULTS[world]


EQUAL = [(w, te.case_name(c)) for w in WORLDS for c in te.matrix(w, full=FULL)]
PLANTED = [(w, te.case_name(c)) for w in WORLDS for c in te.planted(w)]


@pytest.mark.parametrize("world,name", EQUAL)
def test_packed_training_equals_unpacked(world, name):
    r = results(world)[name]
    assert "error" not in r, r.get("error")
    assert r["loss_rel"] <= te.FP32_TOL["loss"], r
    assert r["grad_rel"] <= te.FP32_TOL["grad"], r
    assert r["update_rel"] <= te.FP32_TOL["update"], r
    assert sum(r["microbatches"]) >= te.STEPS


def test_cp_groups_larger_than_one_are_exercised():
    """The matrix really trains microbatches with CP 2 (and 4 on 4 ranks), so CP attention is covered."""
    for world in WORLDS:
        seen = set()
        for name, r in results(world).items():
            if "+" not in name and "error" not in r:
                seen.update(r["cp_sizes"])
        if world >= 2:
            assert 2 in seen, (world, seen)
        if world >= 4:
            assert 4 in seen, (world, seen)


@pytest.mark.parametrize("world,name", PLANTED)
def test_planted_error_fails_the_comparison(world, name):
    r = results(world)[name]
    assert r.get("planted_at") is not None, f"{name}: no microbatch to plant the error in ({r.get('error')})"
    if "error" in r:
        return  # the corrupted microbatch refused by the model (LayoutError): also caught
    assert not te.verdict(r, te.FP32_TOL), r
    # far outside the tolerance, not at its edge
    assert max(r["loss_rel"] / te.FP32_TOL["loss"], r["grad_rel"] / te.FP32_TOL["grad"]) > 10, r
