"""Multi-rank dcp_step from Python threads over the in-process communicator, against a numpy oracle."""

from __future__ import annotations

import dcpack
import numpy as np
import oracle
import pytest
from conftest import dp_slice, make_batch, read_trace

ARRAYS = ("tokens", "labels", "position_ids", "loss_mask", "padding_mask", "cu_seqlens", "cu_seqlens_padded")
SCALARS = ("num_tokens", "max_seqlen", "local_cp_size", "cp_rank", "num_sequences")


def samples_of(batch, ids, prepacked=False):
    """A DP rank's input: one sample per sequence, or pre-packed samples of up to 3 sequences."""
    if not prepacked:
        return [dcpack.Sample(tokens=batch["tokens"][i], labels=batch["labels"][i], loss_mask=batch["loss_mask"][i],
                              position_ids=batch["position_ids"][i], original_length=batch["original"][i])
                for i in ids]
    out = []
    ids = list(ids)
    for k in range(0, len(ids), 3):
        group = ids[k:k + 3]
        cu = np.concatenate([[0], np.cumsum([batch["padded"][i] for i in group])]).astype(np.int32)
        cat = {f: np.concatenate([batch[f][i] for i in group]) for f in ("tokens", "labels", "loss_mask", "position_ids")}
        out.append(dcpack.Sample(cu_seqlens=cu, **cat))
    return out


def run_step(config, batch, *, prepacked=False, mtp=None, steps=1, tp_ranks_hold_data=False):
    """Every rank of config's DPxCPxTPxPP layout steps in its own thread; returns copies by world rank."""
    cluster = dcpack.InprocCluster(config, timeout_ms=30000, tp_ranks_hold_data=tp_ranks_hold_data)
    dp, cp = config.data_parallel_size, config.context_parallel_size
    n = len(batch["padded"])

    def rank(w):
        args = cluster.args(w)
        dpxcp, tp, pp = cluster.coordinates(w)
        if mtp is not None and pp == mtp[0]:
            args.mtp_virtual_stages = mtp[1]
        stepper = dcpack.Stepper(config)
        samples = samples_of(batch, dp_slice(n, dp, dpxcp // cp), prepacked) if args.holds_data else None
        outs = []
        for _ in range(steps):
            out = stepper.step(samples, args)
            outs.append(out.copy())
        return outs

    results = cluster.run(rank)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return cluster, results


def check_against_oracle(config, batch, cluster, results, mtp=None):
    plan = next(r[-1].plan for r in results if r[-1].plan is not None)
    lists = plan.to_lists()
    ocfg = dict(pad_alignment=config.pad_alignment, pad_to_max_seqlen=int(config.pad_to_max_seqlen),
                max_seqlen_per_rank=config.max_seqlen_per_rank,
                max_sequences_per_microbatch=config.max_sequences_per_microbatch,
                thd_tail_policy=config.thd_tail_policy, cp_partition=config.cp_partition)
    padded = batch["padded"]
    vpp = config.virtual_pipeline_size
    checked = 0
    for w, outs in enumerate(results):
        dpxcp, tp, pp = cluster.coordinates(w)
        for out in outs:
            assert out.num_microbatches == plan.num_microbatches and out.num_virtual_stages == vpp
            assert out.num_sequences == len(padded)
            assert out.seqlen_sum == sum(padded)
            assert out.seqlen_squared_sum == sum(p * p for p in padded)
            for m in range(out.num_microbatches):
                want = oracle.microbatch(ocfg, lists, batch, m, dpxcp)
                for v in range(vpp):
                    got = out.microbatch(m, v)
                    first = pp == 0 and v == 0
                    last = pp == config.pipeline_parallel_size - 1 and v == vpp - 1
                    stage_mtp = mtp is not None and pp == mtp[0] and (mtp[1] >> v) & 1
                    for k in SCALARS:
                        assert getattr(got, k) == want[k], (w, m, v, k)
                    for k in ARRAYS:
                        needed = {"tokens": first or stage_mtp, "position_ids": first or stage_mtp,
                                  "labels": last or stage_mtp, "loss_mask": last or stage_mtp}.get(k, True)
                        a = getattr(got, k)
                        if not needed:
                            assert a is None, (w, m, v, k)
                            continue
                        assert a is not None and np.array_equal(a, want[k]), (w, m, v, k)
                    checked += 1
    return checked


CASES = {
    # name: (config fields, trace, sequences)
    "dynamic_cp_zigzag_8": (dict(scheduler="dynamic_cp", data_parallel_size=8, max_seqlen_per_rank=4096), "mlmdefault_n256_seed1.txt", 48),
    "balanced_contiguous_pad_4": (dict(scheduler="balanced", data_parallel_size=4, max_seqlen_per_rank=8192,
                                       cp_partition="contiguous", pad_alignment=64), "bimodal_n256_seed1.txt", 24),
    "dp_balanced_cp2_pad_max_cap": (dict(scheduler="dp_balanced", data_parallel_size=2, context_parallel_size=2,
                                         max_seqlen_per_rank=8192, pad_to_max_seqlen=1, max_sequences_per_microbatch=4),
                                    "mlmdefault_n256_seed1.txt", 20),
    "dynamic_cp_extend_last_align": (dict(scheduler="dynamic_cp", data_parallel_size=4, max_seqlen_per_rank=4096,
                                          pad_alignment=128, thd_tail_policy="extend_last"), "longsft_n256_seed1.txt", 16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_step_matches_the_oracle(name):
    fields, trace, count = CASES[name]
    lengths = np.minimum(read_trace(trace)[:count], 2 * fields["max_seqlen_per_rank"])
    config = dcpack.Config(max_sequences=count, max_tokens_per_rank=1 << 18, **fields)
    n = config.data_parallel_size * config.context_parallel_size
    batch = make_batch(lengths, 2 * n, seed=len(name))
    prepacked = name.startswith("balanced")
    if prepacked:  # a pre-packed sub-sample is all real tokens: its original length is its padded length
        batch["original"] = list(batch["padded"])
    cluster, results = run_step(config, batch, prepacked=prepacked)
    assert check_against_oracle(config, batch, cluster, results) > 0


def test_step_with_tp_pp_vpp_and_mtp():
    """TP 2 x PP 2 with two virtual stages and MTP layers on the last stage's second virtual stage."""
    config = dcpack.Config(scheduler="dynamic_cp", data_parallel_size=2, tensor_parallel_size=2,
                           pipeline_parallel_size=2, virtual_pipeline_size=2, microbatch_group_size_per_vp_stage=2,
                           max_sequences=16, max_seqlen_per_rank=4096, max_tokens_per_rank=1 << 16)
    lengths = read_trace("mlmdefault_n256_seed1.txt")[:12]
    batch = make_batch(lengths, 4, seed=7)
    cluster, results = run_step(config, batch, mtp=(1, 0b01), steps=2)
    assert check_against_oracle(config, batch, cluster, results, mtp=(1, 0b01)) > 0
    # TP rank 1 got everything by broadcast and holds no plan
    assert results[2][0].plan is None and results[0][0].plan is not None


def test_every_tp_rank_holds_data():
    config = dcpack.Config(scheduler="balanced", data_parallel_size=2, tensor_parallel_size=2, max_sequences=16,
                           max_seqlen_per_rank=4096, max_tokens_per_rank=1 << 16)
    batch = make_batch(read_trace("bimodal_n256_seed1.txt")[:10] // 4 + 1, 4, seed=3)
    cluster, results = run_step(config, batch, tp_ranks_hold_data=True)
    assert check_against_oracle(config, batch, cluster, results) > 0


def test_step_output_lifetime():
    config = dcpack.Config(max_sequences=8, max_seqlen_per_rank=1024, max_tokens_per_rank=4096)
    world = dcpack.InprocWorld(1)
    comm = world.comm(0)
    stepper = dcpack.Stepper(config)
    batch = make_batch([100, 200, 300], 2)
    out = stepper.step(samples_of(batch, range(3)), world=comm, data_context_parallel=comm)
    mb = out.microbatch(0)
    tokens = mb.tokens
    assert not tokens.flags.writeable and tokens.base is not None
    kept = out.copy()
    assert kept.microbatch(0).tokens.tolist() == tokens.tolist()
    plan = out.plan
    assert plan.stats(batch["padded"]).total_tokens == sum(batch["padded"])
    stepper.step(samples_of(batch, range(2)), world=comm, data_context_parallel=comm)
    assert not out.is_valid_view
    for access in (lambda: out.microbatches, lambda: mb.tokens, lambda: mb.padding_mask, lambda: plan.ids):
        with pytest.raises(dcpack.StaleViewError):
            access()
    assert kept.is_valid_view and kept.microbatch(0).num_sequences == 3
    assert "stale" in repr(out)


def test_stepper_used_from_two_threads_at_once_is_refused():
    import threading

    config = dcpack.Config(data_parallel_size=2, max_sequences=8, max_seqlen_per_rank=1024, max_tokens_per_rank=4096)
    world = dcpack.InprocWorld(2, timeout_ms=3000)
    stepper = dcpack.Stepper(config)
    batch = make_batch([100, 200], 4)
    errors = []
    started = threading.Event()

    def first():
        started.set()
        try:  # waits for rank 1, which never comes: times out after 3 s
            stepper.step(samples_of(batch, [0]), world=world.comm(0), data_context_parallel=world.comm(0))
        except dcpack.Error as e:
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    started.wait()
    import time
    time.sleep(0.3)
    with pytest.raises(dcpack.InvalidArgumentError, match="already running"):
        stepper.step(samples_of(batch, [1]), world=world.comm(1), data_context_parallel=world.comm(1))
    t.join()
    assert errors and isinstance(errors[0], dcpack.DcpTimeoutError)
