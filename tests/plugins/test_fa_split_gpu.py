"""GPU tests of session 43's split K / V candidates (split48, by name only): fa_ws_core's kWsSplitKV (K and V of a
stage on barriers of their own: K freed once both consumers' S of it is done, V once their P V is) in the bodies
planned at D = 64 and D = 128 on Hopper, and the causal grid longest first within groups of 8 heads (kWsLptGroups):

- m128n128w12t_ldes / _ldesg (D = 64: lde with split barriers; the latter causal grouped), launcher loads 62-65;
- m128n128w12t_ovedqs / _ovedqsg (D = 128: ovedq, Q in registers, lazy rescale), loads 66-69;
- m128n128w12t_ovedfcs (D = 128: ovedfc, two chained query blocks per CTA on the persistent tile loop: the chained
  hand-over waits for V of the first block's last tile on its own barrier and frees K of the second block's first
  tile after its S; a CTA whose two blocks both end in a partial tile uses the V-tail barrier twice), loads 70 / 71;
- m128n64w12t_h256sg (D = 256: h256s, 64-key tiles, causal grouped), loads 72 / 73.

Each case is checked against the float64 reference on the same inputs: full / causal, fp16 / bf16, GQA / MQA, ragged
seq_lens (right and left padding, empty sequences, lengths 0 / 1 / 128 / 129 that skip one block of a fold pair or
both), NaN / +-Inf in the padding rows, sliding windows, long sequences (the stage ring wraps many times), row maxima
that move tile after tile (the lazy rescale), the fallback (the odd codes: the planned bodies' cp.async / w8 bodies)
where TMA cannot address the tensors, and the refusals of the codes at other head sizes.
"""

from __future__ import annotations

import zlib

import pytest

# skip before importing the sibling GPU modules (see test_fa_ws256_gpu.py)
if not pytest.importorskip("torch", reason="torch is not installed").cuda.is_available():  # nor without CUDA
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)

from .test_fa_pad_gpu import TMA_BODY_SHAPES  # noqa: E402
from .test_kernels_gpu import (  # noqa: E402
    DTYPES, FA_OV_CASES, FA_OVEDF_CASES, FA_TMA_CASES, _check_fused_case, _check_inf_padding, _check_moving_max,
    _check_rising_scores, _check_tma_fallback, _check_window_case, _fa_case_id, _fa_fwd_raw, _fa_win_id, _need_sm90,
    _rand, torch)

pytestmark = pytest.mark.gpu

LDES = (128, 128, 12, "tma", "ldes")
LDESG = (128, 128, 12, "tma", "ldesg")
OVEDQS = (128, 128, 12, "tma", "ovedqs")
OVEDQSG = (128, 128, 12, "tma", "ovedqsg")
OVEDFCS = (128, 128, 12, "tma", "ovedfcs")
H256SG = (128, 64, 12, "tma", "h256sg")
D64 = (LDES, LDESG)
D128 = (OVEDQS, OVEDQSG, OVEDFCS)
CODES = {LDES: (62, 63), LDESG: (64, 65), OVEDQS: (66, 67), OVEDQSG: (68, 69), OVEDFCS: (70, 71),
         H256SG: (72, 73)}  # launcher loads: by name, with the fallback
HEAD_DIM = {LDES: 64, LDESG: 64, OVEDQS: 128, OVEDQSG: 128, OVEDFCS: 128, H256SG: 256}

# Shapes (B, S, Hq, Hkv, causal, seq_lens): the TMA cases of each head size, ovedf's fold cases (odd block counts,
# lengths that skip one block of a pair or both), grids whose pair count is not a multiple of 8 (a smaller last
# group), one long sequence (the 3-stage ring wraps 32 times) and many heads
_EXTRA = ((3, 640, 12, 4, True, [640, 300, 129]), (5, 256, 7, 7, True, None), (1, 900, 3, 1, True, [899]),
          (1, 4096, 2, 1, True, None), (1, 4096, 2, 2, False, [4000]), (2, 1024, 16, 4, True, [1024, 1000]))
_D64_SHAPES = [c[:4] + c[5:7] for c in FA_TMA_CASES if c[4] == 64] + list(_EXTRA)
_D128_SHAPES = list({repr(c[:4] + c[5:7]): c[:4] + c[5:7] for c in FA_OV_CASES + FA_OVEDF_CASES}.values()) + list(_EXTRA)
FA_SPLIT_CASES = ([(B, S, Hq, Hkv, 64, causal, lens, v) for v in D64 for (B, S, Hq, Hkv, causal, lens) in _D64_SHAPES]
                  + [(B, S, Hq, Hkv, 128, causal, lens, v) for v in D128
                     for (B, S, Hq, Hkv, causal, lens) in _D128_SHAPES]
                  + [(B, S, Hq, Hkv, 256, causal, lens, H256SG) for (B, S, Hq, Hkv, causal, lens) in TMA_BODY_SHAPES
                     + ((2, 128, 4, 4, True, None), (2, 160, 2, 2, True, [64, 128]), (3, 640, 12, 4, True, [640, 300, 129]))])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_SPLIT_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fa_split_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# Left padding (seq_lens < 0: the span's last rows; the rows in front are zeros) for every candidate
FA_SPLIT_LEFT_CASES = [(3, 515, 4, 1, HEAD_DIM[v], causal, lens, v) for v in CODES
                       for causal, lens in ((True, [-515, -260, 300]), (False, [-1, -400, 129]))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_SPLIT_LEFT_CASES, ids=lambda c: _fa_case_id("-left-" + c[7][-1])(c))
def test_fa_split_left_padding_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# Sliding windows across and inside key tiles, right and left padding (B, S, Hq, Hkv, D, seq_lens, variant, window, cap)
FA_SPLIT_WIN_CASES = ([(2, 1000, 8, 2, HEAD_DIM[v], [1000, 385], v, w, 0.0) for v in CODES for w in (64, 200)]
                      + [(2, 1000, 4, 2, HEAD_DIM[v], [999, 640], v, w, 0.0) for v in D64 for w in (1, 129)]
                      + [(1, 2048, 4, 4, 128, None, v, 1024, 0.0) for v in D128]
                      + [(2, 1000, 8, 2, HEAD_DIM[v], [-1000, -385], v, 80, 0.0) for v in CODES])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_SPLIT_WIN_CASES, ids=_fa_win_id)
def test_fa_split_window_matches_reference(lib, case, dtype):
    _check_window_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_fa_split_moving_max(lib, dtype, causal, head_dim):
    """Keys whose norm grows along the sequence move each row's maximum tile after tile, then a flat stretch leaves
    it still (the lazy O rescale of ovedqs / ovedfcs / h256sg must move its frame on many tiles); ragged lengths."""
    _need_sm90()
    _check_moving_max(lib, dtype, causal, head_dim, tuple(v for v in CODES if HEAD_DIM[v] == head_dim),
                      4300 + head_dim + int(causal))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("variant", D128, ids=lambda v: v[-1])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lens", [None, [1000, 513]], ids=["dense", "ragged"])
def test_fa_split_rising_scores_move_the_softmax_frame(lib, lens, causal, variant, dtype):
    """Scores rising along the keys by about 100 in log2 units with one spike far above the rest (as
    test_fused_attention_rising_scores_move_the_softmax_frame for the planned D = 128 bodies)."""
    _need_sm90()
    _check_rising_scores(lib, lens, causal, variant, dtype, 43)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_fa_split_inf_padding_and_strided_output(lib, dtype, head_dim):
    """+-Inf and NaN in rows [seq_len, S) of Q, K and V (TMA copies them): those V rows must be zeroed (the V-tail
    fix-up arrives on V's own barrier) and those query rows not stored; O a transposed view (strided rows)."""
    _need_sm90()
    _check_inf_padding(lib, dtype, head_dim, tuple(v for v in CODES if HEAD_DIM[v] == head_dim), 43 + head_dim,
                       strided_out=True)


@pytest.mark.parametrize("S", [300, 77], ids=["broadcast-kv", "short"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_fa_split_falls_back_when_tma_cannot_address(lib, S, head_dim):
    """K/V broadcast over the batch (stride 0) or S < 128: by name (62 / 64 / ... / 72) the launcher refuses; the
    codes with the fallback (63 / 65 / ... / 73) run the planned bodies' fallback (cp.async (128, 128, 12) at D = 64
    / 128, (128, 64, 8) at D = 256) and match."""
    _need_sm90()
    vs = tuple(v for v in CODES if HEAD_DIM[v] == head_dim)
    _check_tma_fallback(lib, S, head_dim, vs, [(v[:3], CODES[v][1]) for v in vs],
                        zlib.crc32(f"split{S}{head_dim}".encode()))


def test_fa_split_refusals(lib):
    """Codes 62-71 run at D = 64 / 128 with (128, 128, 12) only (62-65 at D = 64, 66-71 at D = 128), 72 / 73 at
    D = 256 with block_n 64 only; every other launch and code 74 is refused and nothing is written."""
    _need_sm90()
    B, S, Hq, Hkv = 1, 256, 2, 2
    gen = torch.Generator(device="cuda").manual_seed(43)
    valid = {(HEAD_DIM[v], c, 64 if v == H256SG else 128) for v, cs in CODES.items() for c in cs}
    for D in (64, 80, 128, 256):
        q, k, v = (_rand((B, S, h, D), torch.float16, gen) for h in (Hq, Hkv, Hkv))
        out = torch.full_like(q, float("nan"))
        for code in range(62, 75):
            for bn in (64, 80, 128):
                if (D, code, bn) in valid:
                    continue  # the valid launches (tested above)
                assert _fa_fwd_raw(lib, q, k, v, out, False, (128, bn, 12), code) != 0, (D, code, bn)
        torch.cuda.synchronize()
        assert torch.isnan(out).all(), D
