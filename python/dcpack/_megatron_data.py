"""Megatron-LM's packed data path through dcp_step (dcpack.megatron, Level 2): DataPath and its helpers.

Samples from Megatron's loader to dcpack's step and back as Megatron's microbatches, the read-ahead that
plans a step early, online calibration's timing of microbatches, and install_data_path() into Megatron's
training loop.  Needs torch, CUDA and a CUDA build where it steps; importing it imports neither.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
import time
import warnings
from typing import Any

import numpy as np

from ._api import Config, Planner
from ._errors import (
    CommError,
    DcpTimeoutError,
    Error,
    InvalidArgumentError,
    InvalidConfigError,
    NcclError,
    NullPointerError,
    OutOfStepError,
)


# --------------------------------------------------------------------------
# Level 2: Megatron-LM's packed data path through dcp_step (needs torch, CUDA and a CUDA build)
# --------------------------------------------------------------------------


_FIELDS = (("tokens", "int64"), ("labels", "int64"), ("loss_mask", "float32"), ("position_ids", "int64"))


def _first_values(ts: list[Any]) -> list[int]:
    """The first element of each tensor (Megatron's ``t.reshape(-1)[0].item()``), with one conversion for all."""
    import torch

    if len(set(map(_SHAPE, ts))) == 1 and len({t.device for t in ts}) == 1:
        return torch.stack(ts).reshape(len(ts), -1)[:, 0].tolist()
    return [int(t.reshape(-1)[0].item()) for t in ts]


def _column(ts: list[Any], counts: list[int] | None) -> tuple[Any, list[int]]:
    """Tensors of one field, concatenated: (a 1-D tensor, tokens of each).  A leading dimension of 1 (default
    collate, micro-batch size 1) is dropped with one concatenation along the last dimension.  ``counts``: the
    tokens of each sample in the fields before (None for the first): a sample whose field differs raises."""
    import torch

    shapes = list(map(_SHAPE, ts))
    cat = None
    if len({len(s) for s in shapes}) == 1 and len(shapes[0]) in (1, 2):
        try:
            cat = torch.cat(ts, dim=-1)
        except (RuntimeError, TypeError):  # leading dimensions that differ, devices that differ
            cat = None
        # every tensor [n] or [1, n]: cat along the last dimension is their reshape(-1), back to back
        if cat is not None and cat.dim() == 2 and cat.shape[0] != 1:
            cat = None
    if cat is not None:
        n = [s[-1] for s in shapes]
        cat = cat.reshape(-1)
    else:
        flat = [t.reshape(-1) for t in ts]  # other shapes: as Megatron's reshape(-1)
        device = flat[0].device
        n = [t.numel() for t in flat]
        cat = torch.cat([t.to(device) for t in flat])
    if counts is not None and n != counts:
        bad = next(i for i, (a, b) in enumerate(zip(counts, n)) if a != b)
        raise InvalidArgumentError(f"sample {bad}: fields of {counts[bad]} and {n[bad]} tokens")
    return cat, n


_SHAPE = operator.attrgetter("shape")


def _samples_from_megatron(items: list[dict[str, Any]], device: Any) -> Any:
    """Megatron's dataset samples as one dcpack.PackedSamples on ``device``: one copy per field for the batch.

    Pre-packed samples (``cu_seqlens``, e.g. SFTDataset) keep their cut; unpacked
    ones (``padded_seq_len``, ``original_seq_len``, e.g. VarlenDataset) are one
    sequence each.  A leading batch dimension of 1 (default collate) is dropped.
    Each field of all the samples is concatenated where the samples are (the
    host, for a data loader's tensors) and moved to ``device`` in one copy; the
    scalars of all samples are read with one conversion.  No work per sample
    but reading its tensors from the dicts.
    """
    import torch

    from ._samples import PackedSamples

    present = [key for key, _ in _FIELDS if items and items[0].get(key) is not None]
    columns: dict[str, list[Any]] = {}
    for key, _ in _FIELDS:  # one pass per field over the dicts, no work per sample in Python
        column = list(map(operator.methodcaller("get", key), items))
        missing = any(t is None for t in column)  # by identity: `None in column` would compare tensors
        if (key in present and missing) or (key not in present and any(t is not None for t in column)):
            bad = next(i for i, t in enumerate(column) if (t is None) == (key in present))
            raise InvalidArgumentError(f"sample {bad} carries other fields than sample 0 ({present})")
        if key in present:
            columns[key] = column
    moved: dict[str, Any] = {}
    counts: list[int] | None = None
    for key, dtype_name in _FIELDS:
        if key not in columns:
            continue
        cat, counts = _column(columns[key], counts)
        moved[key] = cat.to(device=device, dtype=getattr(torch, dtype_name)).contiguous()
    if counts is None:
        counts = [0] * len(items)
    prepacked = ["cu_seqlens" in item and "padded_seq_len" not in item for item in items]
    original = None
    cu = ncu = None
    if not any(prepacked):
        padded = _first_values([item["padded_seq_len"] for item in items]) if items else []
        original = _first_values([item.get("original_seq_len", item["padded_seq_len"]) for item in items])
        if padded != counts:
            bad = next(i for i, (a, b) in enumerate(zip(counts, padded)) if a != b)
            raise InvalidArgumentError(f"sample {bad} has {counts[bad]} tokens but padded_seq_len {padded[bad]}")
    else:
        ncu_list, cus, orig = [], [], []
        for i, item in enumerate(items):
            if prepacked[i]:
                c = item["cu_seqlens"].reshape(-1).to(device="cpu", dtype=torch.int32)
                cus.append(c)
                ncu_list.append(c.numel())
                orig.append(counts[i])
            else:
                p = int(item["padded_seq_len"].reshape(-1)[0].item())
                if counts[i] != p:
                    raise InvalidArgumentError(f"sample {i} has {counts[i]} tokens but padded_seq_len {p}")
                ncu_list.append(-1)
                orig.append(int(item.get("original_seq_len", item["padded_seq_len"]).reshape(-1)[0].item()))
        cu = torch.cat(cus).contiguous().numpy() if cus else np.empty(0, dtype=np.int32)
        ncu, original = ncu_list, orig
    return PackedSamples(num_tokens=np.array(counts, dtype=np.int64), original_length=original,
                         cu_seqlens=cu, num_cu_seqlens=ncu, **moved)


def _seq_idx_all(microbatches: list[Any], device: Any) -> list[Any]:
    """``PackedSeqParams.seq_idx`` of every microbatch, computed for all of them at once.

    Megatron's ``__post_init__`` does, per microbatch with ``total_tokens`` T and padded
    boundaries cu: ``repeat_interleave(arange(len(cu)), clamp(diff(cu ++ [T]), min=0)).to(int32)``,
    shape [1, n].  Here the repeat counts of all microbatches come from the host copies of
    the boundaries, one ``repeat_interleave`` with a known output size runs on ``device`` (no
    synchronisation), and each microbatch's seq_idx is a [1, n] slice of its result.
    """
    import torch

    if any(mb._tensors.get("cu_seqlens_padded_host") is None for mb in microbatches):
        return [None] * len(microbatches)  # PackedSeqParams.__post_init__ computes them, one by one
    counts, values, sizes = [], [], []
    for mb in microbatches:
        cu = mb._tensors["cu_seqlens_padded_host"].numpy()
        lengths = np.maximum(np.diff(np.append(cu.astype(np.int64), np.int64(mb.num_tokens))), 0)
        counts.append(lengths)
        values.append(np.arange(lengths.shape[0], dtype=np.int32))
        sizes.append(int(lengths.sum()))
    if not microbatches:
        return []
    total = sum(sizes)
    repeats = torch.from_numpy(np.concatenate(counts)).to(device)
    flat = torch.repeat_interleave(torch.from_numpy(np.concatenate(values)).to(device), repeats, output_size=total)
    out, at = [], 0
    for n in sizes:
        out.append(flat[at:at + n].unsqueeze(0))
        at += n
    return out


def _sets_total_tokens(config: Config) -> bool:
    """Whether Megatron's get_batch leaves ``PackedSeqParams.total_tokens`` set (to the rank's padded length).

    ``pad_sequence_for_thd`` sets it when THD padding is on and cu_seqlens are not
    padded to a fixed number of entries (``thd_max_packed_sequences``); without
    padding it stays None.
    """
    d = config.to_dict()
    padding = d["pad_alignment"] > 0 or d["pad_to_max_seqlen"] != 0
    return bool(padding and d["max_sequences_per_microbatch"] == 0)


def _lengths_of_items(items: list[dict[str, Any]]) -> np.ndarray:
    """The padded length of each sequence Megatron's samples hand the step, in order (what ``dcp_step`` gathers
    of this rank): a one-sequence sample's ``padded_seq_len``, a pre-packed sample's sub-samples (``cu_seqlens``,
    empty ones dropped).  Read on the host, before the samples are converted (see ``_samples_from_megatron``,
    which checks them against the tensors)."""
    import torch

    prepacked = ["cu_seqlens" in item and "padded_seq_len" not in item for item in items]
    if not any(prepacked):
        out = np.asarray(_first_values([item["padded_seq_len"] for item in items]) if items else [], dtype=np.int64)
    else:
        parts = []
        for item, packed in zip(items, prepacked):
            if packed:
                cu = item["cu_seqlens"].reshape(-1).to(device="cpu", dtype=torch.int64).numpy()
                parts.append(np.diff(cu))
            else:
                parts.append(np.asarray([int(item["padded_seq_len"].reshape(-1)[0].item())], dtype=np.int64))
        out = np.concatenate(parts)
    return np.ascontiguousarray(out[out != 0], dtype=np.int32)


def _read_items(source: Any, num_microbatches: int) -> list[dict[str, Any]]:
    """The DP rank's samples of one global batch, as the data iterator gives them."""
    items: list[dict[str, Any]] = []
    for _ in range(num_microbatches):
        item = next(source)
        items.extend(item if isinstance(item, list) else [item])
    return items


# What a DP rank tells its peers in the read-ahead's gather.  A rank with no next global batch (its iterator
# ended or raised) still takes part and gathers one length -1: dcp_gather agrees that over the DP ranks as
# BadLengthError on every rank at once (the lengths a DataPath gathers are never negative otherwise), and a
# second gather of one code per rank then says which ranks have no batch, and why.
_NO_BATCH = np.array([-1], dtype=np.int32)
_HAS_BATCH, _ENDED, _FAILED = 1, 2, 3
# failures of the communicator itself: a second gather would only wait out the timeout again
_COMM_FAILURES = (DcpTimeoutError, CommError, NcclError, OutOfStepError)


class _Ahead:
    """The next global batch, read one step early: its samples (as the iterator gave them: converted at the step
    they are for) and the plan of its lengths (planned in a thread).

    ``error``: what reading it raised on this rank.  ``ended`` / ``failed``: the DP ranks (this one included)
    whose iterator ended / raised reading it, agreed in the read-ahead's gather.  When any rank has no batch
    (``missing``), the call it was for steps without input, so every rank of the step stops at once, and raises
    (``end_error``).  A failed gather or plan leaves ``plan`` None: the step then plans the batch itself and
    raises the same error, agreed over every rank.
    """

    __slots__ = ("items", "plan", "error", "plan_error", "thread", "plan_ns", "wait_ns", "gather_ns", "ended",
                 "failed")

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.plan = None
        self.error: BaseException | None = None
        self.plan_error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.plan_ns = 0
        self.wait_ns = 0
        self.gather_ns = 0
        self.ended: list[int] = []
        self.failed: list[int] = []

    @property
    def missing(self) -> bool:
        """Whether some DP rank (this one or a peer) has no next global batch."""
        return self.error is not None or bool(self.ended or self.failed)

    def end_error(self) -> BaseException:
        """What the call this batch was for raises: this rank's own error, else the peers' end or failure."""
        if self.error is not None:
            return self.error  # the iterator's, as without plan-ahead
        if self.failed:
            return RuntimeError(
                f"DataPath: the data iterator of DP rank(s) {self.failed} raised reading the next global batch "
                "(read a call early, plan_ahead): this rank's batch cannot be stepped without theirs")
        return StopIteration(
            f"DataPath: the data iterator of DP rank(s) {self.ended} ended a global batch before this rank's: "
            f"the data ended (this rank's {len(self.items)} samples read ahead are dropped)")

    def start(self, planner: Planner, lengths: np.ndarray) -> None:
        def run() -> None:
            t0 = time.perf_counter_ns()
            try:
                self.plan = planner.plan(lengths)  # the GIL is released while the library plans
            except BaseException as e:  # noqa: BLE001 - the step plans itself and agrees the error
                self.plan_error = e
            self.plan_ns = time.perf_counter_ns() - t0

        self.thread = threading.Thread(target=run, name="dcpack-plan-ahead", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            t0 = time.perf_counter_ns()
            self.thread.join()
            self.wait_ns = time.perf_counter_ns() - t0
            self.thread = None


class _ReadAhead:
    """One data rank's read-ahead for DataPath(plan_ahead=True), without torch: read the next global batch,
    gather its lengths over the DP communicator (``step_id``: the batch number), agree whether every DP rank
    has one, and start planning it.  ``lengths_of(items)``: the padded lengths of a batch's samples.
    ``lost``: batches whose plan made ahead was lost (a failed gather or plan), each also warned of."""

    def __init__(self, planner: Planner, comm: Any, lengths_of: Any) -> None:
        self.planner, self.comm, self.lengths_of = planner, comm, lengths_of
        self.batches = 0
        self.lost = 0

    def read(self, source: Any, num_microbatches: int) -> _Ahead:
        ahead = _Ahead()
        self.batches += 1
        mine = _HAS_BATCH
        try:
            ahead.items = _read_items(source, num_microbatches)
        except StopIteration as e:  # the iterator's end: agreed below, raised at the next call
            ahead.error, mine = e, _ENDED
        except BaseException as e:  # noqa: BLE001 - the iterator's failure: likewise
            ahead.error, mine = e, _FAILED
        lengths = _NO_BATCH
        if mine == _HAS_BATCH:
            try:
                lengths = np.ascontiguousarray(self.lengths_of(ahead.items), dtype=np.int32)
                if lengths.size and int(lengths.min()) < 0:  # only _NO_BATCH may be negative
                    raise ValueError("a negative padded length")
            except Exception:  # noqa: BLE001 - malformed samples: the next call's conversion raises as without
                lengths = np.empty(0, dtype=np.int32)  # plan-ahead; this rank still takes part in the gather
        t0 = time.perf_counter_ns()
        try:
            global_lengths, _ = self.planner.gather(self.comm, lengths, step_id=self.batches)
        except Exception as e:  # noqa: BLE001 - agreed over the DP ranks: every rank takes the same branch
            ahead.gather_ns = time.perf_counter_ns() - t0
            if not isinstance(e, _COMM_FAILURES):
                self._who_has_none(ahead, mine)
            ahead.plan_error = e
            return ahead
        ahead.gather_ns = time.perf_counter_ns() - t0
        ahead.start(self.planner, global_lengths)
        return ahead

    def _who_has_none(self, ahead: _Ahead, mine: int) -> None:
        """After an agreed gather failure: one code per DP rank says which have no batch (none: a real error)."""
        try:
            codes, _ = self.planner.gather(self.comm, [mine], step_id=self.batches)
        except Exception:  # noqa: BLE001 - a rank without a batch still steps without input at the next call
            return
        ahead.ended = [r for r, c in enumerate(codes.tolist()) if c == _ENDED]
        ahead.failed = [r for r, c in enumerate(codes.tolist()) if c == _FAILED]

    def lose(self, error: BaseException | None) -> None:
        """A batch stepped without its plan made ahead: count it and say so."""
        self.lost += 1
        hint = (" (the planner is out of step: later batches are not planned ahead either)"
                if isinstance(error, OutOfStepError) else "")
        warnings.warn(f"DataPath: a global batch was not planned ahead ({type(error).__name__}: {error}); its "
                      f"step plans it itself{hint}; DataPath.plan_ahead_lost counts such batches",
                      RuntimeWarning, stacklevel=3)


class _HostMicrobatch:
    """A host step's microbatch with its arrays as CPU tensors (zero copy), as DataPath reads a TorchMicrobatch."""

    __slots__ = ("_tensors", "num_tokens", "max_seqlen", "local_cp_size", "cp_rank")

    def __init__(self, mb: Any) -> None:
        import torch

        tensors = {}
        with warnings.catch_warnings():  # the views are read-only numpy arrays; the tensors are read only
            warnings.simplefilter("ignore", UserWarning)
            for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "cu_seqlens",
                      "cu_seqlens_padded"):
                a = mb._arrays[k]
                tensors[k] = None if a is None else torch.from_numpy(a)
        tensors["cu_seqlens_host"] = tensors["cu_seqlens"]
        tensors["cu_seqlens_padded_host"] = tensors["cu_seqlens_padded"]
        self._tensors = tensors
        self.num_tokens, self.max_seqlen = mb.num_tokens, mb.max_seqlen
        self.local_cp_size, self.cp_rank = mb.local_cp_size, mb.cp_rank


class DataPath:
    """Megatron-LM's sequence-packing data path through ``dcp_step`` (Level 2).

    Replaces ``wrap_data_iterator`` (fetch the DP rank's samples, gather
    lengths, plan, reroute, pack) and ``get_batch_on_this_rank_for_sequence_packing``
    (pad, CP-slice, TP broadcast) with one ``dcp_step`` per global batch on the
    GPU, over dcpack's NCCL communicators.  Every TP rank gets its microbatches
    from the step (dcp_step broadcasts to the TP group), so every rank's
    iterator is a real one.

    ``config``: the dcpack.Config of the run (DP, CP, TP, PP, VPP sizes,
    scheduler, max_seqlen_per_rank, padding, capacities with
    max_tokens_per_rank > 0); :func:`config_from_megatron` derives it from
    Megatron's arguments.  ``groups``: a dcpack.torch.NcclGroups (default:
    ``NcclGroups.from_megatron(config)``).

    A rank whose data iterator ends (or raises) at a call steps without
    input before raising it, so every other rank of the step fails that
    step at once (NullPointerError, its message saying a rank's batch is
    missing) instead of waiting out the timeout.

    ``groups`` may also be a :class:`dcpack.StepArgs` (e.g.
    ``InprocCluster.args(rank)``): the step then runs on the host with a
    :class:`dcpack.Stepper` and the microbatches are CPU tensors, the same
    values (tests, CPU-only runs).

    Outputs are views of dcpack's output block, valid until the next
    ``wrap_data_iterator`` call: Megatron consumes a global batch's
    microbatches before it fetches the next one.

    ``plan_ahead=True`` plans each global batch a step early (docs/python.md,
    planning a step ahead): after a step, ``wrap_data_iterator`` reads the
    next global batch from the data iterator (the same number of
    microbatches), gathers its lengths over the DP communicator
    (``data_parallel``; default ``groups.data_parallel``, which
    ``NcclGroups(..., data_parallel=True)`` makes and the default groups make
    when plan_ahead is on) and plans them on a thread of its own while the
    trainer trains on the current batch; the next call hands that plan to the
    step.  The microbatches are the same, bit for bit, in the same order.
    The next batch's samples are held as the iterator gave them a call early
    (moved to the device at the call that steps them), and one batch more is
    read from the iterator than the trainer consumes.  End of data is agreed
    in that read-ahead: a DP rank whose iterator ends (or raises) still takes
    part in the gather and says so, and the call that would step the missing
    batch raises at once on every rank: StopIteration on the data ranks (the
    iterator's own where it ended, else one naming the DP ranks that ended),
    the iterator's error where it raised and RuntimeError on its DP peers;
    those ranks first step without input, which fails the step at once on
    every other rank of it (TP ranks that receive: NullPointerError saying
    so).  A plan that fails (or a gather) leaves the step to plan the batch
    itself, which then raises the same error on every rank; each such batch
    is counted in ``plan_ahead_lost`` and warned of (RuntimeWarning).
    ``last_plan_ahead`` says how long the last plan took on its thread and
    how long the step waited for it.

    ``calibrate="online"`` keeps the step's cost model true from the trainer's
    own times (docs/python.md, online calibration): each microbatch the
    trainer takes from the iterator records a CUDA event (the host clock on
    the CPU path) on the current stream, nothing waits inside the step; at the
    next ``wrap_data_iterator`` the events are read (microbatch m runs from
    its fetch to the next one's; the last, which runs into the optimizer, is
    not reported) and observed on the step's context, agreed over the DPxCP
    communicator (``dcp_observe``), before the next batch is planned with the
    refit model.  The config needs ``max_observations`` (default 4096 here);
    TP 1, PP 1 and no plan_ahead (the plan made ahead would be of the older
    model).  ``last_calibration`` is the step context's calibration state.
    """

    def __init__(self, config: Config, groups: Any = None, mtp_virtual_stages: int = 0, *,
                 plan_ahead: bool = False, data_parallel: Any = None, calibrate: str | None = None,
                 max_observations: int = 4096) -> None:
        from ._require import require_torch

        torch = require_torch("dcpack.megatron.DataPath")

        from ._inproc import StepArgs
        from ._step import Stepper

        if calibrate not in (None, "online"):
            raise InvalidConfigError(f"calibrate must be None or 'online', got {calibrate!r}")
        if calibrate == "online" and (plan_ahead or config.tensor_parallel_size != 1
                                      or config.pipeline_parallel_size != 1):
            raise InvalidConfigError("calibrate='online' needs tensor_parallel_size 1, pipeline_parallel_size 1 and "
                                     "plan_ahead off (every rank of the step must observe the same rows)")
        self.calibrate = calibrate
        self._observations = max_observations if calibrate == "online" else 0
        self._timing: _MicrobatchTiming | None = None
        self.last_calibration: dict[str, Any] | None = None
        self.config = config
        self.plan_ahead = bool(plan_ahead)
        step_config = _observing(config, self._observations) if self._observations else config
        if isinstance(groups, StepArgs):
            self.groups = groups
            self.stepper = Stepper(step_config)
            self.device = torch.device("cpu")
            self._host = True
        else:
            from . import torch as dt

            self.groups = groups if groups is not None else dt.NcclGroups.from_megatron(
                config, data_parallel=self.plan_ahead)
            self.stepper = dt.CudaStepper(step_config, self.groups)
            self.device = torch.device("cuda", self.groups.device)
            self._host = False
        self.mtp_virtual_stages = mtp_virtual_stages
        self.last_output = None
        self.last_plan_ahead: dict[str, float] | None = None
        """With plan_ahead, of the batch the last call stepped: {"gather_ms": the gather of its lengths (a call
        earlier), "plan_ms": its planning on the thread, "wait_ms": what the call waited for that thread,
        "planned": whether a plan was handed to the step (False: the gather or the plan failed, the step
        planned itself)}; None before the first batch read ahead is stepped."""
        self._total_tokens_set = _sets_total_tokens(config)
        self._ahead: _Ahead | None = None
        self._planner: Planner | None = None
        self._dp_comm = None
        self._reader: _ReadAhead | None = None
        if self.plan_ahead and self.groups.holds_data:
            self._dp_comm = data_parallel if data_parallel is not None else getattr(self.groups, "data_parallel", None)
            if self._dp_comm is None:
                raise InvalidArgumentError("plan_ahead needs a DP communicator: pass data_parallel= or groups with "
                                           "data_parallel (NcclGroups(..., data_parallel=True))")
            self._planner = Planner(config.replace(max_tokens_per_rank=0))
            self._reader = _ReadAhead(self._planner, self._dp_comm, _lengths_of_items)

    @property
    def plan_ahead_lost(self) -> int:
        """With plan_ahead: global batches stepped without their plan made ahead because its gather or plan
        failed (each also a RuntimeWarning; the step planned the batch itself).  0 on ranks without data."""
        return self._reader.lost if self._reader is not None else 0

    def _observe_last_step(self) -> None:
        """The last step's microbatch times, agreed over the DPxCP communicator, refit the step's model."""
        from . import _core

        timing, self._timing = self._timing, None
        if timing is None or not self.groups.holds_data:
            return
        times = timing.collect()
        ctx = (self.stepper if self._host else self.stepper._stepper)._ctx
        ps = np.ascontiguousarray(np.rint(np.clip(times, 0.0, 1e7) * 1e12).astype(np.int64))
        comm = self.groups.data_context_parallel
        _core.observe(ctx, None, 0, 0, ps.ctypes.data, comm, 0)
        st = _core.observe_status(ctx)
        self.last_calibration = {k: v for k, v in st.items() if k != "cost"}

    _items = staticmethod(_read_items)

    def _step(self, samples: Any, plan: Any) -> Any:
        if self._host:
            args = dataclasses.replace(self.groups, mtp_virtual_stages=self.mtp_virtual_stages)
            return self.stepper.step(samples, args, plan=plan)
        return self.stepper.step(samples, mtp_virtual_stages=self.mtp_virtual_stages, plan=plan)

    def _stop(self, ahead: _Ahead) -> None:
        """This rank, or with plan_ahead a DP peer, has no next global batch: step without input, which every
        rank of the step (DP peers, TP ranks that receive, other pipeline stages) fails at once, agreed, instead
        of waiting out the timeout for this rank; then raise this rank's error or the peers' end."""
        cause = None
        try:
            self._step(None, None)
        except Error as e:
            cause = e
        raise ahead.end_error() from cause

    def wrap_data_iterator(self, data_iterator: Any, config: Any, num_microbatches: int,
                           pg_collection: Any = None) -> tuple[Any, int, float, float]:
        """Drop-in for Megatron's ``wrap_data_iterator``: (iterator(s), microbatches, seqlen sum, squared sum)."""
        vpp = self.config.virtual_pipeline_size
        source = data_iterator
        if isinstance(source, list):
            source = next((d for d in source if d is not None), None)
        samples = None
        plan = None
        if self._observations:
            self._observe_last_step()
        if self.groups.holds_data:
            if source is None:
                raise ValueError("this rank holds data but its data_iterator is None")
            ahead, self._ahead = self._ahead, None
            if ahead is None:
                if self._reader is not None:
                    self._reader.batches += 1  # the gathers' step ids count every batch
                try:
                    items = self._items(source, num_microbatches)
                except Exception as e:  # noqa: BLE001 - the iterator's end or failure: stop every rank at once
                    ahead = _Ahead()
                    ahead.error = e
                    self._stop(ahead)
            else:
                ahead.join()
                self.last_plan_ahead = {"gather_ms": ahead.gather_ns / 1e6, "plan_ms": ahead.plan_ns / 1e6,
                                        "wait_ms": ahead.wait_ns / 1e6, "planned": ahead.plan is not None}
                if ahead.missing:
                    self._stop(ahead)
                if ahead.plan is None:
                    self._reader.lose(ahead.plan_error)
                items, plan = ahead.items, ahead.plan
                del ahead
            try:
                samples = _samples_from_megatron(items, self.device)
            except InvalidArgumentError:
                # refused before the step: counted as this rank's failed step, as the stepper counts a
                # refused input, so the ranks' next step is an OutOfStepError on every rank
                self.stepper.count_failed_step()
                raise
            del items
        try:
            out = self._step(samples, plan)
        except NullPointerError as e:
            if "failed with DCP_ERR_NULL_POINTER" not in e.message:
                raise
            raise NullPointerError(
                f"{e.message}: a DataPath rank whose global batch is missing (its data iterator ended or raised, "
                "or with plan_ahead a DP peer's) steps without input, so that every rank stops at once",
                e.status) from e
        del plan
        self.last_output = out
        mbs = out.microbatches  # checks the output is current, once
        if self._host:
            mbs = [_HostMicrobatch(mb) for mb in mbs]
        seq_idx = _seq_idx_all(mbs, self.device) if self._total_tokens_set else [None] * len(mbs)
        batches_all = []
        for mb, idx in zip(mbs, seq_idx):
            t = mb._tensors
            tok, lab, lm, pos = t["tokens"], t["labels"], t["loss_mask"], t["position_ids"]
            batches_all.append({
                "tokens": None if tok is None else tok.view(1, -1),
                "labels": None if lab is None else lab.view(1, -1),
                "loss_mask": None if lm is None else lm.view(1, -1),
                "position_ids": None if pos is None else pos.view(1, -1),
                "padding_mask": t["padding_mask"].view(1, -1),
                "cu_seqlens": t["cu_seqlens"],
                "cu_seqlens_padded": t["cu_seqlens_padded"],
                "max_seqlen": mb.max_seqlen,
                "local_cp_size": mb.local_cp_size,
                "cp_rank": mb.cp_rank,
                "total_tokens": mb.num_tokens if self._total_tokens_set else None,
                "seq_idx": idx,
            })
        nm = out.num_microbatches
        if self._reader is not None:  # the next global batch: read, gathered, planned while this one trains
            self._ahead = self._reader.read(source, num_microbatches)
        per_stage = [iter(batches_all[v * nm:(v + 1) * nm]) for v in range(vpp)]
        if self._observations and self.groups.holds_data:
            self._timing = _MicrobatchTiming(nm, self._host)
            per_stage = [self._timing.wrap(it) for it in per_stage]
        iterators: Any = per_stage if vpp > 1 else per_stage[0]
        return iterators, out.num_microbatches, float(out.seqlen_sum), float(out.seqlen_squared_sum)

    @staticmethod
    def get_batch(data_iterator: Any, vpp_size: int | None = None, mtp_on_this_rank: bool = False,
                  vp_stage: int | None = None, dynamic_cp: bool = False, pg_collection: Any = None,
                  config: Any = None) -> tuple:
        """Drop-in for ``get_batch_on_this_rank_for_sequence_packing``: the microbatch dcp_step already
        padded, sliced and broadcast, as (tokens, labels, loss_mask, None, position_ids,
        packed_seq_params, padding_mask).

        ``PackedSeqParams`` is filled as Megatron's function leaves it after
        ``pad_sequence_for_thd``: padded boundaries, ``max_seqlen`` of the padded
        microbatch, ``total_tokens`` (and so ``seq_idx``) where Megatron sets it,
        ``pad_between_seqs=True``, the dynamic CP group from ``parallel_state``."""
        from megatron.core import parallel_state
        from megatron.core.packed_seq_params import PackedSeqParams

        batch = next(data_iterator)
        local_cp_size = batch["local_cp_size"] if dynamic_cp else None
        cp_group = (parallel_state.get_dynamic_data_context_parallel_groups(group_size=local_cp_size)
                    if dynamic_cp else None)
        total_tokens, seq_idx = batch.get("total_tokens"), batch.get("seq_idx")
        # with seq_idx computed for the whole batch (_seq_idx_all), __post_init__ runs without total_tokens
        # (it then computes nothing) and both fields are set after: the same object, field by field
        params = PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=batch["cu_seqlens"], cu_seqlens_kv=batch["cu_seqlens"],
            cu_seqlens_q_padded=batch["cu_seqlens_padded"], cu_seqlens_kv_padded=batch["cu_seqlens_padded"],
            max_seqlen_q=batch["max_seqlen"], max_seqlen_kv=batch["max_seqlen"],
            local_cp_size=local_cp_size, cp_group=cp_group,
            total_tokens=total_tokens if seq_idx is None else None,
            cp_partition_mode=getattr(config, "cp_partition_mode", "zigzag"), pad_between_seqs=True,
        )
        if seq_idx is not None:
            params.total_tokens = total_tokens
            params.seq_idx = seq_idx
        return (batch["tokens"], batch["labels"], batch["loss_mask"], None, batch["position_ids"], params,
                batch["padding_mask"])


def _observing(config: Config, max_observations: int) -> Config:
    """The same configuration whose context keeps observation rows (dcp_config.max_observations)."""

    @dataclasses.dataclass
    class _ObservingConfig(Config):
        def to_dict(self) -> dict[str, Any]:
            d = super().to_dict()
            d["max_observations"] = max_observations
            return d

    return _ObservingConfig(**{f.name: getattr(config, f.name) for f in dataclasses.fields(Config)})


class _MicrobatchTiming:
    """A mark at every microbatch the trainer fetches (a CUDA event on the current stream, or the host clock)."""

    def __init__(self, num_microbatches: int, host: bool) -> None:
        self.n = num_microbatches
        self.host = host
        self.marks: list[Any] = []

    def wrap(self, it: Any) -> Any:
        timing = self

        class _Timed:
            def __iter__(self) -> Any:
                return self

            def __next__(self) -> Any:
                item = next(it)
                timing.mark()
                return item

        return _Timed()

    def mark(self) -> None:
        if self.host:
            self.marks.append(time.perf_counter())
        else:
            import torch

            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)

    def collect(self) -> np.ndarray:
        """Seconds per microbatch: from its fetch to the next one's; 0 (not reported) for the last."""
        out = np.zeros(self.n, dtype=np.float64)
        k = min(len(self.marks), self.n)
        if not self.host and k > 1:
            self.marks[k - 1].synchronize()  # long complete by the next step: reads, does not wait
        for i in range(k - 1):
            a, b = self.marks[i], self.marks[i + 1]
            out[i] = (b - a) if self.host else a.elapsed_time(b) * 1e-3
        return out


def config_from_megatron(args: Any, max_sequences: int, max_tokens_per_rank: int,
                         scheduler: str | None = None) -> Config:
    """A dcpack.Config from Megatron-LM's training arguments (``get_args()``).

    Reads the parallel sizes, ``sequence_packing_scheduler`` (dp_balanced,
    default_dynamic_cp; ``scheduler`` overrides with a dcpack name),
    ``max_seqlen_per_dp_cp_rank``, ``min_dynamic_context_parallel_size``,
    ``microbatch_group_size_per_vp_stage``, ``thd_max_packed_sequences``,
    ``pad_packed_seq_alignment`` ("max" or an int; "max" whenever padding is on
    and ``cuda_graph_impl`` is not "none", as Megatron pads then), the THD tail
    policy and ``cp_partition_mode``.  ``max_sequences`` and ``max_tokens_per_rank`` are
    the capacities (sequences per global batch; tokens one rank brings in or
    holds out, THD padding included).
    """
    name = scheduler or {"dp_balanced": "dp_balanced", "default_dynamic_cp": "dynamic_cp"}.get(
        getattr(args, "sequence_packing_scheduler", None) or "dp_balanced", "dynamic_cp")
    vpp = getattr(args, "virtual_pipeline_model_parallel_size", None) or 1
    alignment = getattr(args, "pad_packed_seq_alignment", None)
    if alignment is not None and (getattr(args, "cuda_graph_impl", None) or "none") != "none":
        alignment = "max"  # CUDA graphs: Megatron pads every microbatch to max_seqlen_per_dp_cp_rank
    tail = getattr(args, "thd_tail_padding_policy", None)
    padding = alignment is not None
    cap = getattr(args, "thd_max_packed_sequences", None)
    append_dummy = tail in (None, "append_dummy_seq", "append_dummy")
    if cap is not None and padding and append_dummy:
        cap = int(cap) - 1  # thd_max_packed_sequences counts the dummy sequence
    return Config(
        scheduler=name,
        data_parallel_size=args.data_parallel_size,
        context_parallel_size=args.context_parallel_size,
        tensor_parallel_size=args.tensor_model_parallel_size,
        pipeline_parallel_size=args.pipeline_model_parallel_size,
        virtual_pipeline_size=vpp,
        microbatch_group_size_per_vp_stage=(getattr(args, "microbatch_group_size_per_vp_stage", None) or 0)
        if vpp > 1 else 0,
        max_sequences=max_sequences,
        max_seqlen_per_rank=args.max_seqlen_per_dp_cp_rank,
        min_cp_size=getattr(args, "min_dynamic_context_parallel_size", None) or 1,
        max_sequences_per_microbatch=int(cap or 0),
        max_tokens_per_rank=max_tokens_per_rank,
        pad_alignment=0 if (alignment is None or alignment == "max") else int(alignment),
        pad_to_max_seqlen=1 if alignment == "max" else 0,
        thd_tail_policy="append_dummy" if append_dummy else "extend_last",
        cp_partition=getattr(args, "cp_partition_mode", None) or "zigzag",
    )


def install_data_path(path: DataPath, *, training_module: Any = None, gpt_module: Any = None) -> dict[str, Any]:
    """Route Megatron-LM's packed data path through ``path`` at run time (Level 2).

    Replaces ``wrap_data_iterator`` where ``megatron.training.training``
    imported it, and ``get_batch_on_this_rank_for_sequence_packing`` in the
    module that runs ``pretrain_gpt.py`` (``gpt_module``, default ``__main__``).
    Returns the replaced functions for :func:`uninstall_data_path`.
    """
    import sys

    if training_module is None:
        from megatron.training import training as training_module
    if gpt_module is None:
        gpt_module = sys.modules["__main__"]
    previous = {
        "wrap_data_iterator": (training_module, getattr(training_module, "wrap_data_iterator", None)),
        "get_batch_on_this_rank_for_sequence_packing": (
            gpt_module, getattr(gpt_module, "get_batch_on_this_rank_for_sequence_packing", None)),
    }
    training_module.wrap_data_iterator = path.wrap_data_iterator
    gpt_module.get_batch_on_this_rank_for_sequence_packing = path.get_batch
    return previous


def uninstall_data_path(previous: dict[str, Any]) -> None:
    """Restore what :func:`install_data_path` replaced."""
    for name, (module, fn) in previous.items():
        setattr(module, name, fn)
