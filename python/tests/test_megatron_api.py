"""dcpack.megatron without Megatron: the interface, the golden reference plans, install() on a stand-in module."""

from __future__ import annotations

import json
import types

import dcpack
import dcpack.megatron as dm
import pytest
from conftest import GOLDEN, read_trace


@pytest.mark.parametrize("name", ["mlmdefault_n256_seed1__dynamic_cp_r32_cp0_m8192_vpp4.json",
                                  "bimodal_n1024_seed1__dp_balanced_r32_cp8_m16384_vpp4.json",
                                  "longsft_n256_seed1__dynamic_cp_r128_cp0_m4096_vpp0.json"])
def test_golden_plans_through_the_scheduler_interface(name):
    g = json.loads((GOLDEN / name).read_text())
    lengths = read_trace(g["trace"])
    pairs = [(i, int(s)) for i, s in enumerate(lengths)]
    vpp = g["microbatch_group_size_per_vp_stage"]
    if g["scheduler"] == "dp_balanced":
        s = dm.DpBalancedScheduler(g["max_seqlen_per_rank"], g["cp"], g["ranks"] // g["cp"], vpp)
        assert not s.is_dynamic_cp
    else:
        s = dm.DefaultDynamicCPScheduler(g["max_seqlen_per_rank"], 1, g["ranks"], vpp, min_cp_size=g["min_cp_size"])
        assert s.is_dynamic_cp
    assert s.get_groups_and_subsamples(pairs) == g["plan"]
    assert s.get_required_sample_keys() == ["tokens", "labels", "loss_mask", "position_ids", "original_seq_len",
                                            "padded_seq_len"]
    s.last_plan.validate()


def test_capacity_grows_with_the_batch():
    s = dm.BalancedScheduler(8192, 1, 16, None)
    small = [(i, 100 + i) for i in range(10)]
    large = [(i, 100 + i % 3000) for i in range(5000)]
    assert sum(len(r) for mb in s.get_groups_and_subsamples(small) for r in mb) >= 10
    groups = s.get_groups_and_subsamples(large)
    seen = {i for mb in groups for r in mb for i in r}
    assert seen == set(range(5000))


def test_dynamic_ignores_max_num_seqs_like_the_reference_unless_asked():
    lengths = read_trace("mlmdefault_n256_seed1.txt")
    pairs = [(i, int(s)) for i, s in enumerate(lengths)]
    free = dm.DefaultDynamicCPScheduler(4096, 1, 8, None).get_groups_and_subsamples(pairs)
    assert dm.DefaultDynamicCPScheduler(4096, 1, 8, None, max_num_seqs=2).get_groups_and_subsamples(pairs) == free
    capped = dm.DefaultDynamicCPScheduler(4096, 1, 8, None, max_num_seqs=2, honour_max_num_seqs=True)
    assert max(len(r) for mb in capped.get_groups_and_subsamples(pairs) for r in mb) <= 2


def test_install_and_uninstall_on_a_stand_in_module():
    class Original:
        pass

    module = types.SimpleNamespace(scheduler_map={"dp_balanced": Original, "default_dynamic_cp": Original})
    before = dict(module.scheduler_map)
    prev = dm.install({"default_dynamic_cp": "balanced", "dcpack_balanced": "balanced"}, module=module,
                      max_num_seqs_offset=1, cost=dcpack.CostModel(linear=1))
    cls = module.scheduler_map["default_dynamic_cp"]
    assert issubclass(cls, dm.BalancedScheduler) and module.scheduler_map["dp_balanced"] is Original
    s = cls(4096, 2, 4, None, max_num_seqs=5, min_cp_size=2)
    assert s.config.max_sequences_per_microbatch == 4 and s.config.cost.linear == 1 and s.config.min_cp_size == 2
    dm.uninstall(prev, module=module)
    assert module.scheduler_map == before
    with pytest.raises(KeyError):
        dm.install({"x": "no_such"}, module=module)


def test_config_from_megatron_arguments():
    args = types.SimpleNamespace(
        data_parallel_size=4, context_parallel_size=2, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
        virtual_pipeline_model_parallel_size=2, microbatch_group_size_per_vp_stage=2, max_seqlen_per_dp_cp_rank=8192,
        sequence_packing_scheduler="default_dynamic_cp", min_dynamic_context_parallel_size=2,
        thd_max_packed_sequences=9, pad_packed_seq_alignment=128, thd_tail_padding_policy=None,
        cp_partition_mode="contiguous")
    c = dm.config_from_megatron(args, max_sequences=4096, max_tokens_per_rank=1 << 20).validate()
    assert (c.scheduler, c.data_parallel_size, c.context_parallel_size, c.tensor_parallel_size) == ("dynamic_cp", 4, 2, 2)
    assert (c.pipeline_parallel_size, c.virtual_pipeline_size, c.microbatch_group_size_per_vp_stage) == (2, 2, 2)
    assert (c.min_cp_size, c.pad_alignment, c.pad_to_max_seqlen, c.cp_partition) == (2, 128, 0, "contiguous")
    assert c.max_sequences_per_microbatch == 8 and c.thd_tail_policy == "append_dummy"  # the dummy's slot
    args.pad_packed_seq_alignment, args.thd_tail_padding_policy = "max", "extend_last"
    args.sequence_packing_scheduler, args.virtual_pipeline_model_parallel_size = "dp_balanced", None
    c = dm.config_from_megatron(args, max_sequences=64, max_tokens_per_rank=1 << 16)
    assert (c.scheduler, c.pad_to_max_seqlen, c.max_sequences_per_microbatch, c.microbatch_group_size_per_vp_stage,
            c.thd_tail_policy) == ("dp_balanced", 1, 9, 0, "extend_last")


def test_install_data_path_on_stand_in_modules():
    """install_data_path swaps both functions in (and back) without importing Megatron."""
    def original_wrap(*args, **kwargs):
        return "megatron's wrap_data_iterator"

    def original_get_batch(*args, **kwargs):
        return "megatron's get_batch"

    training = types.SimpleNamespace(wrap_data_iterator=original_wrap)
    gpt = types.SimpleNamespace(get_batch_on_this_rank_for_sequence_packing=original_get_batch)
    path = types.SimpleNamespace(wrap_data_iterator=lambda *a, **k: "dcpack", get_batch=lambda *a, **k: "dcpack")
    prev = dm.install_data_path(path, training_module=training, gpt_module=gpt)
    assert training.wrap_data_iterator is path.wrap_data_iterator
    assert gpt.get_batch_on_this_rank_for_sequence_packing is path.get_batch
    dm.uninstall_data_path(prev)
    assert training.wrap_data_iterator is original_wrap
    assert gpt.get_batch_on_this_rank_for_sequence_packing is original_get_batch
