"""What a step gives a rank: StepOutput and Microbatch, views of the stepper's output block.

The C binding returns one int64 row per microbatch (``_core.MICROBATCH_COLUMNS``); the helpers here turn
that table into arrays in bulk, as slices of typed views of one memory block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _core
from ._api import Plan
from ._errors import InvalidArgumentError, StaleViewError

__all__ = ["Microbatch", "StepOutput"]

# -- the microbatch table the binding returns: one int64 row per microbatch, columns by name ---------------

_MB = {name: i for i, name in enumerate(_core.MICROBATCH_COLUMNS)}
_OUT_ARRAYS = (("tokens", "num_tokens", "int64"), ("labels", "num_tokens", "int64"),
               ("loss_mask", "num_tokens", "float32"), ("position_ids", "num_tokens", "int64"),
               ("padding_mask", "num_tokens", "bool"), ("cu_seqlens", "num_cu_seqlens", "int32"),
               ("cu_seqlens_padded", "num_cu_seqlens", "int32"))
_SCALARS = ("num_tokens", "num_cu_seqlens", "num_sequences", "max_seqlen", "local_cp_size", "cp_rank")
_ITEMSIZES = {"int64": 8, "float32": 4, "int32": 4, "bool": 1}


def microbatch_table(raw: dict[str, Any]) -> np.ndarray:
    """The binding's microbatch table as an int64 array [microbatches, columns] (``_core.MICROBATCH_COLUMNS``)."""
    return np.frombuffer(raw["microbatches"], dtype=np.int64).reshape(-1, len(_MB))


def _span(table: np.ndarray, arrays: Sequence[tuple[str, str, str]] = _OUT_ARRAYS) -> tuple[int, int]:
    """(first address aligned down to 8, bytes to the end of the last array) over the table's arrays."""
    lo, hi = None, 0
    for name, count, dt in arrays:
        addr = table[:, _MB[name]]
        used = addr != 0
        if not used.any():
            continue
        a = int(addr[used].min())
        lo = a if lo is None else min(lo, a)
        hi = max(hi, int((addr[used] + table[used, _MB[count]] * _ITEMSIZES[dt]).max()))
    if lo is None:
        return 0, 0
    lo &= ~7
    return lo, hi - lo


def _bulk_arrays(table: np.ndarray, base: int, size: int, take: Callable[[str, int, int], Any],
                 single: Callable[[int, int, str], Any],
                 arrays: Sequence[tuple[str, str, str]] = _OUT_ARRAYS) -> list[dict[str, Any]]:
    """Every microbatch's arrays as slices of typed views of one memory block (``take(dtype, start, count)``).

    ``base``, ``size``: the block (address, bytes).  An array outside it or not aligned to its element size
    is made alone (``single(address, count, dtype)``); address 0 gives None.
    """
    out: list[dict[str, Any]] = [{} for _ in range(table.shape[0])]
    for name, count, dt in arrays:
        item = _ITEMSIZES[dt]
        addr, n = table[:, _MB[name]], table[:, _MB[count]]
        rel = addr - base
        inside = (addr != 0) & (rel >= 0) & (rel % item == 0) & (rel + n * item <= size)
        for row, a, r, c, ok in zip(out, addr.tolist(), (rel // item).tolist(), n.tolist(), inside.tolist()):
            row[name] = None if a == 0 else (take(dt, r, c) if ok else single(a, c, dt))
    return out


class _StepState:
    """What one step's views share: the context, its generation, a flag for device memory."""

    __slots__ = ("ctx", "gen")

    def __init__(self, ctx: Any, gen: int) -> None:
        self.ctx = ctx
        self.gen = gen

    def check(self) -> None:
        if self.ctx.generation != self.gen:
            raise StaleViewError(
                "this step output is a view of the stepper's output block and a later step() or plan() on that "
                "stepper replaced it; keep StepOutput.copy() (or copy the arrays) to use it after the next call"
            )


class Microbatch:
    """One microbatch as this rank computes on it (``dcp_microbatch``).

    Arrays are read-only numpy views of the stepper's output block (or owned
    arrays after :meth:`StepOutput.copy`): ``tokens``, ``labels``,
    ``position_ids`` int64, ``loss_mask`` float32 (None on stages that do not
    need them), ``padding_mask`` bool (True where a slot holds no real token),
    ``cu_seqlens`` and ``cu_seqlens_padded`` int32 (global boundaries before CP
    slicing).  Scalars: ``num_tokens`` (this rank's slots), ``num_sequences``,
    ``max_seqlen``, ``local_cp_size``, ``cp_rank``.
    """

    _ARRAYS = ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "cu_seqlens", "cu_seqlens_padded")
    __slots__ = ("_state", "_arrays", "num_tokens", "num_cu_seqlens", "num_sequences", "max_seqlen",
                 "local_cp_size", "cp_rank")

    def __init__(self, state: _StepState | None, arrays: dict[str, np.ndarray | None], scalars: tuple) -> None:
        self._state = state
        self._arrays = arrays
        (self.num_tokens, self.num_cu_seqlens, self.num_sequences, self.max_seqlen, self.local_cp_size,
         self.cp_rank) = scalars

    def _get(self, name: str) -> np.ndarray | None:
        if self._state is not None:
            self._state.check()
        return self._arrays[name]

    tokens = property(lambda self: self._get("tokens"), doc="int64 [num_tokens] or None")
    labels = property(lambda self: self._get("labels"), doc="int64 [num_tokens] or None")
    loss_mask = property(lambda self: self._get("loss_mask"), doc="float32 [num_tokens] or None")
    position_ids = property(lambda self: self._get("position_ids"), doc="int64 [num_tokens] or None")
    padding_mask = property(lambda self: self._get("padding_mask"), doc="bool [num_tokens]: True on padding slots")
    cu_seqlens = property(lambda self: self._get("cu_seqlens"), doc="int32 [num_cu_seqlens]: real-token boundaries")
    cu_seqlens_padded = property(lambda self: self._get("cu_seqlens_padded"),
                                 doc="int32 [num_cu_seqlens]: padded-span boundaries (before CP slicing)")

    def copy(self) -> Microbatch:
        """An owning copy of this microbatch."""
        arrays = {k: (None if v is None else np.array(v, copy=True)) for k, v in
                  ((k, self._get(k)) for k in self._ARRAYS)}
        return Microbatch(None, arrays, (self.num_tokens, self.num_cu_seqlens, self.num_sequences, self.max_seqlen,
                                         self.local_cp_size, self.cp_rank))

    def __repr__(self) -> str:
        return (f"<dcpack.Microbatch {self.num_tokens} slots, {self.num_sequences} sequences, "
                f"cp {self.local_cp_size} (rank {self.cp_rank}), max_seqlen {self.max_seqlen}>")


class StepOutput:
    """What ``dcp_step`` gives this rank (``dcp_step_output``).

    ``microbatches[v * num_microbatches + m]`` is microbatch m of virtual
    stage v (:meth:`microbatch`).  ``seqlen_sum`` and ``seqlen_squared_sum``
    are the exact FLOPs sums over the global batch's padded lengths; ``plan``
    is the step's :class:`Plan` (None on ranks that received it by broadcast);
    ``stats`` the step's measurements (``dcp_step_stats``, a dict).

    Lifetime: a view of the stepper's output block, valid until the next
    ``step()`` on that stepper; after it, attributes raise StaleViewError.
    :meth:`copy` gives an owning copy.
    """

    def __init__(self, state: _StepState | None, num_microbatches: int, num_virtual_stages: int,
                 num_sequences: int, seqlen_sum: int, seqlen_squared_sum: int, stats: dict[str, int],
                 plan: Plan | None, microbatches: list[Microbatch]) -> None:
        self._state = state
        self.num_microbatches = num_microbatches
        self.num_virtual_stages = num_virtual_stages
        self.num_sequences = num_sequences
        self.seqlen_sum = seqlen_sum
        self.seqlen_squared_sum = seqlen_squared_sum
        self.stats = stats
        self._plan = plan
        self._microbatches = microbatches

    @property
    def is_valid_view(self) -> bool:
        """False once a later step replaced this output (always True for a copy)."""
        return self._state is None or self._state.ctx.generation == self._state.gen

    @property
    def microbatches(self) -> list[Microbatch]:
        """All microbatches, virtual stage by virtual stage."""
        if self._state is not None:
            self._state.check()
        return self._microbatches

    @property
    def plan(self) -> Plan | None:
        """The step's plan (a view with the same lifetime), or None."""
        if self._state is not None:
            self._state.check()
        return self._plan

    def microbatch(self, m: int, vstage: int = 0) -> Microbatch:
        """Microbatch ``m`` of virtual stage ``vstage``."""
        if not (0 <= m < self.num_microbatches and 0 <= vstage < self.num_virtual_stages):
            raise InvalidArgumentError(
                f"microbatch {m} / virtual stage {vstage} outside {self.num_microbatches} x {self.num_virtual_stages}")
        return self.microbatches[vstage * self.num_microbatches + m]

    def copy(self) -> StepOutput:
        """An owning copy (arrays and plan)."""
        mbs = [mb.copy() for mb in self.microbatches]
        plan = self._plan.copy() if self._plan is not None else None
        return StepOutput(None, self.num_microbatches, self.num_virtual_stages, self.num_sequences, self.seqlen_sum,
                          self.seqlen_squared_sum, dict(self.stats), plan, mbs)

    def __repr__(self) -> str:
        state = "stale view" if not self.is_valid_view else ("view" if self._state else "copy")
        return (f"<dcpack.StepOutput {state}: {self.num_microbatches} microbatches x {self.num_virtual_stages} "
                f"virtual stages, {self.num_sequences} sequences>")
