"""Microbatches from ``dcp_step`` as model input, CP process groups, the loss, and one training step.

- :class:`CPGroups`: one torch.distributed group per CP block ``[first, first+size)``
  of DPxCP ranks, made once (collectively) and looked up per microbatch.
- :class:`THDBatch`: one rank's microbatch on a device, with its attention layout;
  ``THDBatch.from_microbatch(mb, ...)`` takes a :class:`dcpack.Microbatch` (CPU
  step) or a :class:`dcpack.torch.TorchMicrobatch` (CUDA step) as it is.
- :func:`loss_sum`, :func:`loss_denominator`, :func:`forward_backward`,
  :func:`train_step`: token cross entropy masked by ``loss_mask`` (and never on a
  padding slot), normalised by the global loss-mask sum (the count of tokens in the
  loss when the mask is 0/1), gradients summed over DPxCP after the step's last
  microbatch, as Megatron-LM's per-token loss does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from .attention import AttentionLayout


class CPGroups:
    """torch.distributed groups for the CP blocks of ``num_ranks`` DPxCP ranks.

    ``ranks[i]`` is the global rank of DPxCP rank i (default: the default group's
    ranks 0..num_ranks-1).  Made up front for every aligned block of the sizes in
    ``sizes`` (default: the powers of two up to ``num_ranks`` and ``num_ranks``
    itself); :meth:`ensure` adds, collectively and in the same order on every
    rank, the blocks a plan uses that are not there yet (a dp_balanced CP size or a
    full-group fallback that is not aligned).  Every process of the default group
    must make the same calls (``new_group`` is collective over it).
    """

    def __init__(self, num_ranks: int, ranks: Optional[Sequence[int]] = None,
                 sizes: Optional[Iterable[int]] = None) -> None:
        self.num_ranks = int(num_ranks)
        self.ranks = list(range(self.num_ranks)) if ranks is None else [int(r) for r in ranks]
        if len(self.ranks) != self.num_ranks:
            raise ValueError(f"ranks names {len(self.ranks)} ranks, num_ranks is {self.num_ranks}")
        self._groups: Dict[tuple, Any] = {}
        if sizes is None:
            sizes = [1 << k for k in range(1, self.num_ranks.bit_length()) if (1 << k) <= self.num_ranks]
            sizes.append(self.num_ranks)
        for size in sorted(set(int(s) for s in sizes)):
            if size < 2 or size > self.num_ranks:
                continue
            for first in range(0, self.num_ranks - size + 1, size):
                self._make(first, size)

    def _make(self, first: int, size: int) -> None:
        self._groups[(first, size)] = dist.new_group(self.ranks[first:first + size])

    def ensure(self, plan: Any) -> None:
        """Make the groups of every CP block of ``plan`` (a dcpack.Plan) that is missing; collective."""
        need = set()
        for m in range(plan.num_microbatches):
            for first, size, _ in plan.groups(m):
                if size > 1 and (int(first), int(size)) not in self._groups:
                    need.add((int(first), int(size)))
        for first, size in sorted(need):
            self._make(first, size)

    def get(self, first: int, size: int) -> Any:
        """The group of DPxCP ranks ``[first, first+size)`` (None for size 1)."""
        if size == 1:
            return None
        try:
            return self._groups[(first, size)]
        except KeyError:
            raise KeyError(f"no CP group for DPxCP ranks [{first}, {first + size}): call CPGroups.ensure(plan) "
                           f"on every rank first") from None


def _host_ints(x: Any) -> List[int]:
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.cpu().tolist()]
    return [int(v) for v in np.asarray(x).tolist()]


def _tensor(x: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(x), device=device).to(dtype)


@dataclass
class THDBatch:
    """One rank's microbatch on a device: the fields ``dcp_step`` returns and its attention layout."""

    tokens: torch.Tensor          # int64 [T]
    labels: torch.Tensor          # int64 [T]
    loss_mask: torch.Tensor       # float32 [T]; 0 on padding slots
    position_ids: torch.Tensor    # int64 [T]; RoPE positions
    padding_mask: torch.Tensor    # bool [T]; True on padding slots
    cu_seqlens: List[int]
    cu_seqlens_padded: List[int]
    max_seqlen: int
    local_cp_size: int
    cp_rank: int
    layout: AttentionLayout

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def from_fields(cls, *, tokens: Any, labels: Any, loss_mask: Any, position_ids: Any, padding_mask: Any,
                    cu_seqlens: Any, cu_seqlens_padded: Any, max_seqlen: int, local_cp_size: int, cp_rank: int,
                    partition: str = "zigzag", group: Any = None, device: Any = None) -> "THDBatch":
        """From the microbatch fields (numpy arrays or tensors); ``group`` is the CP group (None at CP 1)."""
        device = torch.device(device) if device is not None else torch.device("cpu")
        cp, cp_rank = int(local_cp_size), int(cp_rank)
        if cp > 1 and group is None:
            raise ValueError(f"a microbatch with local_cp_size {cp} needs its CP group")
        t = _tensor(tokens, torch.int64, device)
        cup = _host_ints(cu_seqlens_padded)
        lay = AttentionLayout.build(cup, int(t.shape[0]), cp, cp_rank, partition, group, device)
        return cls(tokens=t, labels=_tensor(labels, torch.int64, device),
                   loss_mask=_tensor(loss_mask, torch.float32, device),
                   position_ids=_tensor(position_ids, torch.int64, device),
                   padding_mask=_tensor(padding_mask, torch.bool, device),
                   cu_seqlens=_host_ints(cu_seqlens), cu_seqlens_padded=cup, max_seqlen=int(max_seqlen),
                   local_cp_size=cp, cp_rank=cp_rank, layout=lay)

    @classmethod
    def from_microbatch(cls, mb: Any, *, dp_cp_rank: int, groups: Optional[CPGroups], partition: str = "zigzag",
                        device: Any = None) -> "THDBatch":
        """From a dcpack.Microbatch or dcpack.torch.TorchMicrobatch of DPxCP rank ``dp_cp_rank``.

        ``partition`` is the configuration's ``cp_partition``; the CP group is the
        block ``[dp_cp_rank - cp_rank, ... + local_cp_size)`` of ``groups``.
        """
        cp, r = int(mb.local_cp_size), int(mb.cp_rank)
        group = groups.get(dp_cp_rank - r, cp) if cp > 1 else None
        host = getattr(mb, "cu_seqlens_padded_host", None) if not isinstance(mb.cu_seqlens_padded, np.ndarray) \
            else None
        host_cu = getattr(mb, "cu_seqlens_host", None) if host is not None else None
        return cls.from_fields(tokens=mb.tokens, labels=mb.labels, loss_mask=mb.loss_mask,
                               position_ids=mb.position_ids, padding_mask=mb.padding_mask,
                               cu_seqlens=host_cu if host_cu is not None else mb.cu_seqlens,
                               cu_seqlens_padded=host if host is not None else mb.cu_seqlens_padded,
                               max_seqlen=mb.max_seqlen, local_cp_size=cp, cp_rank=r, partition=partition,
                               group=group, device=device)

    def loss_weights(self) -> torch.Tensor:
        """``loss_mask`` with every padding slot at 0 (fp32)."""
        return torch.where(self.padding_mask, torch.zeros_like(self.loss_mask), self.loss_mask)


def loss_sum(model: torch.nn.Module, batch: THDBatch) -> torch.Tensor:
    """Sum over this rank's slots of cross entropy x loss weight (fp32 scalar, with autograd)."""
    logits = model(batch)
    ce = F.cross_entropy(logits.float(), batch.labels, reduction="none")
    return (ce * batch.loss_weights()).sum()


def loss_denominator(batches: Sequence[THDBatch], group: Any = None, device: Any = None) -> torch.Tensor:
    """The global batch's loss-weight sum: this rank's microbatches, summed over the DPxCP group.

    CP ranks hold disjoint slots of a sequence, so the sum over DPxCP counts every
    token of the global batch once.
    """
    dev = batches[0].tokens.device if batches else torch.device(device or "cpu")
    local = torch.zeros((), dtype=torch.float64, device=dev)
    for b in batches:
        local = local + b.loss_weights().double().sum()
    if dist.is_initialized():
        dist.all_reduce(local, group=group)
    return local


def forward_backward(model: torch.nn.Module, batch: THDBatch, denominator: Any = 1.0) -> torch.Tensor:
    """One microbatch forward and backward: ``loss_sum / denominator``, gradients accumulated; returns it detached."""
    loss = loss_sum(model, batch) / denominator
    loss.backward()
    return loss.detach()


def allreduce_gradients(model: torch.nn.Module, group: Any = None) -> None:
    """Sum every parameter's gradient over ``group`` (one flat buffer, one collective)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, group=group)
    off = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[off:off + n].view_as(p.grad))
        off += n


def train_step(model: torch.nn.Module, batches: Sequence[THDBatch], *, group: Any = None,
               optimizer: Optional[torch.optim.Optimizer] = None, timer: Any = None) -> float:
    """One step over this rank's microbatches: the global loss (every rank returns the same value).

    Gradients are zeroed, accumulated over the microbatches (each ``loss_sum`` over
    the global denominator), summed over the DPxCP ``group`` once at the end, and
    ``optimizer.step()`` runs when given.  ``timer``: a :class:`dcpack.thd.online.MicrobatchTimer`
    that marks each microbatch's forward and backward (CUDA events, read at the next step).
    """
    model.zero_grad(set_to_none=False)
    den = loss_denominator(batches, group, device=model.device if hasattr(model, "device") else None)
    total = torch.zeros((), dtype=torch.float64, device=den.device)
    if timer is not None:
        timer.begin(len(batches))
    for b in batches:
        total = total + forward_backward(model, b, den.float()).double()
        if timer is not None:
            timer.mark()
    if timer is not None:
        timer.end()
    if dist.is_initialized():
        allreduce_gradients(model, group)
        dist.all_reduce(total, group=group)
    if optimizer is not None:
        optimizer.step()
    return float(total)
