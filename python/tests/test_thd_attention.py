"""dcpack.thd attention: the THD/CP layout against the oracle's slicing, the math kernel against dense
attention, and (CUDA) torch's varlen kernel against both, its causal alignment checked, not assumed."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="dcpack.thd needs torch")

import oracle  # noqa: E402
from dcpack.thd import attention as A  # noqa: E402


def _oracle_positions(cup, cp, r, zigzag):
    """Positions of CP rank r's slots by the oracle's (TransformerEngine's) index formula, on arange data."""
    n = len(cup) - 1
    batch = {"padded": [cup[i + 1] - cup[i] for i in range(n)], "original": [cup[i + 1] - cup[i] for i in range(n)]}
    off = 0
    for k in ("tokens", "labels", "position_ids"):
        batch[k] = []
    batch["loss_mask"] = []
    for p in batch["padded"]:
        batch["tokens"].append(np.arange(off, off + p, dtype=np.int64))
        batch["labels"].append(np.zeros(p, dtype=np.int64))
        batch["position_ids"].append(np.zeros(p, dtype=np.int64))
        batch["loss_mask"].append(np.ones(p, dtype=np.float32))
        off += p
    lists = [[list(range(n)) for _ in range(cp)]]
    cfg = dict(pad_alignment=0, pad_to_max_seqlen=0, max_seqlen_per_rank=1 << 20, max_sequences_per_microbatch=0,
               thd_tail_policy="append_dummy", cp_partition="zigzag" if zigzag else "contiguous")
    return oracle.microbatch(cfg, lists, batch, 0, r)["tokens"]


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
@pytest.mark.parametrize("partition", ["zigzag", "contiguous"])
def test_layout_positions_match_the_oracle_slicing(cp, partition):
    rng = np.random.default_rng(cp)
    lens = [int(2 * cp * rng.integers(1, 6)) for _ in range(5)]
    cup = [0] + list(np.cumsum(lens))
    n = cup[-1] // cp
    seen = []
    for r in range(cp):
        pos, runs = A.layout(cup, n, cp, r, partition)
        assert np.array_equal(pos, _oracle_positions(cup, cp, r, partition == "zigzag")), (cp, r, partition)
        # runs tile the slots in order; each run's positions end at its key prefix's end
        q = 0
        for q_start, q_len, k_start, k_len in runs:
            assert q_start == q and q_len > 0 and q_len <= k_len
            assert np.array_equal(pos[q_start:q_start + q_len], np.arange(k_start + k_len - q_len, k_start + k_len))
            q += q_len
        assert q == n
        seen.append(pos)
    assert sorted(np.concatenate(seen).tolist()) == list(range(cup[-1]))


def test_layout_refuses_boundaries_that_do_not_describe_the_buffer():
    with pytest.raises(A.LayoutError, match="ends at 12"):
        A.layout([0, 4, 12], 5, 2, 0, "zigzag")
    with pytest.raises(A.LayoutError, match="not cut into 4"):
        A.layout([0, 6, 12], 6, 2, 0, "zigzag")
    with pytest.raises(A.LayoutError, match="decreases"):
        A.layout([0, 6, 4, 12], 12, 1, 0, "zigzag")
    with pytest.raises(A.LayoutError, match="partition"):
        A.layout([0, 8], 4, 2, 0, "striped")


def _dense(q, k, v, q_pos, seg_q, k_pos, seg_k):
    """Dense masked softmax attention: query i sees key j of its own span at position <= its own."""
    h, hkv = q.shape[1], k.shape[1]
    kk = k.repeat_interleave(h // hkv, 1)
    vv = v.repeat_interleave(h // hkv, 1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk.float()) / math.sqrt(q.shape[2])
    mask = (seg_q[:, None] == seg_k[None, :]) & (k_pos[None, :] <= q_pos[:, None])
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vv.float())


def _case(cp, r, partition, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    lens = [2 * cp * 3, 2 * cp * 1, 2 * cp * 5]
    cup = [0] + list(np.cumsum(lens))
    total = cup[-1]
    n = total // cp
    h, hkv, d = 4, 2, 16
    qf = torch.randn(total, h, d, generator=g)
    kf = torch.randn(total, hkv, d, generator=g)
    vf = torch.randn(total, hkv, d, generator=g)
    seg = torch.as_tensor(np.searchsorted(np.array(cup[1:]), np.arange(total), side="right"))
    start = torch.as_tensor(np.array(cup)[seg.numpy()])
    pos_in = torch.arange(total) - start
    lay = A.AttentionLayout.build(cup, n, cp, r, partition, None, device)
    pos, _ = A.layout(cup, n, cp, r, partition)
    pos = torch.as_tensor(pos)
    # what gather_kv would give: each run's key prefix, in global order
    kidx = torch.cat([torch.arange(ks, ks + kl) for _, _, ks, kl in lay.runs])
    want = _dense(qf[pos], kf, vf, pos_in[pos], seg[pos], pos_in, seg)
    cast = dict(device=device, dtype=dtype)
    return lay, qf[pos].to(**cast), kf[kidx].to(**cast), vf[kidx].to(**cast), want


@pytest.mark.parametrize("cp,partition", [(1, "zigzag"), (2, "zigzag"), (4, "zigzag"), (2, "contiguous"),
                                          (4, "contiguous")])
def test_math_kernel_equals_dense_attention(cp, partition):
    for r in range(cp):
        lay, q, k, v, want = _case(cp, r, partition, "cpu", torch.float32)
        got = A.math_attention(q, k, v, lay)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (cp, r)


cuda = pytest.mark.skipif(not torch.cuda.is_available() or not A.varlen_available(),
                          reason="needs CUDA and torch.nn.attention.varlen.varlen_attn")


@cuda
def test_varlen_kernel_is_causal_aligned_bottom_right():
    """q_len < k_len: the varlen kernel's causal mask must be the bottom-right one the layout relies on."""
    g = torch.Generator().manual_seed(1)
    q_len, k_len, h, d = 8, 24, 2, 64
    q = torch.randn(q_len, h, d, generator=g).cuda().bfloat16()
    k = torch.randn(k_len, h, d, generator=g).cuda().bfloat16()
    v = torch.randn(k_len, h, d, generator=g).cuda().bfloat16()
    lay = A.AttentionLayout(runs=[(0, q_len, 0, k_len)], cu_q=torch.tensor([0, q_len], dtype=torch.int32).cuda(),
                            cu_k=torch.tensor([0, k_len], dtype=torch.int32).cuda(), max_q=q_len, max_k=k_len,
                            key_index=None, cp=1, cp_rank=0, group=None, num_tokens=q_len)
    got = A.varlen_attention(q, k, v, lay).float()
    i = torch.arange(q_len)
    bottom_right = _dense(q.cpu(), k.cpu(), v.cpu(), i + (k_len - q_len), torch.zeros(q_len), torch.arange(k_len),
                          torch.zeros(k_len)).cuda()
    top_left = _dense(q.cpu(), k.cpu(), v.cpu(), i, torch.zeros(q_len), torch.arange(k_len),
                      torch.zeros(k_len)).cuda()
    err_br = float((got - bottom_right).abs().max())
    err_tl = float((got - top_left).abs().max())
    print(f"varlen_attn causal: max error vs bottom-right {err_br:.3e}, vs top-left {err_tl:.3e}")
    assert err_br < 3e-2 and err_tl > 10 * err_br


@cuda
@pytest.mark.parametrize("cp,partition", [(1, "zigzag"), (2, "zigzag"), (4, "zigzag"), (2, "contiguous")])
def test_varlen_kernel_equals_math_kernel_forward_and_backward(cp, partition):
    for r in range(cp):
        lay, q, k, v, want = _case(cp, r, partition, "cuda", torch.bfloat16, seed=r)
        q32, k32, v32 = (t.float().requires_grad_() for t in (q, k, v))
        qb, kb, vb = (t.detach().clone().requires_grad_() for t in (q, k, v))
        ref = A.math_attention(q32, k32, v32, lay)
        got = A.varlen_attention(qb, kb, vb, lay)
        assert float((got.float() - want.cuda()).abs().max()) < 3e-2
        go = torch.randn_like(ref)
        ref.backward(go)
        got.backward(go.bfloat16())
        for a, b in ((qb, q32), (kb, k32), (vb, v32)):
            scale = float(b.grad.abs().max())
            assert float((a.grad.float() - b.grad).abs().max()) <= 3e-2 * scale, (cp, r)


def test_from_microbatch_takes_a_step_output_as_it_is():
    """THDBatch.from_microbatch on dcpack.Microbatch objects equals from_fields on their arrays; CP groups by block."""
    import dcpack
    import thd_equality as te
    from dcpack.thd import LOCAL_REPLAY, THDBatch

    c = dict(world=4, scheduler="dynamic_cp", cp=1, partition="zigzag", pad=8, tail="append_dummy", family="longsft")
    batch = te.global_batch(c, 0)
    config = te.dcpack_config(c, len(batch["padded"]))
    cluster = dcpack.InprocCluster(config, timeout_ms=60000)
    outs = cluster.run(lambda w: dcpack.Stepper(config).step(te.samples_of(config, batch, w), cluster.args(w)).copy())

    class Groups:
        asked = []

        def get(self, first, size):
            self.asked.append((first, size))
            return LOCAL_REPLAY

    groups = Groups()
    cps = set()
    for rank, out in enumerate(outs):
        for m in range(out.num_microbatches):
            mb = out.microbatch(m)
            got = THDBatch.from_microbatch(mb, dp_cp_rank=rank, groups=groups, partition="zigzag")
            d = te._fields(mb)
            want = THDBatch.from_fields(partition="zigzag", group=LOCAL_REPLAY if d["local_cp_size"] > 1 else None, **d)
            for k in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
                assert torch.equal(getattr(got, k), getattr(want, k)), (rank, m, k)
            assert got.cu_seqlens_padded == want.cu_seqlens_padded and got.layout.runs == want.layout.runs
            assert torch.equal(got.layout.key_index, want.layout.key_index) if mb.local_cp_size > 1 else \
                got.layout.key_index is None
            cps.add(mb.local_cp_size)
            if mb.local_cp_size > 1:
                assert groups.asked[-1] == (rank - mb.cp_rank, mb.local_cp_size)
    assert cps >= {1, 2}, cps


def test_bad_model_and_batch_arguments_name_the_value():
    from dcpack.thd import ModelConfig, THDBatch
    with pytest.raises(ValueError, match="hidden 30 is not a multiple of heads 4"):
        ModelConfig(hidden=30, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match="heads 4 is not a multiple of kv_heads 3"):
        ModelConfig(hidden=32, heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="attention must be"):
        ModelConfig(attention="flash")
    z = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="local_cp_size 2 needs its CP group"):
        THDBatch.from_fields(tokens=z, labels=z, loss_mask=z.astype(np.float32), position_ids=z,
                             padding_mask=z.astype(bool), cu_seqlens=[0, 8], cu_seqlens_padded=[0, 8], max_seqlen=8,
                             local_cp_size=2, cp_rank=0)
