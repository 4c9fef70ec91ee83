"""dcpack.torch and dcpack.megatron.DataPath: dcp_step on CUDA tensors over NCCL, one process per GPU,
against the numpy oracle.

Skipped without torch, without a CUDA device, or when dcpack was built
without CUDA and NCCL (reinstall with DCPACK_CUDA=1).  Uses up to 4 GPUs
(DCPACK_TEST_GPUS overrides), one process each, torch.distributed with the
NCCL backend for the unique-id broadcast, dcpack's own NCCL communicators for
the step.  python/tests/gpu_run.sh builds, installs and runs this on a GPU
machine.
"""

from __future__ import annotations

import gc
import os
import sys

import dcpack
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: dcpack.torch not tested")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: dcpack.torch not tested", allow_module_level=True)
if not (dcpack.HAVE_CUDA and dcpack.HAVE_NCCL):
    pytest.skip("dcpack was built without CUDA/NCCL (reinstall with DCPACK_CUDA=1): dcpack.torch not tested",
                allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = {
    "dynamic_cp": dict(scheduler="dynamic_cp", max_seqlen_per_rank=4096),
    "balanced_contiguous_pad": dict(scheduler="balanced", max_seqlen_per_rank=8192, cp_partition="contiguous",
                                    pad_alignment=64),
}
ARRAYS = ("tokens", "labels", "position_ids", "loss_mask", "padding_mask", "cu_seqlens", "cu_seqlens_padded")
SCALARS = ("max_seqlen", "local_cp_size", "cp_rank", "num_sequences", "num_tokens")


def _setup(rank: int, world: int, init_file: str, case: str):
    """This process's GPU, the process group, the case's configuration and batch, the rank's ids."""
    sys.path.insert(0, HERE)
    import torch.distributed as dist
    from conftest import dp_slice, make_batch, read_trace

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    fields = CASES[case]
    count = 6 * world
    lengths = np.minimum(read_trace("mlmdefault_n256_seed1.txt")[:count], fields["max_seqlen_per_rank"])
    config = dcpack.Config(data_parallel_size=world, max_sequences=count, max_tokens_per_rank=1 << 18, **fields)
    batch = make_batch(lengths, 2 * world, seed=5)
    return dist, config, batch, dp_slice(count, world, rank)


def _oracle_config(config):
    return dict(pad_alignment=config.pad_alignment, pad_to_max_seqlen=0,
                max_seqlen_per_rank=config.max_seqlen_per_rank, max_sequences_per_microbatch=0,
                thd_tail_policy="append_dummy", cp_partition=config.cp_partition)


def _check(got: dict, want: dict, where) -> None:
    """got: name -> tensor (or int); want: the oracle's microbatch."""
    for k in ARRAYS:
        g = got[k]
        assert g.is_cuda, (where, k)
        assert np.array_equal(g.cpu().numpy(), want[k]), (where, k)
    for k in SCALARS:
        if k in got:
            assert got[k] == want[k], (where, k, got[k], want[k])


def _worker(rank: int, world: int, init_file: str, case: str) -> None:
    dist, config, batch, ids = _setup(rank, world, init_file, case)
    import dcpack.torch as dt
    import oracle

    try:
        groups = dt.NcclGroups(config, dp_cp_rank=rank)
        assert groups.tensor_parallel is None  # TP 1: no TP communicator is split off
        stepper = dt.CudaStepper(config, groups)
        assert stepper.calls == 0
        dev = torch.device("cuda", rank)
        samples = [dcpack.Sample(tokens=torch.from_numpy(batch["tokens"][i]).to(dev),
                                 labels=torch.from_numpy(batch["labels"][i]).to(dev),
                                 loss_mask=torch.from_numpy(batch["loss_mask"][i]).to(dev),
                                 position_ids=torch.from_numpy(batch["position_ids"][i]).to(dev),
                                 original_length=batch["original"][i]) for i in ids]
        out = stepper.step(samples, step_id=1)
        assert stepper.calls == 1
        assert out.seqlen_sum == sum(batch["padded"])
        assert out.seqlen_squared_sum == sum(p * p for p in batch["padded"])
        lists = out.plan.to_lists()
        ocfg = _oracle_config(config)
        first = None
        for m in range(out.num_microbatches):
            want = oracle.microbatch(ocfg, lists, batch, m, rank)
            got = out.microbatch(m)
            if first is None:
                first = got.tokens
            assert got.tokens.device == dev and got.tokens.dtype == torch.int64
            assert got.padding_mask.dtype == torch.bool
            _check({k: getattr(got, k) for k in ARRAYS + SCALARS}, want, (rank, m))
            assert np.array_equal(got.cu_seqlens_host.numpy(), want["cu_seqlens"])
            assert np.array_equal(got.cu_seqlens_padded_host.numpy(), want["cu_seqlens_padded"])
        # zero copy: the tensors view the workspace tensor taken from torch's allocator
        ws = stepper._device_ws
        assert ws.data_ptr() <= first.data_ptr() < ws.data_ptr() + ws.numel()
        assert len(dt.check_single_libnccl()) <= 1
        kept = out.clone()
        expected = first.cpu().clone()
        out2 = stepper.step(samples, step_id=2)
        assert stepper.calls == 2
        assert not out.is_valid_view
        with pytest.raises(dcpack.StaleViewError):
            out.microbatch(0)
        assert torch.equal(kept.microbatch(0).tokens.cpu(), expected)  # a clone never goes stale
        # the same samples as one PackedSamples of CUDA tensors (the form DataPath uses): the same outputs
        names = ARRAYS + ("cu_seqlens_host", "cu_seqlens_padded_host")
        want2 = [{k: getattr(out2.microbatch(m), k).cpu().clone() for k in names} for m in range(out2.num_microbatches)]
        packed = dcpack.PackedSamples(
            num_tokens=[len(batch["tokens"][i]) for i in ids], original_length=[batch["original"][i] for i in ids],
            **{f: torch.from_numpy(np.concatenate([batch[f][i] for i in ids])).to(dev)
               for f in ("tokens", "labels", "loss_mask", "position_ids")})
        out3 = stepper.step(packed, step_id=3)
        assert stepper.calls == 3 and out3.num_microbatches == len(want2)
        for m, w in enumerate(want2):
            for k in names:
                assert torch.equal(getattr(out3.microbatch(m), k).cpu(), w[k]), (rank, m, k)
        # a tensor taken from an output keeps the workspace alive after the stepper is gone: torch's
        # allocator must not hand that memory to anyone else while the tensor lives
        view = out3.microbatch(0).tokens
        expected = view.cpu().clone()
        stepper.close()
        del stepper, out, out2, out3, ws, first
        gc.collect()
        torch.cuda.empty_cache()
        junk = [torch.full((1 << 20,), -7, dtype=torch.int64, device=dev) for _ in range(8)]
        torch.cuda.synchronize(dev)
        assert torch.equal(view.cpu(), expected)
        del junk
        groups.close()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_step_matches_the_oracle(tmp_path, case):
    import torch.multiprocessing as mp

    world = int(os.environ.get("DCPACK_TEST_GPUS", min(torch.cuda.device_count(), 4)))
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), case), nprocs=world, join=True)


def _megatron_item(batch, i):
    """Global sample i as Megatron's VarlenDataset yields it through the default collate (batch dim 1)."""
    item = {k: torch.from_numpy(batch[k][i]).unsqueeze(0) for k in ("tokens", "labels", "loss_mask",
                                                                    "position_ids")}
    item["original_seq_len"] = torch.tensor([batch["original"][i]], dtype=torch.int32)
    item["padded_seq_len"] = torch.tensor([batch["padded"][i]], dtype=torch.int32)
    return item


def _data_path_worker(rank: int, world: int, init_file: str, case: str) -> None:
    dist, config, batch, ids = _setup(rank, world, init_file, case)
    import dcpack.megatron as dm
    import dcpack.torch as dt
    import oracle

    try:
        groups = dt.NcclGroups(config, dp_cp_rank=rank)
        path = dm.DataPath(config, groups)
        ocfg = _oracle_config(config)
        for step in range(2):  # two global batches through one DataPath
            source = iter([_megatron_item(batch, i) for i in ids])
            iterator, num_microbatches, seqlen_sum, seqlen_squared_sum = path.wrap_data_iterator(
                source, None, len(ids))
            assert seqlen_sum == float(sum(batch["padded"]))
            assert seqlen_squared_sum == float(sum(p * p for p in batch["padded"]))
            assert path.stepper.calls == step + 1
            lists = path.last_output.plan.to_lists()
            got_all = list(iterator)
            assert len(got_all) == num_microbatches
            for m, got in enumerate(got_all):
                want = oracle.microbatch(ocfg, lists, batch, m, rank)
                for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
                    assert got[k].shape == (1, want["num_tokens"]), (k, got[k].shape)
                flat = {k: (got[k].reshape(-1) if k in ARRAYS else got[k]) for k in got}
                _check(flat, want, (rank, step, m))
        groups.close()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_path_matches_the_oracle(tmp_path, case):
    """dcpack.megatron.DataPath.wrap_data_iterator (Megatron's packed data path through dcp_step), fed
    Megatron-style samples without Megatron itself, against the oracle."""
    import torch.multiprocessing as mp

    world = int(os.environ.get("DCPACK_TEST_GPUS", min(torch.cuda.device_count(), 4)))
    mp.spawn(_data_path_worker, args=(world, str(tmp_path / "init"), case), nprocs=world, join=True)
