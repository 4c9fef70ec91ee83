"""Megatron-LM's packed data path next to dcpack's, in one process per rank: layouts, stand-ins, batches, comparison.

Used by test_megatron_wrap.py (Megatron's wrap_data_iterator with its own
scheduler and with dcpack's, on the CPU over gloo) and test_megatron_gpu.py
(Megatron's whole reference data path against dcpack.megatron.DataPath on
GPUs over NCCL).  megatron_loader.load_data_path says which of Megatron's
files run unchanged; this module provides what they would take from the rest
of Megatron:

- **parallel_state**: the groups of a (DP, CP, TP) layout over the ranks that
  exist, numbered as Megatron numbers them by default (order tp-cp-dp: world
  rank = tp_rank + TP * (cp_rank + CP * dp_rank)), made with
  torch.distributed.new_group: tensor, context, data and data x context
  parallel groups, and the dynamic DPxCP groups (blocks of 1, 2, 4, ...
  consecutive DPxCP ranks, as ``create_dynamic_dp_cp_groups`` makes them).
- **pipeline stages**: PP stage ``pp_rank`` of ``pp`` is emulated.  The PP
  group is an object with ``rank()`` and ``size()`` only; neither data path
  communicates over it (Megatron's run: "There is no PP-group broadcast";
  get_batch_on_this_rank_for_sequence_packing reads rank and size only; dcpack's
  step agrees errors over its world communicator, which here holds the ranks
  that exist), so every rank sees what that stage's rank of a real P-stage run sees.
- **mtp_on_this_rank**: Megatron's rule for a custom pipeline layout, with the
  layout reduced to the set of (pp_rank, vp_stage) that hold MTP layers
  (``config.mtp_stages``).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from conftest import dp_slice, make_batch, read_trace


class Layout:
    """A (DP, CP, TP) layout over the ranks that exist, and the emulated PP stage (pp_rank of pp)."""

    def __init__(self, dp: int, cp: int, tp: int, pp: int = 1, pp_rank: int = 0) -> None:
        self.dp, self.cp, self.tp, self.pp, self.pp_rank = dp, cp, tp, pp, pp_rank
        self.world = dp * cp * tp

    def coords(self, rank: int):
        """(dp_rank, cp_rank, tp_rank) of a world rank."""
        return rank // (self.tp * self.cp), (rank // self.tp) % self.cp, rank % self.tp

    def rank_of(self, dp_rank: int, cp_rank: int, tp_rank: int) -> int:
        return tp_rank + self.tp * (cp_rank + self.cp * dp_rank)

    def __repr__(self) -> str:
        return f"dp{self.dp}-cp{self.cp}-tp{self.tp}"


def layouts_for(world: int) -> list[Layout]:
    """The (DP, CP, TP) layouts of ``world`` ranks the tests run: every DP, and CP, TP powers of two."""
    out = []
    cp = 1
    while cp <= world:
        tp = 1
        while cp * tp <= world:
            if world % (cp * tp) == 0:
                out.append(Layout(world // (cp * tp), cp, tp))
            tp *= 2
        cp *= 2
    return out


class StagePipelineGroup:
    """PP stage ``rank`` of ``size``, emulated: what the data paths ask a PP group (rank and size)."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


class Groups:
    """This rank's process groups of a layout (every rank must build the same layouts in the same order)."""

    def __init__(self, layout: Layout, backend_device: torch.device | None = None) -> None:
        L = layout
        me = dist.get_rank()
        self.layout = L
        self.dp_rank, self.cp_rank, self.tp_rank = L.coords(me)
        self.dp_cp_rank = self.dp_rank * L.cp + self.cp_rank

        def make(ranks_lists):
            mine = None
            for ranks in ranks_lists:
                g = dist.new_group(ranks)
                if me in ranks:
                    mine = g
            return mine

        self.tp_group = make([[L.rank_of(d, c, t) for t in range(L.tp)] for d in range(L.dp) for c in range(L.cp)])
        self.cp_group = make([[L.rank_of(d, c, t) for c in range(L.cp)] for d in range(L.dp) for t in range(L.tp)])
        self.dp_group = make([[L.rank_of(d, c, t) for d in range(L.dp)] for c in range(L.cp) for t in range(L.tp)])
        lanes = [[L.rank_of(d, c, t) for d in range(L.dp) for c in range(L.cp)] for t in range(L.tp)]
        self.dp_cp_group = make(lanes)
        n = L.dp * L.cp
        self.dynamic = {}
        size = 1
        while size < n:
            self.dynamic[size] = make([lane[i:i + size] for lane in lanes for i in range(0, n, size)])
            size *= 2
        self.dynamic[n] = self.dp_cp_group


def make_parallel_state(groups: Groups, into: types.ModuleType | None = None) -> types.ModuleType:
    """A stand-in ``megatron.core.parallel_state`` over ``groups``; :func:`set_stage` sets the emulated PP stage.

    ``into``: a stand-in made before (the one Megatron's loaded code imported), refilled for ``groups``
    in place, its stage reset; its functions read the stage from that module, so :func:`set_stage` on it
    reaches them."""
    ps = into if into is not None else types.ModuleType("megatron.core.parallel_state")
    ps._groups = groups
    ps._pp = StagePipelineGroup(0, 1)
    ps._vpp = None

    def get_data_parallel_group(with_context_parallel=False, **_):
        return groups.dp_cp_group if with_context_parallel else groups.dp_group

    def get_data_parallel_rank(with_context_parallel=False, **_):
        return groups.dp_cp_rank if with_context_parallel else groups.dp_rank

    def get_dynamic_data_context_parallel_groups(check_initialized=True, group_size=None):
        return groups.dynamic[group_size]

    ps.get_data_parallel_group = get_data_parallel_group
    ps.get_data_parallel_rank = get_data_parallel_rank
    ps.get_tensor_model_parallel_group = lambda **_: groups.tp_group
    ps.get_tensor_model_parallel_rank = lambda: groups.tp_rank
    ps.get_context_parallel_group = lambda **_: groups.cp_group
    ps.get_context_parallel_world_size = lambda: groups.layout.cp
    ps.get_context_parallel_rank = lambda: groups.cp_rank
    ps.get_pipeline_model_parallel_group = lambda **_: ps._pp
    ps.get_pipeline_model_parallel_rank = lambda: ps._pp.rank()
    ps.get_pipeline_model_parallel_world_size = lambda: ps._pp.size()
    ps.get_virtual_pipeline_model_parallel_world_size = lambda: ps._vpp
    ps.get_dynamic_data_context_parallel_groups = get_dynamic_data_context_parallel_groups
    return ps


def set_stage(ps: types.ModuleType, pp_rank: int, pp: int, vpp: int | None) -> None:
    ps._pp = StagePipelineGroup(pp_rank, pp)
    ps._vpp = vpp


def make_mtp_on_this_rank(ps: types.ModuleType):
    """Megatron's mtp_on_this_rank for a custom pipeline layout; the layout is ``config.mtp_stages``."""

    def mtp_on_this_rank(config, ignore_virtual=True, vp_stage=None):
        stages = getattr(config, "mtp_stages", None) or set()
        pp_rank = ps.get_pipeline_model_parallel_rank()
        if not ignore_virtual and ps.get_virtual_pipeline_model_parallel_world_size() is not None:
            assert vp_stage is not None, "vp_stage must be passed if virtual pipeline is enabled"
            return (pp_rank, vp_stage) in stages
        return any(p == pp_rank for p, _ in stages)

    return mtp_on_this_rank


def megatron_config(layout: Layout, scheduler: str, max_seqlen: int, *, vpp: int | None = None,
                    vpp_group: int | None = None, min_cp: int = 1, cap: int | None = None,
                    alignment: Any = None, tail: str | None = None, partition: str = "zigzag",
                    cuda_graph: str = "none", mtp_stages: Sequence = ()) -> types.SimpleNamespace:
    """What Megatron's model config and training arguments hold for the data path (one namespace for both)."""
    return types.SimpleNamespace(
        sequence_packing_scheduler=scheduler,
        dynamic_context_parallel=scheduler == "default_dynamic_cp",
        max_seqlen_per_dp_cp_rank=max_seqlen,
        min_dynamic_context_parallel_size=min_cp,
        thd_max_packed_sequences=cap,
        pad_packed_seq_alignment=alignment,
        thd_tail_padding_policy=tail,
        cp_partition_mode=partition,
        cuda_graph_impl=cuda_graph,
        virtual_pipeline_model_parallel_size=vpp,
        microbatch_group_size_per_vp_stage=vpp_group,
        mtp_stages=set(mtp_stages),
        mtp_num_layers=1 if mtp_stages else None,
        data_parallel_size=layout.dp,
        context_parallel_size=layout.cp,
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
    )


def mtp_bits(config, pp_rank: int) -> int:
    """dcpack's mtp_virtual_stages for this stage: bit v when (pp_rank, v) holds MTP layers."""
    vpp = config.virtual_pipeline_model_parallel_size or 1
    return sum(1 << v for v in range(vpp) if (pp_rank, v) in config.mtp_stages)


class Batch:
    """A global batch from a trace: per global id the padded and original lengths and the four fields."""

    def __init__(self, trace: str, count: int, max_len: int, divisor: int, seed: int, packed: int = 0) -> None:
        lengths = np.minimum(read_trace(trace)[:count], max_len)
        self.data = make_batch(lengths, divisor, seed=seed)
        self.count = count
        self.packed = packed  # > 0: samples are pre-packed (SFTDataset): `packed` sequences a sample

    def items(self, dp_rank: int, dp: int) -> list[dict[str, torch.Tensor]]:
        """DP rank ``dp_rank``'s samples as Megatron's datasets yield them through the default collate.

        Unpacked (VarlenDataset): one sequence a sample with ``original_seq_len`` and
        ``padded_seq_len``.  Pre-packed (SFTDataset): ``packed`` sequences a sample with
        ``cu_seqlens`` (Megatron then takes original = padded lengths: the original
        lengths are the padded ones here).  Fresh tensors every call (the reference
        path edits the sample dicts).
        """
        b = self.data
        ids = list(dp_slice(self.count, dp, dp_rank))
        out = []
        if not self.packed:
            for i in ids:
                item = {k: torch.from_numpy(b[k][i].copy()).unsqueeze(0) for k in ("tokens", "labels", "loss_mask",
                                                                                  "position_ids")}
                item["original_seq_len"] = torch.tensor([b["original"][i]], dtype=torch.int64)
                item["padded_seq_len"] = torch.tensor([b["padded"][i]], dtype=torch.int64)
                out.append(item)
            return out
        for s in range(0, len(ids), self.packed):
            chunk = ids[s:s + self.packed]
            item = {k: torch.from_numpy(np.concatenate([b[k][i] for i in chunk])).unsqueeze(0)
                    for k in ("tokens", "labels", "loss_mask", "position_ids")}
            item["cu_seqlens"] = torch.from_numpy(
                np.concatenate([[0], np.cumsum([b["padded"][i] for i in chunk])]).astype(np.int32)).unsqueeze(0)
            out.append(item)
        return out

    def lengths(self) -> list[int]:
        return list(self.data["padded"])


def pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# --------------------------------------------------------------------------
# Comparison: bit for bit, with types, shapes, dtypes and devices
# --------------------------------------------------------------------------

def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where ``a`` (the reference's) and ``b`` (dcpack's) differ; [] when equal bit for bit.

    Tensors: same dtype, shape, device and bytes.  PackedSeqParams (any
    dataclass): same class, every field equal (process groups: the same object).
    None only against None; ints, floats, bools and strings: same type and value.
    """
    out: list[str] = []
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or a.device != b.device:
            return [f"{where}: {a.dtype} {tuple(a.shape)} {a.device} vs {b.dtype} {tuple(b.shape)} {b.device}"]
        x = a.detach().contiguous().reshape(-1).view(torch.uint8)
        y = b.detach().contiguous().reshape(-1).view(torch.uint8)
        if not torch.equal(x, y):
            av, bv = a.reshape(-1), b.reshape(-1)
            bad = (av != bv).nonzero()
            first = int(bad[0]) if bad.numel() else -1
            return [f"{where}: values differ ({bad.numel()} elements; first at {first}: "
                    f"{av[first].item() if first >= 0 else '?'} vs {bv[first].item() if first >= 0 else '?'}; "
                    f"head {av[:12].tolist()} vs {bv[:12].tolist()})"]
        return []
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
        for f in dataclasses.fields(a):
            out += differences(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
        return out
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return [f"{where}: {type(a).__name__}[{len(a)}] vs {type(b).__name__}[{len(b) if hasattr(b, '__len__') else '?'}]"]
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{where}[{i}]")
        return out
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return [f"{where}: keys {sorted(a) if isinstance(a, dict) else a} vs "
                    f"{sorted(b) if isinstance(b, dict) else b}"]
        for k in a:
            out += differences(a[k], b[k], f"{where}[{k!r}]")
        return out
    if a is None or b is None or isinstance(a, (int, float, str, bool)):
        if type(a) is not type(b) or a != b:
            return [f"{where}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"]
        return []
    if a is not b:  # process groups and other objects: the same object
        return [f"{where}: {a!r} is not {b!r}"]
    return []


def drain(iterators: Any) -> Any:
    """The microbatches a wrapped iterator (or a list of them, one a virtual stage) yields."""
    if iterators is None:
        return None
    if isinstance(iterators, list):
        return [drain(it) for it in iterators]
    return list(iterators)
