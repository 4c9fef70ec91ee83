"""The training step's data plane (``dcp_step``) on the CPU: Stepper, one rank's context.

Its rooms: the input (``_samples``: Sample, PackedSamples), the output (``_step_output``: StepOutput,
Microbatch), the in-process ranks (``_inproc``: InprocWorld, InprocCluster, StepArgs); ``_device_step`` is
what a stepper over device memory (dcpack.torch) uses of this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _core
from ._api import Config, Plan, _View, _view
from ._errors import Error, InvalidArgumentError, StaleViewError
from ._inproc import StepArgs
from ._samples import _I32, PackedSamples, Sample, _columns, _fields_of, _host_field, _sample_descriptor
from ._step_output import _MB, _SCALARS, Microbatch, StepOutput, _bulk_arrays, _span, _StepState, microbatch_table

__all__ = ["Stepper"]


def _check_uint64(name: str, value: Any) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << 64):
        raise InvalidArgumentError(f"{name} must be an int in [0, 2**64), got {value!r}")
    return value


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
