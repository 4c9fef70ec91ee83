"""Configuration, planning and plans: the Python face of dcpack.h's planning API."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _core
from ._errors import (
    BadLengthError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPlanError,
    StaleViewError,
)

__all__ = [
    "FIELD_TOKENS",
    "FIELD_LABELS",
    "FIELD_LOSS_MASK",
    "FIELD_POSITION_IDS",
    "FIELD_ALL",
    "CostModel",
    "Config",
    "Planner",
    "Plan",
    "PlanStats",
    "Violation",
    "cost",
]

FIELD_TOKENS = 1 << 0
"""``DCP_FIELD_TOKENS``: int64 token ids."""
FIELD_LABELS = 1 << 1
"""``DCP_FIELD_LABELS``: int64 labels."""
FIELD_LOSS_MASK = 1 << 2
"""``DCP_FIELD_LOSS_MASK``: float32 loss mask."""
FIELD_POSITION_IDS = 1 << 3
"""``DCP_FIELD_POSITION_IDS``: int64 position ids."""
FIELD_ALL = 0xF
"""``DCP_FIELD_ALL``: the four fields."""

_FIELD_NAMES = {
    "tokens": FIELD_TOKENS,
    "labels": FIELD_LABELS,
    "loss_mask": FIELD_LOSS_MASK,
    "position_ids": FIELD_POSITION_IDS,
}
_TAIL_NAMES = {"append_dummy": 0, "extend_last": 1}
_PARTITION_NAMES = {"zigzag": 0, "contiguous": 1}
_SCHEDULERS = ("dp_balanced", "dynamic_cp", "balanced")
_STEP_MODELS = ("barrier", "dependency")
_PIPELINE_SCHEDULES = ("1f1b", "interleaved")
_EFFORTS = ("full", "fast")

_DEFAULTS = _core.config_default()
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _check_int(name: str, value: Any, lo: int, hi: int, error=InvalidConfigError) -> int:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int):
        raise error(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise error(f"{name} = {value} is outside [{lo}, {hi}]")
    return value


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclasses.dataclass
class CostModel:
    """The step cost model (``dcp_cost_model``), integer "attention token pair" units.

    ``cost(s, cp) = (quadratic*s^2 + linear*s)/cp + [cp > 1]*(max(0, kv[log2 cp]*s*(cp-1)/cp - quadratic*s^2/cp)
    + round_latency*(cp-1))``; a microbatch costs its slowest rank plus ``microbatch_overhead``.
    Defaults are ``dcp_cost_model_default()``'s (hidden size 4096, 8 GPUs a node).

    ``step_model`` (``"barrier"``, the default, or ``"dependency"``; or their C values 0 and 1)
    says how microbatches follow one another: every rank waits for each microbatch's slowest
    rank, or a rank waits only for the ranks it shares a CP group with.  It picks the makespan
    :attr:`PlanStats.efficiency` judges by (``PlanStats.model_makespan``).
    """

    quadratic: int = _DEFAULTS["cost"]["quadratic"]
    linear: int = _DEFAULTS["cost"]["linear"]
    kv: tuple[int, ...] = tuple(_DEFAULTS["cost"]["kv"])
    round_latency: int = _DEFAULTS["cost"]["round_latency"]
    microbatch_overhead: int = _DEFAULTS["cost"]["microbatch_overhead"]
    step_model: str | int = _STEP_MODELS[_DEFAULTS["cost"]["step_model"]]
    cp_gather: tuple[int, ...] = tuple(_DEFAULTS["cost"]["cp_gather"])
    small_knee: int = _DEFAULTS["cost"]["small_knee"]
    small_slope: int = _DEFAULTS["cost"]["small_slope"]
    margin_ppm: int = _DEFAULTS["cost"]["margin_ppm"]
    pipeline_schedule: str | int = _PIPELINE_SCHEDULES[_DEFAULTS["cost"]["pipeline_schedule"]]
    forward_ppm: int = _DEFAULTS["cost"]["forward_ppm"]
    first_stage_per_token: int = _DEFAULTS["cost"]["first_stage_per_token"]
    last_stage_per_token: int = _DEFAULTS["cost"]["last_stage_per_token"]

    def _to_dict(self) -> dict[str, Any]:
        kv = tuple(self.kv)
        if len(kv) != _core.MAX_LOG2_CP + 1:
            raise InvalidConfigError(f"cost.kv must have {_core.MAX_LOG2_CP + 1} entries, got {len(kv)}")
        cp_gather = tuple(self.cp_gather)
        if len(cp_gather) != _core.MAX_LOG2_CP + 1:
            raise InvalidConfigError(
                f"cost.cp_gather must have {_core.MAX_LOG2_CP + 1} entries, got {len(cp_gather)}"
            )
        return {
            "cp_gather": tuple(_check_int(f"cost.cp_gather[{k}]", v, *_INT64) for k, v in enumerate(cp_gather)),
            "small_knee": _check_int("cost.small_knee", self.small_knee, *_INT64),
            "small_slope": _check_int("cost.small_slope", self.small_slope, *_INT64),
            "margin_ppm": _check_int("cost.margin_ppm", self.margin_ppm, *_INT64),
            "pipeline_schedule": _enum(
                "cost.pipeline_schedule", self.pipeline_schedule, {n: i for i, n in enumerate(_PIPELINE_SCHEDULES)}
            ),
            "forward_ppm": _check_int("cost.forward_ppm", self.forward_ppm, *_INT32),
            "first_stage_per_token": _check_int("cost.first_stage_per_token", self.first_stage_per_token, *_INT64),
            "last_stage_per_token": _check_int("cost.last_stage_per_token", self.last_stage_per_token, *_INT64),
            "quadratic": _check_int("cost.quadratic", self.quadratic, *_INT64),
            "linear": _check_int("cost.linear", self.linear, *_INT64),
            "kv": tuple(_check_int(f"cost.kv[{k}]", v, *_INT64) for k, v in enumerate(kv)),
            "round_latency": _check_int("cost.round_latency", self.round_latency, *_INT64),
            "microbatch_overhead": _check_int("cost.microbatch_overhead", self.microbatch_overhead, *_INT64),
            "step_model": _enum("cost.step_model", self.step_model, {n: i for i, n in enumerate(_STEP_MODELS)}),
        }


@dataclasses.dataclass
class Config:
    """A ``dcp_config``: everything that fixes the size of a context.

    Keyword arguments are named exactly as the C fields; defaults are
    ``dcp_config_default()``'s.  Enumerations take names or their C values:
    ``scheduler`` ``"dp_balanced"``, ``"dynamic_cp"`` or ``"balanced"``;
    ``thd_tail_policy`` ``"append_dummy"`` or ``"extend_last"``;
    ``cp_partition`` ``"zigzag"`` or ``"contiguous"``.  ``fields`` is a
    ``FIELD_*`` bit set or an iterable of names (``{"tokens", "labels"}``).
    ``cost`` is a :class:`CostModel` (or a dict of its fields).
    ``skip_sibling_data_check`` (0 or 1, default 0) turns off the step's check
    that CP siblings hold byte-identical inputs (their lengths are still compared).

    Nothing is checked until the configuration is used (or :meth:`validate`
    is called): then a bad value raises :class:`dcpack.InvalidConfigError`
    with ``dcp_config_validate()``'s message.
    """

    world_size: int = _DEFAULTS["world_size"]
    data_parallel_size: int = _DEFAULTS["data_parallel_size"]
    context_parallel_size: int = _DEFAULTS["context_parallel_size"]
    tensor_parallel_size: int = _DEFAULTS["tensor_parallel_size"]
    pipeline_parallel_size: int = _DEFAULTS["pipeline_parallel_size"]
    virtual_pipeline_size: int = _DEFAULTS["virtual_pipeline_size"]
    microbatch_group_size_per_vp_stage: int = _DEFAULTS["microbatch_group_size_per_vp_stage"]
    scheduler: str | int = _SCHEDULERS[_DEFAULTS["scheduler"]]
    max_sequences: int = _DEFAULTS["max_sequences"]
    max_seqlen_per_rank: int = _DEFAULTS["max_seqlen_per_rank"]
    min_cp_size: int = _DEFAULTS["min_cp_size"]
    max_sequences_per_microbatch: int = _DEFAULTS["max_sequences_per_microbatch"]
    max_tokens_per_rank: int = _DEFAULTS["max_tokens_per_rank"]
    max_microbatches: int = _DEFAULTS["max_microbatches"]
    pad_alignment: int = _DEFAULTS["pad_alignment"]
    fields: Any = _DEFAULTS["fields"]
    pad_to_max_seqlen: int | bool = _DEFAULTS["pad_to_max_seqlen"]
    thd_tail_policy: str | int = "append_dummy"
    cp_partition: str | int = "zigzag"
    skip_sibling_data_check: int | bool = _DEFAULTS["skip_sibling_data_check"]
    """0 (default): the step checks that CP siblings hold identical inputs (a digest of every byte they
    move), CorruptInputError on every rank when they differ; 1: it compares their lengths only."""
    cost: CostModel = dataclasses.field(default_factory=CostModel)
    plan_effort: Union[str, int] = _EFFORTS[_DEFAULTS["plan_effort"]]
    """``balanced``'s search (docs/planning.md, effort levels): ``"full"`` (default, 0) or ``"fast"`` (1)."""

    # -- conversions --------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the flat dict the C binding reads (enums as ints)."""
        d: dict[str, Any] = {}
        int32_fields = (
            "world_size", "data_parallel_size", "context_parallel_size", "tensor_parallel_size",
            "pipeline_parallel_size", "virtual_pipeline_size", "microbatch_group_size_per_vp_stage",
            "max_sequences", "max_seqlen_per_rank", "min_cp_size", "max_sequences_per_microbatch",
            "max_microbatches", "pad_alignment", "pad_to_max_seqlen", "skip_sibling_data_check",
        )
        for name in int32_fields:
            d[name] = _check_int(name, getattr(self, name), *_INT32)
        d["max_tokens_per_rank"] = _check_int("max_tokens_per_rank", self.max_tokens_per_rank, *_INT64)
        d["scheduler"] = _enum("scheduler", self.scheduler, {n: i for i, n in enumerate(_SCHEDULERS)})
        d["thd_tail_policy"] = _enum("thd_tail_policy", self.thd_tail_policy, _TAIL_NAMES)
        d["cp_partition"] = _enum("cp_partition", self.cp_partition, _PARTITION_NAMES)
        d["fields"] = _fields_mask(self.fields)
        d["plan_effort"] = _enum("plan_effort", self.plan_effort, {n: i for i, n in enumerate(_EFFORTS)})
        cost_model = self.cost
        if isinstance(cost_model, dict):
            cost_model = CostModel(**cost_model)
        if not isinstance(cost_model, CostModel):
            raise InvalidConfigError(f"cost must be a CostModel or a dict, got {type(cost_model).__name__}")
        d["cost"] = cost_model._to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        """Inverse of :meth:`to_dict` (enums come back as names)."""
        d = dict(d)
        d["scheduler"] = _SCHEDULERS[d["scheduler"]] if isinstance(d["scheduler"], int) else d["scheduler"]
        inv_tail = {v: k for k, v in _TAIL_NAMES.items()}
        inv_part = {v: k for k, v in _PARTITION_NAMES.items()}
        d["thd_tail_policy"] = inv_tail.get(d["thd_tail_policy"], d["thd_tail_policy"])
        d["cp_partition"] = inv_part.get(d["cp_partition"], d["cp_partition"])
        if isinstance(d.get("plan_effort"), int) and 0 <= d["plan_effort"] < len(_EFFORTS):
            d["plan_effort"] = _EFFORTS[d["plan_effort"]]
        c = d.get("cost")
        if isinstance(c, dict):
            c = {**c, "kv": tuple(c["kv"])}
            if "cp_gather" in c:
                c["cp_gather"] = tuple(c["cp_gather"])
            if isinstance(c.get("step_model"), int) and 0 <= c["step_model"] < len(_STEP_MODELS):
                c["step_model"] = _STEP_MODELS[c["step_model"]]
            if isinstance(c.get("pipeline_schedule"), int) and 0 <= c["pipeline_schedule"] < len(_PIPELINE_SCHEDULES):
                c["pipeline_schedule"] = _PIPELINE_SCHEDULES[c["pipeline_schedule"]]
            d["cost"] = CostModel(**c)
        return cls(**d)

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def validate(self) -> Config:
        """Run ``dcp_config_validate()``; raises :class:`InvalidConfigError` (or ``DcpOverflowError``). Returns self."""
        _core.config_validate(self.to_dict())
        return self

    @property
    def num_ranks(self) -> int:
        """``dcp_config_num_ranks()``: DPxCP ranks the planner distributes over (validates first)."""
        return _core.config_validate(self.to_dict())

    def workspace_size(self) -> int:
        """``dcp_workspace_size()``: bytes of one context for this configuration."""
        return _core.workspace_size(self.to_dict())


def _enum(name: str, value: Any, names: dict[str, int]) -> int:
    if isinstance(value, str):
        if value not in names:
            raise InvalidConfigError(f"{name} {value!r} is not one of {', '.join(names)}")
        return names[value]
    return _check_int(name, value, *_INT32)


def _fields_mask(fields: Any) -> int:
    if isinstance(fields, (int, np.integer)) and not isinstance(fields, bool):
        return _check_int("fields", fields, 0, (1 << 32) - 1)
    if isinstance(fields, str):
        fields = [fields]
    try:
        names = list(fields)
    except TypeError:
        raise InvalidConfigError(f"fields must be a FIELD_* mask or names, got {fields!r}") from None
    mask = 0
    for n in names:
        if n not in _FIELD_NAMES:
            raise InvalidConfigError(f"unknown field {n!r} (tokens, labels, loss_mask, position_ids)")
        mask |= _FIELD_NAMES[n]
    return mask


def cost(length: int, cp: int, model: CostModel | None = None) -> int:
    """``dcp_cost()``: per-rank cost of a sequence of ``length`` tokens on ``cp`` ranks."""
    cfg = Config(cost=model if model is not None else CostModel())
    return _core.cost(cfg.to_dict(), _check_int("length", length, *_INT64, error=InvalidArgumentError),
                      _check_int("cp", cp, *_INT32, error=InvalidArgumentError))


# --------------------------------------------------------------------------
# Arrays and views
# --------------------------------------------------------------------------


class _View:
    """An ``__array_interface__`` exporter: numpy views of library memory that keep its owner alive."""

    __slots__ = ("__array_interface__", "_owner")

    def __init__(self, address: int, count: int, typestr: str, owner: Any, readonly: bool = True) -> None:
        self.__array_interface__ = {
            "data": (address, readonly),
            "shape": (count,),
            "typestr": typestr,
            "version": 3,
        }
        self._owner = owner


def _view(address: int | None, count: int, dtype: str, owner: Any, readonly: bool = True) -> np.ndarray | None:
    if address is None:
        return None
    if count == 0:
        a = np.empty(0, dtype=dtype)
        a.flags.writeable = False
        return a
    return np.asarray(_View(address, count, np.dtype(dtype).str, owner, readonly))


def _is_torch_tensor(x: Any) -> bool:
    t = type(x)
    return t.__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr") and hasattr(x, "is_contiguous")


_EMPTY_LENGTHS = np.zeros(1, dtype=np.int32)


def as_lengths(lengths: Any) -> np.ndarray:
    """Lengths as a contiguous int32 numpy array, without a copy when they already are one.

    Accepts a list or tuple of ints, a numpy integer array, a CPU torch tensor
    or any object exporting DLPack or the buffer protocol.  Integer arrays of
    another width are converted (values outside int32 raise BadLengthError);
    floats, booleans and other types raise InvalidArgumentError.
    """
    if _is_torch_tensor(lengths):
        if lengths.device.type != "cpu":
            raise InvalidArgumentError(f"lengths must be host memory, got a tensor on {lengths.device}")
        arr = lengths.detach().numpy()  # zero copy for a CPU tensor
    elif isinstance(lengths, np.ndarray):
        arr = lengths
    elif isinstance(lengths, (list, tuple, range)):
        if len(lengths) == 0:
            return np.empty(0, dtype=np.int32)
        for v in lengths:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise InvalidArgumentError(f"lengths must be ints, got {type(v).__name__} {v!r}")
        try:
            arr = np.asarray(lengths, dtype=np.int64)
        except OverflowError:
            raise BadLengthError("a length does not fit in int64") from None
    elif hasattr(lengths, "__dlpack__"):
        arr = np.from_dlpack(lengths)
    else:
        try:
            arr = np.asarray(memoryview(lengths))
        except TypeError:
            raise InvalidArgumentError(
                f"lengths must be a list of ints, a numpy integer array or a CPU tensor, got {type(lengths).__name__}"
            ) from None
    if arr.ndim != 1:
        raise InvalidArgumentError(f"lengths must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"lengths must have an integer dtype, got {arr.dtype}")
    if arr.dtype == np.int32 and arr.flags.c_contiguous and arr.flags.aligned and arr.dtype.isnative:
        return arr
    if arr.size and (int(arr.min()) < _INT32[0] or int(arr.max()) > _INT32[1]):
        bad = int(arr.max()) if int(arr.max()) > _INT32[1] else int(arr.min())
        raise BadLengthError(f"length {bad} does not fit in int32")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _owned_lengths(arr: np.ndarray, given: Any) -> np.ndarray:
    """``arr`` (as_lengths of ``given``) as a read-only array no caller holds: copied unless as_lengths
    just made it.  A Plan keeps it: its stats, matches and copy must not follow a refilled input buffer."""
    if arr is given or not arr.flags.owndata:
        arr = arr.copy()
    arr.flags.writeable = False
    return arr


def _address(arr: np.ndarray) -> int:
    return int(arr.__array_interface__["data"][0])


# --------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlanStats:
    """``dcp_plan_stats``: step-model statistics of a plan (integers), plus derived ratios."""

    num_microbatches: int
    makespan: int
    """The barrier step model's: sum over microbatches of (slowest rank + overhead)."""
    lower_bound: int
    """A lower bound on any plan's makespan for these lengths and ranks."""
    quad_makespan: int
    """The reference's model: per-rank sum of s^2/cp, summed over microbatch maxima."""
    busy_sum: int
    max_rank_sum: int
    cp_size_sum: int
    total_tokens: int
    dependency_makespan: int
    """The dependency step model's makespan: a rank waits only for the ranks of its CP groups
    (never above ``makespan``)."""
    dependency_lower_bound: int
    """A lower bound on any plan's dependency makespan for these lengths and ranks."""
    model_makespan: int
    """The configured step model's makespan: ``makespan`` or ``dependency_makespan``."""
    model_lower_bound: int
    """The configured step model's lower bound: ``lower_bound`` or ``dependency_lower_bound``."""
    step_model: str
    """The configured step model, ``"barrier"`` or ``"dependency"``."""
    pipeline_makespan: int = 0
    """With ``pipeline_parallel_size`` > 1: the pipeline step model's exact makespan of the plan's
    microbatches in plan order (1F1B; interleaved 1F1B with ``virtual_pipeline_size`` > 1); then
    ``model_makespan`` is this.  0 without pipeline parallelism."""
    pipeline_lower_bound: int = 0
    """A lower bound of ``pipeline_makespan`` over every order of the plan's microbatches (0 without PP)."""

    @property
    def efficiency(self) -> float:
        """model_lower_bound / model_makespan under the configured step model (1.0 is optimal)."""
        return self.model_lower_bound / self.model_makespan if self.model_makespan else 1.0


@dataclasses.dataclass(frozen=True)
class Violation:
    """``dcp_plan_violation``: which invariant a plan broke, and where."""

    invariant: int
    """A ``dcp_invariant`` value (1 each id once, 2 block shape, 4 token capacity, 5 no empty rank,
    6 VPP multiple, 7 structure, 8 sequence cap)."""
    microbatch: int
    rank: int
    id: int
    message: str


_PLAN_ARRAYS = ("microbatch_first_group", "group_first_rank", "group_cp_size", "group_first_id", "ids")


class Plan:
    """A plan for one global batch (``dcp_plan``), as structure-of-arrays group tables.

    Microbatch ``m`` owns groups ``microbatch_first_group[m] : microbatch_first_group[m+1]``,
    sorted by first rank.  Group ``g`` runs on ranks
    ``group_first_rank[g] : group_first_rank[g] + group_cp_size[g]``, all holding
    ``ids[group_first_id[g] : group_first_id[g+1]]`` (0-based global ids, the
    order of the lengths planned).

    A plan returned by :meth:`Planner.plan` is a *view* of the planner's
    workspace: its arrays are read-only numpy views, valid until the next
    ``plan()`` (or step) on that planner.  After that, every attribute of the
    old Plan raises :class:`dcpack.StaleViewError` instead of showing the new
    plan's data; arrays you took from it earlier are not revoked (numpy cannot)
    and then show the new data, so keep a :meth:`copy` of what must outlive the
    next call.  A copy owns its arrays and never goes stale.
    """

    __slots__ = ("_ctx", "_gen", "_desc", "_arrays", "_lengths", "_owned", "__weakref__")

    def __init__(self, ctx: Any, generation: int | None, desc: tuple, lengths: np.ndarray,
                 arrays: dict[str, np.ndarray] | None = None) -> None:
        self._ctx = ctx
        self._gen = generation
        self._desc = desc
        self._lengths = lengths
        self._owned = arrays is not None
        if arrays is None:
            nm, ng, ni = desc.num_microbatches, desc.num_groups, desc.num_ids
            counts = (nm + 1, ng, ng, ng + 1, ni)
            memory = ctx.memory  # the arrays hold the context's memory: readable even after close()
            arrays = {name: _view(getattr(desc, name), counts[i], "int32", memory)
                      for i, name in enumerate(_PLAN_ARRAYS)}
        self._arrays = arrays

    # -- lifetime -----------------------------------------------------------

    def _check(self) -> None:
        if self._gen is not None and self._ctx.generation != self._gen:
            raise StaleViewError(
                "this Plan is a view of a planner's workspace and a later plan() or step() on that planner "
                "replaced it; keep Plan.copy() to use a plan after the next call"
            )

    @property
    def is_valid_view(self) -> bool:
        """False once a later plan or step replaced this view (always True for a copy)."""
        return self._gen is None or self._ctx.generation == self._gen

    def copy(self) -> Plan:
        """An owning copy: its arrays are its own and it never goes stale."""
        self._check()
        arrays = {k: np.array(v, dtype=np.int32, copy=True) for k, v in self._arrays.items()}
        for a in arrays.values():
            a.flags.writeable = False
        desc = _core.PlanDescriptor([_address(arrays[k]) if k in arrays else getattr(self._desc, k)
                                     for k in _core.PlanDescriptor.__match_args__])
        lengths = np.array(self._lengths, copy=True)
        lengths.flags.writeable = False
        return Plan(self._ctx, None, desc, lengths, arrays)

    # -- the arrays -----------------------------------------------------------

    def _get(self, name: str) -> np.ndarray:
        self._check()
        return self._arrays[name]

    @property
    def num_ranks(self) -> int:
        """DPxCP ranks of the plan."""
        self._check()
        return self._desc.num_ranks

    @property
    def num_microbatches(self) -> int:
        """Microbatches of the plan."""
        self._check()
        return self._desc.num_microbatches

    @property
    def num_groups(self) -> int:
        """CP groups over all microbatches."""
        self._check()
        return self._desc.num_groups

    @property
    def num_ids(self) -> int:
        """Entries of :attr:`ids` (each sequence once)."""
        self._check()
        return self._desc.num_ids

    @property
    def microbatch_first_group(self) -> np.ndarray:
        """int32 ``[num_microbatches + 1]``."""
        return self._get("microbatch_first_group")

    @property
    def group_first_rank(self) -> np.ndarray:
        """int32 ``[num_groups]``."""
        return self._get("group_first_rank")

    @property
    def group_cp_size(self) -> np.ndarray:
        """int32 ``[num_groups]``: each group's CP size."""
        return self._get("group_cp_size")

    @property
    def group_first_id(self) -> np.ndarray:
        """int32 ``[num_groups + 1]``: offsets into :attr:`ids`."""
        return self._get("group_first_id")

    @property
    def ids(self) -> np.ndarray:
        """int32 ``[num_ids]``: sequence ids, group by group."""
        return self._get("ids")

    @property
    def lengths(self) -> np.ndarray:
        """The lengths this plan was computed for: a read-only array the plan owns (a copy of plan()'s input)."""
        self._check()
        return self._lengths

    # -- helpers --------------------------------------------------------------

    def group_of_rank(self, microbatch: int, rank: int) -> int:
        """``dcp_plan_group_of_rank()``: the group of ``rank`` in ``microbatch``, or -1."""
        self._check()
        nm, nr = self._desc.num_microbatches, self._desc.num_ranks
        if not (0 <= microbatch < nm) or not (0 <= rank < nr):
            raise InvalidArgumentError(f"microbatch {microbatch} / rank {rank} outside {nm} x {nr}")
        return _core.plan_group_of_rank(self._desc, microbatch, rank)

    def rank_ids(self, microbatch: int, rank: int) -> np.ndarray:
        """Ids ``rank`` holds in ``microbatch`` (a read-only view; empty when it holds nothing)."""
        g = self.group_of_rank(microbatch, rank)
        if g < 0:
            return np.empty(0, dtype=np.int32)
        gfi = self._arrays["group_first_id"]
        return self._arrays["ids"][gfi[g]:gfi[g + 1]]

    def groups(self, microbatch: int) -> list[tuple[int, int, np.ndarray]]:
        """The groups of one microbatch as ``(first_rank, cp_size, ids)``."""
        self._check()
        if not 0 <= microbatch < self._desc.num_microbatches:
            raise InvalidArgumentError(f"microbatch {microbatch} outside [0, {self._desc.num_microbatches})")
        mfg, gfr, gcs, gfi, ids = (self._arrays[k] for k in _PLAN_ARRAYS)
        return [(int(gfr[g]), int(gcs[g]), ids[gfi[g]:gfi[g + 1]])
                for g in range(int(mfg[microbatch]), int(mfg[microbatch + 1]))]

    def to_lists(self) -> list[list[list[int]]]:
        """Megatron-LM's ``sample_id_groups``: ``[microbatch][rank] -> list of ids``."""
        self._check()
        mfg, gfr, gcs, gfi, ids = (self._arrays[k].tolist() for k in _PLAN_ARRAYS)
        nr = self._desc.num_ranks
        out: list[list[list[int]]] = []
        for m in range(self._desc.num_microbatches):
            row: list[list[int]] = [[] for _ in range(nr)]
            for g in range(mfg[m], mfg[m + 1]):
                members = ids[gfi[g]:gfi[g + 1]]
                for r in range(gfr[g], gfr[g] + gcs[g]):
                    row[r] = list(members)
            out.append(row)
        return out

    def cp_sizes(self) -> np.ndarray:
        """CP size of every sequence, indexed by id (int32 ``[num_ids]``)."""
        self._check()
        gcs, gfi = self._arrays["group_cp_size"], self._arrays["group_first_id"]
        out = np.zeros(self._desc.num_ids, dtype=np.int32)
        out[self._arrays["ids"]] = np.repeat(gcs, np.diff(gfi))
        return out

    def hash(self) -> int:
        """``dcp_plan_hash()``: FNV-1a 64 over the arrays (equal plans have equal hashes)."""
        self._check()
        return _core.plan_hash(self._desc)

    def _lengths_for(self, lengths: Any) -> np.ndarray:
        if lengths is not None:
            return as_lengths(lengths)
        if self._lengths.size == 0 and self._desc.num_ids > 0:
            raise InvalidArgumentError("this plan came from a step: pass the global batch's lengths")
        return self._lengths

    def matches(self, lengths: Any = None) -> bool:
        """``dcp_plan_matches()``: whether this is the plan the planner made of exactly ``lengths``
        (default: the lengths it planned) under its configuration.

        A plan made ahead is handed to :meth:`dcpack.Stepper.step` (``plan=``), which makes this
        check on every rank against the lengths it gathers; ``matches`` makes it locally first.
        False for other lengths (another batch, a reordered one) and for a plan whose arrays were
        changed.  A plan a step returned was not made by ``plan()``'s planner: check it with
        :meth:`validate` instead.
        """
        self._check()
        lengths = self._lengths_for(lengths)
        arr = lengths if lengths.size else _EMPTY_LENGTHS
        return bool(self._ctx.plan_matches(self._desc, _address(arr), lengths.size))

    def _step_descriptor(self) -> tuple:
        """The descriptor a step reads (dcp_step_args.plan); raises StaleViewError for a stale view."""
        self._check()
        return self._desc

    def stats(self, lengths: Any = None) -> PlanStats:
        """``dcp_plan_stats_compute()`` under the planner's cost model and the planned lengths
        (or ``lengths``, which a step's plan needs)."""
        self._check()
        lengths = self._lengths_for(lengths)
        d = self._ctx.stats(self._desc, _address(lengths) if lengths.size else 0, lengths.size)
        d["step_model"] = _STEP_MODELS[d["step_model"]]
        return PlanStats(**d)

    def violation(self, lengths: Any = None) -> Violation | None:
        """``dcp_plan_validate()``: None when every invariant holds, else the first violation."""
        self._check()
        lengths = self._lengths_for(lengths)
        v = self._ctx.validate(self._desc, _address(lengths) if lengths.size else 0, lengths.size)
        return None if v is None else Violation(**v)

    def validate(self, lengths: Any = None) -> Plan:
        """Raise :class:`dcpack.InvalidPlanError` (with ``.violation``) if an invariant breaks; returns self."""
        v = self.violation(lengths)
        if v is not None:
            err = InvalidPlanError(v.message)
            err.violation = v  # type: ignore[attr-defined]
            raise err
        return self

    def __len__(self) -> int:
        return self.num_microbatches

    def __iter__(self) -> Iterator[list[tuple[int, int, np.ndarray]]]:
        for m in range(self.num_microbatches):
            yield self.groups(m)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        self._check()
        other._check()
        counts = ("num_ranks", "num_microbatches", "num_groups", "num_ids")
        return all(getattr(self._desc, k) == getattr(other._desc, k) for k in counts) and all(
            np.array_equal(self._arrays[k], other._arrays[k]) for k in _PLAN_ARRAYS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if not self.is_valid_view:
            return "<dcpack.Plan (stale view)>"
        kind = "copy" if self._owned else "view"
        return (f"<dcpack.Plan {kind}: {self._desc.num_microbatches} microbatches, {self._desc.num_groups} groups, "
                f"{self._desc.num_ids} sequences on {self._desc.num_ranks} ranks>")


_DEFAULT_OBSERVATIONS = 4096
_TERMS = (("scale", 1 << 0), ("quadratic", 1 << 1), ("linear", 1 << 2), ("microbatch_overhead", 1 << 3),
          ("round_latency", 1 << 4), ("small_slope", 1 << 5))


def _cost_model_from_dict(c: dict[str, Any]) -> CostModel:
    c = dict(c)
    c["kv"] = tuple(c["kv"])
    c["cp_gather"] = tuple(c["cp_gather"])
    if isinstance(c.get("step_model"), int) and 0 <= c["step_model"] < len(_STEP_MODELS):
        c["step_model"] = _STEP_MODELS[c["step_model"]]
    if isinstance(c.get("pipeline_schedule"), int) and 0 <= c["pipeline_schedule"] < len(_PIPELINE_SCHEDULES):
        c["pipeline_schedule"] = _PIPELINE_SCHEDULES[c["pipeline_schedule"]]
    return CostModel(**c)


def _format_profile(c: dict[str, Any], time_unit_ps: int) -> str:
    """The cost-profile text of a cost dict (the keys dcp_cost_profile_parse reads)."""
    lines = [f"time_unit_ps = {time_unit_ps}"] if time_unit_ps > 0 else []
    for key in ("quadratic", "linear", "round_latency", "microbatch_overhead", "small_knee", "small_slope",
                "margin_ppm"):
        lines.append(f"{key} = {c[key]}")
    lines += [f"kv.{1 << k} = {c['kv'][k]}" for k in range(1, len(c["kv"]))]
    lines += [f"cp_gather.{1 << k} = {c['cp_gather'][k]}" for k in range(1, len(c["cp_gather"]))]
    lines.append(f"step_model = {_STEP_MODELS[c['step_model']]}")
    return "\n".join(lines) + "\n"


class Planner:
    """Plans global batches with one context (``dcp_context_create`` + ``dcp_plan_compute``).

    ``Planner(config)`` or ``Planner(**config_fields)``.  One call at a time:
    a planner used from two threads at once raises InvalidArgumentError in the
    second instead of racing.  The GIL is released while the library plans
    (and gathers), so :meth:`plan` on one thread runs while another thread
    steps a :class:`dcpack.Stepper` (planning a step ahead, docs/python.md).
    """

    def __init__(self, config: Config | None = None, **fields: Any) -> None:
        # online calibration's capacity (dcp_config.max_observations): rows kept, one per CP group and
        # microbatch; not a planning field (plans made here match a Stepper's context without it)
        max_observations = fields.pop("max_observations", _DEFAULT_OBSERVATIONS)
        if config is None:
            config = Config(**fields)
        elif fields:
            config = config.replace(**fields)
        if not isinstance(config, Config):
            raise InvalidArgumentError(f"config must be a dcpack.Config, got {type(config).__name__}")
        self._config = config
        self._max_observations = _check_int("max_observations", max_observations, *_INT32)
        d = config.to_dict()
        d["max_observations"] = self._max_observations
        self._ctx = _core.Context(d)
        ranks = d["data_parallel_size"] * d["context_parallel_size"]
        if d["scheduler"] != _SCHEDULERS.index("dp_balanced") and ranks & (ranks - 1):
            # the same note the dcpack program prints: the dynamic schedulers' groups are powers of two
            warnings.warn(
                f"{ranks} DPxCP ranks is not a power of two: a sequence that needs more ranks than the largest "
                f"power of two below runs on all {ranks} (the reference's full-group fallback)",
                stacklevel=2,
            )

    @property
    def config(self) -> Config:
        """The configuration the context was built with."""
        return self._config

    @property
    def workspace_bytes(self) -> int:
        """``dcp_context_workspace_bytes()``."""
        return self._ctx.workspace_bytes

    @property
    def last_error(self) -> str:
        """``dcp_context_last_error()``."""
        return self._ctx.last_error()

    @property
    def calls(self) -> int:
        """``dcp_context_calls()``: multi-rank calls made on this context since it was built or resynced.

        Planning alone makes none (``plan()`` is local); :class:`dcpack.Stepper` counts every step.
        """
        return self._ctx.calls

    def resync(self, next_call: int = 0) -> None:
        """``dcp_context_resync()``: set the call count to ``next_call`` and accept multi-rank calls again."""
        self._ctx.resync(_check_int("next_call", next_call, 0, (1 << 64) - 1, error=InvalidArgumentError))

    def plan(self, lengths: Any) -> Plan:
        """Plan one global batch; returns a :class:`Plan` view valid until the next call on this planner.

        ``lengths``: a list of ints, a numpy integer array or a CPU torch
        tensor.  The plan keeps a read-only copy of them (:attr:`Plan.lengths`,
        O(n) int32), so refilling the caller's buffer for the next batch
        leaves this plan, its stats and its seal alone.  Raises
        CapacityError (more sequences than ``max_sequences``),
        BadLengthError (a length <= 0 or longer than all ranks hold),
        InfeasibleError, InvalidArgumentError (empty batch, wrong type or
        dtype).
        """
        arr = _owned_lengths(as_lengths(lengths), lengths)
        if arr.size == 0:  # the library refuses an empty batch; give it a real pointer so it says so
            arr = _EMPTY_LENGTHS
        desc = self._ctx.plan(_address(arr), arr.size if arr is not _EMPTY_LENGTHS else 0)
        return Plan(self._ctx, self._ctx.generation, desc, arr)

    def gather(self, comm: Any, lengths: Any, *, step_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``dcp_gather()``: this rank's sequence lengths -> the global list over a DP communicator.

        ``comm``: a communicator of ``data_parallel_size`` ranks, one of each DP
        rank (the batch a step gathers over its DPxCP group: CP siblings hold
        the same samples).  Collective: every rank of ``comm`` calls it, with
        the padded length of each sequence it will hand the step, in order
        (zero-length entries are dropped).  ``step_id`` (0 = none) is compared
        across ranks with the planner's call count, as a step's is.  Returns
        ``(global_lengths, rank_offsets)``, int32 copies (the first global id
        of each DP rank, ``comm.size + 1`` entries).  Errors are agreed over
        ``comm``: every rank raises the same dcpack.Error subclass.

        This is step 1 of planning a step ahead (docs/python.md): gather the
        next batch's lengths on the training thread, then :meth:`plan` them on
        another thread while the current step trains, and hand the plan to
        ``Stepper.step(..., plan=...)``.
        """
        arr = as_lengths(lengths)
        n = arr.size
        if n == 0:
            arr = _EMPTY_LENGTHS  # a real pointer: the library refuses NULL input
        sid = _check_int("step_id", step_id, 0, (1 << 64) - 1, error=InvalidArgumentError)
        address, num, offsets = self._ctx.gather(comm, sid, _address(arr), n)
        size = comm.size
        global_lengths = (np.array(_view(address, num, "int32", None), dtype=np.int32, copy=True)
                          if num else np.empty(0, dtype=np.int32))
        rank_offsets = np.array(_view(offsets, size + 1, "int32", None), dtype=np.int32, copy=True)
        return global_lengths, rank_offsets

    # -- online calibration (docs/python.md, online calibration) -----------------------------------------

    def _plan_of_mine(self, plan: Any) -> Plan:
        if not isinstance(plan, Plan):
            raise InvalidArgumentError(f"plan must be a dcpack.Plan, got {type(plan).__name__}")
        plan._check()
        if plan._lengths is None:
            raise InvalidArgumentError("this plan carries no lengths: observe and predict take a plan from plan()")
        return plan

    def observe(self, plan: Plan, times: Any, *, comm: Any = None, step_id: int = 0) -> None:
        """Report a stepped plan's measured times and refit the cost model (``dcp_observe_matrix``).

        ``times``: seconds, a numpy array ``[plan.num_microbatches, plan.num_ranks]`` (each rank's
        forward and backward of its share of each microbatch; 0 where a rank held nothing or did not
        time it).  The next :meth:`plan` uses the refit model (its unit is then picoseconds, the
        cost-profile unit).  With ``comm`` (the DPxCP communicator, collective) ``times`` is this
        rank's own row ``[plan.num_microbatches]`` and the rows are agreed over it
        (``dcp_observe``): every rank refits from the same matrix, and a bad row on any rank raises
        the same error on every rank.  Raises InvalidArgumentError for a time that is negative, NaN
        or infinite, for a time where the rank held nothing, and for a plan this planner did not
        make of its lengths under its current model (a plan from before the last refit); the model
        is then unchanged.  CapacityError when the planner was built with ``max_observations=0``.
        """
        plan = self._plan_of_mine(plan)
        t = np.asarray(times, dtype=np.float64)
        want = (plan.num_microbatches,) if comm is not None else (plan.num_microbatches, plan.num_ranks)
        if t.shape != want:
            raise InvalidArgumentError(f"times must have shape {want}, got {t.shape}")
        ps = np.full(t.shape, np.iinfo(np.int64).min, dtype=np.int64)  # DCP_OBSERVE_INVALID where not finite
        finite = np.isfinite(t)
        # past the library's bound (2^53 ps) the library says so; keep the conversion itself in range
        ps[finite] = np.rint(np.clip(t[finite], -1.0, 1e7) * 1e12).astype(np.int64)
        ps = np.ascontiguousarray(ps)
        lengths = plan._lengths
        if comm is None:
            _core.observe_matrix(self._ctx, plan._desc, _address(lengths), lengths.size, _address(ps))
        else:
            sid = _check_int("step_id", step_id, 0, (1 << 64) - 1, error=InvalidArgumentError)
            _core.observe(self._ctx, plan._desc, _address(lengths), lengths.size, _address(ps), comm, sid)

    def observe_groups(self, cp_sizes: Any, lengths: Any, times: Any) -> None:
        """One step's rows given directly (``dcp_observe_groups``): group ``g`` ran ``lengths[g]`` (a
        sequence of ints) on ``cp_sizes[g]`` ranks and took ``times[g]`` seconds (0: no row).  For
        replays and trainers with plans of their own."""
        cps = np.ascontiguousarray(np.asarray(cp_sizes, dtype=np.int32))
        flat = [np.asarray(x, dtype=np.int32).ravel() for x in lengths]
        if len(flat) != cps.size:
            raise InvalidArgumentError(f"{cps.size} CP sizes for {len(flat)} groups")
        first = np.zeros(cps.size + 1, dtype=np.int32)
        first[1:] = np.cumsum([f.size for f in flat]) if flat else []
        all_lengths = np.ascontiguousarray(np.concatenate(flat) if flat else np.zeros(1, dtype=np.int32))
        t = np.asarray(times, dtype=np.float64)
        if t.shape != (cps.size,):
            raise InvalidArgumentError(f"times must have shape ({cps.size},), got {t.shape}")
        ps = np.full(t.shape, np.iinfo(np.int64).min, dtype=np.int64)
        finite = np.isfinite(t)
        ps[finite] = np.rint(np.clip(t[finite], -1.0, 1e7) * 1e12).astype(np.int64)
        ps = np.ascontiguousarray(ps if ps.size else np.zeros(1, dtype=np.int64))
        cps_arg = cps if cps.size else np.zeros(1, dtype=np.int32)
        _core.observe_groups(self._ctx, int(t.size), _address(cps_arg), _address(first), _address(all_lengths),
                             _address(ps))

    def predict(self, plan: Plan) -> np.ndarray:
        """Predicted seconds ``[plan.num_microbatches, plan.num_ranks]`` of a plan under the current model
        (``dcp_observe_predict``: each rank's group cost, the small-microbatch hinge and the microbatch
        overhead), 0 where a rank holds nothing.  Seconds only once the model is in picoseconds: after an
        observation, or when the planner started from a calibrated profile."""
        plan = self._plan_of_mine(plan)
        out = np.empty((plan.num_microbatches, plan.num_ranks), dtype=np.int64)
        lengths = plan._lengths
        _core.observe_predict(self._ctx, plan._desc, _address(lengths), lengths.size, _address(out))
        return np.where(out < 0, 0.0, out.astype(np.float64) * 1e-12)

    @property
    def cost_model(self) -> CostModel:
        """The cost model the next :meth:`plan` uses (the configuration's, refit by :meth:`observe`)."""
        return _cost_model_from_dict(_core.observe_status(self._ctx)["cost"])

    @property
    def calibration(self) -> dict[str, Any]:
        """Where online calibration stands (``dcp_observe_status``): ``steps``, ``rows``, ``rows_used``,
        ``identified`` (names of the terms the observations identify), ``fit_error`` and
        ``predict_error`` (median relative errors), ``margin_ppm`` and ``digest``."""
        st = _core.observe_status(self._ctx)
        bits = st["identified"]
        names = [name for name, bit in _TERMS if bits & bit]
        names += [f"cp_gather.{1 << k}" for k in range(1, _core.MAX_LOG2_CP + 1) if bits & (1 << (8 + k))]
        return {"steps": st["steps"], "rows": st["rows"], "rows_used": st["rows_used"], "identified": names,
                "fit_error": st["fit_error_ppm"] * 1e-6, "predict_error": st["predict_error_ppm"] * 1e-6,
                "margin_ppm": st["margin_ppm"], "digest": st["digest"]}

    def save_profile(self, path: Any, *, comment: str = "") -> None:
        """Write the current model as a cost profile (the format ``dcpack plan --cost`` reads), in
        picoseconds (``time_unit_ps = 1``) once an observation has set its unit."""
        cost = _core.observe_status(self._ctx)["cost"]
        unit = 1 if _core.observe_status(self._ctx)["steps"] > 0 else 0
        if hasattr(_core, "cost_profile_format"):
            text = _core.cost_profile_format(cost, unit)
        else:
            text = _format_profile(cost, unit)
        head = "# dcpack cost profile, calibrated online from the trainer's own microbatch times\n"
        if comment:
            head += "".join(f"# {line}\n" for line in comment.splitlines())
        with open(path, "w", encoding="utf-8") as f:
            f.write(head + text)

    def close(self) -> None:
        """Destroy the context now (views of it go stale; it is otherwise released when collected)."""
        self._ctx.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self._config
        return (f"<dcpack.Planner {c.scheduler} dp={c.data_parallel_size} cp={c.context_parallel_size} "
                f"max_sequences={c.max_sequences} max_seqlen_per_rank={c.max_seqlen_per_rank}>")
