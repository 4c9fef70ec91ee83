"""Shared helpers of the dcpack Python tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
WORKLOADS = SOURCE / "tests" / "data" / "workloads"
GOLDEN = SOURCE / "tests" / "data" / "golden"
sys.path.insert(0, str(HERE))


def read_trace(name: str) -> np.ndarray:
    return np.loadtxt(WORKLOADS / name, dtype=np.int32).reshape(-1)


def plan_hash_program() -> str | None:
    """The dcp_plan_hash program the C build makes (DCPACK_PLAN_HASH, or build/dcp_plan_hash)."""
    p = os.environ.get("DCPACK_PLAN_HASH")
    if p and os.access(p, os.X_OK):
        return p
    for cand in (SOURCE / "build" / "dcp_plan_hash",):
        if os.access(cand, os.X_OK):
            return str(cand)
    return None


def make_batch(lengths, divisor: int, seed: int = 0) -> dict[str, list]:
    """A global batch whose padded spans are multiples of ``divisor`` (2 x the largest CP group)."""
    rng = np.random.default_rng(seed)
    original = [int(v) for v in lengths]
    padded = [((v + divisor - 1) // divisor) * divisor for v in original]
    batch: dict[str, list] = {"original": original, "padded": padded}
    batch["tokens"] = [rng.integers(1, 1 << 40, size=p, dtype=np.int64) for p in padded]
    batch["labels"] = [rng.integers(1, 1 << 40, size=p, dtype=np.int64) for p in padded]
    batch["position_ids"] = [np.arange(p, dtype=np.int64) for p in padded]
    batch["loss_mask"] = [rng.random(p, dtype=np.float32) + np.float32(0.5) for p in padded]
    return batch


def dp_slice(n: int, dp: int, p: int) -> range:
    """The global ids DP rank p brings (contiguous, as the C harness splits them)."""
    return range(n * p // dp, n * (p + 1) // dp)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
