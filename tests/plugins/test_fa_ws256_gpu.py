"""GPU tests of the D = 256 warp-specialized bodies (session 41): m128n64w12t_h256 / m128n80w12t_h256w (planned on
Hopper from run 49a), the TMA body fa_ws_core at template D = 256 with 64- / 80-key K/V tiles in 2 stages
(fused_attention.cu kWsH256BN / kWsH256WBN / kWsH256Stages, launch_plan FA_WS_TMA_H256 / FA_WS_TMA_H256W, launcher
loads 46-49), and the same with K and V on barriers of their own, _h256s / _h256ws (kWsSplitKV, loads 50-53); the
session-42 candidates m128n80w12t_h256wsn (h256ws without the consumers' turns, kWsNoTurn, loads 54 / 55) and
_h256wm / _h256wmn (80-key tiles in two-CTA clusters multicasting K / V, kWsMcast at D = 256, loads 56-59: no window,
no seq_lens, S a multiple of 256, else by name refused and 57 / 59 run h256ws / h256wsn); _h256wsg (h256ws with the
causal grid longest first within groups of 8 heads, kWsLptGroups, loads 60 / 61).

Each case is checked against the float64 reference: full / causal, GQA / MQA, S not a multiple of the key tile or of
128, right and left padding (NaN / Inf in the padding rows), an empty sequence, sliding windows, row maxima that grow
tile by tile (the lazy O rescale must move its frame), and the fallback (the odd codes 47-61: the (128, 64, 8)
body) where TMA cannot address the tensors.
"""

from __future__ import annotations

import zlib

import pytest

# skip before importing the sibling GPU modules: without torch their import stops half-way (importorskip), and
# a name read from such a half-imported module fails collection instead of skipping it
if not pytest.importorskip("torch", reason="torch is not installed").cuda.is_available():  # nor without CUDA
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)

from .test_fa_pad_gpu import TMA_BODY_SHAPES  # noqa: E402
from .test_kernels_gpu import (  # noqa: E402
    DTYPES, TOL, _check_fused_case, _check_inf_padding, _check_moving_max, _check_tma_fallback, _check_window_case,
    _fa_case_id, _fa_fwd_raw, _fa_win_id, _need_sm90, _np, _rand, _rel_err, _window_reference, np, ref, torch)

pytestmark = pytest.mark.gpu

H256 = (128, 64, 12, "tma", "h256")
H256W = (128, 80, 12, "tma", "h256w")
H256S = (128, 64, 12, "tma", "h256s")
H256WS = (128, 80, 12, "tma", "h256ws")
H256WSN = (128, 80, 12, "tma", "h256wsn")
H256WM = (128, 80, 12, "tma", "h256wm")
H256WMN = (128, 80, 12, "tma", "h256wmn")
H256WSG = (128, 80, 12, "tma", "h256wsg")
H256_VARIANTS = (H256, H256W, H256S, H256WS, H256WSN, H256WSG)  # any shape, seq_lens, windows
H256_CLUSTER = (H256WM, H256WMN)  # no window, no seq_lens, S a multiple of 256
CODES = {H256: (46, 47), H256W: (48, 49), H256S: (50, 51), H256WS: (52, 53), H256WSN: (54, 55),
         H256WM: (56, 57), H256WMN: (58, 59), H256WSG: (60, 61)}  # launcher loads: by name, fallback

# B, S, Hq, Hkv, D, causal, seq_lens, variant: the padded bodies' shapes, a single causal block and tiles that end
# exactly at a sequence's end (80 and 64 keys)
FA_H256_CASES = [(B, S, Hq, Hkv, 256, causal, lens, v) for v in H256_VARIANTS
                 for (B, S, Hq, Hkv, causal, lens) in TMA_BODY_SHAPES + ((2, 128, 4, 4, True, None),
                                                                         (2, 160, 2, 2, True, [80, 64]))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_H256_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fa_h256_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


FA_H256_WIN_CASES = [(2, 1000, 8, 2, 256, [1000, 385], v, w, 0.0) for v in H256_VARIANTS for w in (64, 200)] + [
    (2, 1000, 8, 2, 256, [-1000, -385], v, 80, 0.0) for v in H256_VARIANTS]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_H256_WIN_CASES, ids=_fa_win_id)
def test_fa_h256_window_matches_reference(lib, case, dtype):
    _check_window_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fa_h256_moving_max(lib, dtype, causal):
    """Keys whose norm grows along the sequence move each row's maximum tile after tile (the lazy O rescale must move
    its frame on many tiles, not only the first), then a flat stretch leaves it still; ragged lengths."""
    _need_sm90()
    _check_moving_max(lib, dtype, causal, 256, H256_VARIANTS, 256 + int(causal))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fa_h256_inf_padding_and_strided_output(lib, dtype):
    """+-Inf and NaN in rows [seq_len, S) of Q, K and V (TMA copies them): those V rows must be zeroed and those
    query rows not stored; O a [B, H, S, D] buffer's transposed view (strided rows)."""
    _need_sm90()
    _check_inf_padding(lib, dtype, 256, H256_VARIANTS, 17, strided_out=True)


@pytest.mark.parametrize("S", [300, 77], ids=["broadcast-kv", "short"])
def test_fa_h256_falls_back_when_tma_cannot_address(lib, S):
    """K/V broadcast over the batch (stride 0) or S < 128: by name (46 / 48 / ... / 60) the launcher refuses; the
    codes with the fallback (47 / 49 / ... / 61) run the (128, 64, 8) wgmma body and match."""
    _need_sm90()
    _check_tma_fallback(lib, S, 256, H256_VARIANTS + H256_CLUSTER,
                        [(v[:3], CODES[v][1]) for v in H256_VARIANTS + H256_CLUSTER], zlib.crc32(f"h256{S}".encode()))


def test_fa_h256_refusals(lib):
    """Codes 46-61 exist at D = 256 only, each with its own key tile (block_n 64 / 80): other head sizes, the other
    tile, (128, 128, 12) and codes past 61 are refused and nothing is written."""
    _need_sm90()
    B, S, Hq, Hkv = 1, 256, 2, 2
    gen = torch.Generator(device="cuda").manual_seed(3)
    for D in (64, 128, 256):
        q, k, v = (_rand((B, S, h, D), torch.float16, gen) for h in (Hq, Hkv, Hkv))
        out = torch.full_like(q, float("nan"))
        for code in range(46, 63):
            for bn in (64, 80, 128):
                if D == 256 and code < 62 and bn == {v[1] for v, c in CODES.items() if code in c}.pop():
                    continue  # the valid launches (tested above)
                assert _fa_fwd_raw(lib, q, k, v, out, False, (128, bn, 12), code) != 0, (D, code, bn)
        torch.cuda.synchronize()
        assert torch.isnan(out).all()


# h256wm / h256wmn (two-CTA clusters, K / V multicast): full pairs of query blocks only (S a multiple of 256, no
# seq_lens). One cluster, many heads and batches, GQA / MQA, long sequences (the 2-stage ring wraps many times), S
# where the last 80-key tile is partial (256, 768, 4096: TMA zero-fills its rows past S), and causal pairs whose
# longer CTA loads one or two 80-key tiles alone (its query block ends 128 keys later).
FA_H256_CLUSTER_CASES = [(B, S, Hq, Hkv, 256, causal, None, v) for v in H256_CLUSTER for causal in (False, True)
                         for B, S, Hq, Hkv in ((1, 256, 1, 1), (1, 256, 4, 4), (2, 1024, 8, 2), (3, 512, 12, 4),
                                               (1, 2048, 4, 1), (1, 4096, 2, 1), (5, 768, 7, 7))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_H256_CLUSTER_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fa_h256_cluster_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fa_h256_cluster_moving_max(lib, dtype, causal):
    """Growing key norms (each row's maximum moves tile after tile, then a flat stretch) through the cluster entries
    (no seq_lens: B2 S1280 H8/2)."""
    _need_sm90()
    B, S, Hq, Hkv, D = 2, 1280, 8, 2, 256
    gen = torch.Generator(device="cuda").manual_seed(1280 + int(causal))
    q = _rand((B, S, Hq, D), dtype, gen).abs()
    k = _rand((B, S, Hkv, D), dtype, gen).abs() * 0.2
    k = (k.float() * torch.linspace(0.2, 3.0, S, device="cuda").view(1, S, 1, 1)).to(dtype)
    k[:, 500:800] = k[:, 499:500]
    v = _rand((B, S, Hkv, D), dtype, gen)
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=causal, out_dtype=np.float64)
    for variant in H256_CLUSTER:
        out = torch.full_like(q, float("nan"))
        lib.fused_attention(q, k, v, out, causal=causal, variant=variant)
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[dtype], variant


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fa_h256_cluster_refuses_or_falls_back(lib, dtype):
    """By name (56 / 58) the cluster entries refuse what their pairs cannot share (S not a multiple of 256, seq_lens,
    a window); with 57 / 59 those run h256ws / h256wsn (the same barriers without the cluster) and match."""
    _need_sm90()
    from onnx_fuse.plugins.kernel_lib import KernelError

    for B, S, lens in ((1, 300, None), (2, 1024, [1024, 700]), (2, 512, [512, 512])):
        gen = torch.Generator(device="cuda").manual_seed(S + B)
        q = _rand((B, S, 4, 256), dtype, gen)
        k = _rand((B, S, 2, 256), dtype, gen)
        v = _rand((B, S, 2, 256), dtype, gen)
        seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
        expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, out_dtype=np.float64)
        for variant in H256_CLUSTER:
            out = torch.full_like(q, float("nan"))
            with pytest.raises(KernelError):
                lib.fused_attention(q, k, v, out, seq_lens=seq, variant=variant)
            torch.cuda.synchronize()
            lib.fused_attention(q, k, v, out, seq_lens=seq, variant=variant, loads=CODES[variant][1])
            torch.cuda.synchronize()
            assert _rel_err(out, expect) < TOL[dtype], (variant, B, S, lens)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (_rand((1, 1024, 4, 256), dtype, gen) for _ in range(3))
    expect = _window_reference(q, k, v, None, 1.0 / 256**0.5, 0.0, 200)
    for variant in H256_CLUSTER:
        out = torch.full_like(q, float("nan"))
        with pytest.raises(KernelError):
            lib.fused_attention(q, k, v, out, causal=True, window=200, variant=variant)
        torch.cuda.synchronize()
        lib.fused_attention(q, k, v, out, causal=True, window=200, variant=variant, loads=CODES[variant][1])
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[dtype], variant
