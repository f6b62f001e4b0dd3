"""GPU tests of attention sinks (GPT-OSS; PagedAttention's ``sinks`` input) in the paged kernels.

A sink is one more score per softmax row of query head h, ``sinks[h]`` (not scaled), whose value
row is zero: it only adds ``exp(sinks[h])`` to the row's denominator. The kernels fold it in once
per row where the row is finished (one split: the decode body; split-K: the reduce or the cluster
combine; prefill: the epilogue), with the row's max taken over it. Every decode variant family
(16-bit cp.async / bulk / TMA / head groups / cluster; fp8 cp.async / TMA / head groups / cluster),
split-K on and off, with and without a sliding window, the paged prefill (TMA and cp.async loads),
and the plugin's JIT launch sequence run against the float64 reference
(``reference.paged_attention(..., sinks=)``) on the same values. Sinks range from far below the
scores (no effect) to far above them (they take almost all the mass: the max must include them).
Run on a CUDA machine (sm_90 for TMA and the prefill):

    python -m onnx_fuse.plugins.build_kernels --what lib && pytest -m gpu tests/plugins/test_paged_sinks_gpu.py
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from onnx_fuse.plugins import launch_plan as lp

from .conftest import make_paged_pool  # the `lib` fixture is there too

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)
from . import cuda_reference as ref  # noqa: E402  (float64 on the GPU; after the skips: it imports torch)

TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}   # as tests/plugins/test_kernels_gpu.py
TOL8 = {torch.float16: 4e-3, torch.bfloat16: 1e-2}    # fp8 pool against its dequantized values
DTYPES = [torch.float16, torch.bfloat16]
E4M3_NAN = 0x7F


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _seed(*key) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(key).encode()))


def _err(out, expect: np.ndarray) -> float:
    o = out.detach().float().cpu().numpy().astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    denom = np.linalg.norm(expect)
    return float(np.linalg.norm(o - expect) / denom) if denom > 0 else float(np.linalg.norm(o - expect))


def _sinks(Hq: int, gen, spread: float = 3.0):
    """Per-head logits: mostly around the scores, one far above (takes nearly all the mass) and one
    far below (no effect)."""
    s = torch.randn((Hq,), generator=gen, device="cuda", dtype=torch.float32) * spread
    s[0] = 30.0
    if Hq > 1:
        s[-1] = -1e4
    return s.contiguous()


def _check16(lib, B, Hq, Hkv, D, bs, lens, window, splits, variant, dtype, key):
    gen = _seed("sink16", *key)
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen)
    q = torch.randn((B, Hq, D), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    sinks = _sinks(Hq, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"),
                            out, num_splits=splits, variant=variant, window=window, sinks=sinks)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool)),
                                 tables.cpu().numpy(), np.array(lens), window=window, sinks=_np(sinks),
                                 out_dtype=np.float64)
    err = _err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e} ({plan.kernel}, {plan.num_splits} splits)"
    for b, L in enumerate(lens):   # an empty sequence stays a zero row
        if L == 0:
            assert not out[b].float().abs().any()
    return plan


def _variants16(D, Hkv):
    return (lp.pa_variants(D) + lp.pa_tma_variants(D) + lp.pa_heads_variants(D, Hkv)
            + lp.pa_cluster_variants(D, Hkv))


@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("window", [0, 17])
@pytest.mark.parametrize("variant", sorted({v for D in (64, 128) for v in _variants16(D, 8)}),
                         ids=lambda v: f"w{v[0]}s{v[1]}{lp.PA_SUFFIX[v[2]]}")
@pytest.mark.parametrize("D", [64, 128])
def test_paged_decode_sinks_variants(lib, D, variant, window, splits):
    """Every compiled 16-bit variant at D = 64 / 128 (Hkv 8: head groups and clusters apply):
    one split (the body folds the sink) and five (the reduce or the cluster combine does, once)."""
    if variant not in _variants16(D, 8):
        pytest.skip(f"variant {variant} is not compiled for D={D}")
    if variant[2] >= 4 and splits > lp.PA_CLUSTER_MAX_SPLITS:
        pytest.skip("cluster size")
    _check16(lib, 5, 32, 8, D, 16, [1500, 47, 1, 0, 333], window, splits, variant, torch.float16,
             (D, variant, window, splits))


# B, Hq, Hkv, D, block_size, lens, window, num_splits (None = planned)
PA_SINK_CASES = [
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 0, None),
    (4, 32, 8, 128, 32, [1000, 1, 64, 777], 128, 7),
    (2, 16, 1, 128, 32, [2049, 100], 0, None),             # MQA
    (3, 16, 4, 80, 16, [1000, 1, 77], 100, None),
    (3, 12, 4, 96, 16, [700, 5, 64], 0, 3),
    (3, 8, 2, 256, 16, [900, 1, 300], 64, None),
    (64, 64, 8, 64, 16, [2048] * 64, 128, None),           # GPT-OSS-like: 64 / 8 heads, sliding layer
    (64, 64, 8, 64, 16, [2048] * 64, 0, None),             # and a full one (the planned head groups)
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA_SINK_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}W{}sp{}".format(*c[:5], c[6], c[7]))
def test_paged_decode_sinks_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, window, splits = case
    _check16(lib, B, Hq, Hkv, D, bs, lens, window, splits, None, dtype, case)


def test_paged_decode_sinks_at_minus_infinity_is_no_sink(lib):
    """-inf (what the TensorRT builder feeds a node without sinks) changes nothing."""
    B, Hq, Hkv, D, bs, lens = 3, 16, 4, 128, 16, [600, 1, 90]
    gen = _seed("ninf")
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, torch.float16, gen)
    q = torch.randn((B, Hq, D), generator=gen, device="cuda").to(torch.float16)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for splits in (1, 4):
        a, b = torch.empty_like(q), torch.empty_like(q)
        lib.paged_decode(q, k_pool, v_pool, tables, seq, a, num_splits=splits)
        lib.paged_decode(q, k_pool, v_pool, tables, seq, b, num_splits=splits,
                         sinks=torch.full((Hq,), float("-inf"), device="cuda"))
        torch.cuda.synchronize()
        assert torch.allclose(a.float(), b.float(), rtol=0, atol=1e-3)


def test_paged_decode_sinks_refusals(lib):
    B, Hq, Hkv, D, bs = 2, 8, 2, 64, 16
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, [100, 50], torch.float16, _seed("refuse"))
    q = torch.zeros((B, Hq, D), dtype=torch.float16, device="cuda")
    seq = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
    for bad in (torch.zeros(Hq - 1, device="cuda"), torch.zeros(Hq, device="cuda", dtype=torch.float16),
                torch.zeros(Hq)):
        with pytest.raises(ValueError, match="sinks"):
            lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), sinks=bad)


# ------------------------------------------------------------------ fp8 (e4m3) pool

def _fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen):
    """16-bit pools, the same tokens appended into fp8 pools (append_kv_fp8), scales amax / 448."""
    k16, v16, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen)
    lmax = max(max(lens), 1)
    kd = torch.zeros((B, lmax, Hkv, D), dtype=dtype, device="cuda")
    vd = torch.zeros_like(kd)
    for b, L in enumerate(lens):
        if L > 0:
            t = torch.arange(L, device="cuda")
            blk = tables[b, t // bs].long()
            kd[b, lmax - L:] = k16[blk, t % bs]
            vd[b, lmax - L:] = v16[blk, t % bs]
    ks = (kd.float().abs().amax(dim=(0, 1, 3)) / 448.0).clamp_min(1e-6).contiguous()
    vs = (vd.float().abs().amax(dim=(0, 1, 3)) / 448.0).clamp_min(1e-6).contiguous()
    k8 = torch.full(k16.shape, E4M3_NAN, dtype=torch.uint8, device="cuda")
    v8 = torch.full_like(k8, E4M3_NAN)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    lib.append_kv_fp8(kd, vd, k8, v8, ks, vs, tables, seq)
    torch.cuda.synchronize()
    return k8, v8, ks, vs, tables, seq


def _dequant(pool8, scale) -> np.ndarray:
    return np.nan_to_num(_np(pool8.view(torch.float8_e4m3fn).float() * scale[None, None, :, None]))


def _variants8(D, Hkv):
    return lp.pa8_variants(D) + lp.pa8_heads_variants(D, Hkv) + lp.pa8_cluster_variants(D, Hkv)


@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("window", [0, 17])
@pytest.mark.parametrize("variant", sorted({v for D in (64, 128) for v in _variants8(D, 8)}, key=repr),
                         ids=lambda v: "w{}s{}{}".format(v[0], v[1], {"tma": "t", "heads": "h", "cluster": "hc"}.get(
                             v[2] if len(v) > 2 else "", "")))
@pytest.mark.parametrize("D", [64, 128])
def test_paged_decode_fp8_sinks_variants(lib, D, variant, window, splits):
    if variant not in _variants8(D, 8):
        pytest.skip(f"fp8 variant {variant} is not compiled for D={D}")
    if variant[2:] == ("cluster",) and splits > lp.PA_CLUSTER_MAX_SPLITS:
        pytest.skip("cluster size")
    B, Hq, Hkv, bs, lens = 5, 32, 8, 16, [1500, 47, 1, 0, 333]
    gen = _seed("sink8", D, variant, window, splits)
    k8, v8, ks, vs, tables, seq = _fp8_pool(lib, B, Hkv, D, bs, lens, torch.float16, gen)
    q = torch.randn((B, Hq, D), generator=gen, device="cuda", dtype=torch.float32).to(torch.float16)
    sinks = _sinks(Hq, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant,
                                window=window, sinks=sinks)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 window=window, sinks=_np(sinks), out_dtype=np.float64)
    err = _err(out, expect)
    assert err < TOL8[torch.float16], f"relative error {err:.3e} ({plan.kernel}, {plan.num_splits} splits)"


# ------------------------------------------------------------------ paged prefill (several new tokens)

PP_SINK_CASES = [
    # B, Hq, Hkv, D, block_size, prefix lens, new-token counts, window, packed (cu_seqlens)
    (3, 8, 2, 128, 16, [0, 100, 1000], [130, 1, 300], 0, True),
    (3, 8, 2, 128, 16, [0, 100, 1000], [130, 1, 300], 64, True),
    (2, 8, 1, 64, 64, [2000, 0], [256, 256], 0, False),      # MQA
    (2, 4, 2, 64, 16, [700, 900], [200, 200], 128, False),
]


@pytest.mark.parametrize("loads", ["tma", "cp.async"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PP_SINK_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}W{}{}".format(
    c[0], c[1], c[2], c[3], c[4], c[7], "-packed" if c[8] else ""))
def test_paged_prefill_sinks_matches_reference(lib, case, dtype, loads):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("paged prefill runs the sm_90a warp-specialized kernel only")
    B, Hq, Hkv, D, bs, prefix, new, window, packed = case
    ctx = [p + n for p, n in zip(prefix, new)]
    gen = _seed("pp-sink", case, str(dtype), loads)
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, ctx, dtype, gen)
    seq = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    kp, vp, tb = np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool)), tables.cpu().numpy()
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    total = int(cu[-1])
    q = torch.randn((total, Hq, D), generator=gen, device="cuda").to(dtype)
    sinks = _sinks(Hq, gen)
    out = torch.full((total, Hq, D), float("nan"), dtype=dtype, device="cuda")
    if packed:
        lib.paged_prefill(q, k_pool, v_pool, tables, seq, out, causal=True, window=window, sinks=sinks,
                          cu_seqlens_q=torch.tensor(cu, device="cuda"), loads=loads)
    else:
        lib.paged_prefill(q.view(B, new[0], Hq, D), k_pool, v_pool, tables, seq, out.view(B, new[0], Hq, D),
                          causal=True, window=window, sinks=sinks, loads=loads)
    torch.cuda.synchronize()
    qn = _np(q)
    expect = np.zeros((total, Hq, D))
    for b in range(B):
        if new[b]:
            expect[cu[b]:cu[b + 1]] = ref.paged_attention(qn[None, cu[b]:cu[b + 1]], kp, vp, tb[b:b + 1],
                                                          np.array([ctx[b]]), window=window, sinks=_np(sinks),
                                                          out_dtype=np.float64)[0]
    err = _err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"


# ------------------------------------------------------------------ the plugin's JIT launch sequence

@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("window", [0, 33])
def test_plugin_run_jit_sinks_matches_reference(lib, sq, window):
    """PagedAttention's ten inputs through run_jit (append, then decode or prefill) against
    reference.paged_attention_op with the same sinks."""
    from onnx_fuse.plugins import paged_attention_plugin as pa

    B, Hq, Hkv, D, bs, past = 3, 16, 4, 64, 16, [300, 0, 77]
    dtype = torch.bfloat16
    gen = _seed("jit-sink", sq, window)
    lens = [p + sq for p in past]
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen)
    q = torch.randn((B, sq, Hq * D), generator=gen, device="cuda").to(dtype)
    k = torch.randn((B, sq, Hkv * D), generator=gen, device="cuda").to(dtype)
    v = torch.randn((B, sq, Hkv * D), generator=gen, device="cuda").to(dtype)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    sinks = _sinks(Hq, gen)
    kc, vc = np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool))
    expect, _, _ = ref.paged_attention_op(_np(q), _np(k), _np(v), kc, vc, tables.cpu().numpy(), np.array(lens),
                                          None, None, _np(sinks), num_heads=Hq, kv_num_heads=Hkv, window=window)
    out = torch.full_like(q, float("nan"))

    class _Buf:   # the trtp.Tensor view run_jit takes: data_ptr, shape, element strides
        def __init__(self, t):
            self.data_ptr, self.shape, self.strides = t.data_ptr(), tuple(t.shape), tuple(t.stride())

    pa.run_jit(lib, *(_Buf(t) for t in (q, k, v, k_pool, v_pool, tables, seq)), _Buf(out),
               num_heads=Hq, kv_num_heads=Hkv, scale=0.0, dtype="bfloat16",
               stream=torch.cuda.current_stream().cuda_stream, window=window, sinks=_Buf(sinks))
    torch.cuda.synchronize()
    err = _err(out, expect.astype(np.float64))
    assert err < TOL[dtype], f"relative error {err:.3e}"
