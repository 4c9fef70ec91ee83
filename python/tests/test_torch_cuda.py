"""dcpack.torch: dcp_step on CUDA tensors over NCCL, one process per GPU, against the numpy oracle.

Skipped without torch, without a CUDA device, or when dcpack was built
without CUDA and NCCL (reinstall with DCPACK_CUDA=1).  Uses up to 4 GPUs
(DCPACK_TEST_GPUS overrides), one process each, torch.distributed with the
NCCL backend for the unique-id broadcast, dcpack's own NCCL communicators for
the step.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import dcpack

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


def _worker(rank: int, world: int, init_file: str, case: str) -> None:
    sys.path.insert(0, HERE)
    import torch.distributed as dist

    import dcpack.torch as dt
    import oracle
    from conftest import dp_slice, make_batch, read_trace

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        fields = CASES[case]
        count = 6 * world
        lengths = np.minimum(read_trace("mlmdefault_n256_seed1.txt")[:count], fields["max_seqlen_per_rank"])
        config = dcpack.Config(data_parallel_size=world, max_sequences=count, max_tokens_per_rank=1 << 18, **fields)
        batch = make_batch(lengths, 2 * world, seed=5)
        groups = dt.NcclGroups(config, dp_cp_rank=rank)
        stepper = dt.CudaStepper(config, groups)
        ids = dp_slice(count, world, rank)
        dev = torch.device("cuda", rank)
        samples = [dcpack.Sample(tokens=torch.from_numpy(batch["tokens"][i]).to(dev),
                                 labels=torch.from_numpy(batch["labels"][i]).to(dev),
                                 loss_mask=torch.from_numpy(batch["loss_mask"][i]).to(dev),
                                 position_ids=torch.from_numpy(batch["position_ids"][i]).to(dev),
                                 original_length=batch["original"][i]) for i in ids]
        out = stepper.step(samples)
        assert out.seqlen_sum == sum(batch["padded"])
        assert out.seqlen_squared_sum == sum(p * p for p in batch["padded"])
        lists = out.plan.to_lists()
        ocfg = dict(pad_alignment=config.pad_alignment, pad_to_max_seqlen=0,
                    max_seqlen_per_rank=config.max_seqlen_per_rank, max_sequences_per_microbatch=0,
                    thd_tail_policy="append_dummy", cp_partition=config.cp_partition)
        first = None
        for m in range(out.num_microbatches):
            want = oracle.microbatch(ocfg, lists, batch, m, rank)
            got = out.microbatch(m)
            if first is None:
                first = got.tokens
            assert got.tokens.device == dev and got.tokens.dtype == torch.int64
            assert got.padding_mask.dtype == torch.bool
            for k in ("tokens", "labels", "position_ids", "loss_mask", "padding_mask", "cu_seqlens",
                      "cu_seqlens_padded"):
                assert np.array_equal(getattr(got, k).cpu().numpy(), want[k]), (rank, m, k)
            assert np.array_equal(got.cu_seqlens_host.numpy(), want["cu_seqlens"])
            for k in ("max_seqlen", "local_cp_size", "cp_rank", "num_sequences", "num_tokens"):
                assert getattr(got, k) == want[k], (rank, m, k)
        # zero copy: the tensors view the workspace tensor taken from torch's allocator
        ws = stepper._device_ws
        assert ws.data_ptr() <= first.data_ptr() < ws.data_ptr() + ws.numel()
        assert len(dt.check_single_libnccl()) <= 1
        stepper.step(samples)
        assert not out.is_valid_view
        with pytest.raises(dcpack.StaleViewError):
            out.microbatch(0)
        groups.close()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_step_matches_the_oracle(tmp_path, case):
    import torch.multiprocessing as mp

    world = int(os.environ.get("DCPACK_TEST_GPUS", min(torch.cuda.device_count(), 4)))
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), case), nprocs=world, join=True)
