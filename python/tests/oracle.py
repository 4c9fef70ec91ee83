"""What one DPxCP rank should get for one microbatch, computed the straightforward way in numpy.

A Python transcription of the reference's order of operations, as
tests/oracle.c (the C suite's oracle) writes it: concatenate the rank's whole
samples, build cu_seqlens, the padding mask by searching cu_seqlens_padded,
sanitise, extend the last sequence (extend_last), pad before slicing, slice
with TransformerEngine's zigzag index formula (or contiguous slices), then
pad_sequence_for_thd.  It shares no code with the library.
"""

from __future__ import annotations

import numpy as np


class OracleRefuses(Exception):
    """The reference would assert here (the step must fail too)."""


def round_up(v: int, a: int) -> int:
    return ((v + a - 1) // a) * a


def rank_ids(plan_lists: list[list[list[int]]], m: int, r: int) -> list[int]:
    return plan_lists[m][r]


def microbatch(config: dict, plan_lists: list[list[list[int]]], batch: dict[str, list], m: int, rank: int) -> dict:
    """Expected output of DPxCP rank ``rank`` in microbatch ``m``.

    config: dict with pad_alignment, pad_to_max_seqlen, max_seqlen_per_rank,
    max_sequences_per_microbatch, thd_tail_policy ("append_dummy"/"extend_last"),
    cp_partition ("zigzag"/"contiguous").  batch: per global id, "padded" and
    "original" lengths and the four field arrays (each of the padded length).
    """
    mine = rank_ids(plan_lists, m, rank)
    if not mine:
        raise OracleRefuses(f"rank {rank} empty in microbatch {m}")
    num_ranks = len(plan_lists[m])
    holders = [r for r in range(num_ranks) if mine[0] in plan_lists[m][r]]
    cp, cp_rank = len(holders), sum(1 for r in holders if r < rank)
    n = len(mine)

    padded = [batch["padded"][i] for i in mine]
    original = [batch["original"][i] for i in mine]
    t = {k: np.concatenate([batch[k][i] for i in mine]) for k in ("tokens", "labels", "position_ids", "loss_mask")}
    packed = int(sum(padded))
    cu = [0] + list(np.cumsum(original))
    cup = [0] + list(np.cumsum(padded))
    max_seqlen = max(padded)

    padding = bool(config["pad_to_max_seqlen"]) or config["pad_alignment"] > 0
    target_len = config["max_seqlen_per_rank"] if config["pad_to_max_seqlen"] else -1
    alignment = config["pad_alignment"] if (not config["pad_to_max_seqlen"] and config["pad_alignment"] > 0) else -1
    dummy_policy = config["thd_tail_policy"] == "append_dummy"
    K = config["max_sequences_per_microbatch"]
    max_num_seqs = K + (1 if dummy_policy else 0) if (padding and K > 0) else -1
    zigzag = config["cp_partition"] == "zigzag"
    contiguous_local = -1
    if cp > 1 and not zigzag and padding:
        contiguous_local = target_len if target_len >= 0 else round_up((cup[n] + cp - 1) // cp, alignment)

    # _build_thd_padding_mask and _sanitize_thd_padding_values
    x = np.arange(packed)
    cup_a = np.array(cup, dtype=np.int64)
    cu_a = np.array(cu, dtype=np.int64)
    k = np.searchsorted(cup_a[1:], x, side="right")
    valid_len = cu_a[1:] - cu_a[:-1]
    valid_end = np.where(k < n, cup_a[np.minimum(k, n - 1)] + valid_len[np.minimum(k, n - 1)], 0)
    mask = (k >= n) | (x >= valid_end)
    for key in ("tokens", "labels", "position_ids"):
        t[key] = np.where(mask, 0, t[key]).astype(np.int64)
    t["loss_mask"] = np.where(mask, np.float32(0), t["loss_mask"]).astype(np.float32)
    t["mask"] = mask

    # extend_thd_padding_before_cp_slice
    non_dummy_target = -1
    if padding and not dummy_policy:
        local_t = target_len if target_len >= 0 else (
            contiguous_local if contiguous_local >= 0 else round_up((cup[n] + cp - 1) // cp, alignment))
        gt = local_t * cp
        if cup[n] > gt:
            raise OracleRefuses("packed exceeds target")
        if cp > 1 and zigzag and gt % (2 * cp) != 0:
            raise OracleRefuses("target vs 2*cp")
        if cup[n] < gt:
            cup[n] = gt
            max_seqlen = max(max_seqlen, cup[n] - cup[n - 1])
        non_dummy_target = gt

    def resize(length: int) -> None:
        keep = min(len(t["mask"]), length)
        for key in ("tokens", "labels", "position_ids", "loss_mask", "mask"):
            old = t[key]
            new = np.zeros(length, dtype=old.dtype) if key != "mask" else np.ones(length, dtype=bool)
            new[:keep] = old[:keep]
            t[key] = new

    # get_cp_slice_for_thd
    partition_total = non_dummy_target if non_dummy_target >= 0 else (
        contiguous_local * cp if contiguous_local >= 0 else -1)
    total = partition_total if partition_total >= 0 else cup[n]
    if partition_total >= 0:
        if partition_total < len(t["mask"]):
            raise OracleRefuses("partition total below the packed length")
        resize(partition_total)
    if cp > 1:
        if not zigzag:
            if total % cp:
                raise OracleRefuses("not divisible by cp")
            rows = total // cp
            idx = cp_rank * rows + np.arange(rows)
        else:
            if any(c % (2 * cp) for c in cup):
                raise OracleRefuses("cu_seqlens_padded vs 2*cp")
            cu_s = np.array([c // cp for c in cup], dtype=np.int64)
            rows = total // cp
            token_id = np.arange(rows)
            seq = np.searchsorted(cu_s[1:n], token_id, side="right")  # TE's binary search over [1, n]
            seq_len = cu_s[seq + 1] - cu_s[seq]
            index = token_id - cu_s[seq]
            offset = np.where(index < seq_len // 2, cp_rank, (cp - 1) * 2 - cp_rank)
            idx = index + cu_s[seq] * cp + seq_len // 2 * offset
        for key in ("tokens", "labels", "position_ids", "loss_mask", "mask"):
            t[key] = t[key][idx]
    total_tokens = contiguous_local if contiguous_local >= 0 else cup[n] // cp
    if total_tokens != len(t["mask"]):
        raise OracleRefuses("total_tokens vs rows")

    entries = n + 1
    cu, cup = list(cu), list(cup)
    # pad_sequence_for_thd
    if padding:
        local_actual = len(t["mask"])
        local_target = target_len if target_len >= 0 else round_up(local_actual, alignment)
        gt, ga = local_target * cp, cup[n]
        if any(cu[i + 1] - cu[i] > gt for i in range(n)):
            raise OracleRefuses("request longer than the target")
        if local_actual > local_target:
            raise OracleRefuses("rows exceed target")
        resize(local_target)
        dummy = last_padded = 0
        if gt > ga and dummy_policy:
            dummy = gt - ga
            if cp > 1 and zigzag and dummy % (2 * cp):
                raise OracleRefuses("dummy vs 2*cp")
            cu.append(cu[-1] + dummy)
            cup.append(gt)
            entries += 1
        elif gt > ga:
            if cp != 1:
                raise OracleRefuses("non-dummy tail after slicing with cp > 1")
            cup[entries - 1] = gt
            last_padded = cup[entries - 1] - cup[entries - 2]
        if max_num_seqs >= 0:
            if entries > max_num_seqs + 1:
                raise OracleRefuses("thd_max_packed_sequences exceeded")
            while entries < max_num_seqs + 1:
                cu.append(cu[-1])
                cup.append(cup[-1])
                entries += 1
            max_seqlen = gt
        else:
            max_seqlen = max(max_seqlen, dummy, last_padded)

    return {
        "num_tokens": len(t["mask"]),
        "tokens": t["tokens"], "labels": t["labels"], "position_ids": t["position_ids"],
        "loss_mask": t["loss_mask"], "padding_mask": t["mask"],
        "cu_seqlens": np.array(cu, dtype=np.int32), "cu_seqlens_padded": np.array(cup, dtype=np.int32),
        "max_seqlen": int(max_seqlen), "local_cp_size": cp, "cp_rank": cp_rank, "num_sequences": n,
    }
