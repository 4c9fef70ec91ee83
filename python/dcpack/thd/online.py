"""Online calibration's timing in training steps (docs/python.md, online calibration).

:class:`MicrobatchTimer` times each microbatch's forward and backward with CUDA events recorded
on the current stream (no synchronisation inside the step); :meth:`MicrobatchTimer.collect`
reads the previous step's events at the next step, when they have long completed, and gives
seconds per microbatch, ready for :meth:`dcpack.Planner.observe` (``comm=``: agreed over the
DPxCP communicator).  On a CPU device it reads the host clock instead.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional

import numpy as np
import torch


class MicrobatchTimer:
    """Marks before the first microbatch and after each one; microbatch ``i`` is mark ``i`` to ``i + 1``."""

    def __init__(self, device: Any = None) -> None:
        dev = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
        self.cuda = dev.type == "cuda"
        self._pool: List[Any] = []   # events reused step after step: no allocation per step once warm
        self._marks: List[Any] = []
        self._count = 0
        self._ready: Optional[int] = None  # marks of a finished step not yet collected

    def begin(self, num_microbatches: int) -> None:
        """Start a step of ``num_microbatches`` (its first mark); an uncollected step is dropped."""
        need = num_microbatches + 1
        if self.cuda:
            while len(self._pool) < need:
                self._pool.append(torch.cuda.Event(enable_timing=True))
            self._marks = self._pool[:need]
        else:
            self._marks = [0.0] * need
        self._count = 0
        self._ready = None
        self.mark()

    def mark(self) -> None:
        """The end of the current microbatch (the start of the next)."""
        if self._count >= len(self._marks):
            return
        if self.cuda:
            self._marks[self._count].record()
        else:
            self._marks[self._count] = time.perf_counter()
        self._count += 1

    def end(self) -> None:
        """The step's microbatches are enqueued: collect() may read them (at the next step)."""
        self._ready = self._count

    def collect(self) -> Optional[np.ndarray]:
        """Seconds per microbatch of the last finished step (0 for one not marked), or None.

        The events are read once complete: by the next step the trainer's own synchronisation (the
        loss, the optimizer) has long passed them, so this normally waits for nothing.
        """
        if self._ready is None:
            return None
        n = len(self._marks) - 1
        out = np.zeros(n, dtype=np.float64)
        if self.cuda:
            last = self._marks[self._ready - 1]
            if not last.query():
                last.synchronize()  # only when called inside the same step, before its work finished
            for i in range(min(n, self._ready - 1)):
                out[i] = self._marks[i].elapsed_time(self._marks[i + 1]) * 1e-3
        else:
            for i in range(min(n, self._ready - 1)):
                out[i] = self._marks[i + 1] - self._marks[i]
        self._ready = None
        return out
