"""PagedAttention's fp8 (e4m3) pool form in the NumPy reference, against independent computations:
an e4m3 table decoded from the bit layout here, a brute-force round-to-nearest-even quantizer over
that table, torch's CPU e4m3 cast (what the GPU tests compare append_kv_fp8 with), and plain
attention over the dequantized tokens."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse import reference as ref
from onnx_fuse.reference import attention as att


def _e4m3_table() -> np.ndarray:
    """Value of each byte 0..255 as OCP e4m3 (float8_e4m3fn: bias 7, no infinities, S.1111.111 NaN),
    decoded from the bits."""
    vals = np.empty(256)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 15 and m == 7:
            vals[b] = np.nan
        elif e == 0:
            vals[b] = (-1) ** s * m / 8 * 2.0 ** -6
        else:
            vals[b] = (-1) ** s * (1 + m / 8) * 2.0 ** (e - 7)
    return vals


TABLE = _e4m3_table()


def _brute_quantize(y: np.ndarray) -> np.ndarray:
    """Bytes of the e4m3 values nearest to y (ties to the even mantissa code), saturated to
    +-448: a linear search over the finite table."""
    finite = [b for b in range(256) if np.isfinite(TABLE[b])]
    out = np.empty(y.shape, np.uint8)
    for idx, v in np.ndenumerate(np.clip(y, -448.0, 448.0)):
        dist = [abs(TABLE[b] - v) for b in finite]
        best = min(dist)
        ties = [b for b, d in zip(finite, dist) if d == best]
        # +0 and -0 tie at v == 0: keep the sign of v (the cast's signed zero)
        ties = [b for b in ties if (TABLE[b] != 0) or ((b >> 7) == (np.signbit(v)))] or ties
        out[idx] = next((b for b in ties if b % 2 == 0), ties[0])
    return out


def test_quantize_matches_a_brute_force_search_incl_ties_saturation_and_subnormals():
    scale = np.array([0.5, 2.0], np.float32)
    # midpoints between neighbours (ties), subnormals, the saturation edge, signed zero
    special = [0.0, -0.0, 1.0625, 1.1875, -1.0625, 2.0 ** -9, 3 * 2.0 ** -10, 2.0 ** -10,
               448.0, 464.0, 500.0, 1e6, -1e6, 0.00390625, 240.0, 232.0]
    x = np.array(special + list(np.random.default_rng(0).standard_normal(48) * 40), np.float32)
    x = x[: (len(x) // 2) * 2].reshape(-1, 2, 1) * scale[None, :, None]   # [n, Hkv, 1]
    got = att.quantize_e4m3(x, scale).view(np.uint8)
    want = _brute_quantize(x.astype(np.float32) / scale[:, None])
    np.testing.assert_array_equal(got, want)


def test_quantize_is_bit_exact_with_torchs_e4m3_cast():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    r = np.random.default_rng(1)
    x16 = (r.standard_normal((64, 4, 32)) * r.uniform(0.01, 300, (1, 4, 1))).astype(np.float16)
    scale = np.array([0.02, 0.3, 1.0, 0.7], np.float32)
    t = (torch.from_numpy(x16).float() / torch.from_numpy(scale)[:, None]).clamp(-448, 448)
    want = t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    np.testing.assert_array_equal(att.quantize_e4m3(x16, scale).view(np.uint8), want)


def _pools(r, nb, bs, hkv, d):
    """uint8 pools of random finite e4m3 bytes (0x7F / 0xFF are NaN: avoided)."""
    def one():
        b = r.integers(0, 256, (nb, bs, hkv, d), dtype=np.uint8)
        return np.where((b & 0x7F) == 0x7F, np.uint8(0x3C), b).astype(np.uint8)
    return one(), one()


@pytest.mark.parametrize("Sq, bs, Hq, Hkv",
                         [(1, 4, 4, 2), (1, 16, 8, 1), (4, 4, 6, 3), (1, 1, 2, 2)])
def test_fp8_op_is_attention_over_the_dequantized_pool(Sq, bs, Hq, Hkv):
    """Output = plain bottom-right causal attention over Concat(dequantized prefix, dequantized
    quantized new tokens); the pools change exactly at the new tokens' slots, to the bytes of the
    brute-force quantizer."""
    r = np.random.default_rng(10 + Sq + bs)
    D, prefix = 8, [7, 0, 30]
    B = len(prefix)
    lens = np.array([p + Sq for p in prefix], np.int32)
    need = [-(-int(n) // bs) for n in lens]
    nb = sum(need) + 2
    perm = r.permutation(nb)
    tables = np.full((B, max(need) + 1), -1, np.int32)
    i = 0
    for b in range(B):
        tables[b, :need[b]] = perm[i:i + need[b]]
        i += need[b]
    kp, vp = _pools(r, nb, bs, Hkv, D)
    ks = r.uniform(0.05, 2.0, Hkv).astype(np.float32)
    vs = r.uniform(0.05, 2.0, Hkv).astype(np.float32)
    q = r.standard_normal((B, Sq, Hq * D)).astype(np.float32)
    kn = (r.standard_normal((B, Sq, Hkv * D)) * 3).astype(np.float32)
    vn = (r.standard_normal((B, Sq, Hkv * D)) * 3).astype(np.float32)
    out, kc, vc = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, ks, vs, num_heads=Hq,
                                         kv_num_heads=Hkv, scale=0.4)
    assert kc.dtype == np.uint8 and vc.dtype == np.uint8 and out.dtype == np.float32
    written = np.zeros((nb, bs), bool)
    for b, p in enumerate(prefix):
        pos = np.arange(int(lens[b]))
        slots = (tables[b, pos // bs], pos % bs)
        k8n = _brute_quantize(kn[b].reshape(Sq, Hkv, D) / ks[:, None])
        v8n = _brute_quantize(vn[b].reshape(Sq, Hkv, D) / vs[:, None])
        np.testing.assert_array_equal(kc[slots][p:], k8n)
        np.testing.assert_array_equal(vc[slots][p:], v8n)
        written[tables[b, pos[p:] // bs], pos[p:] % bs] = True
        k_full = TABLE[kc[slots]] * ks[:, None]
        v_full = TABLE[vc[slots]] * vs[:, None]
        np.testing.assert_array_equal(kc[slots][:p], kp[slots][:p])   # the prefix is untouched
        want = _chunk_attention(q[b].reshape(Sq, Hq, D).astype(np.float64), k_full, v_full, 0.4)
        np.testing.assert_allclose(out[b].reshape(Sq, Hq, D), want, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(kc[~written], kp[~written])
    np.testing.assert_array_equal(vc[~written], vp[~written])


def _chunk_attention(q, k, v, scale):
    n, Hq, D = q.shape
    L, Hkv, _ = k.shape
    out = np.zeros((n, Hq, D))
    for i in range(n):
        for h in range(Hq):
            kv = h // (Hq // Hkv)
            s = k[: L - n + i + 1, kv] @ q[i, h] * scale
            p = np.exp(s - s.max())
            out[i, h] = p @ v[: L - n + i + 1, kv] / p.sum()
    return out


def test_fp8_pools_as_float8_values_come_back_as_float8():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    r = np.random.default_rng(3)
    kp, vp = _pools(r, 3, 4, 2, 8)
    tables = np.array([[2, 0]], np.int32)
    args = (r.standard_normal((1, 1, 16)), r.standard_normal((1, 1, 16)),
            r.standard_normal((1, 1, 16)))
    sc = np.ones(2, np.float32)
    o8, k8, _ = ref.paged_attention_op(*args, kp.view(ml_dtypes.float8_e4m3fn),
                                       vp.view(ml_dtypes.float8_e4m3fn), tables,
                                       np.array([6], np.int32), sc, sc, num_heads=2)
    ob, kb, _ = ref.paged_attention_op(*args, kp, vp, tables, np.array([6], np.int32), sc, sc,
                                       num_heads=2)
    assert k8.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(k8.view(np.uint8), kb)
    np.testing.assert_array_equal(o8, ob)


@pytest.mark.parametrize("bad, match", [
    (dict(v_scale=None), "go together"),
    (dict(k_scale=np.ones(3, np.float32)), "k_scale must be 2"),
    (dict(v_scale=np.array([1.0, 0.0], np.float32)), "v_scale must be 2 positive"),
    (dict(k_scale=None, v_scale=None), "fp8 \\(e4m3\\) pools need k_scale and v_scale"),
    (dict(value_cache=np.zeros((2, 4, 2, 8), np.float16)), "uint8 bytes"),
])
def test_fp8_op_rejects_bad_scales_and_pool_types(bad, match):
    kw = dict(query=np.zeros((1, 1, 16)), key=np.zeros((1, 1, 16)), value=np.zeros((1, 1, 16)),
              key_cache=np.zeros((2, 4, 2, 8), np.uint8),
              value_cache=np.zeros((2, 4, 2, 8), np.uint8),
              block_tables=np.array([[0]], np.int32), seq_lens=np.array([1], np.int32),
              k_scale=np.ones(2, np.float32), v_scale=np.ones(2, np.float32))
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        ref.paged_attention_op(**kw, num_heads=2)


def test_scales_with_16bit_pools_are_checked_and_unused():
    """The 9-input form over fp16 pools (what the TensorRT builder makes of the 7-input one)
    computes exactly the 7-input form; the scales must still be [Hkv] positive values."""
    r = np.random.default_rng(4)
    q, kn, vn = (r.standard_normal((2, 1, 16)).astype(np.float16) for _ in range(3))
    kp = r.standard_normal((4, 4, 2, 8)).astype(np.float16)
    vp = r.standard_normal((4, 4, 2, 8)).astype(np.float16)
    tables, lens = np.array([[0, 1], [3, 2]], np.int32), np.array([6, 3], np.int32)
    plain = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, num_heads=2)
    ones = np.ones(2, np.float32)
    scaled = ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, ones * 3, ones, num_heads=2)
    for a, b in zip(plain, scaled):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="k_scale must be 2"):
        ref.paged_attention_op(q, kn, vn, kp, vp, tables, lens, ones[:1], ones, num_heads=2)
