"""GPU tests of the D = 256 warp-specialized candidates (session 41): m128n64w12t_h256 / m128n80w12t_h256w, the TMA
body fa_ws_core at template D = 256 with 64- / 80-key K/V tiles in 2 stages (fused_attention.cu kWsH256BN /
kWsH256WBN / kWsH256Stages, launch_plan FA_WS_TMA_H256 / FA_WS_TMA_H256W, launcher loads 46-49).

Each case is checked against the float64 reference: full / causal, GQA / MQA, S not a multiple of the key tile or of
128, right and left padding (NaN / Inf in the padding rows), an empty sequence, sliding windows, row maxima that grow
tile by tile (the lazy O rescale must move its frame), and the fallback (47 / 49: the planned (128, 64, 8) body)
where TMA cannot address the tensors.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from onnx_fuse import reference as ref

from .test_kernels_gpu import (DTYPES, TOL, _check_fused_case, _check_moving_max, _check_window_case, _fa_case_id,
                               _fa_fwd_raw, _fa_win_id, _inf_padded_qkv, _need_sm90, _np, _rand, _rel_err, torch)

pytestmark = pytest.mark.gpu

H256 = (128, 64, 12, "tma", "h256")
H256W = (128, 80, 12, "tma", "h256w")
H256_VARIANTS = (H256, H256W)
CODES = {H256: (46, 47), H256W: (48, 49)}  # launcher loads: by name, with the fallback

# B, S, Hq, Hkv, D, causal, seq_lens, variant
FA_H256_CASES = [
    (B, S, Hq, Hkv, 256, causal, lens, v)
    for v in H256_VARIANTS
    for (B, S, Hq, Hkv, causal, lens) in (
        (2, 128, 4, 4, False, None),
        (2, 128, 4, 4, True, None),
        (2, 515, 4, 1, True, [515, 260]),
        (1, 1000, 8, 8, False, None),
        (1, 1000, 8, 2, True, None),
        (4, 130, 12, 4, False, [130, 127, 17, 2]),
        (2, 700, 8, 2, True, [-700, -385]),
        (3, 300, 48, 8, True, [130, 300, 0]),
        (2, 160, 2, 2, True, [80, 64]),
        (1, 2048, 2, 1, False, [2000]),
    )
]


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
    B, S, Hq, Hkv, D = 3, 700, 8, 2, 256
    lens = [700, 385, 130]
    gen = torch.Generator(device="cuda").manual_seed(17)
    (q, k, v), (qc, kc, vc) = _inf_padded_qkv(B, S, Hq, Hkv, D, lens, dtype, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for causal in (False, True):
        expect = ref.fused_attention(_np(qc), _np(kc), _np(vc), seq_lens=lens, causal=causal, out_dtype=np.float64)
        for variant in H256_VARIANTS:
            out = torch.full((B, Hq, S, D), float("nan"), dtype=dtype, device="cuda").transpose(1, 2)
            lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, variant=variant)
            torch.cuda.synchronize()
            assert _rel_err(out, expect) < TOL[dtype], (variant, causal)
            for b, L in enumerate(lens):
                assert torch.count_nonzero(out[b, L:]).item() == 0, (variant, causal)


@pytest.mark.parametrize("S", [300, 77], ids=["broadcast-kv", "short"])
def test_fa_h256_falls_back_when_tma_cannot_address(lib, S):
    """K/V broadcast over the batch (stride 0) or S < 128: by name (46 / 48) the launcher refuses; the codes with
    the fallback (47 / 49) run the (128, 64, 8) wgmma body and match."""
    _need_sm90()
    from onnx_fuse.plugins.kernel_lib import KernelError

    B, Hq, Hkv, D = 2, 4, 2, 256
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"h256{S}".encode()))
    q = _rand((B, S, Hq, D), torch.float16, gen)
    kb = 1 if S >= 128 else B
    k = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    v = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    out = torch.full_like(q, float("nan"))
    for variant in H256_VARIANTS:
        with pytest.raises(KernelError):
            lib.fused_attention(q, k, v, out, variant=variant)
    torch.cuda.synchronize()
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=True, out_dtype=np.float64)
    for variant in H256_VARIANTS:
        out.fill_(float("nan"))
        assert _fa_fwd_raw(lib, q, k, v, out, True, variant[:3], CODES[variant][1]) == 0
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[torch.float16], variant


def test_fa_h256_refusals(lib):
    """Codes 46-49 exist at D = 256 only, each with its own key tile (block_n 64 / 80): other head sizes, the other
    tile, (128, 128, 12) and codes past 49 are refused and nothing is written."""
    _need_sm90()
    B, S, Hq, Hkv = 1, 256, 2, 2
    gen = torch.Generator(device="cuda").manual_seed(3)
    for D in (64, 128, 256):
        q, k, v = (_rand((B, S, h, D), torch.float16, gen) for h in (Hq, Hkv, Hkv))
        out = torch.full_like(q, float("nan"))
        for code in (46, 47, 48, 49, 50):
            for bn in (64, 80, 128):
                if D == 256 and code < 50 and bn == (64 if code < 48 else 80):
                    continue  # the valid launches (tested above)
                assert _fa_fwd_raw(lib, q, k, v, out, False, (128, bn, 12), code) != 0, (D, code, bn)
        torch.cuda.synchronize()
        assert torch.isnan(out).all()
