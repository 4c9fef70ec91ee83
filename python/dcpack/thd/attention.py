"""Causal attention over a THD buffer, with context parallelism inside a microbatch's CP group.

A microbatch from ``dcp_step`` gives this rank ``num_tokens`` slots of a packed
buffer whose padded spans ``cu_seqlens_padded`` (global, before CP slicing)
separate the sequences.  :func:`layout` works out, for one CP rank, which
global position every local slot holds and cuts the local slots into *runs*:
consecutive slots of one span at consecutive positions.  A run's queries attend
to the key prefix of their span up to the run's last position, so the mask of
every run is causal aligned bottom-right (query i of a run of q_len against k_len
keys sees keys j <= k_len - q_len + i).

- zigzag (``cp_partition="zigzag"``, CP > 1): each span is cut into 2·cp equal
  chunks and CP rank r holds chunks r and 2·cp-1-r, one after the other, at
  local offset ``cu_seqlens_padded[i] / cp``: two runs per span.
- contiguous (CP > 1): the packed microbatch is cut into cp equal slices and rank r
  holds slice r (positions ``r*num_tokens ...``): one run per span it meets.
- CP 1: the buffer is the packed microbatch: one run per span.

K and V are all-gathered inside the CP group (:class:`GatherKV`, an autograd
function whose backward reduce-scatters dK and dV back to the ranks that own
them), put in global order, and each run reads its key prefix from them.

Two kernels compute the same thing: ``"varlen"``, torch's FlashAttention varlen
kernel (``torch.nn.attention.varlen.varlen_attn``, CUDA, bf16/fp16), and
``"math"``, an exact per-run softmax attention with an explicit causal mask
(any device and dtype; the fp32 reference of the equality tests).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

PARTITIONS = ("zigzag", "contiguous")


class LayoutError(ValueError):
    """A microbatch whose boundaries do not describe its buffer (names the value)."""


def _spans(cu_padded: Sequence[int]) -> List[Tuple[int, int]]:
    cu = [int(c) for c in cu_padded]
    if not cu or cu[0] != 0:
        raise LayoutError(f"cu_seqlens_padded must start at 0, got {cu[:4]}")
    out = []
    for i in range(len(cu) - 1):
        if cu[i + 1] < cu[i]:
            raise LayoutError(f"cu_seqlens_padded decreases at entry {i + 1}: {cu[i]} -> {cu[i + 1]}")
        if cu[i + 1] > cu[i]:
            out.append((cu[i], cu[i + 1]))
    return out


def layout(cu_seqlens_padded: Sequence[int], num_tokens: int, cp: int, cp_rank: int,
           partition: str = "zigzag") -> Tuple[np.ndarray, List[Tuple[int, int, int, int]]]:
    """Global positions of one CP rank's slots, and its runs.

    Returns ``(positions, runs)``: ``positions[j]`` is the position of local slot j
    in the packed microbatch (all CP ranks' slots together: ``cp * num_tokens``
    positions); each run ``(q_start, q_len, k_start, k_len)`` says that local
    slots ``q_start .. q_start+q_len-1`` hold positions ``k_start + k_len - q_len
    ... k_start + k_len - 1`` of the span starting at ``k_start``.  The runs tile
    the local slots in order.  Raises :class:`LayoutError` when the boundaries do
    not cover exactly ``cp * num_tokens`` positions or a span cannot be cut.
    """
    if partition not in PARTITIONS:
        raise LayoutError(f"cp partition must be one of {PARTITIONS}, got {partition!r}")
    if cp < 1 or not 0 <= cp_rank < cp:
        raise LayoutError(f"cp rank {cp_rank} outside a CP group of {cp}")
    spans = _spans(cu_seqlens_padded)
    end = spans[-1][1] if spans else 0
    if end != cp * num_tokens:
        raise LayoutError(f"cu_seqlens_padded ends at {end}, but {cp} CP rank(s) of {num_tokens} slots hold "
                          f"{cp * num_tokens} positions")
    runs: List[Tuple[int, int, int, int]] = []
    pos = np.empty(num_tokens, dtype=np.int64)
    if cp == 1 or partition == "contiguous":
        lo, hi = cp_rank * num_tokens, (cp_rank + 1) * num_tokens
        pos[:] = np.arange(lo, hi)
        for s, e in spans:
            a, b = max(s, lo), min(e, hi)
            if a < b:
                runs.append((a - lo, b - a, s, b - s))
        return pos, runs
    for s, e in spans:
        length = e - s
        if length % (2 * cp) or s % cp:
            raise LayoutError(f"zigzag: span [{s}, {e}) of {length} positions is not cut into {2 * cp} equal chunks")
        c, o = length // (2 * cp), s // cp
        for k, chunk in enumerate((cp_rank, 2 * cp - 1 - cp_rank)):
            pos[o + k * c:o + (k + 1) * c] = np.arange(s + chunk * c, s + (chunk + 1) * c)
            runs.append((o + k * c, c, s, (chunk + 1) * c))
    return pos, runs


@dataclass
class AttentionLayout:
    """What one microbatch's attention needs on this rank (built once per microbatch, shared by layers).

    ``cu_q`` / ``cu_k`` (int32, on the device) and ``max_q`` / ``max_k`` are the
    varlen kernel's arguments over the runs; ``key_index`` (int64, device) picks
    each run's key prefix out of the gathered K/V (rank-major order: all of CP
    rank 0's slots, then rank 1's, ...), or is None at CP 1 where the keys are the
    local buffer itself; ``runs`` the host list.
    """

    runs: List[Tuple[int, int, int, int]]
    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int
    key_index: Optional[torch.Tensor]
    cp: int
    cp_rank: int
    group: Any
    num_tokens: int

    @classmethod
    def build(cls, cu_seqlens_padded: Sequence[int], num_tokens: int, cp: int, cp_rank: int, partition: str,
              group: Any, device: Any) -> "AttentionLayout":
        _, runs = layout(cu_seqlens_padded, num_tokens, cp, cp_rank, partition)
        cu_q = [0]
        cu_k = [0]
        for q_start, q_len, _, k_len in runs:
            cu_q.append(cu_q[-1] + q_len)
            cu_k.append(cu_k[-1] + k_len)
        key_index = None
        if cp > 1:
            # gathered slot (rank-major) of every global position
            where = np.empty(cp * num_tokens, dtype=np.int64)
            for r in range(cp):
                pos_r, _ = layout(cu_seqlens_padded, num_tokens, cp, r, partition)
                where[pos_r] = r * num_tokens + np.arange(num_tokens)
            idx = np.concatenate([where[k_start:k_start + k_len] for _, _, k_start, k_len in runs]) \
                if runs else np.zeros(0, dtype=np.int64)
            key_index = torch.as_tensor(idx, device=device)
        return cls(runs=runs, cu_q=torch.tensor(cu_q, dtype=torch.int32, device=device),
                   cu_k=torch.tensor(cu_k, dtype=torch.int32, device=device),
                   max_q=max((r[1] for r in runs), default=0), max_k=max((r[3] for r in runs), default=0),
                   key_index=key_index, cp=cp, cp_rank=cp_rank, group=group, num_tokens=num_tokens)


def _supports_reduce_scatter(group: Any) -> bool:
    return dist.get_backend(group) != "gloo"


class GatherKV(torch.autograd.Function):
    """All-gather along dim 0 inside a CP group; the backward reduce-scatters the gradient.

    Forward: every rank's ``[n, ...]`` tensor -> ``[cp * n, ...]`` in rank order.
    Backward: the gradient of the gathered tensor is summed over the group and
    each rank keeps its own ``n`` rows (``reduce_scatter_tensor``; on gloo, which
    has no reduce-scatter, an all-reduce and a slice: the same sum).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: Any, cp: int, cp_rank: int) -> torch.Tensor:
        ctx.group, ctx.cp, ctx.cp_rank = group, cp, cp_rank
        x = x.contiguous()
        out = torch.empty((cp * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        if dist.get_backend(group) == "gloo":
            dist.all_gather(list(out.chunk(cp)), x, group=group)
        else:
            dist.all_gather_into_tensor(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        n = grad.shape[0] // ctx.cp
        if _supports_reduce_scatter(ctx.group):
            out = torch.empty((n,) + tuple(grad.shape[1:]), dtype=grad.dtype, device=grad.device)
            dist.reduce_scatter_tensor(out, grad, group=ctx.group)
        else:
            total = grad.clone()
            dist.all_reduce(total, group=ctx.group)
            out = total[ctx.cp_rank * n:(ctx.cp_rank + 1) * n].contiguous()
        return out, None, None, None


class _LocalReplay:
    """The group of a CP rank timed alone (see :data:`LOCAL_REPLAY`)."""

    def __repr__(self) -> str:
        return "dcpack.thd.LOCAL_REPLAY"


#: Pass as a microbatch's CP group to compute one CP rank's share with no peers: the gathered K/V
#: is this rank's own K/V repeated cp times, so every kernel runs on the shapes the real group
#: gives (the replay mode of bench/training/bench_train_step.py; the values, hence the loss, are not the
#: real group's).
LOCAL_REPLAY = _LocalReplay()


def gather_kv(kv: torch.Tensor, lay: AttentionLayout) -> torch.Tensor:
    """K and V of this microbatch's whole CP group, each run's key prefix in order: ``[sum k_len, ...]``."""
    if lay.cp == 1:
        return kv
    if lay.group is LOCAL_REPLAY:
        full = kv.repeat((lay.cp,) + (1,) * (kv.dim() - 1))
    else:
        full = GatherKV.apply(kv, lay.group, lay.cp, lay.cp_rank)
    return full.index_select(0, lay.key_index)


# ---- kernels --------------------------------------------------------------------------------------

def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lay: AttentionLayout,
                   scale: Optional[float] = None) -> torch.Tensor:
    """Exact causal attention, run by run: ``q [Tq, H, D]``, ``k``/``v`` ``[Tk, Hkv, D]`` -> ``[Tq, H, D]``.

    Each run is a softmax over its key prefix with an explicit bottom-right
    causal mask, computed in the inputs' dtype (fp32 in the equality tests).
    """
    h, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    outs = []
    kq = 0
    for q_start, q_len, _, k_len in lay.runs:
        qs = q[q_start:q_start + q_len].transpose(0, 1)                      # [H, q, D]
        ks = k[kq:kq + k_len].transpose(0, 1).repeat_interleave(h // hkv, 0)   # [H, k, D]
        vs = v[kq:kq + k_len].transpose(0, 1).repeat_interleave(h // hkv, 0)
        kq += k_len
        scores = torch.matmul(qs, ks.transpose(1, 2)) * scale
        i = torch.arange(q_len, device=q.device)[:, None]
        j = torch.arange(k_len, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + (k_len - q_len), float("-inf"))
        outs.append(torch.matmul(torch.softmax(scores, dim=-1), vs).transpose(0, 1))
    if not outs:
        return q.new_zeros(q.shape)
    return torch.cat(outs, 0)


_VARLEN_PARAMS: Optional[frozenset] = None


def _varlen_params() -> frozenset:
    global _VARLEN_PARAMS
    if _VARLEN_PARAMS is None:
        from torch.nn.attention.varlen import varlen_attn
        _VARLEN_PARAMS = frozenset(inspect.signature(varlen_attn).parameters)
    return _VARLEN_PARAMS


def varlen_available() -> bool:
    """Whether this torch has ``torch.nn.attention.varlen.varlen_attn`` with a causal mode."""
    try:
        p = _varlen_params()
    except (ImportError, AttributeError):
        return False
    return "window_size" in p or "is_causal" in p


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lay: AttentionLayout,
                     scale: Optional[float] = None) -> torch.Tensor:
    """Causal attention with torch's FlashAttention varlen kernel over the runs (CUDA, bf16/fp16).

    Causal is ``window_size=(-1, 0)`` (or ``is_causal=True`` on the torch releases
    that named it so); the kernel's alignment when q_len != k_len must be
    bottom-right, which ``tests/test_thd_attention.py`` checks against
    :func:`math_attention` on the GPU.  GQA through ``enable_gqa`` where the kernel
    has it, else K/V heads are repeated.
    """
    from torch.nn.attention.varlen import varlen_attn

    params = _varlen_params()
    h, hkv = q.shape[1], k.shape[1]
    kw = {}
    if "window_size" in params:
        kw["window_size"] = (-1, 0)
    else:
        kw["is_causal"] = True
    if h != hkv:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            k = k.repeat_interleave(h // hkv, 1)
            v = v.repeat_interleave(h // hkv, 1)
    if scale is not None:
        kw["scale"] = scale
    return varlen_attn(q.contiguous(), k.contiguous(), v.contiguous(), lay.cu_q, lay.cu_k, lay.max_q, lay.max_k,
                       **kw)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lay: AttentionLayout, kernel: str) -> torch.Tensor:
    """CP attention of one layer: gather K/V over the CP group, then ``kernel`` ("math" or "varlen")."""
    hkv = k.shape[1]
    kv = gather_kv(torch.cat([k, v], 1), lay)
    k_all, v_all = kv[:, :hkv], kv[:, hkv:]
    if kernel == "varlen":
        return varlen_attention(q, k_all, v_all, lay)
    if kernel == "math":
        return math_attention(q, k_all, v_all, lay)
    raise ValueError(f"attention kernel must be 'math' or 'varlen', got {kernel!r}")
