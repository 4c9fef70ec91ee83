"""What a stepper over device memory (dcpack.torch's CudaStepper) uses of the host Stepper.

The host Stepper checks a step's arguments, builds the sample table, calls the binding and wraps its
microbatch table in views.  A device stepper does the same with arrays of its own, through this:

- :func:`context`: the stepper's C context (to attach a CUDA workspace to it).
- :func:`sample_table`: the sample table of a list of samples or a PackedSamples whose fields
  ``field(x, name, label) -> (keep, address, count)`` checks and places.
- :func:`run`: one step through the stepper's checks and call counting, with that sample table.
- :class:`OutputTable`: a step's microbatch table: the views' shared state, each microbatch's arrays
  as slices of one memory block, its scalars; :func:`column` reads one column of such a table by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._errors import InvalidArgumentError
from ._inproc import StepArgs
from ._samples import PackedSamples, Sample, _columns, _fields_of, _sample_descriptor
from ._step import Stepper
from ._step_output import _MB, _SCALARS, _bulk_arrays, _StepState, microbatch_table

FieldArray = Callable[[Any, str, str], tuple[Any, int, int]]


def context(stepper: Stepper) -> Any:
    """The stepper's C context (``_core.Context``)."""
    return stepper._ctx


def sample_table(stepper: Stepper, samples: Any, fields: int | None, keep: list[Any],
                 field: FieldArray) -> tuple[Any, int | None]:
    """(the binding's sample table, fields) of ``samples``; (None, fields) for None (a rank that receives).

    ``keep`` collects what must live through the call; ``fields`` None: the samples' own, or the
    configuration's for an empty list.
    """
    if samples is None:
        return None, fields
    if isinstance(samples, PackedSamples):
        return samples._columns(fields, keep, field)
    if isinstance(samples, (Sample, dict)) or not isinstance(samples, (list, tuple)):
        raise InvalidArgumentError("samples must be a list of dcpack.Sample (or dicts), a dcpack.PackedSamples, "
                                   "or None")
    if fields is None:
        fields = _fields_of(samples) if samples else stepper.config.to_dict()["fields"]
    rows = [_sample_descriptor(s, fields, i, keep, field) for i, s in enumerate(samples)]
    return _columns(rows, keep), fields


def run(stepper: Stepper, args: StepArgs, fields: int | None,
        columns: Callable[[list[Any]], tuple[Any, int | None]], plan: Any = None) -> dict[str, Any]:
    """One step on ``stepper`` with the sample table ``columns(keep)`` builds -> the binding's result dict.

    The call counts on the stepper's context whatever happens, as :meth:`dcpack.Stepper.step` does.
    """
    return stepper._step(None, args, fields, columns=columns, plan=plan)


def column(table: np.ndarray, name: str) -> np.ndarray:
    """One column of a microbatch table by name (``_core.MICROBATCH_COLUMNS``), a row per microbatch."""
    return table[:, _MB[name]]


class OutputTable:
    """A step's microbatch table (one int64 row per microbatch, ``_core.MICROBATCH_COLUMNS``)."""

    def __init__(self, ctx: Any, raw: dict[str, Any]) -> None:
        self.state = _StepState(ctx, raw["generation"])
        """What the step's views share: they go stale with it (``state.check()``)."""
        self.table = microbatch_table(raw)

    def arrays(self, base: int, size: int, take: Callable[[str, int, int], Any],
               single: Callable[[int, int, str], Any]) -> list[dict[str, Any]]:
        """Every microbatch's output arrays as ``take(dtype, start, count)`` slices of the block at ``base``
        (``size`` bytes); one outside it or misaligned is ``single(address, count, dtype)``; address 0 None."""
        return _bulk_arrays(self.table, base, size, take, single)

    def scalars(self) -> list[list[int]]:
        """Each microbatch's (num_tokens, num_cu_seqlens, num_sequences, max_seqlen, local_cp_size, cp_rank)."""
        return self.table[:, [_MB[k] for k in _SCALARS]].tolist()

