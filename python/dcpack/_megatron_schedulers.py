"""dcpack's planners behind Megatron-LM's sequence-packing scheduler interface (dcpack.megatron, Level 1).

The scheduler classes, the table of them, and install()/uninstall() into Megatron's ``scheduler_map``.
Imports neither Megatron nor torch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._api import Config, CostModel, Planner, as_lengths
from ._errors import InvalidConfigError

REQUIRED_SAMPLE_KEYS = ["tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len"]


def _int_arg(name: str, value: Any, optional: bool = False) -> int | None:
    """An int constructor argument as Planner and Config take it: no floats, strings or booleans."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _megatron_pipeline(vpp_on: bool) -> tuple[int, int]:
    """Megatron-LM's pipeline and virtual pipeline sizes where Megatron is loaded and its parallel
    state is set up (Megatron constructs the scheduler without them), else (1, 1): with PP > 1 the
    ``balanced`` scheduler plans for the pipeline's step (docs/planning.md, pipeline step model).
    Megatron is never imported here."""
    import sys

    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None:
        return 1, 1
    try:
        pp = int(ps.get_pipeline_model_parallel_world_size() or 1)
        vpp = int(ps.get_virtual_pipeline_model_parallel_world_size() or 1) if vpp_on else 1
    except (AssertionError, AttributeError, RuntimeError, TypeError, ValueError):
        return 1, 1  # parallel state not initialised
    pp = max(pp, 1)
    return pp, (vpp if pp > 1 and vpp > 1 else 1)


class DcpackPackingScheduler:
    """Common part of the drop-in schedulers (Megatron's ``BasePackingScheduler`` interface).

    Args:
        max_seqlen_per_dp_cp_rank: tokens one DPxCP rank holds in a microbatch (``max_seqlen_per_rank``).
        cp_size: context-parallel size (the static CP size for dp_balanced; with dynamic CP the pool is
            dp_size * cp_size ranks).
        dp_size: data-parallel size.
        microbatch_group_size_per_vp_stage: VPP microbatch group, or None without VPP.
        max_num_seqs: cap on real sequences per rank per microbatch, or None.
        min_cp_size: smallest CP group of the dynamic schedulers.
        cost: the cost model of the ``balanced`` scheduler and of :meth:`stats`.
    """

    dcpack_scheduler: str = ""
    is_dynamic_cp: bool = True
    honours_max_num_seqs: bool = True

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, max_num_seqs: int | None = None,
                 min_cp_size: int = 1, cost: CostModel | None = None) -> None:
        max_seqlen_per_dp_cp_rank = _int_arg("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank)
        cp_size = _int_arg("cp_size", cp_size)
        dp_size = _int_arg("dp_size", dp_size)
        microbatch_group_size_per_vp_stage = _int_arg("microbatch_group_size_per_vp_stage",
                                                      microbatch_group_size_per_vp_stage, optional=True)
        max_num_seqs = _int_arg("max_num_seqs", max_num_seqs, optional=True)
        min_cp_size = _int_arg("min_cp_size", min_cp_size)
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.cp_size = cp_size
        self.dp_size = dp_size
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_num_seqs = max_num_seqs
        self.min_cp_size = min_cp_size
        self.max_seq_len_all_ranks = max_seqlen_per_dp_cp_rank * cp_size
        self.max_seq_len_per_rank = max_seqlen_per_dp_cp_rank
        self.total_hdp_gpus = dp_size * cp_size
        cap = max_num_seqs if (max_num_seqs is not None and self.honours_max_num_seqs) else 0
        pp, vpp = _megatron_pipeline(microbatch_group_size_per_vp_stage is not None)
        self.config = Config(
            scheduler=self.dcpack_scheduler,
            data_parallel_size=dp_size,
            context_parallel_size=cp_size,
            max_seqlen_per_rank=max_seqlen_per_dp_cp_rank,
            min_cp_size=min_cp_size,
            max_sequences_per_microbatch=cap,
            microbatch_group_size_per_vp_stage=microbatch_group_size_per_vp_stage or 0,
            pipeline_parallel_size=pp,
            virtual_pipeline_size=vpp,
            cost=cost if cost is not None else CostModel(),
        )
        self._planner: Planner | None = None
        self._lock = threading.Lock()
        self.last_plan = None
        """A copy of the last plan (dcpack.Plan), for statistics."""

    def get_required_sample_keys(self) -> list[str]:
        """The keys every sample of the batch must carry (as Megatron's DpBalancedScheduler)."""
        return list(REQUIRED_SAMPLE_KEYS)

    def _plan(self, lengths: np.ndarray):
        with self._lock:
            n = int(lengths.size)
            if self._planner is None or self._planner.config.max_sequences < n:
                capacity = 1024
                while capacity < n:
                    capacity *= 2
                self._planner = Planner(self.config.replace(max_sequences=capacity))
            plan = self._planner.plan(lengths)
            self.last_plan = plan.copy()
            return self.last_plan

    def plan(self, sample_id_seqlens: Sequence[tuple[int, int]]):
        """The dcpack :class:`~dcpack.Plan` of a batch given as Megatron's ``(global_id, seqlen)`` pairs."""
        # the lengths as Planner.plan checks them: ints only (a float, string or bool raises, never truncates)
        return self._plan(as_lengths([s for _, s in sample_id_seqlens]))

    def _index_to_id(self, sample_id_seqlens: Sequence[tuple[int, int]]) -> list[int] | None:
        return [int(i) for i, _ in sample_id_seqlens]

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[int, int]]) -> list[list[list[int]]]:
        """Plan the batch: ``[microbatch][dpxcp rank] -> list of sample ids`` (Megatron's ``sample_id_groups``)."""
        lists = self.plan(sample_id_seqlens).to_lists()
        ids = self._index_to_id(sample_id_seqlens)
        if ids is not None and ids != list(range(len(ids))):
            lists = [[[ids[k] for k in rank] for rank in mb] for mb in lists]
        return lists

    def run(self, data_iterator: Any, num_microbatches: int, dp_group: Any, tp_group: Any, pp_group: Any,
            dp_cp_group: Any, dev: Any, config: Any) -> tuple[Any, int, float, float]:
        """Megatron's own ``DpBalancedScheduler.run`` (fetch, reroute, pack, broadcast), planning with dcpack."""
        from megatron.core.datasets.data_schedule import DpBalancedScheduler as _MegatronDpBalanced

        return _MegatronDpBalanced.run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group,
                                       dp_cp_group, dev, config)

    def __repr__(self) -> str:
        return (f"<dcpack.megatron.{type(self).__name__} dp={self.dp_size} cp={self.cp_size} "
                f"max_seqlen_per_dp_cp_rank={self.max_seqlen_per_dp_cp_rank}>")


class DpBalancedScheduler(DcpackPackingScheduler):
    """Megatron's ``dp_balanced``: sequences packed in order, a static CP group of ``cp_size`` ranks.

    Plans identical to Megatron-LM's ``DpBalancedScheduler`` (which returns
    positions in ``sample_id_seqlens``, not the ids: so does this class).
    """

    dcpack_scheduler = "dp_balanced"
    is_dynamic_cp = False

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, max_num_seqs: int | None = None,
                 cost: CostModel | None = None) -> None:
        super().__init__(max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage,
                         max_num_seqs=max_num_seqs, min_cp_size=1, cost=cost)

    def _index_to_id(self, sample_id_seqlens: Sequence[tuple[int, int]]) -> list[int] | None:
        return None  # the reference appends positions i, whatever the ids are


class DefaultDynamicCPScheduler(DcpackPackingScheduler):
    """Megatron's ``default_dynamic_cp``: a power-of-two CP group per sequence, per microbatch.

    Plans identical to Megatron-LM's ``DefaultDynamicCPScheduler``.  Like it,
    ``max_num_seqs`` is ignored unless ``honour_max_num_seqs=True``.
    """

    dcpack_scheduler = "dynamic_cp"
    honours_max_num_seqs = False

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, max_num_seqs: int | None = None,
                 min_cp_size: int = 1, cost: CostModel | None = None, honour_max_num_seqs: bool = False) -> None:
        self.honours_max_num_seqs = bool(honour_max_num_seqs)
        super().__init__(max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage,
                         max_num_seqs=max_num_seqs, min_cp_size=min_cp_size, cost=cost)


class BalancedScheduler(DcpackPackingScheduler):
    """dcpack's ``balanced`` scheduler: dynamic CP groups chosen to minimise the step cost model.

    Takes the arguments of Megatron's ``DefaultDynamicCPScheduler`` (``min_cp_size``
    included) and honours ``max_num_seqs`` as a cap on real sequences.  Megatron
    passes ``thd_max_packed_sequences`` as is to schedulers other than
    dp_balanced; with THD padding that appends a dummy sequence, give
    ``install(max_num_seqs_offset=1)`` so one slot stays free for the dummy.
    """

    dcpack_scheduler = "balanced"
    max_num_seqs_offset = 0

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, max_num_seqs: int | None = None,
                 min_cp_size: int = 1, cost: CostModel | None = None) -> None:
        if max_num_seqs is not None and self.max_num_seqs_offset:
            max_num_seqs = max(1, _int_arg("max_num_seqs", max_num_seqs) - self.max_num_seqs_offset)
        super().__init__(max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage,
                         max_num_seqs=max_num_seqs, min_cp_size=min_cp_size, cost=cost)


SCHEDULERS: dict[str, type[DcpackPackingScheduler]] = {
    "dp_balanced": DpBalancedScheduler,
    "dynamic_cp": DefaultDynamicCPScheduler,
    "default_dynamic_cp": DefaultDynamicCPScheduler,
    "balanced": BalancedScheduler,
}
"""dcpack scheduler names (and Megatron's ``default_dynamic_cp``) -> drop-in class."""


def make_scheduler(kind: str | type[DcpackPackingScheduler], **defaults: Any) -> type[DcpackPackingScheduler]:
    """A drop-in class whose extra keyword arguments default to ``defaults``.

    ``make_scheduler("balanced", cost=CostModel(linear=...))`` gives a class
    Megatron can construct with its usual arguments and the cost model you chose.
    ``max_num_seqs_offset`` (balanced only) is a class attribute, not a constructor default.
    """
    base = SCHEDULERS[kind] if isinstance(kind, str) else kind
    if not (isinstance(base, type) and issubclass(base, DcpackPackingScheduler)):
        raise TypeError(f"not a dcpack scheduler: {kind!r}")
    offset = defaults.pop("max_num_seqs_offset", None)
    if not defaults and offset is None:
        return base
    attrs: dict[str, Any] = {"__doc__": base.__doc__, "__module__": "dcpack.megatron"}  # its public home
    if offset is not None:
        attrs["max_num_seqs_offset"] = int(offset)
    if defaults:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            for k, v in defaults.items():
                kwargs.setdefault(k, v)
            base.__init__(self, *args, **kwargs)

        attrs["__init__"] = __init__
    return type(base.__name__, (base,), attrs)


_DEFAULT_MAPPING = {"dp_balanced": "dp_balanced", "default_dynamic_cp": "dynamic_cp"}


def _data_schedule_module(module: Any = None) -> Any:
    if module is not None:
        return module
    try:
        from megatron.core.datasets import data_schedule  # imported only when installing
    except ImportError as e:
        raise ModuleNotFoundError(
            "dcpack.megatron.install needs Megatron-LM's megatron.core.datasets.data_schedule (the sequence-packing "
            "path of NVIDIA/Megatron-LM, branch dev, matched at d48bd6be0a85): put a checkout on PYTHONPATH "
            f"(docs/megatron.md); the import failed with: {e}",
            name="megatron",
        ) from e

    return data_schedule


def install(mapping: dict[str, str | type] | None = None, *, module: Any = None,
            **defaults: Any) -> dict[str, Any]:
    """Put dcpack's schedulers into Megatron-LM's ``scheduler_map``, at run time.

    ``mapping``: Megatron scheduler name (what ``--sequence-packing-scheduler``
    gives, e.g. ``"dp_balanced"``, ``"default_dynamic_cp"``) -> dcpack
    scheduler (``"dp_balanced"``, ``"dynamic_cp"``, ``"balanced"``) or a class.
    Default: Megatron's two names to their identical dcpack counterparts.
    ``install({"default_dynamic_cp": "balanced"})`` runs Megatron's dynamic-CP
    path (``--dynamic-context-parallel`` requires that name) with dcpack's
    balanced planner.  ``defaults`` go to :func:`make_scheduler` (``cost=...``,
    ``max_num_seqs_offset=1``).  ``module`` is the ``data_schedule`` module
    (default: ``megatron.core.datasets.data_schedule``).

    Returns what the map held before, for :func:`uninstall`.
    """
    ds = _data_schedule_module(module)
    mapping = dict(_DEFAULT_MAPPING if mapping is None else mapping)
    previous: dict[str, Any] = {}
    for name, target in mapping.items():
        cls = make_scheduler(target, **dict(defaults))
        previous[name] = ds.scheduler_map.get(name, _MISSING)
        ds.scheduler_map[name] = cls
    return previous


_MISSING = object()


def uninstall(previous: dict[str, Any], *, module: Any = None) -> None:
    """Restore Megatron's ``scheduler_map`` entries :func:`install` replaced."""
    ds = _data_schedule_module(module)
    for name, cls in previous.items():
        if cls is _MISSING:
            ds.scheduler_map.pop(name, None)
        else:
            ds.scheduler_map[name] = cls
