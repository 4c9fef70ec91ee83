"""dcpack.torch: ``dcp_step`` on torch CUDA tensors, over NCCL communicators dcpack creates next to torch.distributed.

Needs torch with CUDA and a dcpack built with CUDA and NCCL (``DCPACK_CUDA=1 pip install .``;
the default wheel is CPU-only and raises UnsupportedError here).

- :class:`NcclGroups`: this rank's world, DPxCP and TP communicators.  One
  rank of a torch.distributed process group makes an NCCL unique id, it is
  broadcast over that group (``broadcast_object_list``), every rank calls
  ``ncclCommInitRank`` (the way vLLM's PyNcclCommunicator does), and the DPxCP
  and TP communicators are ``ncclCommSplit`` s of it.
- :class:`CudaStepper`: one rank's context with its CUDA workspace taken from
  torch's allocator (a ``torch.uint8`` CUDA tensor and a pinned host tensor of
  ``dcp_cuda_workspace_size()`` bytes, 256-byte aligned, bound by
  ``dcp_context_attach_cuda``).  ``step()`` runs on the groups' stream, which
  first waits for torch's current stream; the step waits for its stream before
  it returns, so outputs are ready for any stream.  ``step(..., step_id=n)``
  and ``calls`` / ``resync()`` are the calls-in-step checks of dcpack.Stepper.
- Outputs are torch tensors that view dcpack's output block (zero copy: slices
  of typed views of the device workspace tensor, made in bulk), valid until the
  next ``step()`` on that stepper: afterwards the :class:`TorchStepOutput`
  raises StaleViewError, and tensors taken from it earlier show the next step's
  data (``clone()`` what must outlive it).  Each output tensor holds the
  workspace tensor's storage, so its memory is never handed to anyone else
  while it lives.

One libnccl per process: the extension is linked against ``libnccl.so.2`` by
its soname, so the dynamic loader reuses the libnccl torch already loaded
(import torch first, which this module does); :func:`check_single_libnccl`
verifies that exactly one libnccl file is mapped.

What CudaStepper uses of the host :class:`dcpack.Stepper` (its checks, call counting and sample and
microbatch tables) is the small interface of ``dcpack._device_step``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._require import require_torch

require_torch("dcpack.torch")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from . import _core
from ._api import Config, _view
from ._errors import InvalidArgumentError, NcclError, UnsupportedError
from ._device_step import OutputTable, column, context, run, sample_table
from ._inproc import StepArgs
from ._step import Stepper

__all__ = ["check_single_libnccl", "nccl_comm", "NcclGroups", "CudaStepper", "TorchMicrobatch", "TorchStepOutput"]

_DTYPES = {"tokens": torch.int64, "labels": torch.int64, "loss_mask": torch.float32, "position_ids": torch.int64}
_TORCH = {"int64": torch.int64, "float32": torch.float32, "int32": torch.int32, "bool": torch.bool}
_TYPESTR = {"int64": "<i8", "float32": "<f4", "int32": "<i4", "bool": "|b1"}
_HOST_ARRAYS = (("cu_seqlens_host", "num_cu_seqlens", "int32"), ("cu_seqlens_padded_host", "num_cu_seqlens", "int32"))


def check_single_libnccl() -> list[str]:
    """The libnccl files mapped into this process; raises NcclError when there are several."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "libnccl" in parts[-1].rsplit("/", 1)[-1]:
                    paths.add(parts[-1])
    except OSError:
        return []
    if len(paths) > 1:
        raise NcclError("several libnccl are loaded in this process (" + ", ".join(sorted(paths)) +
                        "): import torch before dcpack, or build dcpack against torch's NCCL")
    return sorted(paths)


def _require_cuda_build() -> None:
    if not (_core.HAVE_CUDA and _core.HAVE_NCCL):
        raise UnsupportedError("this dcpack was built without CUDA and NCCL: reinstall with DCPACK_CUDA=1 "
                               "(docs/python.md, Installing)")


def _device_index(device: Any) -> int:
    if device is None:
        return torch.cuda.current_device()
    d = torch.device(device)
    if d.type != "cuda":
        raise InvalidArgumentError(f"device must be a CUDA device, got {d}")
    return d.index if d.index is not None else torch.cuda.current_device()


def nccl_comm(group: Any = None, *, device: Any = None, stream: torch.cuda.Stream | None = None,
              timeout_ms: int = 600000, staging_bytes: int = 0) -> _core.Comm:
    """A dcpack NCCL communicator over the ranks of a torch.distributed process group.

    Rank 0 of ``group`` makes the NCCL unique id; it is broadcast over ``group``;
    every rank then joins with ``ncclCommInitRank`` on ``device`` (default: the
    current device).  Operations run on ``stream`` (default: a new stream).
    Collective over ``group``.
    """
    _require_cuda_build()
    index = _device_index(device)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    uid = _core.nccl_unique_id() if rank == 0 else None
    holder = [uid]
    src = dist.get_global_rank(group, 0) if group is not None else 0
    dist.broadcast_object_list(holder, src=src, group=group, device=torch.device("cuda", index))
    if stream is None:
        stream = torch.cuda.Stream(device=index)
    comm = _core.nccl_comm_create(holder[0], size, rank, index, stream.cuda_stream, timeout_ms, staging_bytes)
    check_single_libnccl()
    return comm


class NcclGroups:
    """This rank's communicators for ``dcp_step``, built over a torch.distributed group.

    ``NcclGroups(config, dp_cp_rank=..., tp_rank=..., pp_rank=...)``: ``world``
    is an NCCL communicator over ``group`` (default: the default group; it must
    hold every rank of the step), split into the DPxCP communicator of this
    rank's (pp, tp) lane, ranked by ``dp_cp_rank`` (= dp_rank * CP + cp_rank),
    and the TP communicator of its (pp, dpxcp) position, ranked by ``tp_rank``
    (only when TP > 1 and only TP rank 0 holds data).  ``data_parallel=True``
    also splits the DP communicator of a rank that holds data
    (:attr:`data_parallel`: the DP ranks of its (pp, tp, cp) position, ranked
    by DP rank), over which :meth:`dcpack.Planner.gather` gathers the next
    batch's lengths when steps are planned ahead; give the same value on every
    rank.  :meth:`from_megatron` reads the coordinates from Megatron-LM's
    parallel_state.
    """

    def __init__(self, config: Config, *, dp_cp_rank: int, tp_rank: int = 0, pp_rank: int = 0, group: Any = None,
                 device: Any = None, tp_ranks_hold_data: bool = False, timeout_ms: int = 600000,
                 data_parallel: bool = False) -> None:
        _require_cuda_build()
        d = config.to_dict()
        n = _core.config_validate(d)
        tp, pp = d["tensor_parallel_size"], d["pipeline_parallel_size"]
        if not (0 <= dp_cp_rank < n and 0 <= tp_rank < tp and 0 <= pp_rank < pp):
            raise InvalidArgumentError(f"coordinates dp_cp {dp_cp_rank} / tp {tp_rank} / pp {pp_rank} outside "
                                       f"{n} x {tp} x {pp}")
        self.device = _device_index(device)
        self.stream = torch.cuda.Stream(device=self.device)
        self.pipeline_rank = pp_rank
        self.tp_ranks_hold_data = bool(tp_ranks_hold_data)
        self.holds_data = self.tp_ranks_hold_data or tp_rank == 0
        staging = _core.nccl_staging_bytes(d)
        self.world = nccl_comm(group, device=self.device, stream=self.stream, timeout_ms=timeout_ms,
                               staging_bytes=staging)
        if self.world.size != n * tp * pp:
            raise InvalidArgumentError(f"the group has {self.world.size} ranks, the configuration {n * tp * pp}")
        # every rank takes part in both splits (ncclCommSplit is collective over the parent)
        lane = self.world.split(pp_rank * tp + tp_rank if self.holds_data else -1, dp_cp_rank)
        self.data_context_parallel = lane
        # the TP split only where TP communicators are used: the same decision on every rank (configuration)
        use_tp = not self.tp_ranks_hold_data and tp > 1
        self.tensor_parallel = self.world.split(pp_rank * n + dp_cp_rank, tp_rank) if use_tp else None
        self.data_parallel = None
        if data_parallel:  # the same decision on every rank (an argument every rank gives alike)
            cp = d["context_parallel_size"]
            color = (pp_rank * tp + tp_rank) * cp + dp_cp_rank % cp if self.holds_data else -1
            self.data_parallel = self.world.split(color, dp_cp_rank // cp)

    @classmethod
    def from_megatron(cls, config: Config, **kwargs: Any) -> NcclGroups:
        """Coordinates from megatron.core.parallel_state (initialised model parallel)."""
        from megatron.core import parallel_state as ps

        return cls(config, dp_cp_rank=ps.get_data_parallel_rank(with_context_parallel=True),
                   tp_rank=ps.get_tensor_model_parallel_rank(), pp_rank=ps.get_pipeline_model_parallel_rank(),
                   **kwargs)

    def args(self, mtp_virtual_stages: int = 0, step_id: int = 0) -> StepArgs:
        """The StepArgs of this rank (on this object's stream)."""
        return StepArgs(world=self.world, data_context_parallel=self.data_context_parallel,
                        tensor_parallel=self.tensor_parallel, pipeline_rank=self.pipeline_rank,
                        mtp_virtual_stages=mtp_virtual_stages, tp_ranks_hold_data=self.tp_ranks_hold_data,
                        cuda_stream=self.stream.cuda_stream, step_id=step_id, holds_data=self.holds_data)

    def close(self) -> None:
        """Destroy the NCCL communicators dcpack created."""
        for c in (self.data_parallel, self.tensor_parallel, self.data_context_parallel, self.world):
            if c is not None:
                c.close()


class _CudaView:
    """``__cuda_array_interface__`` exporter: a torch tensor over dcpack's device memory, owner kept alive."""

    __slots__ = ("__cuda_array_interface__", "_owner")

    def __init__(self, address: int, count: int, typestr: str, owner: Any) -> None:
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (count,), "typestr": typestr,
                                         "version": 3, "stream": None}
        self._owner = owner


def _tensor(address: int | None, count: int, dtype: torch.dtype, typestr: str, device: int, owner: Any):
    if address is None:
        return None
    if count == 0:
        return torch.empty(0, dtype=dtype, device=torch.device("cuda", device))
    t = torch.as_tensor(_CudaView(address, count, typestr, owner), device=torch.device("cuda", device))
    assert t.dtype == dtype
    return t


class TorchMicrobatch:
    """One microbatch on this rank as torch tensors (``dcp_microbatch``).

    CUDA tensors: ``tokens``, ``labels``, ``position_ids`` (int64), ``loss_mask``
    (float32), None where the stage does not need them; ``padding_mask``
    (bool); ``cu_seqlens`` and ``cu_seqlens_padded`` (int32).  Host tensors:
    ``cu_seqlens_host``, ``cu_seqlens_padded_host``.  Ints: ``max_seqlen``,
    ``local_cp_size``, ``cp_rank``, ``num_tokens``, ``num_sequences``.
    """

    _NAMES = ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "cu_seqlens", "cu_seqlens_padded",
              "cu_seqlens_host", "cu_seqlens_padded_host")

    def __init__(self, state: Any, tensors: dict[str, Any], scalars: tuple) -> None:
        self._state = state
        self._tensors = tensors
        (self.num_tokens, self.num_cu_seqlens, self.num_sequences, self.max_seqlen, self.local_cp_size,
         self.cp_rank) = scalars

    def __getattr__(self, name: str) -> Any:
        if name in TorchMicrobatch._NAMES and "_tensors" in self.__dict__:
            if self._state is not None:
                self._state.check()
            return self._tensors[name]
        raise AttributeError(name)

    def clone(self) -> TorchMicrobatch:
        """An owning copy (tensors cloned, on torch's current stream)."""
        tensors = {k: (None if getattr(self, k) is None else getattr(self, k).clone()) for k in self._NAMES}
        return TorchMicrobatch(None, tensors, (self.num_tokens, self.num_cu_seqlens, self.num_sequences,
                                               self.max_seqlen, self.local_cp_size, self.cp_rank))


class TorchStepOutput:
    """What ``dcp_step`` gives this rank, as torch tensors; a view valid until the next step.

    ``microbatch(m, vstage)``, ``num_microbatches``, ``num_virtual_stages``,
    ``num_sequences``, ``seqlen_sum`` and ``seqlen_squared_sum`` (exact ints:
    Megatron's FLOPs sums), ``stats`` (dict), ``plan`` (a dcpack.Plan view or None).
    """

    def __init__(self, state, nm, nv, nseq, ssum, sq, stats, plan, microbatches) -> None:
        self._state = state
        self.num_microbatches, self.num_virtual_stages, self.num_sequences = nm, nv, nseq
        self.seqlen_sum, self.seqlen_squared_sum, self.stats = ssum, sq, stats
        self._plan, self._microbatches = plan, microbatches

    @property
    def is_valid_view(self) -> bool:
        """False once a later step replaced this output."""
        return self._state is None or self._state.ctx.generation == self._state.gen

    @property
    def microbatches(self) -> list[TorchMicrobatch]:
        """All microbatches, virtual stage by virtual stage."""
        if self._state is not None:
            self._state.check()
        return self._microbatches

    @property
    def plan(self):
        """The step's plan (view), or None on ranks that received it by broadcast."""
        if self._state is not None:
            self._state.check()
        return self._plan

    def microbatch(self, m: int, vstage: int = 0) -> TorchMicrobatch:
        """Microbatch ``m`` of virtual stage ``vstage``."""
        if not (0 <= m < self.num_microbatches and 0 <= vstage < self.num_virtual_stages):
            raise InvalidArgumentError(f"microbatch {m} / virtual stage {vstage} outside "
                                       f"{self.num_microbatches} x {self.num_virtual_stages}")
        return self.microbatches[vstage * self.num_microbatches + m]

    def clone(self) -> TorchStepOutput:
        """An owning copy: microbatch tensors cloned, the plan copied; it never goes stale."""
        plan = self.plan.copy() if self.plan is not None else None
        return TorchStepOutput(None, self.num_microbatches, self.num_virtual_stages, self.num_sequences,
                               self.seqlen_sum, self.seqlen_squared_sum, dict(self.stats), plan,
                               [mb.clone() for mb in self.microbatches])


def _cuda_field(x: Any, name: str, device: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise InvalidArgumentError(f"{name} must be a torch tensor, got {type(x).__name__}")
    if x.device.type != "cuda" or x.device.index != device:
        raise InvalidArgumentError(f"{name} must be on cuda:{device}, got {x.device}")
    field = name.rsplit(" ", 1)[-1]
    if x.dtype != _DTYPES[field]:
        raise InvalidArgumentError(f"{name} must be {_DTYPES[field]}, got {x.dtype}")
    if x.dim() != 1 or not x.is_contiguous():
        raise InvalidArgumentError(f"{name} must be one-dimensional and contiguous")
    return x


def _gathered_copies(table: np.ndarray, base: int, block: torch.Tensor, owner: Any) -> list[dict[str, Any]]:
    """Owned copies of every microbatch's host int32 arrays (_HOST_ARRAYS), made by one gather from ``block``
    (the int32 view of the memory at ``base``): each array a slice of the gathered tensor."""
    rows: list[dict[str, Any]] = [{} for _ in range(table.shape[0])]
    starts, counts, where = [], [], []
    size = block.numel()
    for name, count, _dt in _HOST_ARRAYS:
        addr, n = column(table, name), column(table, count)
        rel = addr - base
        for i, (a, r, c) in enumerate(zip(addr.tolist(), rel.tolist(), n.tolist())):
            if a == 0:
                rows[i][name] = None
            elif r % 4 or r < 0 or r // 4 + c > size:  # not in the block: copy it alone
                rows[i][name] = torch.from_numpy(_view(a, c, "int32", owner).copy())
            else:
                starts.append(r // 4)
                counts.append(c)
                where.append((i, name))
    if where:
        st, ct = np.array(starts, dtype=np.int64), np.array(counts, dtype=np.int64)
        ends = np.cumsum(ct)
        # positions of every element: start of its array + its place in it
        index = np.repeat(st - (ends - ct), ct) + np.arange(int(ends[-1]), dtype=np.int64)
        flat = block[torch.from_numpy(index)]
        for (i, name), e, c in zip(where, ends.tolist(), counts):
            rows[i][name] = flat[e - c:e]
    return rows


class _Workspace:
    """What output tensors keep alive: the context and the torch tensors its CUDA workspace lives in.

    The context points into the workspace tensors; output tensors point into
    the device one.  Holding all three in one owner means neither the context
    nor torch's allocator can reuse that memory while any output tensor lives,
    whatever happens to the CudaStepper.
    """

    __slots__ = ("ctx", "device", "host")

    def __init__(self, ctx: Any, device: torch.Tensor, host: torch.Tensor) -> None:
        self.ctx, self.device, self.host = ctx, device, host


_ALIGN = 256  # dcp_context_attach_cuda lays its blocks out 256-aligned from the bases it is given


def _aligned(t: torch.Tensor) -> int:
    return (t.data_ptr() + _ALIGN - 1) & ~(_ALIGN - 1)


class CudaStepper:
    """Runs ``dcp_step`` on the GPU for one rank, with CUDA workspace from torch's allocator.

    ``config.max_tokens_per_rank`` must be > 0.  ``groups`` gives the
    communicators and the stream.  Every ``step()`` counts on the context
    (:attr:`calls`) and is compared across ranks, as for :class:`dcpack.Stepper`:
    after an OutOfStepError call :meth:`resync` on every rank.
    """

    def __init__(self, config: Config, groups: NcclGroups) -> None:
        _require_cuda_build()
        self._stepper = Stepper(config)
        self._ctx = context(self._stepper)
        self.groups = groups
        self.device = groups.device
        device_bytes, host_bytes = _core.cuda_workspace_size(config.to_dict())
        # room to align both bases to 256 bytes whatever the allocators return
        with torch.cuda.device(self.device):
            self._device_ws = torch.empty(device_bytes + _ALIGN, dtype=torch.uint8, device="cuda")
        self._host_ws = torch.empty(host_bytes + _ALIGN, dtype=torch.uint8, pin_memory=True)
        # the workspace is used on the groups' stream; tell torch's caching allocator so (a free is then
        # ordered after that stream's work, not only the allocating stream's)
        self._device_ws.record_stream(groups.stream)
        self._owner = _Workspace(self._ctx.memory, self._device_ws, self._host_ws)
        _core.cuda_set_device(self.device)
        self._ctx.attach_cuda(_aligned(self._device_ws), device_bytes, _aligned(self._host_ws), host_bytes)
        # the outputs are slices of these typed views of the device workspace (made once)
        self._device_base = _aligned(self._device_ws)
        self._device_bytes = device_bytes // 8 * 8
        pad = self._device_base - self._device_ws.data_ptr()
        block = self._device_ws[pad:pad + self._device_bytes]
        self._device_typed = {dt: block.view(_TORCH[dt]) for dt in ("int64", "float32", "int32", "bool")}
        self._host_base = _aligned(self._host_ws)
        pad = self._host_base - self._host_ws.data_ptr()
        self._host_i32 = self._host_ws[pad:pad + host_bytes // 4 * 4].view(torch.int32)

    @property
    def calls(self) -> int:
        """``dcp_context_calls()``: steps made on this stepper since it was built or resynced."""
        return self._stepper.calls

    def resync(self, next_call: int = 0) -> None:
        """``dcp_context_resync()``: after an OutOfStepError, on every rank with the same ``next_call``."""
        self._stepper.resync(next_call)

    def count_failed_step(self) -> None:
        """As :meth:`dcpack.Stepper.count_failed_step`: a step given up on this rank before ``step()``."""
        self._stepper.count_failed_step()

    def step(self, samples: Any, *, mtp_virtual_stages: int = 0,
             fields: int | None = None, step_id: int = 0, plan: Any = None) -> TorchStepOutput:
        """One step on this rank.

        ``samples``: list of :class:`dcpack.Sample` (or dicts) whose fields are
        CUDA tensors on this rank's device (int64 tokens/labels/position_ids,
        float32 loss_mask; 1-D, contiguous) and whose ``cu_seqlens`` is host
        memory (int32 CPU tensor or numpy array); or a :class:`dcpack.PackedSamples`
        of such tensors (the fast form: no Python work per sample); None on ranks
        that receive by TP broadcast.  ``step_id``: this step's number, compared
        across ranks (0 = none).  ``plan``: a plan made ahead, as for
        :meth:`dcpack.Stepper.step`.  Collective over the world communicator.
        """
        try:
            args = self.groups.args(mtp_virtual_stages, step_id)
            # inputs written on torch's current stream are ready before the step's stream reads them
            current = torch.cuda.current_stream(self.device)
            self.groups.stream.wait_stream(current)
            _core.cuda_set_device(self.device)
        except BaseException:
            self._stepper.count_failed_step()
            raise
        raw = run(self._stepper, args, fields, lambda keep: self._columns(samples, fields, keep), plan=plan)
        return self._wrap(raw)

    def _columns(self, samples: Any, fields: int | None, keep: list[Any]):
        """The C binding's sample table of CUDA samples -> (table, fields); (None, fields) without input."""
        device = self.device

        def field(x: Any, _field: str, label: str):
            t = _cuda_field(x, label, device)
            return t, (t.data_ptr() if t.numel() else 0), t.numel()

        return sample_table(self._stepper, samples, fields, keep, field)

    def _wrap(self, raw: dict[str, Any]) -> TorchStepOutput:
        gen = raw["generation"]
        ctx, dev, owner = self._ctx, self.device, self._owner
        table = OutputTable(ctx, raw)
        state = table.state
        # device arrays: slices of typed views of the workspace tensor (they keep its storage alive)
        tensors = table.arrays(self._device_base, self._device_bytes,
                               lambda dt, start, count: self._device_typed[dt][start:start + count],
                               lambda address, count, dt: _tensor(address, count, _TORCH[dt], _TYPESTR[dt], dev,
                                                                  owner))
        # host copies of the boundaries (the pinned workspace is rewritten by the next step): one gather
        # copies them all, each microbatch's are slices of it
        host = _gathered_copies(table.table, self._host_base, self._host_i32, owner)
        scalars = table.scalars()
        out = []
        for t, h, sc in zip(tensors, host, scalars):
            t.update(h)
            out.append(TorchMicrobatch(state, t, tuple(sc)))
        from ._api import Plan

        plan = Plan(ctx, gen, raw["plan"], np.empty(0, dtype=np.int32)) if raw["plan"] is not None else None
        return TorchStepOutput(state, raw["num_microbatches"], raw["num_virtual_stages"], raw["num_sequences"],
                               raw["seqlen_sum"], raw["seqlen_squared_sum"], raw["stats"], plan, out)

    def close(self) -> None:
        """Destroy the context now (outputs go stale; the workspace is freed once no output tensor holds it)."""
        self._stepper.close()
