"""GPU tests of the sliding window (``window``) in the paged decode kernels, 16-bit and fp8 pools.

Decode's query sits at position p = seq_lens[b] - 1 and sees cache keys p - W < j <= p. Every
variant family the planner can pick (cp.async, bulk, TMA, head groups, cluster reduce; fp8
cp.async / TMA / head groups / cluster) runs windows shorter and longer than the context, with and
without split-K, against the float64 reference (``reference.paged_attention(..., window=W)``) on the
same values. The blocks wholly before each sequence's window are then filled with NaN (the kernels
must not read them: a block manager may have freed them), as is every slot past a sequence's end;
the output is poisoned with NaN before the launch. Run on a CUDA machine (sm_90 for TMA):

    python -m onnx_fuse.plugins.build_kernels --what lib && pytest -m gpu tests/plugins/test_paged_window_gpu.py
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
WINDOWS = [1, 16, 17, 100, 4096]


def _rel_err(out, expect: np.ndarray) -> float:
    o = out.detach().float().cpu().numpy().astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    denom = np.linalg.norm(expect)
    num = np.linalg.norm(o - expect)
    return float(num / denom) if denom > 0 else float(num)


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _seed(*key) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(key).encode()))


def _poison_below_window(pools, tables, lens, bs, window, nan):
    """Fill the blocks wholly before each sequence's window (keys < L - window) with ``nan``
    (window 0: none)."""
    if window <= 0:
        return
    tabs = tables.cpu().tolist()
    for b, L in enumerate(lens):
        lo = max(L - window, 0)
        for j in range(lo // bs):
            for p in pools:
                p[tabs[b][j]] = nan


def _lens_for(ctx_max: int, B: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, ctx_max + 1, (B,), generator=g).tolist()
    lens[0] = ctx_max
    if B > 2:
        lens[-1] = 1
    return lens


def _check16(lib, B, Hq, Hkv, D, bs, lens, window, splits, variant, dtype, key):
    gen = _seed("win16", *key)
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen)
    _poison_below_window((k_pool, v_pool), tables, lens, bs, window, float("nan"))
    q = torch.randn((B, Hq, D), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"),
                            out, num_splits=splits, variant=variant, window=window)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool)),
                                 tables.cpu().numpy(), np.array(lens), window=window, out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e} ({plan.kernel}, {plan.num_splits} splits)"
    return plan


# B, Hq, Hkv, D, block_size, lens, window, num_splits (None = planned)
PA_WIN_CASES = [
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 100, None),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 17, 1),
    (4, 32, 8, 128, 32, [1000, 1, 64, 777], 16, 7),
    (4, 32, 8, 128, 64, [1000, 1, 64, 777], 1, None),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 4096, None),   # window past every context
    (2, 16, 1, 128, 32, [2049, 100], 100, None),            # MQA
    (2, 16, 1, 64, 64, [130, 4096], 1000, 5),
    (5, 12, 4, 64, 32, [31, 32, 33, 300, 1], 17, None),
    (3, 16, 4, 80, 16, [1000, 1, 77], 100, None),
    (3, 12, 4, 96, 16, [700, 5, 64], 64, 3),
    (3, 8, 2, 256, 16, [900, 1, 300], 100, None),
    (64, 32, 8, 128, 16, None, 300, None),                  # the planned head groups (w4s2h on an H100, w8s2hc on the H200)
    (128, 16, 1, 64, 16, None, 500, None),                  # the planned MQA (w16s2t / w8s3t)
]


def _case_id(c):
    return "B{}H{}/{}D{}bs{}W{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6], c[7])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA_WIN_CASES, ids=_case_id)
def test_paged_decode_window_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, window, splits = case
    lens = lens or _lens_for(1024, B, B + D)
    _check16(lib, B, Hq, Hkv, D, bs, lens, window, splits, None, dtype, case)


def _variants16(D, Hkv):
    return (lp.pa_variants(D) + lp.pa_tma_variants(D) + lp.pa_heads_variants(D, Hkv)
            + lp.pa_cluster_variants(D, Hkv))


# Every compiled 16-bit variant at D = 64 / 128 (Hkv 8: head groups and clusters apply), ragged lengths
# with an empty sequence, windows inside and past the contexts, split-K on (5 splits: some start
# past the window's end) and off.
@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("window", [17, 4096])
@pytest.mark.parametrize("variant", sorted({v for D in (64, 128) for v in _variants16(D, 8)}),
                         ids=lambda v: f"w{v[0]}s{v[1]}{lp.PA_SUFFIX[v[2]]}")
@pytest.mark.parametrize("D", [64, 128])
def test_paged_decode_window_variants(lib, D, variant, window, splits):
    if variant not in _variants16(D, 8):
        pytest.skip(f"variant {variant} is not compiled for D={D}")
    if variant[2] >= 4 and splits > lp.PA_CLUSTER_MAX_SPLITS:
        pytest.skip("cluster size")
    lens = [1500, 47, 1, 0, 333]
    plan = _check16(lib, 5, 32, 8, D, 16, lens, window, splits, variant, torch.float16,
                    (D, variant, window, splits))
    assert plan.bulk == variant[2] or variant[2] == 2  # TMA may fall back (block size 16 maps)


@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("variant", [(4, 3, 2), (8, 2, 4), (4, 3, 0), (4, 2, 1)],
                         ids=lambda v: f"w{v[0]}s{v[1]}{lp.PA_SUFFIX[v[2]]}")
def test_paged_decode_window_block_sizes(lib, variant, window, bs):
    lens = [2000, 600, 65, 16]
    _check16(lib, 4, 16, 8, 128, bs, lens, window, None if variant[2] < 4 else 2, variant, torch.bfloat16,
             (bs, variant, window))


def test_paged_decode_window_refuses_a_plan_for_another_window(lib):
    B, Hq, Hkv, D, bs = 2, 8, 2, 64, 16
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, [100, 50], torch.float16, _seed("refuse"))
    q = torch.zeros((B, Hq, D), dtype=torch.float16, device="cuda")
    seq = torch.tensor([100, 50], dtype=torch.int32, device="cuda")
    plan = lp.plan_paged_decode(B, Hq, Hkv, D, bs, tables.shape[1], "float16", window=16)
    with pytest.raises(ValueError, match="window"):
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), plan=plan)
    with pytest.raises(ValueError, match="window"):
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), window=-1)


# ------------------------------------------------------------------ fp8 (e4m3) pool


def _fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen):
    """16-bit pools (NaN outside the sequences), the same tokens appended into fp8 pools with
    append_kv_fp8 (right-aligned batch), per-head scales amax / 448."""
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


def _check8(lib, B, Hq, Hkv, D, bs, lens, window, splits, variant, dtype, key):
    gen = _seed("win8", *key)
    k8, v8, ks, vs, tables, seq = _fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    _poison_below_window((k8, v8), tables, lens, bs, window, E4M3_NAN)
    q = torch.randn((B, Hq, D), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant,
                                window=window)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 window=window, out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL8[dtype], f"relative error {err:.3e} ({plan.kernel}, {plan.num_splits} splits)"
    return plan


PA8_WIN_CASES = [c for c in PA_WIN_CASES if c[3] != 80]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA8_WIN_CASES, ids=_case_id)
def test_paged_decode_fp8_window_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, window, splits = case
    lens = lens or _lens_for(1024, B, B + D)
    _check8(lib, B, Hq, Hkv, D, bs, lens, window, splits, None, dtype, case)


def _variants8(D, Hkv):
    return lp.pa8_variants(D) + lp.pa8_heads_variants(D, Hkv) + lp.pa8_cluster_variants(D, Hkv)


@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("window", [17, 4096])
@pytest.mark.parametrize("variant", sorted({v for D in (64, 128) for v in _variants8(D, 8)}, key=repr),
                         ids=lambda v: "w{}s{}{}".format(v[0], v[1], {"tma": "t", "heads": "h", "cluster": "hc"}.get(
                             v[2] if len(v) > 2 else "", "")))
@pytest.mark.parametrize("D", [64, 128])
def test_paged_decode_fp8_window_variants(lib, D, variant, window, splits):
    if variant not in _variants8(D, 8):
        pytest.skip(f"fp8 variant {variant} is not compiled for D={D}")
    if variant[2:] == ("cluster",) and splits > lp.PA_CLUSTER_MAX_SPLITS:
        pytest.skip("cluster size")
    _check8(lib, 5, 32, 8, D, 16, [1500, 47, 1, 0, 333], window, splits, variant, torch.float16,
            (D, variant, window, splits))


@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("variant", [(4, 3, "tma"), (4, 4, "cluster"), (4, 3)], ids=["w4s3t", "w4s4hc", "w4s3"])
def test_paged_decode_fp8_window_block_sizes(lib, variant, window, bs):
    _check8(lib, 4, 16, 8, 128, bs, [2000, 600, 65, 16], window, 2 if variant[2:] == ("cluster",) else None,
            variant, torch.bfloat16, (bs, variant, window))


# ------------------------------------------------------------------ paged prefill (several new tokens)
# New token i of sequence b sits at p = seq_lens[b] - n_b + i and sees keys p - W < j <= p. The new
# K/V are appended first (append_kv); the key tiles (128 keys) wholly before the first new token's
# window are poisoned with NaN: the kernel skips whole tiles below the band.

PP_WIN_CASES = [
    # B, Hq, Hkv, D, block_size, prefix lens, new-token counts, window, packed (cu_seqlens)
    (3, 8, 2, 128, 16, [0, 100, 1000], [130, 1, 300], 64, True),
    (2, 4, 4, 64, 32, [5, 513], [128, 77], 1, True),
    (2, 8, 1, 128, 64, [2000, 0], [256, 256], 300, False),    # MQA
    (1, 4, 2, 128, 16, [1500], [512], 17, True),
    (2, 4, 2, 64, 16, [700, 900], [200, 200], 1000, False),
    (3, 6, 3, 128, 32, [10, 20, 3000], [0, 5, 129], 4096, True),  # window past every context
]


@pytest.mark.parametrize("loads", ["tma", "cp.async"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PP_WIN_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}W{}{}".format(
    c[0], c[1], c[2], c[3], c[4], c[7], "-packed" if c[8] else ""))
def test_paged_prefill_window_matches_reference(lib, case, dtype, loads):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("paged prefill runs the sm_90a warp-specialized kernel only")
    B, Hq, Hkv, D, bs, prefix, new, window, packed = case
    ctx = [p + n for p, n in zip(prefix, new)]
    gen = _seed("pp-win", case, str(dtype), loads)
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, ctx, dtype, gen)
    seq = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    total = int(cu[-1])
    k_new = torch.randn((total, Hkv, D), generator=gen, device="cuda").to(dtype)
    v_new = torch.randn((total, Hkv, D), generator=gen, device="cuda").to(dtype)
    for b in range(B):
        if new[b]:
            lib.append_kv(k_new[cu[b]:cu[b + 1]][None], v_new[cu[b]:cu[b + 1]][None], k_pool, v_pool,
                          tables[b:b + 1], seq[b:b + 1])
    torch.cuda.synchronize()
    kp, vp, tb = np.nan_to_num(_np(k_pool)), np.nan_to_num(_np(v_pool)), tables.cpu().numpy()
    tabs = tb.tolist()
    for b in range(B):  # key tiles wholly before the first new token's window
        first = max(ctx[b] - new[b] - window + 1, 0) // 128 * 128
        for j in range(first // bs):
            k_pool[tabs[b][j]] = float("nan")
            v_pool[tabs[b][j]] = float("nan")
    q = torch.randn((max(total, 1), Hq, D), generator=gen, device="cuda").to(dtype)[:total]
    out = torch.full((total, Hq, D), float("nan"), dtype=dtype, device="cuda")
    if packed:
        lib.paged_prefill(q, k_pool, v_pool, tables, seq, out, causal=True, window=window,
                          cu_seqlens_q=torch.tensor(cu, device="cuda"), loads=loads)
    else:
        assert len(set(new)) == 1
        lib.paged_prefill(q.view(B, new[0], Hq, D), k_pool, v_pool, tables, seq, out.view(B, new[0], Hq, D),
                          causal=True, window=window, loads=loads)
    torch.cuda.synchronize()
    qn = _np(q)
    expect = np.zeros((total, Hq, D))
    for b in range(B):
        if new[b]:
            expect[cu[b]:cu[b + 1]] = ref.paged_attention(qn[None, cu[b]:cu[b + 1]], kp, vp, tb[b:b + 1],
                                                          np.array([ctx[b]]), window=window,
                                                          out_dtype=np.float64)[0]
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"


def test_paged_prefill_window_refusals(lib):
    pool = torch.zeros((4, 16, 2, 64), dtype=torch.float16, device="cuda")
    tables = torch.zeros((1, 4), dtype=torch.int32, device="cuda")
    seq = torch.full((1,), 20, dtype=torch.int32, device="cuda")
    q = torch.zeros((1, 4, 4, 64), dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="causal"):
        lib.paged_prefill(q, pool, pool, tables, seq, torch.empty_like(q), causal=False, window=8)
    with pytest.raises(ValueError, match="window"):
        lib.paged_prefill(q, pool, pool, tables, seq, torch.empty_like(q), window=-2)
