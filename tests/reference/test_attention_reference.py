"""The NumPy attention references (onnx_fuse.reference) against independent computations."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse import reference as ref
from onnx_fuse.reference.attention import dequantize_e4m3, quantize_e4m3



def _rng(seed):
    return np.random.default_rng(seed)


def _oracle(q, k, v, *, causal, scale, lens=None, window=0):
    """Independent float64 attention on [B,S,H,D] arrays: online softmax, one key at a time.

    Shares nothing with the reference but the definition: no score matrix, no boolean mask, no
    K/V repeat for GQA (query head h reads kv head h // group), a running max and denominator as
    FlashAttention streams them. Rows of padded queries (at or past ``lens[b]``) are zero.
    ``window`` W > 0: query i also skips keys j <= i - W (checked here key by key)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    B, S, Hq, D = q.shape
    group = Hq // k.shape[2]
    sc = (1.0 / np.sqrt(D)) if not scale else float(scale)
    out = np.zeros((B, S, Hq, D))
    rows = np.arange(S)
    for b in range(B):
        valid = S if lens is None else int(lens[b])
        for h in range(Hq):
            kv = h // group
            run_max = np.full(S, -np.inf)
            denom = np.zeros(S)
            acc = np.zeros((S, D))
            for j in range(valid):
                live = rows >= j if causal else np.ones(S, bool)
                if window:
                    live = live & (j > rows - window)
                score = np.where(live, q[b, :, h, :] @ k[b, j, kv, :] * sc, -np.inf)
                new_max = np.maximum(run_max, score)
                keep = np.where(np.isfinite(run_max), np.exp(run_max - np.where(np.isfinite(new_max), new_max, 0)), 0.0)
                w = np.where(live, np.exp(score - np.where(np.isfinite(new_max), new_max, 0)), 0.0)
                denom = denom * keep + w
                acc = acc * keep[:, None] + w[:, None] * v[b, j, kv, :]
                run_max = new_max
            ok = denom > 0
            out[b, ok, h, :] = acc[ok] / denom[ok, None]
            out[b, valid:, h, :] = 0.0
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (6, 1)])
def test_fused_matches_the_streaming_oracle(causal, heads):
    Hq, Hkv = heads
    r = _rng(Hq * 10 + causal)
    q = r.standard_normal((2, 37, Hq, 16))
    k = r.standard_normal((2, 37, Hkv, 16))
    v = r.standard_normal((2, 37, Hkv, 16))
    got = ref.fused_attention(q, k, v, causal=causal, scale=0.3)
    np.testing.assert_allclose(got, _oracle(q, k, v, causal=causal, scale=0.3), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_padding_zeroes_rows_and_ignores_padded_values(causal):
    r = _rng(1)
    lens = [37, 20, 1, 0]
    q = r.standard_normal((4, 37, 4, 8))
    k = r.standard_normal((4, 37, 2, 8))
    v = r.standard_normal((4, 37, 2, 8))
    expect = _oracle(q, k, v, causal=causal, scale=None, lens=[max(L, 1) for L in lens])
    expect[3] = 0.0
    for b, L in enumerate(lens):  # garbage in the padding must not leak
        k[b, L:] = 1e6
        v[b, L:] = -1e6
    got = ref.fused_attention(q, k, v, seq_lens=np.array(lens, np.int32), causal=causal)
    np.testing.assert_allclose(got, expect, rtol=1e-10, atol=1e-12)
    assert not got[3].any() and not got[1, 20:].any()


def test_fused_layouts_and_onnx_op_agree():
    r = _rng(2)
    B, S, Hq, Hkv, D = 2, 9, 4, 2, 8
    q = r.standard_normal((B, S, Hq, D)).astype(np.float32)
    k = r.standard_normal((B, S, Hkv, D)).astype(np.float32)
    v = r.standard_normal((B, S, Hkv, D)).astype(np.float32)
    base = ref.fused_attention(q, k, v, causal=True)
    assert base.dtype == np.float32
    bhsd = ref.fused_attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3),
                               causal=True, layout="bhsd")
    np.testing.assert_allclose(bhsd.transpose(0, 2, 1, 3), base, rtol=1e-6)
    op = ref.fused_attention_op(q.reshape(B, S, -1), k.reshape(B, S, -1), v.reshape(B, S, -1),
                                num_heads=Hq, kv_num_heads=Hkv, causal=1, scale=0.0)
    np.testing.assert_allclose(op.reshape(B, S, Hq, D), base, rtol=1e-6)
    # scale 0.0 and None both mean 1/sqrt(D)
    np.testing.assert_allclose(ref.fused_attention(q, k, v, scale=0.0), ref.fused_attention(q, k, v), rtol=0)
    assert ref.resolve_scale(0.0, 64) == ref.resolve_scale(None, 64) == 0.125


@pytest.mark.parametrize("bad", [
    dict(k_shape=(1, 5, 3, 8)),            # 4 % 3 != 0
    dict(k_shape=(1, 6, 2, 8)),            # S mismatch
    dict(layout="nope"),
])
def test_fused_rejects_bad_shapes(bad):
    q = np.zeros((1, 5, 4, 8))
    k = np.zeros(bad.get("k_shape", (1, 5, 2, 8)))
    with pytest.raises(ValueError):
        ref.fused_attention(q, k, k, layout=bad.get("layout", "bshd"))


def _paged_setup(r, B, Hkv, D, bs, lens, nb_extra=2):
    blocks = [max(1, -(-L // bs)) for L in lens]
    nb = sum(blocks) + nb_extra
    perm = r.permutation(nb)
    tables = np.full((B, max(blocks) + 1), -1, np.int32)
    kp = np.full((nb, bs, Hkv, D), np.nan)
    vp = np.full((nb, bs, Hkv, D), np.nan)
    contig_k = [r.standard_normal((L, Hkv, D)) for L in lens]
    contig_v = [r.standard_normal((L, Hkv, D)) for L in lens]
    i = 0
    for b, L in enumerate(lens):
        for j in range(blocks[b]):
            tables[b, j] = perm[i]
            i += 1
        for p in range(L):
            kp[tables[b, p // bs], p % bs] = contig_k[b][p]
            vp[tables[b, p // bs], p % bs] = contig_v[b][p]
    return kp, vp, tables, contig_k, contig_v


@pytest.mark.parametrize("bs", [1, 4, 16])
def test_paged_decode_equals_dense_attention(bs):
    r = _rng(bs)
    B, Hq, Hkv, D, lens = 3, 8, 2, 8, [1, 17, 40]
    kp, vp, tables, ck, cv = _paged_setup(r, B, Hkv, D, bs, lens)
    q = r.standard_normal((B, Hq, D))
    got = ref.paged_attention(q, kp, vp, tables, np.array(lens), scale=0.5)
    assert np.isfinite(got).all()  # NaN slots in the pool are never read
    for b, L in enumerate(lens):
        dense = ref.fused_attention(q[b][None, None], ck[b][None], cv[b][None], scale=0.5) if L == 1 else None
        kk = np.repeat(ck[b], Hq // Hkv, axis=1)
        vv = np.repeat(cv[b], Hq // Hkv, axis=1)
        s = np.einsum("hd,lhd->hl", q[b], kk) * 0.5
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(got[b], np.einsum("hl,lhd->hd", p, vv), rtol=1e-10, atol=1e-12)
        if dense is not None:
            np.testing.assert_allclose(got[b], dense[0, 0], rtol=1e-10)


def test_paged_chunked_prefill_is_causal_over_cache():
    """Sq new tokens at the end of the cache = causal attention over the whole sequence."""
    r = _rng(5)
    Hq, Hkv, D, bs, L, Sq = 4, 2, 8, 4, 11, 5
    kp, vp, tables, ck, cv = _paged_setup(r, 1, Hkv, D, bs, [L])
    qfull = r.standard_normal((1, L, Hq, D))
    full = ref.fused_attention(qfull, ck[0][None], cv[0][None], causal=True)
    got = ref.paged_attention(qfull[:, L - Sq:], kp, vp, tables, np.array([L]))
    np.testing.assert_allclose(got, full[:, L - Sq:], rtol=1e-10, atol=1e-12)


def test_append_kv_and_paged_op_roundtrip():
    r = _rng(6)
    B, Hq, Hkv, D, bs = 2, 4, 2, 8, 4
    lens_after = np.array([6, 9], np.int32)
    kp, vp, tables, ck, cv = _paged_setup(r, B, Hkv, D, bs, [5, 8], nb_extra=2)
    tables[1, 2] = np.setdiff1d(np.arange(kp.shape[0]), tables[tables >= 0])[0]
    kn = r.standard_normal((B, 1, Hkv * D))
    vn = r.standard_normal((B, 1, Hkv * D))
    q = r.standard_normal((B, 1, Hq * D))
    out, kc, vc = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens_after, num_heads=Hq, kv_num_heads=Hkv)
    assert np.isnan(kp[tables[0, 1], 1]).all()  # inputs untouched (functional in ORT)
    for b in range(B):
        p = int(lens_after[b]) - 1
        np.testing.assert_array_equal(kc[tables[b, p // bs], p % bs], kn[b, 0].reshape(Hkv, D))
        np.testing.assert_array_equal(vc[tables[b, p // bs], p % bs], vn[b, 0].reshape(Hkv, D))
        # Decode over the updated cache = dense attention over old tokens + the new one.
        full_k = np.concatenate([ck[b][: p], kn[b, 0].reshape(1, Hkv, D)])
        full_v = np.concatenate([cv[b][: p], vn[b, 0].reshape(1, Hkv, D)])
        L = p + 1
        dense = ref.fused_attention(np.repeat(q[b].reshape(1, 1, Hq, D), L, axis=1), full_k[None], full_v[None])
        np.testing.assert_allclose(out[b, 0], dense[0, -1].reshape(-1), rtol=1e-10, atol=1e-12)
    # In place: same result, pools modified.
    k2, v2 = ref.append_kv(kp, vp, kn.reshape(B, 1, Hkv, D), vn.reshape(B, 1, Hkv, D), tables, lens_after, inplace=True)
    assert k2 is kp and np.array_equal(kp, kc, equal_nan=True)


def test_paged_zero_length_and_overflow():
    r = _rng(7)
    kp, vp, tables, _, _ = _paged_setup(r, 2, 1, 8, 4, [0, 3])
    out = ref.paged_attention(r.standard_normal((2, 2, 8)), kp, vp, tables, np.array([0, 3]))
    assert not out[0].any() and np.isfinite(out).all()
    with pytest.raises(ValueError, match="exceeds"):
        ref.paged_attention(np.zeros((2, 2, 8)), kp, vp, tables, np.array([0, 999]))


def _contiguous_chunk_attention(q, k, v, scale):
    """Plain attention of a chunk of n queries [n, Hq, D] that sit at the END of a contiguous
    cache k/v [L, Hkv, D] (bottom-right causal: query i sees keys 0 .. L - n + i)."""
    n, Hq, D = q.shape
    L, Hkv, _ = k.shape
    out = np.zeros((n, Hq, D))
    mask = np.arange(L)[None, :] <= (L - n + np.arange(n))[:, None]   # [n, L]
    for h in range(Hq):
        kv = h * Hkv // Hq
        s = (q[:, h] @ k[:, kv].T) * scale
        s = np.where(mask, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v[:, kv]
    return out


@pytest.mark.parametrize("Sq, bs", [(1, 4), (3, 4), (5, 1), (8, 16), (13, 8)])
def test_paged_attention_op_chunk_equals_contiguous_bottom_right_causal(Sq, bs):
    """The ONNX-level op with Sq new tokens per sequence (ragged prefixes, one of them empty):
    output = attention over Concat(prefix, new) with a bottom-right causal mask; the pools hold
    the new tokens at seq_lens[b] - Sq + i afterwards and nothing else changed."""
    r = _rng(100 + Sq)
    Hq, Hkv, D, prefix = 6, 2, 8, [0, 5, 23]
    B = len(prefix)
    lens = np.array([p + Sq for p in prefix], np.int32)
    kp, vp, tables, ck, cv = _paged_setup(r, B, Hkv, D, bs, list(lens))
    for b, p in enumerate(prefix):   # the new tokens' slots start empty (NaN)
        for pos in range(p, int(lens[b])):
            kp[tables[b, pos // bs], pos % bs] = np.nan
            vp[tables[b, pos // bs], pos % bs] = np.nan
    q = r.standard_normal((B, Sq, Hq * D))
    kn = r.standard_normal((B, Sq, Hkv * D))
    vn = r.standard_normal((B, Sq, Hkv * D))
    out, kc, vc = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, num_heads=Hq,
                                         kv_num_heads=Hkv, scale=0.3)
    assert out.shape == (B, Sq, Hq * D) and np.isfinite(out).all()
    for b, p in enumerate(prefix):
        k_full = np.concatenate([ck[b][:p], kn[b].reshape(Sq, Hkv, D)])
        v_full = np.concatenate([cv[b][:p], vn[b].reshape(Sq, Hkv, D)])
        want = _contiguous_chunk_attention(q[b].reshape(Sq, Hq, D), k_full, v_full, 0.3)
        np.testing.assert_allclose(out[b], want.reshape(Sq, Hq * D), rtol=1e-10, atol=1e-12)
        for i in range(Sq):
            pos = p + i
            np.testing.assert_array_equal(kc[tables[b, pos // bs], pos % bs], k_full[pos])
            np.testing.assert_array_equal(vc[tables[b, pos // bs], pos % bs], v_full[pos])
    # Everything else in the pools is as it was (NaN compares equal to NaN here).
    written = np.zeros(kp.shape[:2], bool)
    for b, p in enumerate(prefix):
        for pos in range(p, int(lens[b])):
            written[tables[b, pos // bs], pos % bs] = True
    np.testing.assert_array_equal(kc[~written], kp[~written])
    np.testing.assert_array_equal(vc[~written], vp[~written])


def test_paged_attention_op_chunk_longer_than_cache_drops_the_first_tokens():
    """seq_lens[b] < Sq (outside the serving contract, defined to match the kernels): new
    tokens at positions < 0 are not written and their rows are zero; the others see 0 .. p."""
    r = _rng(9)
    Hq = Hkv = 2
    D, bs, Sq = 4, 4, 5
    kp, vp, tables, _, _ = _paged_setup(r, 1, Hkv, D, bs, [3])
    q = r.standard_normal((1, Sq, Hq * D))
    kn, vn = r.standard_normal((1, Sq, Hkv * D)), r.standard_normal((1, Sq, Hkv * D))
    out, kc, _ = ref.paged_attention_op(q, kn, vn, kp, vp, tables, np.array([3], np.int32),
                                        num_heads=Hq)
    assert not out[0, :2].any()
    np.testing.assert_array_equal(kc[tables[0, 0], :3], kn[0, 2:].reshape(3, Hkv, D))
    want = _contiguous_chunk_attention(q[0, 2:].reshape(3, Hq, D), kn[0, 2:].reshape(3, Hkv, D),
                                       vn[0, 2:].reshape(3, Hkv, D), 1 / np.sqrt(D))
    np.testing.assert_allclose(out[0, 2:], want.reshape(3, Hq * D), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ sliding window (``window``)


@pytest.mark.parametrize("W", [1, 3, 8, 36, 37, 100])
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)])
def test_fused_window_matches_the_streaming_oracle(W, heads):
    """Query i sees keys i - W < j <= i; with padding the padded keys stay hidden too."""
    Hq, Hkv = heads
    r = _rng(300 + W)
    q = r.standard_normal((3, 37, Hq, 16))
    k = r.standard_normal((3, 37, Hkv, 16))
    v = r.standard_normal((3, 37, Hkv, 16))
    lens = np.array([37, 20, 5], np.int32)
    want = _oracle(q, k, v, causal=True, scale=0.3, lens=lens, window=W)
    for b, L in enumerate(lens):   # garbage in the padding must not leak
        k[b, L:], v[b, L:] = 1e6, -1e6
    got = ref.fused_attention(q, k, v, seq_lens=lens, causal=True, scale=0.3, window=W)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    causal = ref.fused_attention(q, k, v, seq_lens=lens, causal=True, scale=0.3)
    if W >= 37:   # a window at least the context is plain causal attention
        np.testing.assert_array_equal(got, causal)
    else:         # the window bites from row W on
        assert np.allclose(got[0, :W], causal[0, :W], rtol=1e-12, atol=1e-14)
        assert np.abs(got[0, W:] - causal[0, W:]).max() > 1e-3


def test_fused_window_one_is_each_token_alone_and_op_passes_it():
    r = _rng(310)
    B, S, Hq, Hkv, D = 2, 6, 4, 2, 8
    q = r.standard_normal((B, S, Hq * D))
    k = r.standard_normal((B, S, Hkv * D))
    v = r.standard_normal((B, S, Hkv * D))
    got = ref.fused_attention_op(q, k, v, num_heads=Hq, kv_num_heads=Hkv, causal=1, window=1)
    # one visible key: the output is that key's value row (its kv head, repeated per group)
    want = np.repeat(v.reshape(B, S, Hkv, D), Hq // Hkv, axis=2).reshape(B, S, Hq * D)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("bad, match", [
    (dict(window=2, causal=False), "needs causal"),
    (dict(window=-1, causal=True), ">= 0"),
    (dict(window=2.5, causal=True), "integer"),
])
def test_fused_window_refuses_bad_values(bad, match):
    q = np.zeros((1, 5, 2, 8))
    with pytest.raises(ValueError, match=match):
        ref.fused_attention(q, q, q, **bad)


@pytest.mark.parametrize("W", [1, 4, 9, 40, 41])
@pytest.mark.parametrize("bs", [1, 4])
def test_paged_decode_window_sees_the_last_W_tokens(W, bs):
    """Decode at position p = L - 1: attention over cache positions max(0, L - W) .. L - 1."""
    r = _rng(320 + W)
    B, Hq, Hkv, D, lens = 3, 8, 2, 8, [1, 17, 41]
    kp, vp, tables, ck, cv = _paged_setup(r, B, Hkv, D, bs, lens)
    q = r.standard_normal((B, Hq, D))
    got = ref.paged_attention(q, kp, vp, tables, np.array(lens), scale=0.5, window=W)
    for b, L in enumerate(lens):
        lo = max(0, L - W)
        kk = np.repeat(ck[b][lo:L], Hq // Hkv, axis=1)
        vv = np.repeat(cv[b][lo:L], Hq // Hkv, axis=1)
        s = np.einsum("hd,lhd->hl", q[b], kk) * 0.5
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(got[b], np.einsum("hl,lhd->hd", p, vv), rtol=1e-10, atol=1e-12)
    full = ref.paged_attention(q, kp, vp, tables, np.array(lens), scale=0.5)
    if W < 17:
        assert np.abs(got[1:] - full[1:]).max() > 1e-3
    if W >= 41:
        np.testing.assert_array_equal(got, full)


@pytest.mark.parametrize("W", [1, 3, 6, 11])
@pytest.mark.parametrize("Sq", [1, 5])
def test_paged_chunked_prefill_window_equals_dense_windowed_prefill(W, Sq):
    """Sq new tokens at the end of the cache with a window = rows L - Sq .. L - 1 of the
    windowed causal prefill over the whole sequence (positions are absolute, not chunk-local)."""
    r = _rng(330 + W + Sq)
    Hq, Hkv, D, bs, L = 4, 2, 8, 4, 11
    kp, vp, tables, ck, cv = _paged_setup(r, 1, Hkv, D, bs, [L])
    qfull = r.standard_normal((1, L, Hq, D))
    full = ref.fused_attention(qfull, ck[0][None], cv[0][None], causal=True, window=W)
    got = ref.paged_attention(qfull[:, L - Sq:], kp, vp, tables, np.array([L]), window=W)
    np.testing.assert_allclose(got, full[:, L - Sq:], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fp8", [False, True])
def test_paged_attention_op_window_appends_then_attends_the_window(fp8):
    """The ONNX-level op (16-bit and e4m3 pools): the caches are written exactly as without a
    window; the output is the windowed attention over the updated cache."""
    r = _rng(340)
    B, Hq, Hkv, D, bs, Sq, W = 2, 4, 2, 8, 4, 3, 4
    prefix = [6, 9]
    lens = np.array([p + Sq for p in prefix], np.int32)
    kp, vp, tables, _, _ = _paged_setup(r, B, Hkv, D, bs, list(lens))
    kp, vp = np.nan_to_num(kp), np.nan_to_num(vp)
    extra = ()
    if fp8:
        scales = np.array([0.02, 0.01], np.float32)
        kp, vp = quantize_e4m3(kp, scales), quantize_e4m3(vp, scales)
        extra = (scales, scales)
    q = r.standard_normal((B, Sq, Hq * D))
    kn = r.standard_normal((B, Sq, Hkv * D))
    vn = r.standard_normal((B, Sq, Hkv * D))
    out, kc, vc = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, *extra, num_heads=Hq,
                                         kv_num_heads=Hkv, window=W)
    _, kc0, vc0 = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, *extra, num_heads=Hq,
                                         kv_num_heads=Hkv)
    np.testing.assert_array_equal(kc.view(np.uint8) if fp8 else kc, kc0.view(np.uint8) if fp8 else kc0)
    kd = dequantize_e4m3(kc, scales) if fp8 else kc
    vd = dequantize_e4m3(vc, scales) if fp8 else vc
    want = ref.paged_attention(q.reshape(B, Sq, Hq, D), kd, vd, tables, lens, window=W)
    np.testing.assert_allclose(out, want.reshape(B, Sq, Hq * D), rtol=1e-6, atol=1e-7)
    plain = ref.paged_attention(q.reshape(B, Sq, Hq, D), kd, vd, tables, lens)
    assert np.abs(out - plain.reshape(B, Sq, -1)).max() > 1e-3
