"""bench/training/pipeline_compose.py's composition of a replay's per-rank stage times (bench_train_step.py
--replay --pp), exactly against hand-computed schedules; no torch, no GPU: synthetic per-rank times."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "training"))
import pipeline_compose as pc  # noqa: E402


def t(f, b, ff, fb, lf, lb):
    """One rank's times of a microbatch: layer stack forward / backward, embedding f / b, head + loss f / b."""
    return dict(forward=f, backward=b, first_forward=ff, first_backward=fb, last_forward=lf, last_backward=lb)


# microbatch 0 on one CP-2 group (ranks 0, 1), microbatch 1 on two CP-1 groups (rank 0, rank 1)
GROUPS = [[(0, 2)], [(0, 1), (1, 1)]]
RANKS = [[t(4, 6, 1, 1, 2, 1), t(2, 4, 1, 1, 2, 2)],
         [t(3, 8, 0.5, 1, 1, 2), t(1, 3, 1, 1, 1, 1)]]


def test_a_microbatch_part_is_its_slowest_ranks_each_part_apart():
    mbs = pc.microbatch_times(GROUPS, RANKS)
    assert mbs == [t(4, 8, 1, 1, 2, 2), t(2, 4, 1, 1, 2, 2)]
    # an idle rank (None) counts for nothing
    assert pc.microbatch_times([[(1, 1)]], [[None], [t(1, 2, 3, 4, 5, 6)]]) == [t(1, 2, 3, 4, 5, 6)]


def test_one_f_one_b_by_hand():
    # P 2, V 1; microbatches (slowest rank per part) 0: layers f 4 b 8, 1: layers f 2 b 4; embedding f 1 b 1,
    # head + loss f 2 b 2.  Each stage takes half the layers, stage 0 adds the embedding, stage 1 the head:
    #   stage 0: F0 2+1=3  F1 1+1=2  B0 4+1=5  B1 2+1=3      (1F1B: F0 F1 B0 B1)
    #   stage 1: F0 2+2=4  F1 1+2=3  B0 4+2=6  B1 2+2=4      (F0 B0 F1 B1)
    #   stage 0: F0 [0,3]  F1 [3,5]                 B0 [13,18]         B1 [20,23]
    #   stage 1:           F0 [3,7]  B0 [7,13]  F1 [13,16]  B1 [16,20]
    # makespan 23
    got = pc.pipeline_step(GROUPS, RANKS, 2)
    assert got["makespan"] == 23
    assert got["microbatch_sum"] == (4 + 8 + 1 + 1 + 2 + 2) + (2 + 4 + 1 + 1 + 2 + 2)


def test_interleaved_by_hand():
    # P 2, V 2, group 2; microbatch 0: layers f 4 b 8, 1: f 8 b 4 (a virtual stage a quarter); embedding
    # f 1 b 1 on k 0, head + loss f 2 b 2 on k 3 (stage 0 holds k 0 and 2, stage 1 k 1 and 3):
    #   mb 0: F k0..3 = 2 1 1 3, B = 3 2 2 4;   mb 1: F = 3 2 2 4, B = 2 1 1 3
    #   stage 0 (warm-up 4): F(0,k0) [0,2] F(1,k0) [2,5] F(0,k2) [5,6] F(1,k2) [7,9]
    #                        B(0,k2) [14,16] B(1,k2) [21,22] B(0,k0) [23,26] B(1,k0) [26,28]
    #   stage 1 (warm-up 2): F(0,k1) [2,3] F(1,k1) [5,7] F(0,k3) [7,10] B(0,k3) [10,14] F(1,k3) [14,18]
    #                        B(1,k3) [18,21] B(0,k1) [21,23] B(1,k1) [23,24]
    # makespan 28
    groups = [[(0, 1)], [(0, 1)]]
    ranks = [[t(4, 8, 1, 1, 2, 2), t(8, 4, 1, 1, 2, 2)]]
    assert pc.pipeline_step(groups, ranks, 2, 2, 2)["makespan"] == 28


def test_planted_errors_change_the_result():
    """The composition notices: the extras on the wrong stages, the plan's order ignored, one rank read
    for the microbatch instead of its slowest."""
    right = pc.pipeline_step(GROUPS, RANKS, 2)["makespan"]
    swapped = [[{**d, "first_forward": d["last_forward"], "last_forward": d["first_forward"],
                 "first_backward": d["last_backward"], "last_backward": d["first_backward"]} for d in row]
               for row in RANKS]
    assert pc.pipeline_step(GROUPS, swapped, 2)["makespan"] == 22 != right   # worked as above: 22
    reordered = pc.pipeline_step(GROUPS[::-1], [row[::-1] for row in RANKS], 2)["makespan"]
    assert reordered != right
    rank0 = pc.pipeline_step([[(0, 1)], [(0, 1)]], [RANKS[0], [None, None]], 2)["makespan"]
    assert rank0 != right


def test_a_count_megatron_refuses_raises():
    # interleaved, P 2, group 2, 3 microbatches: the last group holds 1 < P
    groups = [[(0, 1)]] * 3
    with pytest.raises(ValueError):
        pc.pipeline_step(groups, [[t(1, 1, 0, 0, 0, 0)] * 3], 2, 2, 2)
    assert not pc.runs(3, 2, 2, 2) and pc.runs(4, 2, 2, 2)
