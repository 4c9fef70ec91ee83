"""The fast input and output paths: PackedSamples, the column-built sample table, outputs made in bulk,
dcpack.megatron's batched sample conversion and seq_idx, each against the per-sample path it replaces."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import dcpack
import numpy as np
import pytest
from conftest import dp_slice, make_batch
from dcpack import _step_output as _step
from dcpack._api import _view

FIELDS = ("tokens", "labels", "loss_mask", "position_ids")
ARRAYS = ("tokens", "labels", "loss_mask", "position_ids", "padding_mask", "cu_seqlens", "cu_seqlens_padded")


def _packed(batch, ids, prepacked_every=0):
    """PackedSamples of the given ids; with prepacked_every=k, every k-th sample is pre-packed (cu of 2 cuts)."""
    ids = list(ids)
    counts = [batch["padded"][i] for i in ids]
    cat = {f: np.concatenate([batch[f][i] for i in ids]) if ids else np.empty(0, dtype=batch[f][0].dtype)
           for f in FIELDS}
    kw = dict(num_tokens=counts, original_length=[batch["original"][i] for i in ids], **cat)
    if prepacked_every:
        ncu, cus = [], []
        for k, i in enumerate(ids):
            if k % prepacked_every == 0:
                p = batch["padded"][i]
                cus.append(np.array([0, p // 2 // 4 * 4, p], dtype=np.int32))
                ncu.append(3)
                kw["original_length"][k] = p
            else:
                ncu.append(-1)
        kw["cu_seqlens"] = np.concatenate(cus) if cus else np.empty(0, dtype=np.int32)
        kw["num_cu_seqlens"] = ncu
    return dcpack.PackedSamples(**kw)


def _listed(batch, ids, prepacked_every=0):
    out = []
    for k, i in enumerate(ids):
        f = {name: batch[name][i] for name in FIELDS}
        if prepacked_every and k % prepacked_every == 0:
            p = batch["padded"][i]
            out.append(dcpack.Sample(cu_seqlens=np.array([0, p // 2 // 4 * 4, p], dtype=np.int32), **f))
        else:
            out.append(dcpack.Sample(original_length=batch["original"][i], **f))
    return out


def _step_all(config, make):
    cluster = dcpack.InprocCluster(config, timeout_ms=30000)
    cp = config.context_parallel_size

    def rank(w):
        args = cluster.args(w)
        return dcpack.Stepper(config).step(make(w // cp), args).copy()

    results = cluster.run(rank)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def _assert_same(a, b):
    assert (a.num_microbatches, a.num_sequences, a.seqlen_sum, a.seqlen_squared_sum) == \
        (b.num_microbatches, b.num_sequences, b.seqlen_sum, b.seqlen_squared_sum)
    for ma, mb in zip(a.microbatches, b.microbatches):
        for name in ARRAYS:
            x, y = getattr(ma, name), getattr(mb, name)
            assert (x is None) == (y is None), name
            if x is not None:
                assert x.dtype == y.dtype and np.array_equal(x, y), name
        for name in ("num_tokens", "num_sequences", "max_seqlen", "local_cp_size", "cp_rank"):
            assert getattr(ma, name) == getattr(mb, name)


@pytest.mark.parametrize("dp,cp,prepacked", [(2, 1, 0), (2, 2, 0), (4, 1, 3), (1, 4, 2)])
def test_packed_samples_step_like_sample_lists(dp, cp, prepacked):
    rng = np.random.default_rng(dp * 10 + cp)
    lengths = rng.integers(40, 900, size=48)
    batch = make_batch(lengths, 2 * cp * 4, seed=7)
    config = dcpack.Config(scheduler="dynamic_cp" if cp == 1 else "dp_balanced", data_parallel_size=dp,
                           context_parallel_size=cp, max_sequences=128, max_seqlen_per_rank=4096,
                           max_tokens_per_rank=1 << 16, pad_alignment=8)
    n = len(lengths)
    listed = _step_all(config, lambda p: _listed(batch, dp_slice(n, dp, p), prepacked))
    packed = _step_all(config, lambda p: _packed(batch, dp_slice(n, dp, p), prepacked))
    for a, b in zip(listed, packed):
        _assert_same(a, b)
    assert sum(mb.num_sequences for r in listed[::cp] for mb in r.microbatches) > 0


def test_packed_samples_from_cpu_tensors():
    torch = pytest.importorskip("torch")
    batch = make_batch([64, 96, 32, 128], 2)
    config = dcpack.Config(data_parallel_size=1, max_sequences=8, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 12)
    p = _packed(batch, range(4))
    t = dcpack.PackedSamples(num_tokens=torch.tensor(p.num_tokens), original_length=torch.tensor(p.original_length),
                             **{f: torch.from_numpy(getattr(p, f)) for f in FIELDS})
    a = _step_all(config, lambda _: p)[0]
    b = _step_all(config, lambda _: t)[0]
    _assert_same(a, b)


def _one_rank_error(samples, match, error=dcpack.InvalidArgumentError):
    config = dcpack.Config(data_parallel_size=1, max_sequences=8, max_seqlen_per_rank=1024,
                           max_tokens_per_rank=1 << 12)
    cluster = dcpack.InprocCluster(config, timeout_ms=30000)
    stepper = dcpack.Stepper(config)
    with pytest.raises(error, match=match):
        stepper.step(samples, cluster.args(0))
    assert stepper.calls == 1  # refused steps count, as for lists of samples


def test_packed_samples_refused_with_the_value():
    b = make_batch([64, 96], 2)
    p = _packed(b, range(2))
    short = dcpack.PackedSamples(num_tokens=[64, 95], **{f: getattr(p, f) for f in FIELDS})
    _one_rank_error(short, "tokens has 160 elements, num_tokens adds up to 159")
    bad_original = dcpack.PackedSamples(num_tokens=[64, 96], original_length=[64, 97], **{f: getattr(p, f) for f in FIELDS})
    _one_rank_error(bad_original, "sample 1: original_length 97 outside")
    negative = dcpack.PackedSamples(num_tokens=[-1, 161], **{f: getattr(p, f) for f in FIELDS})
    _one_rank_error(negative, "num_tokens holds -1")
    floats = dcpack.PackedSamples(num_tokens=[64.0, 96.0], **{f: getattr(p, f) for f in FIELDS})
    _one_rank_error(floats, "num_tokens must be a one-dimensional integer array")
    wrong_dtype = dcpack.PackedSamples(num_tokens=[64, 96], **{**{f: getattr(p, f) for f in FIELDS},
                                                             "tokens": p.tokens.astype(np.int32)})
    _one_rank_error(wrong_dtype, "tokens must have dtype int64")
    cu = dcpack.PackedSamples(num_tokens=[64, 96], cu_seqlens=np.array([0, 64], dtype=np.int32),
                              num_cu_seqlens=[2, 1], **{f: getattr(p, f) for f in FIELDS})
    _one_rank_error(cu, "cu_seqlens has 2 entries, num_cu_seqlens adds up to 3")


# -- outputs in bulk --------------------------------------------------------------------------------------


def test_bulk_arrays_are_the_single_views():
    """_bulk_arrays slices typed views of one block; arrays outside it, misaligned, or absent are handled."""
    block = np.arange(4096, dtype=np.uint8)
    base = block.__array_interface__["data"][0]
    other = np.arange(16, dtype=np.int64)
    cols = len(_step._MB)
    rows = []
    for k in range(5):
        row = np.zeros(cols, dtype=np.int64)
        row[_step._MB["tokens"]] = base + 64 * k * 8 if k != 3 else other.__array_interface__["data"][0]
        row[_step._MB["num_tokens"]] = k + 1
        row[_step._MB["padding_mask"]] = base + 3000 + k  # bool: any alignment
        row[_step._MB["cu_seqlens"]] = 0 if k == 2 else base + 2048 + 16 * k
        row[_step._MB["num_cu_seqlens"]] = 2
        rows.append(row)
    table = np.stack(rows)
    typed = {dt: block[:4096 // np.dtype(dt).itemsize * np.dtype(dt).itemsize].view(dt)
             for dt in ("int64", "float32", "int32", "bool")}
    singles = []

    def single(address, count, dt):
        singles.append(address)
        return _view(address, count, dt, None)

    got = _step._bulk_arrays(table, base, 4096, lambda dt, s, c: typed[dt][s:s + c], single)
    for k, row in enumerate(got):
        for name, count, dt in _step._OUT_ARRAYS:
            addr, n = int(table[k, _step._MB[name]]), int(table[k, _step._MB[count]])
            expect = None if addr == 0 else _view(addr, n, dt, None)
            if expect is None:
                assert row[name] is None
            else:
                assert row[name].dtype == np.dtype(dt) and np.array_equal(row[name], expect), (k, name)
    assert singles == [other.__array_interface__["data"][0]]


def test_gathered_host_copies():
    torch = pytest.importorskip("torch")
    dt = pytest.importorskip("dcpack.torch")
    block = torch.arange(1000, dtype=torch.int32)
    base = block.data_ptr()
    outside = np.arange(50, 60, dtype=np.int32)
    cols = len(_step._MB)
    table = np.zeros((4, cols), dtype=np.int64)
    spec = [(10, 5, 300, 5), (0, 0, 400, 3), (700, 2, 0, 2), (None, 3, 900, 3)]
    for k, (a, n, b, m) in enumerate(spec):
        table[k, _step._MB["cu_seqlens_host"]] = (outside.__array_interface__["data"][0] if a is None
                                                  else (base + 4 * a if a else 0))
        table[k, _step._MB["cu_seqlens_padded_host"]] = base + 4 * b if b else 0
        table[k, _step._MB["num_cu_seqlens"]] = n if n else m
    rows = dt._gathered_copies(table, base, block, None)
    for k, (a, n, b, m) in enumerate(spec):
        count = n if n else m
        h, hp = rows[k]["cu_seqlens_host"], rows[k]["cu_seqlens_padded_host"]
        if a == 0:
            assert h is None
        else:
            want = outside[:count] if a is None else np.arange(a, a + count)
            assert h.dtype == torch.int32 and h.tolist() == want.tolist()
            assert h.data_ptr() != base + 4 * (a or 0)  # a copy, not a view of the block
        if b == 0:
            assert hp is None
        else:
            assert hp.tolist() == list(range(b, b + count))
    block.zero_()  # the copies do not change with the block
    assert rows[0]["cu_seqlens_host"].tolist() == [10, 11, 12, 13, 14]


# -- dcpack.megatron -----------------------------------------------------------------------------------


def _items(torch, lengths, shape2d=True, prepacked=()):
    items = []
    for i, n in enumerate(lengths):
        def f(dtype, k):
            t = (torch.arange(n, dtype=dtype) + 1000 * i + k)
            return t.view(1, -1) if shape2d else t
        item = {"tokens": f(torch.int64, 0), "labels": f(torch.int64, 1), "loss_mask": f(torch.float32, 2),
                "position_ids": f(torch.int64, 3)}
        if i in prepacked:
            item["cu_seqlens"] = torch.tensor([[0, n // 2, n]], dtype=torch.int32)
        else:
            item["padded_seq_len"] = torch.tensor([n])
            item["original_seq_len"] = torch.tensor([max(1, n - 3)])
        items.append(item)
    return items


def _samples_one_by_one(items):
    """dcpack.megatron's former conversion, one sample at a time (the reference of the batched one)."""
    out = []
    for item in items:
        f = {k: item[k].reshape(-1).numpy() for k in FIELDS}
        if "padded_seq_len" in item:
            out.append(dcpack.Sample(original_length=int(item["original_seq_len"].reshape(-1)[0].item()), **f))
        else:
            out.append(dcpack.Sample(cu_seqlens=item["cu_seqlens"].reshape(-1).numpy().astype(np.int32), **f))
    return out


@pytest.mark.parametrize("shape2d,prepacked", [(True, ()), (False, ()), (True, (1, 4))])
def test_samples_from_megatron_batched(shape2d, prepacked):
    torch = pytest.importorskip("torch")
    from dcpack.megatron import _samples_from_megatron

    lengths = [64, 96, 32, 128, 40, 72]
    items = _items(torch, lengths, shape2d, prepacked)
    packed = _samples_from_megatron(items, torch.device("cpu"))
    assert isinstance(packed, dcpack.PackedSamples) and list(packed.num_tokens) == lengths
    config = dcpack.Config(data_parallel_size=1, max_sequences=16, max_seqlen_per_rank=2048,
                           max_tokens_per_rank=1 << 13)
    a = _step_all(config, lambda _: _samples_one_by_one(items))[0]
    b = _step_all(config, lambda _: packed)[0]
    _assert_same(a, b)


def test_samples_from_megatron_refuses_mismatches():
    torch = pytest.importorskip("torch")
    from dcpack.megatron import _samples_from_megatron

    items = _items(torch, [64, 96])
    items[1]["labels"] = items[1]["labels"][:, :95]
    with pytest.raises(dcpack.InvalidArgumentError, match="sample 1: fields of 96 and 95 tokens"):
        _samples_from_megatron(items, torch.device("cpu"))
    items = _items(torch, [64, 96])
    items[0]["padded_seq_len"] = torch.tensor([63])
    with pytest.raises(dcpack.InvalidArgumentError, match="sample 0 has 64 tokens but padded_seq_len 63"):
        _samples_from_megatron(items, torch.device("cpu"))
    items = _items(torch, [64, 96])
    del items[1]["loss_mask"]
    with pytest.raises(dcpack.InvalidArgumentError, match="sample 1 carries other fields"):
        _samples_from_megatron(items, torch.device("cpu"))


def _megatron_packed_seq_params():
    root = os.environ.get("DCPACK_MEGATRON_DIR")
    if not root:
        pytest.skip("DCPACK_MEGATRON_DIR is not set: seq_idx not compared with Megatron-LM's PackedSeqParams")
    path = Path(root) / "megatron/core/packed_seq_params.py"
    spec = importlib.util.spec_from_file_location("_dcpack_test_packed_seq_params", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.PackedSeqParams


class _Mb:
    def __init__(self, torch, cu, total):
        self._tensors = {"cu_seqlens_padded_host": torch.tensor(cu, dtype=torch.int32)}
        self.num_tokens = total


def test_seq_idx_equals_megatron_field_by_field():
    torch = pytest.importorskip("torch")
    PackedSeqParams = _megatron_packed_seq_params()
    from dcpack.megatron import _seq_idx_all

    cases = [([0, 5, 7, 11], 16), ([0, 5, 7, 16], 16), ([0, 64, 128, 256], 128),  # CP-sliced: cu past total
             ([0, 8], 8), ([0, 0, 4, 4, 12], 20), ([0, 100, 101], 64)]
    mbs = [_Mb(torch, cu, t) for cu, t in cases]
    ours = _seq_idx_all(mbs, torch.device("cpu"))
    for (cu, t), got in zip(cases, ours):
        ref = PackedSeqParams(qkv_format="thd", cu_seqlens_q_padded=torch.tensor(cu, dtype=torch.int32),
                              total_tokens=t).seq_idx
        assert got.dtype == ref.dtype and got.shape == ref.shape and got.is_contiguous() and torch.equal(got, ref)
        # the same object when built as DataPath.get_batch builds it
        p = PackedSeqParams(qkv_format="thd", cu_seqlens_q_padded=torch.tensor(cu, dtype=torch.int32))
        p.total_tokens, p.seq_idx = t, got
        q = PackedSeqParams(qkv_format="thd", cu_seqlens_q_padded=torch.tensor(cu, dtype=torch.int32),
                            total_tokens=t)
        for name in p.__dataclass_fields__:
            a, b = getattr(p, name), getattr(q, name)
            assert (torch.equal(a, b) and a.dtype == b.dtype) if isinstance(a, torch.Tensor) else a == b, name
