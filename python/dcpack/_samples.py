"""A rank's step input: Sample, PackedSamples, and the sample table the C binding reads (``dcp_sample``).

Every array is checked here (dtype, shape, memory) and read in place by the step, never copied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._api import (
    FIELD_LABELS,
    FIELD_LOSS_MASK,
    FIELD_POSITION_IDS,
    FIELD_TOKENS,
    _address,
    _is_torch_tensor,
)
from ._errors import InvalidArgumentError

__all__ = ["Sample", "PackedSamples"]

_I32 = (-(1 << 31), (1 << 31) - 1)

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


def _fields_of(samples: Sequence[Any]) -> int:
    mask = 0
    for s in samples:
        get = s.get if isinstance(s, dict) else (lambda k, s=s: getattr(s, k, None))
        for name, bit in _FIELD_BITS:
            if get(name) is not None:
                mask |= bit
    return mask
