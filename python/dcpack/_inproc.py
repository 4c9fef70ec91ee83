"""The in-process communicator (``dcp_inproc_world``) and a cluster of ranks as threads over it.

InprocWorld wraps the C world; InprocCluster lays a configuration's DP x CP x TP x PP ranks out over one
world and runs a function on each (tests, CPU-only runs).  StepArgs says where one rank sits.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from . import _core
from ._api import Config
from ._errors import InvalidArgumentError
from ._samples import _I32

__all__ = ["FAULT_NONE", "FAULT_RETURN_ERROR", "FAULT_NEVER_ARRIVE", "FAULT_TRUNCATE", "Comm", "InprocWorld",
           "InprocCluster", "StepArgs"]

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
