"""onnx_fuse.reference.torch_attention (the GPU kernel tests' float64 reference, computed with torch) against
the NumPy reference it twins, here on the CPU (torch float64 runs there too) on small shapes: every option the
GPU tests use (ragged / left padding, empty sequences, causal, GQA / MQA, softcap, windows, sinks, decode and
multi-token paged queries, NaN propagation from unmasked NaN inputs), the head chunking, and the return types."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse.reference import attention as ref

torch = pytest.importorskip("torch", reason="torch is not installed")
from onnx_fuse.reference import torch_attention as tref  # noqa: E402

FA = [  # B, S, Hq, Hkv, D, causal, seq_lens, softcap, window, layout
    (2, 17, 4, 4, 16, False, None, 0.0, 0, "bshd"),
    (2, 17, 4, 2, 16, True, None, 0.0, 0, "bshd"),
    (3, 23, 6, 3, 8, False, [23, 1, 0], 0.0, 0, "bshd"),
    (3, 23, 6, 1, 8, True, [-23, -5, 9], 0.0, 0, "bshd"),
    (2, 31, 4, 2, 16, True, [31, 12], 5.0, 0, "bshd"),
    (2, 31, 4, 2, 16, False, [-31, -12], 3.0, 0, "bshd"),
    (2, 40, 4, 1, 16, True, None, 0.0, 7, "bshd"),
    (2, 40, 4, 2, 16, True, [40, 19], 4.0, 5, "bshd"),
    (2, 40, 4, 2, 16, True, [-40, -19], 0.0, 64, "bshd"),
    (2, 19, 4, 2, 8, True, [19, 7], 0.0, 0, "bhsd"),
    (2, 19, 4, 2, 8, False, [19, 7], 0.0, 0, "bsh"),
]


def _qkv(rng, case):
    B, S, Hq, Hkv, D, _, _, _, _, layout = case
    q = rng.standard_normal((B, S, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, S, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, S, Hkv, D)).astype(np.float32)
    if layout == "bhsd":
        return q.transpose(0, 2, 1, 3).copy(), k.transpose(0, 2, 1, 3).copy(), v.transpose(0, 2, 1, 3).copy()
    if layout == "bsh":
        return q.reshape(B, S, -1), k.reshape(B, S, -1), v.reshape(B, S, -1)
    return q, k, v


@pytest.mark.parametrize("case", FA, ids=lambda c: "B{}S{}H{}/{}D{}{}-{}-cap{:g}-w{}-{}".format(
    c[0], c[1], c[2], c[3], c[4], "c" if c[5] else "", "pad" if c[6] else "full", c[7], c[8], c[9]))
def test_fused_attention_matches_numpy(case):
    B, S, Hq, Hkv, D, causal, lens, cap, window, layout = case
    q, k, v = _qkv(np.random.default_rng(len(repr(case))), case)
    kw = dict(seq_lens=lens, causal=causal, scale=0.3, softcap=cap, window=window, layout=layout,
              out_dtype=np.float64)
    if layout == "bsh":
        kw.update(num_heads=Hq, num_kv_heads=Hkv)
    want = ref.fused_attention(q, k, v, **kw)
    got = tref.fused_attention(q, k, v, **kw)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    # the tensor form: inputs as torch tensors -> a float64 tensor, the same values
    got_t = tref.fused_attention(*(torch.from_numpy(x) for x in (q, k, v)), **kw)
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.float64
    np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-12, atol=1e-13)


def test_fused_attention_options_change_the_result():
    """The comparison above can fail: dropping causal / the window / the softcap / the padding moves the result."""
    case = (2, 40, 4, 2, 16, True, [40, 19], 4.0, 5, "bshd")
    q, k, v = _qkv(np.random.default_rng(5), case)
    base = dict(seq_lens=[40, 19], causal=True, scale=0.3, softcap=4.0, window=5, out_dtype=np.float64)
    want = ref.fused_attention(q * 6, k, v, **base)
    for change in (dict(window=0), dict(softcap=0.0), dict(seq_lens=None), dict(scale=0.2)):
        got = tref.fused_attention(q * 6, k, v, **{**base, **change})
        assert np.abs(got - want).max() > 1e-3, change
    with pytest.raises(ValueError, match="needs causal"):
        tref.fused_attention(q, k, v, window=4)


def test_fused_attention_nan_inputs_propagate_as_numpy():
    """Unmasked NaN rows (a GPU test that forgot nan_to_num) give NaN where the NumPy reference does."""
    case = (2, 21, 4, 2, 8, True, [21, 9], 0.0, 0, "bshd")
    q, k, v = _qkv(np.random.default_rng(9), case)
    q[1, 12:], k[1, 12:], v[1, 15:] = np.nan, np.nan, np.nan
    want = ref.fused_attention(q, k, v, seq_lens=[21, 9], causal=True, out_dtype=np.float64)
    got = tref.fused_attention(q, k, v, seq_lens=[21, 9], causal=True, out_dtype=np.float64)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13, equal_nan=True)


def test_fused_attention_head_chunks(monkeypatch):
    """Scores taken a few heads at a time (large S on the GPU) give the same result."""
    case = (2, 33, 8, 2, 16, True, [33, 20], 0.0, 0, "bshd")
    q, k, v = _qkv(np.random.default_rng(3), case)
    want = ref.fused_attention(q, k, v, seq_lens=[33, 20], causal=True, out_dtype=np.float64)
    monkeypatch.setattr(tref, "_SCORE_ELEMS", 3 * 33 * 33)  # chunks of 3 heads: 3, 3, 2
    got = tref.fused_attention(q, k, v, seq_lens=[33, 20], causal=True, out_dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def _paged(rng, B, Hkv, D, bs, lens):
    per = [max(1, -(-L // bs)) for L in lens]
    nb = sum(per) + 3
    kp = rng.standard_normal((nb, bs, Hkv, D)).astype(np.float32)
    vp = rng.standard_normal((nb, bs, Hkv, D)).astype(np.float32)
    perm = rng.permutation(nb)
    tables = np.full((B, max(per) + 1), -1, np.int32)
    i = 0
    for b in range(B):
        for j in range(per[b]):
            tables[b, j] = perm[i]
            i += 1
    return kp, vp, tables


PA = [  # B, Sq (0: decode q [B, Hq, D]), Hq, Hkv, D, block, lens, window, sinks
    (3, 0, 8, 8, 16, 4, [1, 4, 13], 0, False),
    (4, 0, 8, 2, 16, 8, [30, 1, 0, 17], 0, False),
    (2, 0, 4, 1, 8, 16, [50, 33], 7, False),
    (2, 0, 4, 2, 8, 4, [21, 9], 0, True),
    (2, 0, 4, 2, 8, 4, [21, 9], 5, True),
    (3, 5, 8, 2, 16, 4, [5, 20, 9], 0, False),
    (2, 6, 4, 1, 8, 8, [30, 6], 4, False),
    (2, 3, 4, 2, 8, 4, [11, 3], 3, True),
]


@pytest.mark.parametrize("case", PA, ids=lambda c: "B{}Sq{}H{}/{}D{}bs{}-w{}{}".format(
    c[0], c[1], c[2], c[3], c[4], c[5], c[7], "-sinks" if c[8] else ""))
def test_paged_attention_matches_numpy(case):
    B, Sq, Hq, Hkv, D, bs, lens, window, with_sinks = case
    rng = np.random.default_rng(len(repr(case)))
    kp, vp, tables = _paged(rng, B, Hkv, D, bs, lens)
    q = rng.standard_normal((B, Hq, D) if Sq == 0 else (B, Sq, Hq, D)).astype(np.float32)
    sinks = None
    if with_sinks:
        sinks = rng.standard_normal(Hq) * 2
        sinks[0] = -np.inf  # -inf: no sink
    kw = dict(scale=0.4, window=window, sinks=sinks, out_dtype=np.float64)
    want = ref.paged_attention(q, kp, vp, tables, np.array(lens), **kw)
    got = tref.paged_attention(q, kp, vp, tables, np.array(lens), **kw)
    assert isinstance(got, np.ndarray) and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    got_t = tref.paged_attention(torch.from_numpy(q), torch.from_numpy(kp), torch.from_numpy(vp),
                                 torch.from_numpy(tables), torch.tensor(lens, dtype=torch.int32),
                                 scale=0.4, window=window, sinks=None if sinks is None else torch.from_numpy(sinks))
    assert isinstance(got_t, torch.Tensor) and got_t.dtype == torch.float64
    np.testing.assert_allclose(got_t.numpy(), want, rtol=1e-12, atol=1e-13)
    for b, L in enumerate(lens):
        if L == 0:
            assert not got[b].any()


def test_paged_attention_options_change_the_result():
    kp, vp, tables = _paged(np.random.default_rng(1), 2, 2, 8, 4, [21, 9])
    q = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32) * 3
    want = ref.paged_attention(q, kp, vp, tables, np.array([21, 9]), window=5, sinks=np.ones(4), out_dtype=np.float64)
    for change in (dict(window=0), dict(sinks=None), dict(scale=0.5)):
        got = tref.paged_attention(q, kp, vp, tables, np.array([21, 9]),
                                   **{**dict(window=5, sinks=np.ones(4)), **change}, out_dtype=np.float64)
        assert np.abs(got - want).max() > 1e-3, change
    with pytest.raises(ValueError, match="exceeds the block table"):
        tref.paged_attention(q, kp, vp, tables, np.array([21, 99]))
