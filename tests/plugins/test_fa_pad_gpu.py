"""GPU tests of the padded-head-dim candidates (session 38): D = 80 / 96 through the D = 128 TMA bodies
ovedq / ovedfc, the head dim padded to 128 in shared memory only (fused_attention.cu kWsPadD80 / kWsPadD96,
launch_plan FA_WS_TMA_OVEDQP / FA_WS_TMA_OVEDFCP, launcher loads 42-45).

TMA zero-fills columns D..127 of every Q / K / V box; O must be stored up to the real D only. Each case is
checked against the float64 reference; the column guard by a sentinel in the columns past D of a wider
output buffer; the fallback (43 / 45: the w8 wgmma body) where TMA cannot address the tensors.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from .test_kernels_gpu import (DTYPES, TOL, _check_fused_case, _check_inf_padding, _check_tma_fallback,
                               _check_window_case, _fa_case_id, _fa_fwd_raw, _fa_win_id, _need_sm90, _np, _rand,
                               _rel_err, ref, torch)  # ref: float64 on the GPU (cuda_reference)

pytestmark = pytest.mark.gpu

QP = (128, 128, 12, "tma", "ovedqp")
FCP = (128, 128, 12, "tma", "ovedfcp")
PAD_VARIANTS = (QP, FCP)

# (B, S, Hq, Hkv, causal, seq_lens) of the TMA bodies' cases (here and test_fa_ws256_gpu.py): GQA / MQA, S not a
# multiple of 128, right and left padding (NaN in the padding rows), one block per sequence, many (head, sequence)
# pairs (ovedfcp's causal 1-D grid folds all but the last 8 pairs), a long sequence.
TMA_BODY_SHAPES = (
    (2, 128, 4, 4, False, None),
    (2, 515, 4, 1, True, [515, 260]),
    (1, 1000, 8, 8, False, None),
    (1, 1000, 8, 2, True, None),
    (4, 130, 12, 4, False, [130, 127, 17, 2]),
    (2, 700, 8, 2, True, [-700, -385]),
    (3, 300, 48, 8, True, [130, 300, 0]),
    (1, 2048, 2, 1, False, [2000]),
)
# B, S, Hq, Hkv, D, causal, seq_lens, variant
FA_PAD_CASES = [(B, S, Hq, Hkv, D, causal, lens, v) for D in (80, 96) for v in PAD_VARIANTS
                for (B, S, Hq, Hkv, causal, lens) in TMA_BODY_SHAPES]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_PAD_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fa_pad_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


FA_PAD_WIN_CASES = [(2, 1000, 8, 2, D, [1000, 385], v, w, 0.0) for D in (80, 96) for v in PAD_VARIANTS
                    for w in (64, 200)] + [(2, 1000, 8, 2, 96, [-1000, -385], QP, 64, 0.0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_PAD_WIN_CASES, ids=_fa_win_id)
def test_fa_pad_window_matches_reference(lib, case, dtype):
    _check_window_case(lib, case, dtype)


@pytest.mark.parametrize("D", [80, 96])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fa_pad_stores_only_the_real_head_dim(lib, D, causal):
    """Q / K / V as strided views of one packed tensor, O a view of the first D columns of a 128-column buffer
    holding a sentinel: the sentinel survives (no store past D), the rows match (default scale 1 / sqrt(D),
    the real D), padded rows are zeros."""
    _need_sm90()
    B, S, Hq, Hkv = 2, 390, 8, 2
    lens = [390, 200]
    gen = torch.Generator(device="cuda").manual_seed(31 + D + int(causal))
    qkv = _rand((B, S, Hq + 2 * Hkv, D), torch.float16, gen)
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=causal, out_dtype=np.float64)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for variant in PAD_VARIANTS:
        wide = torch.full((B, S, Hq, 128), 7.0, dtype=torch.float16, device="cuda")
        out = wide[..., :D]
        out.fill_(float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, variant=variant)
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[torch.float16], variant
        assert bool((wide[..., D:] == 7.0).all()), f"{variant}: a store past column {D}"
        assert torch.count_nonzero(out[1, 200:]).item() == 0, variant


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [80, 96])
def test_fa_pad_inf_padding(lib, dtype, D):
    """+-Inf and NaN in rows [seq_len, S) of Q, K and V (TMA copies them): those V rows must be zeroed and
    those query rows not stored, as in the D = 128 bodies."""
    _need_sm90()
    _check_inf_padding(lib, dtype, D, PAD_VARIANTS, 17 + D)


@pytest.mark.parametrize("S", [300, 77], ids=["broadcast-kv", "short"])
@pytest.mark.parametrize("D", [80, 96])
def test_fa_pad_falls_back_when_tma_cannot_address(lib, S, D):
    """K/V broadcast over the batch (stride 0) or S < 128: by name (42 / 44) the launcher refuses; planned
    codes (43 / 45) run the w8 wgmma body at the real D and match."""
    _need_sm90()
    _check_tma_fallback(lib, S, D, PAD_VARIANTS, [((128, 128, 12), 43), ((128, 128, 12), 45)],
                        zlib.crc32(f"pad{S}{D}".encode()))


def test_fa_pad_refusals(lib):
    """The padded codes exist at D = 80 / 96 only: at D = 128 or 64 the launcher refuses 42-45 (and 41)."""
    _need_sm90()
    B, S, Hq, Hkv = 1, 256, 2, 2
    gen = torch.Generator(device="cuda").manual_seed(3)
    for D in (64, 128):
        q, k, v = (_rand((B, S, h, D), torch.float16, gen) for h in (Hq, Hkv, Hkv))
        out = torch.full_like(q, float("nan"))
        for code in (41, 42, 43, 44, 45, 46):
            assert _fa_fwd_raw(lib, q, k, v, out, False, (128, 128, 12), code) != 0, (D, code)
        torch.cuda.synchronize()
        assert torch.isnan(out).all()
