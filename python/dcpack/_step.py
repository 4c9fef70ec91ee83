"""The training step's data plane (``dcp_step``) on the CPU, over the in-process communicator."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _core
from ._api import (
    FIELD_LABELS,
    FIELD_LOSS_MASK,
    FIELD_POSITION_IDS,
    FIELD_TOKENS,
    Config,
    Plan,
    _address,
    _is_torch_tensor,
    _View,
    _view,
)
from ._errors import Error, InvalidArgumentError, StaleViewError

__all__ = [
    "FAULT_NONE",
    "FAULT_RETURN_ERROR",
    "FAULT_NEVER_ARRIVE",
    "FAULT_TRUNCATE",
    "Comm",
    "InprocWorld",
    "InprocCluster",
    "StepArgs",
    "Sample",
    "PackedSamples",
    "Microbatch",
    "StepOutput",
    "Stepper",
]

FAULT_NONE = 0
"""``DCP_FAULT_NONE``: clear a pending fault."""
FAULT_RETURN_ERROR = 1
"""``DCP_FAULT_RETURN_ERROR``: the rank fails its next collective locally (DCP_ERR_COMM on every rank)."""
FAULT_NEVER_ARRIVE = 2
"""``DCP_FAULT_NEVER_ARRIVE``: the rank skips its next collective; the others time out."""
FAULT_TRUNCATE = 3
"""``DCP_FAULT_TRUNCATE``: the rank provides half the bytes it announces (DCP_ERR_CORRUPT_INPUT)."""

Comm = _core.Comm
"""One rank's communicator (``dcp_comm``): ``.rank``, ``.size``, ``.kind`` ("inproc" or "nccl")."""

_I32 = (-(1 << 31), (1 << 31) - 1)


class InprocWorld:
    """``dcp_inproc_world``: ``size`` ranks that are threads of this process.

    ``world.comm(rank)`` gives rank ``rank``'s communicator.  The k-th
    collective a rank calls meets the k-th of every other rank; a rank that
    waits longer than ``timeout_ms`` (0 = forever) for its peers fails the
    collective with DcpTimeoutError on every rank.  The world is released when
    it and every communicator of it are gone.
    """

    def __init__(self, size: int, timeout_ms: int = 60000) -> None:
        for name, v in (("size", size), ("timeout_ms", timeout_ms)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(f"{name} must be an int, got {v!r}")
        if not 1 <= size <= _I32[1] or not 0 <= timeout_ms <= _I32[1]:
            raise InvalidArgumentError(f"need size >= 1 and timeout_ms >= 0, got size={size}, timeout_ms={timeout_ms}")
        self._world = _core.World(size, timeout_ms)
        self.size = size
        self.timeout_ms = timeout_ms

    def comm(self, rank: int) -> Comm:
        """``dcp_inproc_comm()``: the communicator of rank ``rank`` (a new handle each call)."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise InvalidArgumentError(f"rank must be an int, got {rank!r}")
        return self._world.comm(rank)

    def inject_fault(self, rank: int, fault: int) -> None:
        """``dcp_inproc_inject_fault()``: a FAULT_* on the rank's next collective (tests)."""
        self._world.inject_fault(rank, fault)

    def __repr__(self) -> str:
        return f"<dcpack.InprocWorld size={self.size} timeout_ms={self.timeout_ms}>"


@dataclasses.dataclass
class StepArgs:
    """``dcp_step_args``: where a rank sits and how it talks.

    ``world``: every rank of the step (errors are agreed over it).
    ``data_context_parallel``: the rank's DPxCP group (rank = dp_rank * CP + cp_rank),
    needed on ranks that hold data.  ``tensor_parallel``: its TP group, None when
    TP is 1 or every TP rank holds the data.  ``cuda_stream``: a cudaStream_t as an
    int (dcpack.torch sets it).  ``step_id``: the caller's step number (0 = none),
    compared across ranks with the stepper's call count, so a rank a step ahead of
    its peers makes the step fail with OutOfStepError on every rank.
    """

    world: Comm
    data_context_parallel: Comm | None = None
    tensor_parallel: Comm | None = None
    pipeline_rank: int = 0
    mtp_virtual_stages: int = 0
    tp_ranks_hold_data: bool = False
    cuda_stream: int | None = None
    step_id: int = 0
    """``dcp_step_args.step_id`` (uint64; 0 = none).  ``Stepper.step(..., step_id=n)`` overrides it."""
    holds_data: bool = True
    """Whether this rank passes an input (TP rank 0, or every TP rank with tp_ranks_hold_data)."""


class InprocCluster:
    """All the in-process communicators of a DPxCPxTPxPP layout, as ``dcp_step`` numbers ranks.

    World rank ``w`` has DPxCP rank ``w % N`` (N = DP*CP), TP rank ``(w // N) % TP``
    and PP stage ``w // (N*TP)``.  Each (PP stage, TP rank) pair has its own
    DPxCP world, each (PP stage, DPxCP rank) pair its own TP world, like the C
    test harness.  ``args(w)`` gives rank w's :class:`StepArgs`; :meth:`run`
    runs a function on one thread per rank.
    """

    def __init__(self, config: Config, timeout_ms: int = 60000, tp_ranks_hold_data: bool = False) -> None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 <= timeout_ms <= _I32[1] // 4:
            raise InvalidArgumentError(
                f"timeout_ms = {timeout_ms!r} must be an int in [0, {_I32[1] // 4}]: the cluster's world "
                "communicator waits up to 4 x timeout_ms, which must fit in int32 milliseconds")
        d = config.to_dict()
        _core.config_validate(d)
        self.n = d["data_parallel_size"] * d["context_parallel_size"]
        self.tp = d["tensor_parallel_size"]
        self.pp = d["pipeline_parallel_size"]
        self.size = self.n * self.tp * self.pp
        self.tp_ranks_hold_data = bool(tp_ranks_hold_data)
        # each later communicator waits longer than the earlier ones, as the C harness does
        self._world = InprocWorld(self.size, timeout_ms * 4)
        self._lanes = [InprocWorld(self.n, timeout_ms) for _ in range(self.pp * self.tp)]
        self._tps = [InprocWorld(self.tp, timeout_ms * 2) for _ in range(self.pp * self.n)]
        self.dp, self.cp = d["data_parallel_size"], d["context_parallel_size"]
        self._timeout_ms = timeout_ms
        self._dps: list[InprocWorld] | None = None  # made on first use (data_parallel)
        self._dps_lock = threading.Lock()

    def coordinates(self, world_rank: int) -> tuple[int, int, int]:
        """(dpxcp rank, tp rank, pp stage) of a world rank."""
        return world_rank % self.n, (world_rank // self.n) % self.tp, world_rank // (self.n * self.tp)

    def args(self, world_rank: int) -> StepArgs:
        """The StepArgs of one world rank (new communicator handles each call)."""
        if not 0 <= world_rank < self.size:
            raise InvalidArgumentError(f"world rank {world_rank} outside [0, {self.size})")
        dpxcp, tp, pp = self.coordinates(world_rank)
        holds = self.tp_ranks_hold_data or tp == 0
        return StepArgs(
            world=self._world.comm(world_rank),
            data_context_parallel=self._lanes[pp * self.tp + tp].comm(dpxcp) if holds else None,
            tensor_parallel=(self._tps[pp * self.n + dpxcp].comm(tp)
                             if (not self.tp_ranks_hold_data and self.tp > 1) else None),
            pipeline_rank=pp,
            tp_ranks_hold_data=self.tp_ranks_hold_data,
            holds_data=holds,
        )

    def data_parallel(self, world_rank: int) -> Comm | None:
        """The DP communicator of a world rank that holds data (None for one that does not): the
        ``data_parallel_size`` ranks of its (PP stage, TP rank, CP rank), ranked by DP rank, what
        :meth:`dcpack.Planner.gather` gathers a batch's lengths over when a step is planned ahead."""
        if not 0 <= world_rank < self.size:
            raise InvalidArgumentError(f"world rank {world_rank} outside [0, {self.size})")
        dpxcp, tp, pp = self.coordinates(world_rank)
        if not (self.tp_ranks_hold_data or tp == 0):
            return None
        with self._dps_lock:
            if self._dps is None:
                self._dps = [InprocWorld(self.dp, self._timeout_ms) for _ in range(self.pp * self.tp * self.cp)]
        return self._dps[(pp * self.tp + tp) * self.cp + dpxcp % self.cp].comm(dpxcp // self.cp)

    def run(self, fn: Callable[[int], Any], *, return_exceptions: bool = False) -> list[Any]:
        """Run ``fn(world_rank)`` on one thread per rank; return the results by rank.

        When a rank raises, ``run`` raises that exception once every thread is
        done (the lowest failing rank's: a failing step raises the same dcpack
        error on every rank).  ``return_exceptions=True`` returns each rank's
        exception in its slot instead.
        """
        results: list[Any] = [None] * self.size

        def body(w: int) -> None:
            try:
                results[w] = fn(w)
            except BaseException as e:  # noqa: BLE001 - returned to the caller
                results[w] = e

        threads = [threading.Thread(target=body, args=(w,), name=f"dcpack-rank-{w}") for w in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results


_DTYPES = {"tokens": np.int64, "labels": np.int64, "loss_mask": np.float32, "position_ids": np.int64}
_FIELD_BITS = (("tokens", FIELD_TOKENS), ("labels", FIELD_LABELS), ("loss_mask", FIELD_LOSS_MASK),
               ("position_ids", FIELD_POSITION_IDS))


def _host_array(x: Any, dtype: Any, name: str) -> np.ndarray:
    """A 1-D C-contiguous host array of exactly ``dtype``, without a copy, or InvalidArgumentError."""
    if _is_torch_tensor(x):
        if x.device.type != "cpu":
            raise InvalidArgumentError(f"{name} is on {x.device}; it must be host memory (dcpack.Stepper takes "
                                       "host arrays; dcpack.torch.CudaStepper CUDA fields and host cu_seqlens)")
        x = x.detach().numpy()
    if not isinstance(x, np.ndarray):
        raise InvalidArgumentError(f"{name} must be a numpy array or a CPU tensor, got {type(x).__name__}")
    if x.dtype != np.dtype(dtype):
        raise InvalidArgumentError(f"{name} must have dtype {np.dtype(dtype)}, got {x.dtype}")
    if x.ndim != 1:
        raise InvalidArgumentError(f"{name} must be one-dimensional, got shape {x.shape}")
    if not (x.flags.c_contiguous and x.flags.aligned and x.dtype.isnative):
        raise InvalidArgumentError(f"{name} must be contiguous, aligned and in native byte order")
    return x


@dataclasses.dataclass
class Sample:
    """One sample of a rank's input (``dcp_sample``), as the trainer's loader produced it.

    Field arrays are 1-D and contiguous: ``tokens``, ``labels`` and
    ``position_ids`` int64, ``loss_mask`` float32 (numpy arrays or CPU
    tensors; dcpack.torch takes CUDA tensors).  They are read in place during
    the step, never copied beforehand.

    Two shapes: pre-packed (``cu_seqlens`` int32 cuts the buffers into
    sub-samples, each non-empty one a sequence), or one sequence whose first
    ``original_length`` tokens are real (default: all of them).
    """

    tokens: Any = None
    labels: Any = None
    loss_mask: Any = None
    position_ids: Any = None
    cu_seqlens: Any = None
    original_length: int | None = None


def _sample_descriptor(s: Any, fields: int, index: int, keep: list[Any],
                       field_array: Callable[[Any, str, str], tuple[Any, int, int]] | None = None) -> tuple:
    """One sample's row of the sample table (the columns of _COLUMN_NAMES), its arrays checked.

    ``field_array(value, field, label) -> (array, address, length)`` checks one field array (default:
    host memory, _host_field; dcpack.torch passes its CUDA check); ``keep`` collects what must live
    until the step returns.
    """
    field_array = field_array or _host_field
    if isinstance(s, dict):
        unknown = set(s) - {"tokens", "labels", "loss_mask", "position_ids", "cu_seqlens", "original_length"}
        if unknown:
            raise InvalidArgumentError(f"sample {index}: unknown keys {sorted(unknown)}")
        s = Sample(**s)
    if not isinstance(s, Sample):
        raise InvalidArgumentError(f"sample {index} must be a dcpack.Sample or a dict, got {type(s).__name__}")
    addrs: list[int | None] = []
    num_tokens: int | None = None
    for name, bit in _FIELD_BITS:
        value = getattr(s, name)
        if not fields & bit:
            addrs.append(None)
            continue
        if value is None:
            raise InvalidArgumentError(f"sample {index} lacks {name}, which the step's fields include")
        arr, address, length = field_array(value, name, f"sample {index} {name}")
        if num_tokens is None:
            num_tokens = length
        elif length != num_tokens:
            raise InvalidArgumentError(f"sample {index}: {name} has {length} elements, expected {num_tokens}")
        keep.append(arr)
        addrs.append(address or None)
    if num_tokens is None:
        num_tokens = 0
    cu_addr, num_cu = None, 0
    if s.cu_seqlens is not None:
        cu = _host_array(s.cu_seqlens, np.int32, f"sample {index} cu_seqlens")
        keep.append(cu)
        cu_addr, num_cu = (_address(cu) if cu.size else None), cu.shape[0]
        if s.original_length is not None:
            raise InvalidArgumentError(f"sample {index}: original_length applies to one-sequence samples only")
        original = 0
    else:
        if num_tokens > _I32[1]:
            raise InvalidArgumentError(f"sample {index}: {num_tokens} tokens exceed an int32 length")
        padded = num_tokens
        original = num_tokens if s.original_length is None else s.original_length
        if isinstance(original, bool) or not isinstance(original, (int, np.integer)):
            raise InvalidArgumentError(f"sample {index}: original_length must be an int")
        original = int(original)
        if not 0 <= original <= padded:
            raise InvalidArgumentError(f"sample {index}: original_length {original} outside [0, {padded}]")
    return (addrs[0], addrs[1], addrs[2], addrs[3], int(num_tokens), cu_addr, int(num_cu) if s.cu_seqlens is not None
            else -1, original)


_COLUMN_NAMES = ("tokens", "labels", "loss_mask", "position_ids", "num_tokens", "cu_seqlens", "num_cu_seqlens",
                 "original_length")
_COLUMN_DTYPES = (np.uint64, np.uint64, np.uint64, np.uint64, np.int64, np.uint64, np.int32, np.int32)


def _columns(rows: Sequence[tuple], keep: list[Any]) -> dict[str, Any]:
    """The C binding's sample table from per-sample rows (_sample_descriptor's): one array per column."""
    cols: dict[str, Any] = {"num_samples": len(rows)}
    if not rows:
        return cols
    for name, dtype, values in zip(_COLUMN_NAMES, _COLUMN_DTYPES, zip(*rows)):
        if name in _FIELD_NAMES and all(v is None for v in values):
            continue  # a field the step does not move
        arr = np.array([0 if v is None else v for v in values], dtype=dtype)
        keep.append(arr)
        cols[name] = _address(arr)
    return cols


_FIELD_NAMES = ("tokens", "labels", "loss_mask", "position_ids")
_ITEMSIZE = {"tokens": 8, "labels": 8, "loss_mask": 4, "position_ids": 8}


def _int_column(x: Any, name: str, n: int | None, lo: int, hi: int, dtype: Any) -> np.ndarray:
    """A 1-D integer array (list, numpy, CPU tensor) checked to [lo, hi], as ``dtype``."""
    if _is_torch_tensor(x):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"{name} must be a one-dimensional integer array, got {arr.dtype} {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise InvalidArgumentError(f"{name} has {arr.shape[0]} entries for {n} samples")
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        bad = int(arr.min()) if int(arr.min()) < lo else int(arr.max())
        raise InvalidArgumentError(f"{name} holds {bad}, outside [{lo}, {hi}]")
    return np.ascontiguousarray(arr, dtype=dtype)


@dataclasses.dataclass
class PackedSamples:
    """A rank's samples back to back: one array per field instead of one object per sample.

    The fast input of ``step()``: the table of samples is built with a few
    array operations and in C, with no Python work per sample.  Sample ``i``
    holds ``num_tokens[i]`` consecutive elements of every field array (1-D,
    contiguous: int64 ``tokens``, ``labels``, ``position_ids``, float32
    ``loss_mask``; numpy arrays or CPU tensors for :class:`Stepper`, CUDA
    tensors for ``dcpack.torch.CudaStepper``), read in place.
    ``original_length[i]`` (default: all) counts the real tokens at the start
    of a one-sequence sample.  Pre-packed samples: ``num_cu_seqlens[i]`` (>= 0)
    entries of ``cu_seqlens`` (int32, host memory, every pre-packed sample's
    cut back to back) belong to sample ``i``; -1 marks a one-sequence sample.
    Equal to the list of :class:`Sample` it stands for, step for step.
    """

    num_tokens: Any
    tokens: Any = None
    labels: Any = None
    loss_mask: Any = None
    position_ids: Any = None
    original_length: Any = None
    cu_seqlens: Any = None
    num_cu_seqlens: Any = None

    def __len__(self) -> int:
        return len(self.num_tokens)

    def _columns(self, fields: int | None, keep: list[Any],
                 field_array: Callable[[Any, str, str], tuple[Any, int, int]]) -> tuple[dict[str, Any], int]:
        """(the C binding's sample table, the step's fields); ``field_array(x, field, label) -> (x, address,
        length)`` checks a field array (_sample_descriptor's)."""
        counts = _int_column(self.num_tokens, "num_tokens", None, 0, _I64_MAX, np.int64)
        n = counts.shape[0]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        present = [name for name in _FIELD_NAMES if getattr(self, name) is not None]
        if fields is None:
            fields = sum(bit for name, bit in _FIELD_BITS if name in present)
        cols: dict[str, Any] = {"num_samples": n}
        keep.extend((counts, offsets))
        cols["num_tokens"] = _address(counts)
        for name, bit in _FIELD_BITS:
            if not fields & bit:
                continue
            if name not in present:
                raise InvalidArgumentError(f"the samples lack {name}, which the step's fields include")
            x, address, length = field_array(getattr(self, name), name, name)
            if length != total:
                raise InvalidArgumentError(f"{name} has {length} elements, num_tokens adds up to {total}")
            keep.append(x)
            col = (offsets[:-1] * _ITEMSIZE[name]).astype(np.uint64) + np.uint64(address)
            keep.append(col)
            cols[name] = _address(col)
        if self.original_length is not None:
            orig = _int_column(self.original_length, "original_length", n, _I32[0], _I32[1], np.int32)
            keep.append(orig)
            cols["original_length"] = _address(orig)
        if self.num_cu_seqlens is not None or self.cu_seqlens is not None:
            if self.num_cu_seqlens is None or self.cu_seqlens is None:
                raise InvalidArgumentError("pre-packed samples need both cu_seqlens and num_cu_seqlens")
            ncu = _int_column(self.num_cu_seqlens, "num_cu_seqlens", n, -1, _I32[1], np.int32)
            cu = _host_array(self.cu_seqlens, np.int32, "cu_seqlens")
            cu_off = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.maximum(ncu, 0), out=cu_off[1:])
            if int(cu_off[-1]) != cu.shape[0]:
                raise InvalidArgumentError(f"cu_seqlens has {cu.shape[0]} entries, num_cu_seqlens adds up to "
                                           f"{int(cu_off[-1])}")
            if self.original_length is not None and bool(np.any((ncu >= 0) & (orig != counts))):
                raise InvalidArgumentError("original_length applies to one-sequence samples only")
            cu_addr = (cu_off[:-1] * 4).astype(np.uint64) + np.uint64(_address(cu) if cu.size else 0)
            keep.extend((ncu, cu, cu_addr))
            cols["cu_seqlens"] = _address(cu_addr)
            cols["num_cu_seqlens"] = _address(ncu)
        return cols, fields


_I64_MAX = (1 << 63) - 1


def _host_field(x: Any, field: str, label: str) -> tuple[np.ndarray, int, int]:
    arr = _host_array(x, _DTYPES[field], label)
    return arr, (_address(arr) if arr.size else 0), arr.shape[0]


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


def _check_uint64(name: str, value: Any) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << 64):
        raise InvalidArgumentError(f"{name} must be an int in [0, 2**64), got {value!r}")
    return value


def _fields_of(samples: Sequence[Any]) -> int:
    mask = 0
    for s in samples:
        get = s.get if isinstance(s, dict) else (lambda k, s=s: getattr(s, k, None))
        for name, bit in _FIELD_BITS:
            if get(name) is not None:
                mask |= bit
    return mask


def _receives_by_broadcast(args: StepArgs) -> bool:
    """Whether dcp_step gives this rank its microbatches by TP broadcast (it then ignores a plan): TP rank > 0 of
    a TP group of several ranks, without tp_ranks_hold_data.  The C step's own rule (pipeline/step.c)."""
    tp = args.tensor_parallel
    if args.tp_ranks_hold_data or tp is None:
        return False
    try:
        return tp.size > 1 and tp.rank != 0
    except Exception:  # noqa: BLE001 - not a communicator: the binding refuses it on its own
        return False


# A stale plan view on a rank that holds data goes to the step as a plan with no arrays: the step refuses it
# (InvalidArgumentError, "not a computed plan") and agrees that over the world, so every rank raises at once,
# where a Python-side StaleViewError on that rank alone would leave its peers waiting out the timeout.
_REFUSED_PLAN = _core.PlanDescriptor((0, 0, 0, 0, None, None, None, None, None, 0, 0, 0, 0, 0))
_STALE_PLAN = ("the plan handed to step() is a stale view: a later plan() on its planner replaced it; hand in "
               "the current plan or a Plan.copy()")


class Stepper:
    """Runs ``dcp_step`` for one rank: one context sized by ``config`` (max_tokens_per_rank > 0).

    ``Stepper(config).step(samples, args)`` on every rank of the step (each
    rank its own Stepper, in its own thread; the GIL is released while the
    library steps).  ``samples``: this rank's list of :class:`Sample` (or
    dicts), or None on ranks that receive by TP broadcast.

    Calls in step: every ``step()`` counts on the stepper's context
    (:attr:`calls`), a failed one too, also one refused in Python before the
    library saw it.  The step's first collective compares the count (and the
    ``step_id`` given) across ranks: ranks that skipped or repeated a step raise
    :class:`dcpack.OutOfStepError`, all of them, instead of pairing two steps'
    data; the stepper then refuses every step at once (OutOfStepError, no
    collective) until :meth:`resync` is called on every rank with the same
    next call count.
    """

    def __init__(self, config: Config) -> None:
        if not isinstance(config, Config):
            raise InvalidArgumentError(f"config must be a dcpack.Config, got {type(config).__name__}")
        self._config = config
        self._ctx = _core.Context(config.to_dict())
        self.last_step_ns = 0
        """Wall time of the last step's call into the library (``dcp_step``, the GIL released), in ns: the rest
        of ``step()`` is the package's own work."""

    @property
    def config(self) -> Config:
        """The configuration of this rank's context."""
        return self._config

    @property
    def calls(self) -> int:
        """``dcp_context_calls()``: steps made on this stepper since it was built or resynced (failed ones too)."""
        return self._ctx.calls

    def resync(self, next_call: int = 0) -> None:
        """``dcp_context_resync()``: after an OutOfStepError, once the ranks are back in step.

        Call it on every rank of the step with the same ``next_call`` (e.g. 0,
        or the step number the training loop restarts from): it sets the call
        count and lets the stepper step again.
        """
        self._ctx.resync(_check_uint64("next_call", next_call))

    def step(self, samples: Sequence[Any] | None, args: StepArgs | None = None, *,
             fields: int | None = None, step_id: int | None = None, plan: Plan | None = None,
             **kwargs: Any) -> StepOutput:
        """One step on this rank; returns a :class:`StepOutput` view (valid until the next step).

        ``args`` is a :class:`StepArgs`, or give its fields as keywords
        (``world=..., data_context_parallel=..., pipeline_rank=...``).
        ``fields``: the FIELD_* set every sample carries (default: the fields
        present in the samples).  ``step_id``: this step's number, compared
        across ranks (default: ``args.step_id``; 0 = none).  ``plan``: this
        step's plan, made ahead by :meth:`dcpack.Planner.plan` on a planner of
        the same configuration (``max_tokens_per_rank`` may differ) from the
        lengths :meth:`dcpack.Planner.gather` gathered (``dcp_step_args.plan``):
        the step then does not plan, it checks on every rank that this is the
        plan of the lengths it gathers and copies it, so the planner may plan
        again as soon as ``step()`` returns.  A plan of other lengths or of
        another configuration, on any one rank, raises InvalidArgumentError on
        every rank (never a batch cut by another plan); so does a stale view
        (:class:`dcpack.StaleViewError` on its rank, a subclass).  Ignored on
        ranks that receive by TP broadcast, whatever it is: not checked, not
        read.  Errors are agreed over the world: every rank raises the same
        dcpack.Error subclass.
        """
        try:
            if args is None:
                kwargs.pop("holds_data", None)
                args = StepArgs(**kwargs)
            elif kwargs:
                raise InvalidArgumentError("give either a StepArgs or keyword arguments, not both")
        except BaseException:
            self.count_failed_step()
            raise
        return self._wrap_host(self._step(samples, args, fields, step_id=step_id, plan=plan))

    def count_failed_step(self) -> None:
        """Count a step that failed on this rank alone before it reached :meth:`step`.

        ``step()`` counts its own failures (the library counts a step that fails
        on the calling rank alone, and the package a call it refuses before the
        library sees it).  A wrapper that gives up on a step before calling
        ``step()`` (its own argument checks, a batch it could not read) calls this
        instead, so the ranks stay paired: the peers' next step then finds this
        rank a call ahead and realigns, instead of this rank's next step pairing
        with the peers' current one.  Never raises.
        """
        try:
            self._ctx.count_failed_step()
        except Error:
            pass

    def _step(self, samples: Any, args: StepArgs, fields: int | None, step_id: int | None = None,
              columns: Callable[[list[Any]], tuple[dict[str, Any], int | None]] | None = None,
              plan: Plan | None = None) -> dict[str, Any]:
        """Check the arguments, build the sample table, call the binding; -> its result dict.

        ``columns(keep)``, when given, builds the sample table instead of ``samples``
        (dcpack.torch's, for CUDA tensors): -> (table, fields).
        """
        keep: list[Any] = []
        try:
            if not isinstance(args, StepArgs):
                raise InvalidArgumentError(f"args must be a dcpack.StepArgs, got {type(args).__name__}")
            table = None
            if columns is not None:
                table, fields = columns(keep)
            elif isinstance(samples, PackedSamples):
                table, fields = samples._columns(fields, keep, _host_field)
            elif samples is not None:
                if isinstance(samples, (Sample, dict)) or not isinstance(samples, (list, tuple)):
                    raise InvalidArgumentError(
                        "samples must be a list of dcpack.Sample (or dicts), a dcpack.PackedSamples, or None")
                if fields is None and samples:
                    fields = _fields_of(samples)  # an empty list carries the configuration's fields (below)
                if fields is None:
                    fields = self._config.to_dict()["fields"]
                table = _columns([_sample_descriptor(s, fields, i, keep) for i, s in enumerate(samples)], keep)
            if fields is None:
                fields = self._config.to_dict()["fields"]
            for name in ("pipeline_rank", "mtp_virtual_stages"):
                v = getattr(args, name)
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _I32[1]:
                    raise InvalidArgumentError(f"{name} must be a non-negative int, got {v!r}")
            sid = _check_uint64("step_id", args.step_id if step_id is None else step_id)
            desc, stale = None, None
            if plan is not None and not _receives_by_broadcast(args):  # ignored where the step receives
                if not isinstance(plan, Plan):
                    raise InvalidArgumentError(f"plan must be a dcpack.Plan or None, got {type(plan).__name__}")
                if plan.is_valid_view:
                    desc = plan._step_descriptor()
                    keep.append(plan)  # its arrays are read during the call
                else:  # refused by the step itself, so every rank raises at once (no lone failure)
                    desc, stale = _REFUSED_PLAN, _STALE_PLAN
        except BaseException:
            self.count_failed_step()
            raise
        # from here on the C binding counts the call, whatever happens
        t0 = time.perf_counter_ns()
        try:
            raw = self._ctx.step(world=args.world, data_context_parallel=args.data_context_parallel,
                                 tensor_parallel=args.tensor_parallel, pipeline_rank=args.pipeline_rank,
                                 mtp_virtual_stages=args.mtp_virtual_stages,
                                 tp_ranks_hold_data=int(bool(args.tp_ranks_hold_data)), cuda_stream=args.cuda_stream,
                                 fields=int(fields), samples=table, step_id=sid, plan=desc)
        except InvalidArgumentError as e:
            if stale is None:
                raise
            raise StaleViewError(f"{stale} (the step failed on every rank: {e.message})") from e
        finally:
            self.last_step_ns = time.perf_counter_ns() - t0
        del keep
        return raw

    def _wrap_host(self, raw: dict[str, Any]) -> StepOutput:
        gen = raw["generation"]
        state = _StepState(self._ctx, gen)
        ctx = self._ctx
        memory = ctx.memory  # what the arrays hold: the context's memory outlives close() while they live
        table = microbatch_table(raw)
        lo, size = _span(table)
        if size:
            region = np.asarray(_View(lo, size, "|u1", memory))
            typed = {dt: region[:size // np.dtype(dt).itemsize * np.dtype(dt).itemsize].view(dt)
                     for dt in ("int64", "float32", "int32", "bool")}
        else:
            typed = {}
        arrays = _bulk_arrays(table, lo, size, lambda dt, start, count: typed[dt][start:start + count],
                              lambda address, count, dt: _view(address, count, dt, memory))
        scalars = table[:, [_MB[k] for k in _SCALARS]].tolist()
        microbatches = [Microbatch(state, a, tuple(sc)) for a, sc in zip(arrays, scalars)]
        plan = None
        if raw["plan"] is not None:
            plan = Plan(ctx, gen, raw["plan"], np.empty(0, dtype=np.int32))
        return StepOutput(state, raw["num_microbatches"], raw["num_virtual_stages"], raw["num_sequences"],
                          raw["seqlen_sum"], raw["seqlen_squared_sum"], raw["stats"], plan, microbatches)

    def close(self) -> None:
        """Destroy the context now."""
        self._ctx.close()

    def __enter__(self) -> Stepper:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
