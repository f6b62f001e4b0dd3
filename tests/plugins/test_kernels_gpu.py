"""GPU tests of the attention kernels against the float64 reference (onnx_fuse.reference; computed in torch
float64 on the GPU by cuda_reference.py, which tests/reference/test_torch_attention.py checks against NumPy).

Every case draws fresh random inputs, poisons the output with NaN before the launch, and
checks ||out - ref|| / ||ref|| (float64 reference on the same fp16/bf16 values) under a
per-dtype bound; a NaN anywhere fails. Paged cases also fill every pool slot the kernel must
not read with NaN. Run on a CUDA machine:

    python -m onnx_fuse.plugins.build_kernels --what lib && pytest -m gpu tests/plugins/test_kernels_gpu.py
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from .conftest import make_paged_pool as _make_pool  # the `lib` fixture is there too

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)
from . import cuda_reference as ref  # noqa: E402  (float64 on the GPU; after the skips: it imports torch)

# ||out - ref|| / ||ref|| bounds: fp16 rounding of P and O ~1e-3, bf16 ~8x coarser.
TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}
DTYPES = [torch.float16, torch.bfloat16]


def _rel_err(out: torch.Tensor, expect) -> float:
    if isinstance(expect, torch.Tensor):  # a float64 reference on the GPU: compared there
        o = out.detach().to(torch.float64)
        assert torch.isfinite(o).all(), f"non-finite output: {torch.count_nonzero(~torch.isfinite(o)).item()} elements"
        e = expect.to(o.device, torch.float64)
        denom, num = torch.linalg.norm(e).item(), torch.linalg.norm(o - e).item()
        return num / denom if denom > 0 else num
    o = out.detach().float().cpu().numpy().astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    e = expect.astype(np.float64)
    denom = np.linalg.norm(e)
    num = np.linalg.norm(o - e)
    return float(num / denom) if denom > 0 else float(num)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _rand(shape, dtype, gen):
    return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


# ------------------------------------------------------------------ fused attention (prefill)


def _pad_tag(lens) -> str:
    """Test-id tag of a seq_lens list: "" none, "p" right padding only, "l" with left padding."""
    return "" if not lens else "l" if min(lens) < 0 else "p"


FA_CASES = [
    # B, S, Hq, Hkv, D, causal, seq_lens, variant (block_m, block_n, warps) or None = planned
    (2, 128, 4, 4, 64, False, None, None),
    (2, 128, 4, 4, 64, True, None, (64, 64, 4)),
    (1, 1, 2, 1, 128, True, None, None),
    (1, 1, 2, 2, 64, False, None, (128, 32, 4)),
    (2, 77, 8, 2, 128, True, [77, 33], (128, 64, 4)),
    (3, 200, 6, 3, 64, False, [200, 1, 0], (128, 64, 8)),
    (2, 515, 4, 1, 128, False, [515, 260], (64, 64, 4)),
    (2, 515, 4, 1, 128, True, [515, 260], (128, 64, 8)),
    (2, 515, 4, 1, 128, True, [515, 260], (128, 32, 4)),
    (1, 1024, 4, 4, 128, True, None, (128, 64, 4)),
    (1, 1000, 8, 8, 128, False, None, (128, 32, 4)),
    (1, 1000, 8, 8, 128, False, None, (128, 64, 4)),
    (2, 333, 16, 1, 64, True, [300, 333], (128, 64, 4)),
    (2, 333, 16, 1, 64, False, [300, 333], (128, 32, 4)),
    (4, 64, 12, 4, 128, False, [64, 63, 17, 2], (128, 64, 8)),
    # Hopper wgmma variant (sm_90a)
    (2, 128, 4, 4, 128, False, None, (128, 128, 8)),
    (2, 128, 4, 4, 64, False, None, (128, 128, 8)),
    (1, 1, 2, 1, 128, True, None, (128, 128, 8)),
    (2, 515, 4, 1, 128, True, [515, 260], (128, 128, 8)),
    (2, 333, 16, 1, 64, True, [300, 333], (128, 128, 8)),
    (1, 1000, 8, 8, 128, False, None, (128, 128, 8)),
    (3, 200, 6, 3, 64, False, [200, 1, 0], (128, 128, 8)),
    (1, 1024, 4, 4, 128, True, None, (128, 128, 8)),
    # head sizes 80, 96 (rows padded in shared memory; wgmma with D padded to 128) and 256
    (2, 300, 4, 2, 80, False, [300, 129], None),
    (2, 300, 4, 2, 80, True, [300, 129], (64, 64, 4)),
    (2, 300, 4, 2, 80, True, None, (128, 32, 4)),
    (1, 515, 4, 4, 80, False, None, (128, 64, 4)),
    (2, 515, 4, 1, 80, True, [515, 260], (128, 128, 8)),
    (1, 515, 4, 4, 80, False, None, (128, 64, 8)),
    (2, 333, 6, 3, 96, False, [333, 17], None),
    (2, 333, 6, 3, 96, True, None, (64, 64, 4)),
    (1, 333, 6, 6, 96, False, None, (128, 32, 4)),
    (2, 333, 6, 3, 96, True, [300, 333], (128, 64, 4)),
    (2, 515, 4, 1, 96, True, [515, 260], (128, 128, 8)),
    (1, 1000, 4, 4, 96, False, None, (128, 128, 8)),
    (1, 515, 4, 2, 96, True, None, (128, 64, 8)),
    (2, 300, 4, 2, 256, False, [300, 129], None),
    (2, 300, 4, 2, 256, True, [300, 129], (64, 64, 4)),
    (2, 515, 4, 1, 256, True, [515, 260], (128, 64, 8)),
    (1, 1000, 4, 4, 256, False, None, (128, 64, 8)),
    (1, 1, 2, 1, 256, True, None, (128, 64, 8)),
    # D = 64 wgmma with one warpgroup per CTA
    (2, 128, 4, 4, 64, False, None, (64, 128, 4)),
    (2, 333, 16, 1, 64, True, [300, 333], (64, 128, 4)),
    (3, 200, 6, 3, 64, False, [200, 1, 0], (64, 128, 4)),
    (1, 1000, 8, 8, 64, True, None, (64, 128, 4)),
    (1, 1, 2, 1, 64, True, None, (64, 128, 4)),
    # warp-specialized wgmma (producer warpgroup, two consumer warpgroups), D = 64 and 128
    (2, 128, 4, 4, 128, False, None, (128, 128, 12)),
    (2, 515, 4, 1, 128, True, [515, 260], (128, 128, 12)),
    (1, 1000, 8, 8, 128, False, None, (128, 128, 12)),
    (1, 1024, 4, 4, 128, True, None, (128, 128, 12)),
    (4, 64, 12, 4, 128, False, [64, 63, 17, 2], (128, 128, 12)),
    (1, 1, 2, 1, 128, True, None, (128, 128, 12)),
    (2, 333, 16, 1, 64, True, [300, 333], (128, 128, 12)),
    (3, 200, 6, 3, 64, False, [200, 1, 0], (128, 128, 12)),
    (1, 2000, 4, 2, 64, False, None, (128, 128, 12))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_CASES, ids=lambda c: "B{}S{}H{}/{}D{}{}{}-{}".format(
    c[0], c[1], c[2], c[3], c[4], "c" if c[5] else "", _pad_tag(c[6]),
    "x".join(map(str, c[7])) if c[7] else "auto"))
def test_fused_attention_matches_reference(lib, case, dtype):
    _check_fused_case(lib, case, dtype)


def _check_fused_case(lib, case, dtype, loads=None):
    B, S, Hq, Hkv, D, causal, lens, variant = case
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    q = _rand((B, S, Hq, D), dtype, gen)
    k = _rand((B, S, Hkv, D), dtype, gen)
    v = _rand((B, S, Hkv, D), dtype, gen)
    seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    _poison_padding(lens, q, k, v)  # padding content must not matter
    out = torch.full_like(q, float("nan"))
    scale = 0.7 / D**0.5
    lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, scale=scale, variant=variant, loads=loads)
    torch.cuda.synchronize()
    expect = ref.fused_attention(np.nan_to_num(_np(q)), np.nan_to_num(_np(k)), np.nan_to_num(_np(v)),
                                 seq_lens=lens, causal=causal, scale=scale, out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    _assert_padding_zero(lens, out)  # padded rows are exact zeros


def _poison_padding(lens, *tensors: torch.Tensor) -> None:
    """NaN into every row of [B, S, ...] tensors outside the spans of ``lens`` (None: none)."""
    if lens is not None:
        for t in tensors:
            t[~_span_rows(lens, t.shape[0], t.shape[1], t.device)] = float("nan")


def _assert_padding_zero(lens, out: torch.Tensor) -> None:
    """Rows of ``out`` [B, S, ...] outside the spans of ``lens`` are exact zeros (docs/ops.md)."""
    if lens is not None:
        pad = out[~_span_rows(lens, out.shape[0], out.shape[1], out.device)]
        assert torch.count_nonzero(pad).item() == 0, "a padded row is not zero"


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fused_attention_strided_packed_qkv(lib, dtype):
    """Q/K/V as views of one packed [B, S, (Hq + 2*Hkv) * D] tensor; output in a [B,H,S,D] buffer."""
    B, S, Hq, Hkv, D = 2, 190, 8, 2, 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    qkv = _rand((B, S, Hq + 2 * Hkv, D), dtype, gen)
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    out_bhsd = torch.full((B, Hq, S, D), float("nan"), dtype=dtype, device="cuda")
    out = out_bhsd.transpose(1, 2)
    lib.fused_attention(q, k, v, out, causal=True)
    torch.cuda.synchronize()
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=True, out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL[dtype]


def test_fused_attention_onnx_level_contract(lib):
    """The ONNX-level op ([B,S,H*D] inputs) computes what the kernel computes."""
    B, S, Hq, Hkv, D = 2, 70, 4, 2, 64
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = _rand((B, S, Hq * D), torch.float16, gen)
    k = _rand((B, S, Hkv * D), torch.float16, gen)
    v = _rand((B, S, Hkv * D), torch.float16, gen)
    lens = np.array([70, 41], np.int32)
    out = torch.full_like(q, float("nan"))
    lib.fused_attention(q.view(B, S, Hq, D), k.view(B, S, Hkv, D), v.view(B, S, Hkv, D),
                        out.view(B, S, Hq, D), seq_lens=torch.from_numpy(lens).cuda(), causal=True)
    torch.cuda.synchronize()
    expect = ref.fused_attention_op(_np(q), _np(k), _np(v), lens, num_heads=Hq, kv_num_heads=Hkv, causal=1)
    assert _rel_err(out, expect) < TOL[torch.float16]


# ------------------------------------------ logit softcap (Gemma 2): the _sc twins of the variants
# softmax(cap * tanh(scale * q k^T / cap) + mask) v; the reference is torch float64 on the same
# fp16/bf16 values. q is scaled up so that the scores reach the cap (trained Gemma-2 logits do)
# and the softcap changes the result far beyond the tolerance (checked in every case).

FA_SC_CASES = [  # B, S, Hq, Hkv, D, causal, seq_lens, variant (None = planned), cap, q gain
    (2, 1024, 32, 8, 128, False, None, None, 50.0, 24.0),       # planned: TMA r24 (H200)
    (2, 1024, 32, 8, 128, True, [1024, 700], None, 5.0, 4.0),
    (2, 1024, 32, 8, 64, False, [1000, 1024], None, 5.0, 4.0),  # planned: TMA (H200)
    (2, 1024, 32, 8, 64, True, None, None, 50.0, 24.0),
    (9, 100, 32, 8, 128, True, None, None, 5.0, 4.0),  # planned TMA r24 -> cp.async twin (S < 128)
    (2, 333, 16, 1, 64, True, [300, 333], (128, 128, 12), 5.0, 4.0),
    (3, 200, 6, 3, 128, False, [200, 1, 0], (128, 128, 12), 5.0, 4.0),
    (2, 515, 4, 1, 128, True, [515, 260], (64, 64, 4), 5.0, 4.0),
    (2, 515, 4, 1, 64, False, [515, 260], (64, 64, 4), 30.0, 16.0),
    (1, 1, 2, 1, 128, True, None, None, 5.0, 4.0),
    (2, 300, 8, 2, 128, True, [300, 129], (128, 64, 4), 5.0, 4.0),
    (1, 515, 4, 4, 64, False, None, (128, 64, 4), 5.0, 4.0),
    (2, 300, 4, 2, 80, True, [300, 129], (128, 128, 8), 5.0, 4.0),
    (2, 300, 4, 2, 96, False, [300, 129], (128, 64, 4), 5.0, 4.0),
    (1, 333, 6, 3, 96, True, None, (64, 64, 4), 5.0, 4.0),
    (2, 300, 4, 2, 256, True, [300, 129], (128, 64, 8), 50.0, 24.0),
    (2, 300, 4, 2, 256, False, None, (64, 64, 4), 5.0, 4.0),
    # left padding (seq_lens < 0: the last rows), the planned TMA twin, cp.async ws, mma.sync
    (2, 1024, 32, 8, 128, True, [-1024, -700], None, 5.0, 4.0),
    (3, 200, 6, 3, 128, False, [-200, -1, 0], (128, 128, 12), 5.0, 4.0),
    (2, 515, 4, 1, 64, True, [-515, -260], (64, 64, 4), 30.0, 16.0),
]


def _softcap_reference(q, k, v, lens, causal, scale, cap):
    """float64 on the GPU (the shared reference, cuda_reference): q [B,S,Hq,D], k/v [B,S,Hkv,D] -> a float64
    tensor [B,S,Hq,D]; padded rows zero."""
    return ref.fused_attention(q, k, v, seq_lens=lens, causal=causal, scale=scale, softcap=cap)


def _check_inf_padding(lib, dtype, D, variants, seed, strided_out=False):
    """B3 S700 H8/2 with seq_lens [700, 385, 130] and NaN (Q), +Inf (K), +-Inf (V) in rows [seq_len, S) (right
    padding; TMA copies those rows): those V rows must be zeroed and those query rows not stored, for each of
    ``variants``, full and causal; strided_out: O a [B, H, S, D] buffer's transposed view (strided rows)."""
    B, S, Hq, Hkv = 3, 700, 8, 2
    lens = [700, 385, 130]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (_rand((B, S, h, D), dtype, gen) for h in (Hq, Hkv, Hkv))
    qc, kc, vc = q.clone(), k.clone(), v.clone()
    for b, L in enumerate(lens):
        qc[b, L:] = kc[b, L:] = vc[b, L:] = 0
        q[b, L:] = float("nan")
        k[b, L:] = float("inf")
        v[b, L:] = float("inf")
        v[b, L + 1::3] = float("-inf")
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for causal in (False, True):
        expect = ref.fused_attention(_np(qc), _np(kc), _np(vc), seq_lens=lens, causal=causal, out_dtype=np.float64)
        for variant in variants:
            out = (torch.full((B, Hq, S, D), float("nan"), dtype=dtype, device="cuda").transpose(1, 2) if strided_out
                   else torch.full_like(q, float("nan")))
            lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, variant=variant)
            torch.cuda.synchronize()
            assert _rel_err(out, expect) < TOL[dtype], (variant, causal)
            for b, L in enumerate(lens):
                assert torch.count_nonzero(out[b, L:]).item() == 0, (variant, causal)


def _fa_fwd_raw(lib, q, k, v, out, causal, block, loads):
    """onnx_fuse_fused_attention_fwd with the launcher's own arguments (fp16, no seq_lens, scale 1 / sqrt(D)):
    block = (block_m, block_n, warps), loads its code; returns the launcher's status."""
    B, S, Hq, D = q.shape
    st = [x for t in (q, k, v, out) for x in t.stride()[:3]]
    return lib._lib.onnx_fuse_fused_attention_fwd(
        0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, k.shape[2], D, *st,
        1.0 / D**0.5, int(causal), *block, loads, torch.cuda.current_stream().cuda_stream)


def _check_tma_fallback(lib, S, D, variants, fallback, seed):
    """K/V that TMA cannot address (broadcast over the batch, stride 0, when S >= 128; else S < 128): each of
    ``variants`` by name is refused, and each (block, loads) of ``fallback`` (codes that fall back to a body without
    TMA) runs and matches the reference (causal)."""
    from onnx_fuse.plugins.kernel_lib import KernelError

    B, Hq, Hkv = 2, 4, 2
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = _rand((B, S, Hq, D), torch.float16, gen)
    kb = 1 if S >= 128 else B
    k = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    v = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    out = torch.full_like(q, float("nan"))
    for variant in variants:
        with pytest.raises(KernelError):
            lib.fused_attention(q, k, v, out, variant=variant)
    torch.cuda.synchronize()
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=True, out_dtype=np.float64)
    for block, code in fallback:
        out.fill_(float("nan"))
        assert _fa_fwd_raw(lib, q, k, v, out, True, block, code) == 0
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[torch.float16], code


def _span_rows(lens, B: int, S: int, device) -> torch.Tensor:
    """bool [B, S]: the rows inside each sequence's span (seq_lens[b] = L >= 0: [0, L); -L: the
    last L rows; None: all)."""
    pos = torch.arange(S, device=device)
    raw = torch.tensor(lens if lens is not None else [S] * B, device=device)
    n = raw.abs().clamp(max=S)
    first = torch.where(raw < 0, S - n, torch.zeros_like(n))
    return (pos[None, :] >= first[:, None]) & (pos[None, :] < (first + n)[:, None])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_SC_CASES, ids=lambda c: "B{}S{}H{}/{}D{}{}{}-{}-cap{:g}".format(
    c[0], c[1], c[2], c[3], c[4], "c" if c[5] else "", _pad_tag(c[6]),
    "x".join(map(str, c[7])) if c[7] else "auto", c[8]))
def test_fused_attention_softcap_matches_torch(lib, case, dtype):
    B, S, Hq, Hkv, D, causal, lens, variant, cap, gain = case
    if variant is not None and len(variant) > 3:
        _need_sm90()
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    q = (_rand((B, S, Hq, D), torch.float32, gen) * gain).to(dtype)
    k = _rand((B, S, Hkv, D), dtype, gen)
    v = _rand((B, S, Hkv, D), dtype, gen)
    seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    clean = (q.clone(), k.clone(), v.clone())
    _poison_padding(lens, q, k, v)  # padding content must not matter
    out = torch.full_like(q, float("nan"))
    scale = 1.0 / D**0.5
    lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, scale=scale, softcap=cap, variant=variant)
    torch.cuda.synchronize()
    expect = _softcap_reference(*clean, lens, causal, scale, cap)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    # the softcap matters here: without it the result is far off (not with a single key: p = 1)
    if S > 1:
        assert _rel_err(out, _softcap_reference(*clean, lens, causal, scale, 0.0)) > 4 * TOL[dtype]
    _assert_padding_zero(lens, out)  # padded rows are exact zeros


def test_fused_attention_softcap_refusals(lib):
    """A variant without a _sc twin is refused by the planner; onnx_fuse_fused_attention_fwd_ex
    refuses bad caps, variants without a twin and the persistent loads."""
    q = torch.zeros((1, 128, 2, 128), dtype=torch.float16, device="cuda")
    out = torch.empty_like(q)
    with pytest.raises(ValueError, match="softcap"):
        lib.fused_attention(q, q, q, out, softcap=30.0, variant=(128, 32, 4))
    for cap, variant, loads in ((-1.0, (64, 64, 4), 0), (float("inf"), (64, 64, 4), 0),
                                (30.0, (128, 32, 4), 0), (30.0, (128, 128, 12), 4)):
        rc = lib._lib.onnx_fuse_fused_attention_fwd_ex(
            0, q.data_ptr(), q.data_ptr(), q.data_ptr(), out.data_ptr(), None, 1, 128, 2, 2, 128,
            *([128 * 2 * 128, 2 * 128, 128] * 4), 0.1, cap, 0, *variant, loads, None)
        assert rc != 0, (cap, variant, loads)
    torch.cuda.synchronize()


# ------------------------------------------ warp-specialized wgmma with a TMA producer (m128n128w12t)
# Under TMA only rows past S read as zeros; rows [seq_len, S) are whatever the tensor holds there.

FA_TMA = (128, 128, 12, "tma")
FA_TMA_CASES = [  # as FA_CASES (rows [seq_len, S) of Q, K and V hold NaN)
    (2, 128, 4, 4, 128, False, None, FA_TMA),
    (2, 515, 4, 1, 128, True, [515, 260], FA_TMA),
    (1, 1000, 8, 8, 128, False, None, FA_TMA),
    (1, 1024, 4, 4, 128, True, None, FA_TMA),
    (4, 130, 12, 4, 128, False, [130, 127, 17, 2], FA_TMA),
    (1, 128, 2, 1, 128, True, None, FA_TMA),
    (2, 700, 8, 2, 128, False, [700, 385], FA_TMA),
    (1, 4096, 2, 1, 128, False, [3000], FA_TMA),
    (2, 333, 16, 1, 64, True, [300, 333], FA_TMA),
    (3, 200, 6, 3, 64, False, [200, 1, 0], FA_TMA),
    (1, 2000, 4, 2, 64, False, None, FA_TMA),
    (2, 1000, 4, 4, 64, True, [999, 640], FA_TMA)]


def _fa_case_id(suffix: str):
    """pytest id of a fused-attention case: shape, c (causal), p (padded), then ``suffix``."""
    return lambda c: "B{}S{}H{}/{}D{}{}{}{}".format(c[0], c[1], c[2], c[3], c[4], "c" if c[5] else "",
                                                   _pad_tag(c[6]), suffix)


def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA variant: compute capability 9.0 (sm_90a library) only")


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_TMA_CASES, ids=_fa_case_id("-tma"))
def test_fused_attention_tma_matches_reference(lib, case, dtype):
    _need_sm90()
    test_fused_attention_matches_reference(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_TMA_CASES, ids=_fa_case_id("-tma-r24"))
def test_fused_attention_tma_r24_matches_reference(lib, case, dtype):
    """The experimental m128n128w12t_r24 entries (launcher loads = 3: 24 producer / 240
    consumer registers) on the TMA cases."""
    _need_sm90()
    _check_fused_case(lib, case, dtype, loads=3)


# Experimental m128n128w12tp (the TMA body on a persistent grid of min(tiles, SMs) CTAs, D = 128):
# the TMA cases, plus ones with several rounds of tiles per CTA (over 132 tiles), empty sequences
# (tiles that only store zeros) and ragged lengths, so stage phases, the Q-empty barrier, the
# V-tail barrier and the consumers' turn order all carry across tiles.
FA_PERSIST = (128, 128, 12, "tma", "persistent")
FA_PERSIST_CASES = [c[:7] + (FA_PERSIST,) for c in FA_TMA_CASES if c[4] == 128] + [
    (2, 260, 40, 8, 128, True, [260, 0], FA_PERSIST),  # 240 tiles, a third of them empty
    (3, 300, 48, 8, 128, False, [130, 300, 0], FA_PERSIST),  # 432 tiles: 4 rounds on 132 SMs
    (1, 640, 48, 48, 128, True, None, FA_PERSIST)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_PERSIST_CASES, ids=_fa_case_id("-tma-persistent"))
def test_fused_attention_tma_persistent_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


def test_fused_attention_tma_persistent_refusals(lib):
    """m128n128w12tp is compiled at D = 128 only: the planner refuses it elsewhere and the launcher
    (loads = 4) returns an error instead of launching anything."""
    _need_sm90()
    from onnx_fuse.plugins import launch_plan as lp

    B, S, Hq, Hkv, D = 2, 300, 4, 2, 64
    gen = torch.Generator(device="cuda").manual_seed(13)
    q, k, v = (_rand((B, S, h, D), torch.float16, gen) for h in (Hq, Hkv, Hkv))
    out = torch.full_like(q, float("nan"))
    with pytest.raises(ValueError):
        lp.plan_fused_attention(B, S, Hq, Hkv, D, variant=FA_PERSIST)
    st = [x for t in (q, k, v, out) for x in t.stride()[:3]]
    rc = lib._lib.onnx_fuse_fused_attention_fwd(
        0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, Hkv, D, *st,
        1.0 / D**0.5, 0, 128, 128, 12, 4, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert rc != 0 and torch.isnan(out).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_attention_tma_inf_padding(lib, dtype, D, causal):
    """+-Inf and NaN in rows [seq_len, S) of Q, K and V (TMA copies them): P is 0 there, but
    0 * Inf is NaN, so the kernel must zero those V rows and not store those query rows."""
    _need_sm90()
    B, S, Hq, Hkv = 3, 700, 8, 2
    lens = [700, 385, 130]
    gen = torch.Generator(device="cuda").manual_seed(11 + D + int(causal))
    q, k, v = (_rand((B, S, h, D), dtype, gen) for h in (Hq, Hkv, Hkv))
    qc, kc, vc = q.clone(), k.clone(), v.clone()
    for b, L in enumerate(lens):
        qc[b, L:] = kc[b, L:] = vc[b, L:] = 0  # what the reference sees there (it never reads it)
        q[b, L:] = float("nan")
        k[b, L:] = float("inf")
        v[b, L:] = float("inf")
        v[b, L + 1::3] = float("-inf")
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    expect = ref.fused_attention(_np(qc), _np(kc), _np(vc), seq_lens=lens, causal=causal, out_dtype=np.float64)
    variants = [FA_TMA] + ([FA_PERSIST, FA_OV, FA_OVE] if D == 128 else [])
    for variant in variants:
        out = torch.full_like(q, float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, variant=variant)
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[dtype], variant
        for b, L in enumerate(lens):
            assert torch.count_nonzero(out[b, L:]).item() == 0, variant


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fused_attention_tma_strided_packed_qkv(lib, dtype):
    """Q/K/V as views of one packed [B, S, (Hq + 2*Hkv) * D] tensor (tensor maps over strided
    heads); output in a [B,H,S,D] buffer; ragged lengths."""
    _need_sm90()
    B, S, Hq, Hkv, D = 2, 390, 8, 2, 128
    gen = torch.Generator(device="cuda").manual_seed(9)
    qkv = _rand((B, S, Hq + 2 * Hkv, D), dtype, gen)
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:]
    lens = [390, 200]
    out = torch.full((B, Hq, S, D), float("nan"), dtype=dtype, device="cuda").transpose(1, 2)
    expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=True, out_dtype=np.float64)
    for variant in (FA_TMA, FA_PERSIST):
        out.fill_(float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=torch.tensor(lens, dtype=torch.int32, device="cuda"),
                            causal=True, variant=variant)
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[dtype], variant


@pytest.mark.parametrize("S", [300, 77], ids=["broadcast-kv", "short"])
def test_fused_attention_tma_falls_back_when_tma_cannot_address(lib, S):
    """K/V broadcast over the batch (stride 0), or fewer rows than a TMA box (S < 128), break the
    launcher's TMA rules: asked for by name it refuses (cudaErrorInvalidValue); with loads = 2
    (what a planned TMA launch passes) it runs the cp.async producer and the result matches."""
    _need_sm90()
    from onnx_fuse.plugins.kernel_lib import KernelError

    B, Hq, Hkv, D = 2, 4, 2, 128
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = _rand((B, S, Hq, D), torch.float16, gen)
    kb = 1 if S >= 128 else B  # the short case keeps ordinary strides
    k = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    v = _rand((kb, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    out = torch.full_like(q, float("nan"))
    for variant in (FA_TMA, FA_PERSIST, FA_OV, FA_OVE, FA_OVED, FA_OVEDG, FA_OVEDF):  # by name: no fallback
        with pytest.raises(KernelError):
            lib.fused_attention(q, k, v, out, variant=variant)
    torch.cuda.synchronize()
    st = [x for t in (q, k, v, out) for x in t.stride()[:3]]
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=True, out_dtype=np.float64)
    for code in (2, 5, 7, 9, 19, 23, 25):  # planned TMA: w12t, r24, ov, ove, oved, ovedg, ovedf
        out.fill_(float("nan"))
        rc = lib._lib.onnx_fuse_fused_attention_fwd(
            0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, Hkv, D, *st,
            1.0 / D**0.5, 1, 128, 128, 12, code, torch.cuda.current_stream().cuda_stream)
        assert rc == 0
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[torch.float16], code


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("broadcast", [False, True], ids=["tma", "fallback"])
def test_fused_attention_tma_planned_d128_ov(lib, dtype, broadcast):
    """At D = 128 on the H200 the planner names m128n128w12t_ovedq (launcher loads 31, run 21; oved until
    then) without a mask, and causal m128n128w12t_ovedfc (loads 39, run 29a; ovedq in runs 24-28, ovedf
    before): each runs on TMA, or on the cp.async producer where TMA cannot address K/V (broadcast over
    the batch)."""
    _need_sm90()
    from onnx_fuse.plugins import launch_plan as lp

    B, S, Hq, Hkv, D, lens = 2, 1024, 32, 8, 128, [1024, 700]
    assert lp.plan_fused_attention(B, S, Hq, Hkv, D, str(dtype)[6:], causal=True).variant == lp.FA_WS_TMA_OVEDFC
    assert lp.plan_fused_attention(B, S, Hq, Hkv, D, str(dtype)[6:]).variant == lp.FA_WS_TMA_OVEDQ
    gen = torch.Generator(device="cuda").manual_seed(21)
    q = _rand((B, S, Hq, D), dtype, gen)
    kb = 1 if broadcast else B
    k = _rand((kb, S, Hkv, D), dtype, gen).expand(B, S, Hkv, D)
    v = _rand((kb, S, Hkv, D), dtype, gen).expand(B, S, Hkv, D)
    out = torch.full_like(q, float("nan"))
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for causal in (True, False):
        out.fill_(float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal)
        torch.cuda.synchronize()
        expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=causal, out_dtype=np.float64)
        assert _rel_err(out, expect) < TOL[dtype], causal
        assert torch.count_nonzero(out[1, 700:]).item() == 0


# m128n128w12t_ov (launch_plan.FA_WS_TMA_OV, planned at D = 128: r24 with the softmax pinned
# between wgmma wait_group 1 and 0) by name on the TMA cases at D = 128 and the persistent ones.
FA_OV = (128, 128, 12, "tma", "ov")
FA_OV_CASES = list({repr(c[:7]): c[:7] + (FA_OV,) for c in FA_TMA_CASES + FA_PERSIST_CASES if c[4] == 128}.values())
# m128n128w12t_ove (launch_plan.FA_WS_TMA_OVE, planned at D = 128 for bf16): ov with the output
# staged in shared memory and written as 16-byte rows, on the same cases.
FA_OVE = (128, 128, 12, "tma", "ove")
FA_OVE_CASES = [c[:7] + (FA_OVE,) for c in FA_OV_CASES]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OV_CASES, ids=_fa_case_id("-ov"))
def test_fused_attention_tma_ov_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_attention_tma_ov_moving_max(lib, dtype, causal):
    """Keys that grow along the sequence move every row's running max on every tile (each tile
    rescales O by a factor below 1), then a flat stretch (the same key repeated) leaves it still;
    against the reference, the planned m128n128w12t_ov and the r24 body it pins."""
    _need_sm90()
    _check_moving_max(lib, dtype, causal, 128, (FA_OV, (128, 128, 12, "tma", "r24"), FA_OVE), 31 + int(causal))


def _check_moving_max(lib, dtype, causal, D, variants, seed):
    """The moving-max case (above) at head size D for each of ``variants``: B2 S1300 H8/2, seq_lens [1300, 900]."""
    B, S, Hq, Hkv = 2, 1300, 8, 2
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = _rand((B, S, Hq, D), dtype, gen).abs()
    k = _rand((B, S, Hkv, D), dtype, gen).abs() * 0.2
    ramp = torch.linspace(0.2, 3.0, S, device="cuda").view(1, S, 1, 1)
    k = (k.float() * ramp).to(dtype)
    k[:, 500:800] = k[:, 499:500]  # flat: the max stops moving for two tiles and more
    v = _rand((B, S, Hkv, D), dtype, gen)
    lens = [1300, 900]
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=causal, out_dtype=np.float64)
    for variant in variants:
        out = torch.full_like(q, float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, variant=variant)
        torch.cuda.synchronize()
        assert _rel_err(out, expect) < TOL[dtype], variant
        assert torch.count_nonzero(out[1, 900:]).item() == 0, variant


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OVE_CASES, ids=_fa_case_id("-ove"))
def test_fused_attention_tma_ove_matches_reference(lib, case, dtype):
    """m128n128w12t_ove by name on the ov cases: ragged lengths with NaN padding, GQA, several query
    tiles per head, empty sequences (padded rows are exact zeros: the staged epilogue must not
    store rows past seq_len either)."""
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# The wgmma descriptors stepped by adds (fa_ws_core's kWsLeanDesc, run 17): planned m128n128w12t_ld at
# D = 64 with the candidates _ldr (24 / 240 registers) and _lde (staged output), on the D = 64 TMA
# cases plus a ragged batch; planned m128n128w12t_oved at D = 128 (ove with them) on the ov cases.
FA_D64_LD = [(128, 128, 12, "tma", t) for t in ("ld", "ldr", "lde")]
FA_OVED = (128, 128, 12, "tma", "oved")
FA_CAND_CASES = [c[:7] + (v,) for v in FA_D64_LD for c in FA_TMA_CASES if c[4] == 64] + [
    (8, 512, 4, 2, 64, True, [512, 511, 300, 129, 128, 1, 0, 257], v) for v in FA_D64_LD] + [
    c[:7] + (FA_OVED,) for c in FA_OV_CASES]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_CAND_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fused_attention_tma_stepped_descriptors_match_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("sharp", [1.0, 24.0], ids=["plain", "sharp"])
def test_fused_attention_tma_d64_stepped_descriptors_error_as_w12t(lib, dtype, causal, sharp):
    """On the same inputs _ld / _ldr / _lde compute the same values as m128n128w12t (only the wgmma
    descriptors' computation, the register split or the output path differ), so their error
    against the float64 reference is the same; "sharp" scales the scores (standard deviation about
    35 in the exp2 domain: the running max moves by large steps)."""
    _need_sm90()
    B, S, Hq, Hkv, D, lens = 2, 1000, 8, 2, 64, [1000, 700]
    gen = torch.Generator(device="cuda").manual_seed(41 + int(causal) + int(sharp))
    q = _rand((B, S, Hq, D), dtype, gen)
    k = _rand((B, S, Hkv, D), dtype, gen)
    v = _rand((B, S, Hkv, D), dtype, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    scale = sharp / D**0.5
    expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=causal, scale=scale,
                                 out_dtype=np.float64)
    errs = {}
    for variant in [FA_TMA] + FA_D64_LD:
        out = torch.full_like(q, float("nan"))
        lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, scale=scale, variant=variant)
        torch.cuda.synchronize()
        errs[variant[-1]] = _rel_err(out, expect)
        assert torch.count_nonzero(out[1, 700:]).item() == 0, variant
    assert errs["tma"] < TOL[dtype], errs
    for tag in ("ld", "ldr", "lde"):
        assert abs(errs[tag] - errs["tma"]) <= 1e-3 * errs["tma"], errs


@pytest.mark.parametrize("code", [11, 13, 15, 19, 23, 25, 31, 39],
                         ids=["ldr", "ld", "lde", "oved", "ovedg", "ovedf", "ovedq", "ovedfc"])
def test_fused_attention_tma_stepped_descriptors_codes_fall_back(lib, code):
    """Launcher loads 11 / 13 / 15 / 19 / 23 / 25 / 31 / 39 (ldr / ld / lde at D = 64, oved / ovedg / ovedf /
    ovedq / ovedfc at D = 128, with the cp.async fallback; 13, 31 and 39 are the planned ones, 39 causal)
    run where TMA cannot address K/V (broadcast over the batch) and match the reference (ovedf's and
    ovedfc's fallback keeps the one-block-per-CTA grid); the by-name codes 10 / 12 / 14 / 18 / 22 / 24 / 30 / 38 refuse
    there, and 16 / 17 (the dropped ovd), 20 / 21 (the dropped ovedl) and 26 / 27 (the dropped
    ovedh) everywhere."""
    _need_sm90()
    B, S, Hq, Hkv, D = 2, 300, 4, 2, 128 if code >= 17 else 64
    gen = torch.Generator(device="cuda").manual_seed(code)
    q = _rand((B, S, Hq, D), torch.float16, gen)
    k = _rand((1, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    v = _rand((1, S, Hkv, D), torch.float16, gen).expand(B, S, Hkv, D)
    out = torch.full_like(q, float("nan"))
    st = [x for t in (q, k, v, out) for x in t.stride()[:3]]
    stream = torch.cuda.current_stream().cuda_stream
    rc = lib._lib.onnx_fuse_fused_attention_fwd(
        0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, Hkv, D, *st,
        1.0 / D**0.5, 1, 128, 128, 12, code - 1, stream)
    assert rc != 0
    torch.cuda.synchronize()
    rc = lib._lib.onnx_fuse_fused_attention_fwd(
        0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, Hkv, D, *st,
        1.0 / D**0.5, 1, 128, 128, 12, code, stream)
    assert rc == 0
    torch.cuda.synchronize()
    expect = ref.fused_attention(_np(q), _np(k), _np(v), causal=True, out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL[torch.float16]
    for dropped in (16, 17, 20, 21, 26, 27, 32, 33, 34, 35):
        rc = lib._lib.onnx_fuse_fused_attention_fwd(
            0, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None, B, S, Hq, Hkv, D, *st,
            1.0 / D**0.5, 1, 128, 128, 12, dropped, stream)
        assert rc != 0, dropped
    torch.cuda.synchronize()


# m128n128w12t_ovedg (D = 128, planned causal from run 18): oved with the grid taken longest first
# within groups of 8 (head, sequence) pairs (kWsLptGroups), by name: the ov cases that are causal,
# a grid of many heads and batches (the remap's head / sequence arithmetic), a ragged batch, and
# grids whose pair count is not a multiple of 8 (a smaller last group). (ovedl, the whole-grid
# order, was dropped in run 18.)
FA_OVEDG = (128, 128, 12, "tma", "ovedg")
FA_OVEDG_CASES = [c[:7] + (FA_OVEDG,) for c in FA_OV_CASES if c[5]] + [
    (3, 640, 12, 4, 128, True, [640, 300, 129], FA_OVEDG), (5, 256, 7, 7, 128, True, None, FA_OVEDG),
    (1, 900, 3, 1, 128, True, [899], FA_OVEDG)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OVEDG_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fused_attention_tma_longest_first_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# Candidate m128n128w12t_ovedf (D = 128, both masks, by name): oved with query blocks nm - 1 - x and
# x in one CTA (kWsFold, the persistent tile loop): the ov cases, odd block counts (the middle
# CTA runs one block), two blocks, ragged batches whose short sequences skip the first (heavy) or
# the second block of a pair or both (lens 0, 1, 128, 129), and GQA / MQA.
FA_OVEDF = (128, 128, 12, "tma", "ovedf")
FA_OVEDF_CASES = [c[:7] + (v,) for v in (FA_OVEDF,) for c in FA_OV_CASES] + [
    (c[0], c[1], c[2], c[3], 128, causal, c[4], v) for v in (FA_OVEDF,) for causal in (False, True)
    for c in ((3, 640, 12, 4, [640, 300, 129]), (1, 129, 4, 1, None), (1, 900, 3, 1, [899]),
              (6, 1024, 4, 2, [1024, 0, 1, 128, 129, 700]), (2, 1000, 8, 8, [1000, 513]))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OVEDF_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fused_attention_tma_folded_blocks_match_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# m128n128w12t_ovedm (D = 128, both masks, by name; planned for fp16 without a mask from run 20): oved in two-CTA clusters whose
# producers each load one 64-column box of every K/V tile and multicast it to both CTAs (causal, the
# longer CTA's last tile alone). Only full pairs of query blocks: S a multiple of 256, no seq_lens.
# Grids of one cluster, many heads and batches, GQA / MQA, long sequences (the stage ring wraps).
FA_OVEDM = (128, 128, 12, "tma", "ovedm")
FA_OVEDM_CASES = [(B, S, Hq, Hkv, 128, causal, None, FA_OVEDM) for causal in (False, True) for B, S, Hq, Hkv in (
    (1, 256, 1, 1), (1, 256, 4, 4), (2, 1024, 8, 2), (3, 512, 12, 4), (1, 2048, 4, 1), (1, 4096, 2, 1),
    (5, 768, 7, 7))]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OVEDM_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fused_attention_tma_multicast_matches_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# m128n128w12t_ovedq (D = 128, planned from run 21 except fp16 causal): oved with Q's fragments in
# registers (kWsQRegs), on the ov cases (ragged batches, GQA / MQA, odd lengths) and ovedf's (lengths
# 0, 1, 128, 129 in one batch; its causal launch keeps the 3-D grid).
FA_OVEDQ = (128, 128, 12, "tma", "ovedq")
FA_OVEDQ_CASES = list({repr(c[:7]): c[:7] + (FA_OVEDQ,) for c in FA_OV_CASES + FA_OVEDF_CASES}.values())


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_OVEDQ_CASES, ids=lambda c: _fa_case_id("-" + c[7][-1])(c))
def test_fused_attention_tma_q_registers_match_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# Session 18's chained candidates (kWsChain, D = 128, by name): ovedfc (ovedf's fold with Q in registers,
# its second block's first S and softmax run beside the first block's last P V) on ovedf's cases (odd block
# counts, lengths 0 / 1 / 128 / 129 that skip one block of a pair or both, GQA / MQA), and the persistent
# tp_ovedc on the persistent cases (several rounds per CTA: chains across many blocks, broken by empty
# tiles; the Q tile's arrivals per block and the stage ring carry across every block).
FA_OVEDFC = (128, 128, 12, "tma", "ovedfc")
FA_PERSISTC = (128, 128, 12, "tma", "persistent", "ovedc")
FA_CHAIN_CASES = [c[:7] + (FA_OVEDFC,) for c in FA_OVEDF_CASES] + [c[:7] + (FA_PERSISTC,) for c in FA_PERSIST_CASES]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_CHAIN_CASES, ids=lambda c: _fa_case_id("-chained-" + c[7][-1])(c))
def test_fused_attention_chained_blocks_match_reference(lib, case, dtype):
    _need_sm90()
    _check_fused_case(lib, case, dtype)


# Session 20: the planned D = 128 bodies rescale O lazily (kWsLazyRescale); ovedf keeps the exact running
# maximum (a control on the same inputs).
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("variant", [FA_OVEDQ, FA_OVEDFC, FA_OVEDF], ids=lambda v: v[-1])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lens", [None, [1000, 513]], ids=["dense", "ragged"])
def test_fused_attention_rising_scores_move_the_softmax_frame(lib, lens, causal, variant, dtype):
    """Scores that rise along the keys by about 100 in log2 units over the sequence, with one spike per
    sequence far above the rest: each row's running maximum passes the lazy frame (kWsLazyT = 8) on many
    tiles, and the spike's tile rescales everything before it by 2^-40 or less; the rows past the spike see
    it only when it is visible to them (causal). Every body must match the float64 reference there too."""
    _need_sm90()
    _check_rising_scores(lib, lens, causal, variant, dtype, 20)


def _check_rising_scores(lib, lens, causal, variant, dtype, seed):
    """The rising-scores case (above) for ``variant`` at D = 128: B2 S1000 H4, ``lens`` None or ragged."""
    B, S, H, D = 2, 1000, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ramp = torch.linspace(0.0, 8.8, S, device="cuda")  # scale * q . k * log2(e) ~ 11.4 * ramp
    q = (1.0 + 0.3 * torch.randn(B, S, H, D, generator=gen, device="cuda")).to(dtype)
    k = (ramp[None, :, None, None] + 0.3 * torch.randn(B, S, H, D, generator=gen, device="cuda"))
    k[:, 700] += 4.0  # the spike: about 40 above its neighbours in log2 units
    k = k.to(dtype)
    v = _rand((B, S, H, D), dtype, gen)
    seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    _poison_padding(lens, q, k, v)
    out = torch.full_like(q, float("nan"))
    scale = 0.7 / D**0.5
    lib.fused_attention(q, k, v, out, seq_lens=seq, causal=causal, scale=scale, variant=variant)
    torch.cuda.synchronize()
    expect = ref.fused_attention(np.nan_to_num(_np(q)), np.nan_to_num(_np(k)), np.nan_to_num(_np(v)),
                                 seq_lens=lens, causal=causal, scale=scale, out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    _assert_padding_zero(lens, out)


# Left padding (seq_lens[b] = -L: the sequence's last L rows, as batched generation pads prompts):
# every body moves its Q/K/V/O rows (or TMA coordinates) to the span's first row, and the rows in
# front are zeros (fa_zero_lead_rows, or fa_fwd_body's own blocks on TensorRT's AOT path). One
# batch mixes a full row, left padding by less than a tile and by more, and right padding.
FA_LEFT_SHAPES = [(3, 515, 4, 1, 128, True, [-515, -260, 300]), (3, 515, 4, 1, 128, False, [-1, -400, 129]),
                  (3, 333, 16, 1, 64, True, [-333, -200, 0]), (2, 333, 6, 3, 64, False, [-17, 333]),
                  (2, 300, 4, 2, 80, True, [-129, 300]), (2, 333, 6, 3, 96, False, [-300, 17]),
                  (2, 300, 4, 2, 256, True, [-129, -300])]
FA_LEFT_VARIANTS = {64: [None, (64, 64, 4), (128, 64, 8), (64, 128, 4), (128, 128, 8), (128, 128, 12), FA_TMA]
                    + FA_D64_LD,
                    128: [None, (64, 64, 4), (128, 32, 4), (128, 64, 8), (128, 128, 8), (128, 128, 12), FA_TMA,
                          FA_PERSIST, FA_OV, FA_OVE, FA_OVED, FA_OVEDG, FA_OVEDF, FA_OVEDQ, FA_OVEDFC, FA_PERSISTC],
                    80: [None, (128, 64, 4)], 96: [None, (128, 128, 8)], 256: [None, (128, 64, 8)]}
FA_LEFT_CASES = [c + (v,) for c in FA_LEFT_SHAPES for v in FA_LEFT_VARIANTS[c[4]]]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_LEFT_CASES, ids=lambda c: _fa_case_id(
    "-left-" + ("auto" if c[7] is None else "x".join(map(str, c[7]))))(c))
def test_fused_attention_left_padding_matches_reference(lib, case, dtype):
    if case[7] is not None and "tma" in case[7]:
        _need_sm90()
    _check_fused_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_fused_attention_tma_multicast_refuses_or_falls_back(lib, dtype):
    """By name (loads 28) ovedm refuses what its pairs cannot share (S not a multiple of 256, seq_lens,
    a window); with loads 29 those run oved and match the reference."""
    _need_sm90()
    from onnx_fuse.plugins.kernel_lib import KernelError

    for B, S, lens in ((1, 300, None), (2, 1024, [1024, 700]), (2, 512, [512, 512])):
        gen = torch.Generator(device="cuda").manual_seed(S + B)
        q = _rand((B, S, 4, 128), dtype, gen)
        k = _rand((B, S, 2, 128), dtype, gen)
        v = _rand((B, S, 2, 128), dtype, gen)
        seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
        out = torch.full_like(q, float("nan"))
        with pytest.raises(KernelError):
            lib.fused_attention(q, k, v, out, seq_lens=seq, variant=FA_OVEDM)
        torch.cuda.synchronize()
        lib.fused_attention(q, k, v, out, seq_lens=seq, variant=FA_OVEDM, loads=29)
        torch.cuda.synchronize()
        expect = ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, out_dtype=np.float64)
        assert _rel_err(out, expect) < TOL[dtype], (B, S, lens)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (_rand((1, 1024, 4, 128), dtype, gen) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    with pytest.raises(KernelError):
        lib.fused_attention(q, k, v, out, causal=True, window=200, variant=FA_OVEDM)
    torch.cuda.synchronize()
    lib.fused_attention(q, k, v, out, causal=True, window=200, variant=FA_OVEDM, loads=29)
    torch.cuda.synchronize()
    expect = _window_reference(q, k, v, None, 1.0 / 128**0.5, 0.0, 200)
    assert _rel_err(out, expect) < TOL[dtype]


# ------------------------------------------------ sliding window (causal; window = W > 0)
# Query i sees keys i - W < j <= i (HF's sliding_window). Every variant the planner can pick, the
# TMA candidates by name, the _sc twins (Gemma 2: softcap and windows); S not a multiple of the
# tiles, ragged seq_lens with NaN padding, GQA / MQA. Reference: onnx_fuse.reference (float64).
# Each case also checks that the window matters (W < the longest sequence): the plain causal
# result is far from it.
FA_WS_TMA_NAMED = [(128, 128, 12, "tma")] + [(128, 128, 12, "tma", t) for t in ("r24", "ld", "ldr", "lde")]
FA_WIN_CASES = [  # B, S, Hq, Hkv, D, seq_lens, variant (None = planned), window, softcap
    # planned: m128n128w12t_ovedg (D 128 causal) / _lde (D 64) on the H200; with a softcap r24 / w12t _sc
    (2, 1024, 32, 8, 128, None, None, 128, 0.0),
    (2, 1024, 32, 8, 128, [1024, 700], None, 1000, 0.0),
    (2, 1300, 32, 8, 128, [1300, 1], None, 7, 0.0),
    (2, 1024, 32, 8, 128, [1024, 700], None, 64, 50.0),
    (2, 1024, 32, 8, 64, [1000, 1024], None, 1, 0.0),
    (2, 1100, 32, 4, 64, None, None, 300, 0.0),
    (2, 1024, 32, 8, 64, [1000, 517], None, 64, 30.0),
    (2, 1024, 32, 8, 128, None, None, 4096, 0.0),           # W >= S: plain causal
    # small grids: the planned (64, 64, 4) (one-warpgroup wgmma at D <= 128 on sm_90a)
    (2, 300, 4, 2, 128, [300, 129], None, 64, 0.0),
    (1, 77, 2, 1, 64, None, None, 7, 0.0),
    (2, 515, 4, 1, 96, [515, 260], None, 128, 5.0),
    # D = 80 / 96: wgmma m128n128w8; D = 256: m128n64w8 (planned there), mma.sync 64x64
    (2, 700, 32, 8, 80, [700, 385], (128, 128, 8), 128, 0.0),
    (2, 700, 32, 8, 96, [700, 385], (128, 128, 8), 1, 5.0),
    (2, 600, 16, 8, 256, [600, 301], (128, 64, 8), 64, 0.0),
    (2, 600, 16, 8, 256, [600, 301], (128, 64, 8), 100, 50.0),
    (1, 333, 4, 2, 256, None, (64, 64, 4), 7, 5.0),
    # mma.sync 128x64 4-warp (its _sc twin too), the pipelined wgmma, one warpgroup at D = 64
    (2, 515, 4, 1, 128, [515, 260], (128, 64, 4), 64, 0.0),
    (2, 300, 8, 2, 80, [300, 129], (128, 64, 4), 7, 5.0),
    (2, 515, 4, 2, 128, [515, 260], (128, 64, 8), 128, 0.0),
    (1, 1000, 8, 8, 64, None, (64, 128, 4), 1000, 0.0),
    (1, 1000, 8, 8, 64, None, (64, 128, 4), 65, 0.0),
    # warp-specialized, cp.async producer (and its _sc twin)
    (2, 515, 4, 1, 128, [515, 260], (128, 128, 12), 128, 0.0),
    (2, 333, 16, 1, 64, [300, 333], (128, 128, 12), 7, 5.0),
    (1, 1000, 4, 4, 128, None, (128, 128, 12), 1, 0.0),
] + [  # the TMA bodies by name (every planned and candidate option), windows across and inside tiles
    (2, 1000, 4, 2, 64, [999, 640], v, w, 0.0) for v in FA_WS_TMA_NAMED for w in (1, 129)
] + [
    (2, 1000, 8, 2, 128, [1000, 385], v, w, 0.0)
    for v in [(128, 128, 12, "tma")] + [(128, 128, 12, "tma", t) for t in ("r24", "ov", "ove", "oved", "ovedg", "ovedf", "ovedq",
                                                                           "ovedfc")]
    for w in (64, 200)
] + [
    (1, 2048, 4, 4, 128, None, (128, 128, 12, "tma", "oved"), 1024, 0.0),
    (1, 2048, 4, 4, 128, None, (128, 128, 12, "tma", "ovedf"), 1024, 0.0),
    (1, 2048, 4, 4, 128, None, (128, 128, 12, "tma", "ovedfc"), 1024, 0.0),
    (2, 700, 8, 2, 128, [700, 130], (128, 128, 12, "tma", "r24"), 128, 50.0),   # the D = 128 _sc twin
    (2, 700, 8, 2, 64, [700, 130], (128, 128, 12, "tma"), 64, 5.0),             # the D = 64 _sc twin
] + [  # left padding (seq_lens < 0): windows counted from the span's first row as from row 0
    (2, 1000, 8, 2, 128, [-1000, -385], v, 64, 0.0)
    for v in (None, (128, 128, 12), (128, 64, 4), (128, 128, 12, "tma", "ovedg"), (128, 128, 12, "tma", "ovedq"))
] + [(2, 1024, 32, 8, 128, [-1024, -700], None, 64, 50.0), (2, 1024, 32, 8, 64, [-1000, 517], None, 64, 30.0)]


def _fa_win_id(c):
    v = "x".join(map(str, c[6])) if c[6] else "auto"
    return "B{}S{}H{}/{}D{}{}-{}-W{}{}".format(c[0], c[1], c[2], c[3], c[4], _pad_tag(c[5]), v, c[7],
                                              f"-cap{c[8]:g}" if c[8] else "")


def _window_reference(q, k, v, lens, scale, cap, window):
    """float64 on the GPU (the shared reference, cuda_reference; it agrees with the NumPy one:
    test_fused_attention_window_torch_reference_is_the_reference): causal, keys i - window < j <= i
    (window 0: none), q [B,S,Hq,D], k/v [B,S,Hkv,D] (NaN read as 0) -> a float64 tensor [B,S,Hq,D]; padded rows
    zero."""
    return ref.fused_attention(q.nan_to_num(0.0), k.nan_to_num(0.0), v.nan_to_num(0.0), seq_lens=lens, causal=True,
                               scale=scale, softcap=cap, window=window)


def test_fused_attention_window_torch_reference_is_the_reference():
    from onnx_fuse import reference as np_ref  # the NumPy reference itself

    gen = torch.Generator(device="cuda").manual_seed(11)
    q, k, v = _rand((2, 70, 4, 64), torch.float32, gen), _rand((2, 70, 2, 64), torch.float32, gen), \
        _rand((2, 70, 2, 64), torch.float32, gen)
    for lens, cap, w in ((None, 0.0, 5), ([70, 33], 5.0, 16), ([70, 1], 0.0, 100)):
        want = np_ref.fused_attention(_np(q), _np(k), _np(v), seq_lens=lens, causal=True, scale=0.2, softcap=cap,
                                      window=w, out_dtype=np.float64)
        np.testing.assert_allclose(_window_reference(q, k, v, lens, 0.2, cap, w).cpu().numpy(), want, atol=1e-9)


def _check_window_case(lib, case, dtype, loads=None):
    B, S, Hq, Hkv, D, lens, variant, window, cap = case
    if variant is not None and len(variant) > 3:
        _need_sm90()
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    gain = 4.0 if cap else 1.0  # scores that reach the cap
    q = (_rand((B, S, Hq, D), torch.float32, gen) * gain).to(dtype)
    k = _rand((B, S, Hkv, D), dtype, gen)
    v = _rand((B, S, Hkv, D), dtype, gen)
    seq = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
    clean = (q.clone(), k.clone(), v.clone())
    _poison_padding(lens, q, k, v)  # padding content must not matter
    out = torch.full_like(q, float("nan"))
    scale = 0.7 / D**0.5
    lib.fused_attention(q, k, v, out, seq_lens=seq, causal=True, scale=scale, softcap=cap, variant=variant,
                        window=window, loads=loads)
    torch.cuda.synchronize()
    err = _rel_err(out, _window_reference(*clean, lens, scale, cap, window))
    assert err < TOL[dtype], f"relative error {err:.3e}"
    if 4 * window <= max([abs(x) for x in lens] if lens else [S]):  # the window matters here (far beyond the tolerance)
        assert _rel_err(out, _window_reference(*clean, lens, scale, cap, 0)) > 4 * TOL[dtype]
    _assert_padding_zero(lens, out)  # padded rows are exact zeros


FA_WIN_TMA_CASES = [c for c in FA_WIN_CASES if c[6] is not None and len(c[6]) > 3]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [c for c in FA_WIN_CASES if c not in FA_WIN_TMA_CASES], ids=_fa_win_id)
def test_fused_attention_window_matches_reference(lib, case, dtype):
    _check_window_case(lib, case, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FA_WIN_TMA_CASES, ids=_fa_win_id)
def test_fused_attention_tma_window_matches_reference(lib, case, dtype):
    _check_window_case(lib, case, dtype)


@pytest.mark.parametrize("code", [2, 13, 15, 19, 23, 31], ids=["w12t", "ld", "lde", "oved", "ovedg", "ovedq"])
def test_fused_attention_tma_window_codes_fall_back(lib, code):
    """The planned TMA codes with a window where TMA cannot address the tensors (a broadcast K/V)
    run the cp.async producer with the same window."""
    _need_sm90()
    B, S, Hq, D, W = 2, 600, 8, 128 if code in (19, 23, 31) else 64, 100
    gen = torch.Generator(device="cuda").manual_seed(code)
    q = _rand((B, S, Hq, D), torch.float16, gen)
    k = _rand((1, S, 1, D), torch.float16, gen).expand(B, S, 2, D)  # stride 0: no tensor map
    v = _rand((1, S, 1, D), torch.float16, gen).expand(B, S, 2, D)
    out = torch.full_like(q, float("nan"))
    lib.fused_attention(q, k, v, out, causal=True, scale=0.1, variant=(128, 128, 12), loads=code, window=W)
    torch.cuda.synchronize()
    assert _rel_err(out, _window_reference(q, k, v, None, 0.1, 0.0, W)) < TOL[torch.float16]


def test_fused_attention_window_refusals(lib):
    """A window without causal, a negative window and the persistent entries are refused, never
    ignored: by KernelLib (ValueError) and by the C launcher (an error code)."""
    B, S, H, D = 1, 256, 2, 128
    q = torch.zeros((B, S, H, D), dtype=torch.float16, device="cuda")
    out = torch.empty_like(q)
    with pytest.raises(ValueError):
        lib.fused_attention(q, q, q, out, causal=False, window=8)
    with pytest.raises(ValueError):
        lib.fused_attention(q, q, q, out, causal=True, window=-1)
    with pytest.raises(ValueError):
        lib.fused_attention(q, q, q, out, causal=True, window=8, variant=(128, 128, 12, "tma", "persistent"))
    st = [x for _ in range(4) for x in q.stride()[:3]]
    args = (0, q.data_ptr(), q.data_ptr(), q.data_ptr(), out.data_ptr(), None, B, S, H, H, D, *st, 0.1, 0.0)
    assert lib._lib.onnx_fuse_fused_attention_fwd_w(*args, 0, 8, 0, 0, 0, 0, None) != 0  # not causal
    assert lib._lib.onnx_fuse_fused_attention_fwd_w(*args, 1, -1, 0, 0, 0, 0, None) != 0
    assert lib._lib.onnx_fuse_fused_attention_fwd_w(*args, 1, 8, 128, 128, 12, 4, None) != 0  # persistent


# ------------------------------------------------------------------ paged attention (decode)


def _ref_pool(pool: torch.Tensor) -> np.ndarray:
    return np.nan_to_num(_np(pool))  # the reference never reads the NaN slots either


PA_CASES = [
    # B, Hq, Hkv, D, block_size, lens, num_splits
    (3, 8, 8, 128, 16, [1, 16, 33], None),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], None),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 1),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 7),
    (2, 16, 1, 128, 32, [2049, 100], None),
    (2, 16, 1, 64, 64, [130, 4096], 5),
    (5, 12, 4, 64, 32, [31, 32, 33, 300, 1], None),
    (2, 4, 4, 64, 16, [15, 17], 2),
    (2, 28, 4, 128, 64, [640, 65], None),
    (1, 2, 1, 128, 16, [5000], None),
    (3, 16, 4, 80, 16, [1000, 1, 77], None),
    (2, 8, 1, 80, 32, [2049, 100], 3),
    (3, 12, 4, 96, 16, [700, 5, 64], None),
    (2, 28, 4, 96, 64, [640, 65], 1),
    (3, 8, 2, 256, 16, [900, 1, 300], None),
    (2, 16, 1, 256, 32, [2049, 100], 4),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    lib.paged_decode(q, k_pool, v_pool, tables, seq, out, num_splits=splits)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"


@pytest.mark.parametrize("variant", [(4, 3, 0), (8, 3, 0), (4, 3, 1), (4, 2, 1), (8, 3, 1)],
                         ids=lambda v: f"w{v[0]}s{v[1]}{'b' if v[2] else ''}")
@pytest.mark.parametrize("splits", [1, None, 5])
@pytest.mark.parametrize("D", [64, 80, 96, 128, 256])
def test_paged_decode_variants(lib, variant, splits, D):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa_variants(D):
        pytest.skip(f"variant {variant} is not compiled for D={D} (shared memory)")
    B, Hq, Hkv, bs, lens = 3, 24, 4, 16, [1500, 47, 1]
    dtype = torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((variant, splits, D)).encode()))
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"), out,
                     num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"


# MQA (16 query rows per kv head: every row of the warp merge live) with the cp.async and bulk variants: the
# cp.async ones merge through the padded pa_merge_out (session 37), the bulk ones through pa_merge_out_flat;
# ragged lengths ending mid-tile, an empty sequence, 1 and 3 splits.
@pytest.mark.parametrize("variant", [(4, 3, 0), (8, 3, 0), (4, 3, 1), (4, 2, 1), (8, 3, 1)],
                         ids=lambda v: f"w{v[0]}s{v[1]}{'b' if v[2] else ''}")
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("D", [64, 80, 96, 128, 256])
def test_paged_decode_mqa_variants(lib, variant, splits, D):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa_variants(D):
        pytest.skip(f"variant {variant} is not compiled for D={D} (shared memory)")
    B, Hq, Hkv, bs, lens = 5, 16, 1, 16, [1500, 0, 129, 640, 77]
    dtype = torch.bfloat16 if D in (96, 256) else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("mqa16", variant, splits, D)).encode()))
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"), out,
                            num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    assert (plan.warps, plan.stages, plan.bulk) == variant
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    assert torch.count_nonzero(out[1]).item() == 0  # zero-length sequence



# The default plans of this GPU (launch_plan.plan_paged_decode for current_device) on shapes that
# reach them: head groups at D 128, Hkv 8 (on an H100 4 kv heads w4s2h: one split at B64, two with the
# workspace reduce at B32; on the H200 8 kv heads: the cluster reduce w8s2hc at B64, w8s2h at four splits
# at B32), w16s2t for MQA and w4s2t for GQA at D 64, w4s2t at D 256; ragged lengths and an empty sequence.
@pytest.mark.parametrize("case", [(64, 32, 8, 128, 16, ("w4s2h", "w8s2hc")), (32, 32, 8, 128, 16, ("w4s2h", "w8s2h")),
                                  (128, 16, 1, 64, 16, "w16s2t"), (64, 32, 8, 64, 16, "w4s2t"),
                                  (64, 16, 8, 256, 16, "w4s2t")],
                         ids=lambda c: f"b{c[0]}_d{c[3]}_{c[-1] if isinstance(c[-1], str) else 'heads'}")
def test_paged_decode_default_plans(lib, case):
    from onnx_fuse.plugins import launch_plan as lp

    B, Hq, Hkv, D, bs, suffix = case
    if not isinstance(suffix, str):   # (slower memory than W4S2H_MAX_BANDWIDTH, else)
        slow = lp.current_device().mem_bandwidth < lp.W4S2H_MAX_BANDWIDTH
        suffix = suffix[0] if slow else suffix[1]
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("default", case)).encode()))
    lens = torch.randint(1, 1025, (B,), generator=torch.Generator().manual_seed(B + D)).tolist()
    lens[0], lens[1] = 1024, 0
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"), out)
    torch.cuda.synchronize()
    assert plan.kernel.endswith(f"_d{D}_{suffix}"), plan.kernel
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL[torch.float16]
    assert torch.count_nonzero(out[1]).item() == 0

# 16-bit pool with TMA loads (variants (warps, stages, 2), sm_90). The pools' NaN slots past each
# sequence's end are inside the boxes the kernel copies: these cases check they are masked (K)
# and zeroed (V).
def _tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, variant, dtype, seed):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa_tma_variants(D) + lp.pa_heads_variants(D, Hkv) + lp.pa_cluster_variants(D, Hkv):
        pytest.skip(f"TMA variant {variant} is not compiled for D={D} (or Hkv={Hkv})")
    heads = variant[2] in (3, 4)  # head groups: the launcher refuses (no fallback) what it cannot run
    assert heads or lib.tma_supported(D, bs, variant[0], variant[1])  # the GPU tests run on sm_90
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("tma", seed)).encode()))
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    assert heads or (lib.tma_map_ok(k_pool) and lib.tma_map_ok(v_pool))  # else the launcher would not run TMA
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor(lens, dtype=torch.int32, device="cuda"), out,
                            num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    assert plan.bulk == variant[2] and plan.kernel.endswith(f"w{variant[0]}s{variant[1]}{lp.PA_SUFFIX[variant[2]]}")
    assert not plan.cluster or (plan.workspace_bytes == 0 and plan.reduce_kernel is None)
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    for b, L in enumerate(lens):
        if L == 0:
            assert torch.count_nonzero(out[b]).item() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [c for c in PA_CASES if c[3] in (64, 128, 256)],
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_tma_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    _tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, (4, 3, 2), dtype, case)


@pytest.mark.parametrize("variant", [(4, 2, 2), (4, 3, 2), (4, 4, 2), (8, 2, 2), (8, 3, 2), (8, 4, 2), (16, 2, 2)],
                         ids=lambda v: f"w{v[0]}s{v[1]}t")
@pytest.mark.parametrize("splits", [1, None, 5])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_paged_decode_tma_variants(lib, variant, splits, D):
    _tma_check(lib, 3, 24, 4, D, 16, [1500, 47, 0], splits, variant, torch.float16, (variant, splits, D))


# MQA (one kv head, 16 query heads in the mma tile) with the 8- and 16-warp TMA variants (the 256-token
# tiles of w16s2t planned for both dtypes; w8s2t, w8s3t, w8s4t candidates; D = 64 only): ragged lengths
# ending mid-tile, an empty sequence, 1 to 3 splits.
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("variant", [(8, 2, 2), (8, 3, 2), (8, 4, 2), (16, 2, 2)], ids=lambda v: f"w{v[0]}s{v[1]}t")
@pytest.mark.parametrize("splits", [1, 3])
def test_paged_decode_tma_mqa_variants(lib, variant, splits, dtype):
    _tma_check(lib, 5, 16, 1, 64, 16, [1500, 0, 129, 640, 77], splits, variant, dtype, ("mqa", variant, splits))


# 16 warps: a 256-token tile is 32 boxes of 8-row blocks (every lane of warp 0 issues) or part of one
# 256-row block (one box of 64 rows per lane); splits starting mid-block.
@pytest.mark.parametrize("bs", [8, 256])
@pytest.mark.parametrize("variant", [(16, 2, 2)], ids=lambda v: f"w{v[0]}s{v[1]}t")
def test_paged_decode_tma_w16_block_sizes(lib, variant, bs):
    _tma_check(lib, 3, 16, 1, 64, bs, [1500, 200, 9], 5, variant, torch.float16, ("w16", bs, variant))


@pytest.mark.parametrize("bs", [8, 32, 64, 128, 256])
@pytest.mark.parametrize("splits", [1, 5])
@pytest.mark.parametrize("variant", [(4, 3, 2), (8, 2, 2)], ids=lambda v: f"w{v[0]}s{v[1]}t")
def test_paged_decode_tma_block_sizes(lib, bs, splits, variant):
    # blocks smaller than, equal to and larger than the 64-row box; 5 splits of 1500 tokens start
    # at 320, 640, ... (mid-block for blocks of 128 and 256 tokens)
    seed = (bs, splits) if variant == (4, 3, 2) else (bs, splits, variant)
    _tma_check(lib, 3, 16, 2, 128, bs, [1500, 200, 9], splits, variant, torch.bfloat16, seed)



# Head-group decode (variants (warps, stages, 3), sm_90): one CTA per group of `warps` kv heads,
# tiles of 16 tokens of all of them; the reference cases whose shapes it takes, then every variant
# on ragged lengths (an empty sequence included) with and without splits.
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [c for c in PA_CASES if c[3] in (64, 128) and c[2] % 4 == 0 and c[4] >= 16],
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_heads_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    _tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, (4, 3, 3), dtype, ("heads", case))


@pytest.mark.parametrize("variant", [(4, 3, 3), (8, 2, 3), (8, 3, 3)], ids=lambda v: f"w{v[0]}s{v[1]}h")
@pytest.mark.parametrize("splits", [1, None, 5])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("bs", [16, 128])
def test_paged_decode_heads_variants(lib, variant, splits, D, bs):
    _tma_check(lib, 3, 32, 8, D, bs, [1500, 47, 0], splits, variant, torch.float16, ("heads", variant, splits, D, bs))


def test_paged_decode_heads_refuses(lib):
    """What the head-group launcher cannot run (Hkv not a multiple of the group, block 8) is refused
    by the plan, and by the C launcher when called directly."""
    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelError

    gen = torch.Generator(device="cuda").manual_seed(17)
    k_pool, v_pool, tables = _make_pool(2, 4, 128, 8, [100, 9], torch.float16, gen)
    q = _rand((2, 8, 128), torch.float16, gen)
    seq = torch.tensor([100, 9], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError):
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), variant=(8, 2, 3))
    plan = lp.plan_paged_decode(2, 8, 4, 128, 16, tables.shape[1], variant=(4, 3, 3), num_splits=1)
    with pytest.raises(KernelError):  # block size 8 under a plan made for 16
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), plan=plan)
    torch.cuda.synchronize()

# Cluster-reduce head groups (variant (8, 2, 4), sm_90; planned at D = 128 where w8s2h would run two
# splits in one wave): the splits of each row reduced inside a thread-block cluster through
# distributed shared memory, no workspace and no reduce kernel; empty splits (short sequences) and an
# empty sequence take part in their cluster.
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [c for c in PA_CASES + [(3, 64, 16, 64, 32, [900, 0, 300], 3),
                                                         (2, 16, 8, 128, 64, [4000, 70], None)]
                                  if c[3] in (64, 128) and c[2] % 8 == 0 and c[4] >= 16],
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_cluster_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    _tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, (8, 2, 4), dtype, ("cluster", case))


@pytest.mark.parametrize("splits", [1, 2, 5, 8])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("bs", [16, 128])
def test_paged_decode_cluster_variants(lib, splits, D, bs):
    _tma_check(lib, 3, 32, 8, D, bs, [1500, 47, 0], splits, (8, 2, 4), torch.float16,
               ("cluster", (8, 2, 4), splits, D, bs))


def test_paged_decode_cluster_refuses(lib):
    """More splits than a portable cluster holds, or a block size the variant cannot box, are refused
    by the plan and by the C launcher (no fallback)."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelError

    gen = torch.Generator(device="cuda").manual_seed(19)
    k_pool, v_pool, tables = _make_pool(2, 8, 128, 16, [1500, 9], torch.float16, gen)
    q = _rand((2, 32, 128), torch.float16, gen)
    seq = torch.tensor([1500, 9], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError):
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q), variant=(8, 2, 4), num_splits=9)
    plan = lp.plan_paged_decode(2, 32, 8, 128, 16, tables.shape[1], variant=(8, 2, 4), num_splits=8)
    with pytest.raises(KernelError):  # 12 splits of 128 tokens: past the portable cluster size
        lib.paged_decode(q, k_pool, v_pool, tables, seq, torch.empty_like(q),
                         plan=dataclasses.replace(plan, num_splits=12, part_tokens=128, grid=(1, 12, 2)))
    k_b8, v_b8, t_b8 = _make_pool(2, 8, 128, 8, [100, 9], torch.float16, gen)
    with pytest.raises(KernelError):  # block size 8 under a head-group plan made for 16
        lib.paged_decode(q, k_b8, v_b8, t_b8, seq.clamp(max=100), torch.empty_like(q), plan=plan)
    torch.cuda.synchronize()


def test_paged_decode_cluster_l2_promotion_changes_caching_only(lib):
    """The cluster launcher's L2 promotion setting (256 B, 128 B as planned, none) gives the same output
    bit for bit, and matches the reference."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp

    gen = torch.Generator(device="cuda").manual_seed(29)
    lens = [1500, 47, 0]
    k_pool, v_pool, tables = _make_pool(3, 8, 128, 16, lens, torch.bfloat16, gen)
    q = _rand((3, 32, 128), torch.bfloat16, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    for splits in (2, 3):
        plan = lp.plan_paged_decode(3, 32, 8, 128, 16, tables.shape[1], "bfloat16", variant=(8, 2, 4),
                                    num_splits=splits)
        assert plan.l2_promotion == lp.PA_CLUSTER_L2_PROMOTION
        outs = []
        for prom in (256, 128, 0):
            out = torch.full_like(q, float("nan"))
            lib.paged_decode(q, k_pool, v_pool, tables, seq, out, plan=dataclasses.replace(plan, l2_promotion=prom))
            outs.append(out)
        torch.cuda.synchronize()
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
        assert _rel_err(outs[0], expect) < TOL[torch.bfloat16]


def test_paged_decode_refuses_misaligned_pools(lib, monkeypatch):
    """Pools must be 16-byte aligned (docs/ops.md): KernelLib refuses a misaligned one (ValueError),
    and every C decode launcher refuses it too (cudaErrorInvalidValue) rather than reading it."""
    from onnx_fuse.plugins import kernel_lib
    from onnx_fuse.plugins.kernel_lib import KernelError

    gen = torch.Generator(device="cuda").manual_seed(23)
    k_pool, v_pool, tables = _make_pool(2, 8, 128, 16, [300, 9], torch.float16, gen)
    flat = torch.zeros(k_pool.numel() + 8, dtype=torch.float16, device="cuda")
    k_mis = flat[1:1 + k_pool.numel()].view(k_pool.shape)  # 2 bytes past an aligned base
    k_mis.copy_(k_pool)
    q = _rand((2, 32, 128), torch.float16, gen)
    seq = torch.tensor([300, 9], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="16-byte"):
        lib.paged_decode(q, k_mis, v_pool, tables, seq, torch.empty_like(q))
    monkeypatch.setattr(kernel_lib, "check_pool_alignment", lambda *pools: None)  # reach the C launchers
    for variant in ((4, 3, 0), (4, 3, 1), (4, 3, 2), (8, 2, 3), (8, 2, 4)):
        with pytest.raises(KernelError):
            lib.paged_decode(q, k_mis, v_pool, tables, seq, torch.empty_like(q), variant=variant, num_splits=2)
    _, _, k8, v8, ks, vs, t8, s8 = _make_fp8_pool(lib, 2, 8, 128, 16, [300, 9], torch.float16, gen)
    flat8 = torch.zeros(k8.numel() + 16, dtype=torch.uint8, device="cuda")
    k8_mis = flat8[8:8 + k8.numel()].view(k8.shape)
    k8_mis.copy_(k8)
    for variant in ((4, 3), (4, 3, "tma"), (4, 3, "heads")):
        with pytest.raises(KernelError):
            lib.paged_decode_fp8(q, k8_mis, v8, ks, vs, t8, s8, torch.empty_like(q), variant=variant, num_splits=2)
    torch.cuda.synchronize()


def test_paged_decode_tma_falls_back(lib):
    """Block size 12: the planner and the C launcher both run the bulk variant of the same stages."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp

    assert not lib.tma_supported(128, 12, 4, 3) and not lib.tma_supported(96, 12, 4, 3)
    assert not lib.tma_supported(96, 16, 4, 3) and not lib.tma_supported(80, 16, 4, 2)  # dropped (slower)
    assert lib.tma_supported(64, 8, 8, 2) and not lib.tma_supported(128, 16, 8, 3)
    assert not lib.tma_supported(256, 16, 4, 4) and lib.tma_supported(256, 16, 4, 2)
    assert not lib.tma_supported(256, 16, 8, 2)
    B, Hq, Hkv, D, bs, lens = 2, 16, 4, 128, 12, [300, 7]
    gen = torch.Generator(device="cuda").manual_seed(13)
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode(q, k_pool, v_pool, tables, seq, out, variant=(4, 3, 2))
    torch.cuda.synchronize()
    assert plan.bulk == 1 and plan.kernel.endswith("w4s3b")
    expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL[torch.float16]
    out2 = torch.full_like(q, float("nan"))
    lib.paged_decode(q, k_pool, v_pool, tables, seq, out2, plan=dataclasses.replace(plan, bulk=2))
    torch.cuda.synchronize()
    assert torch.equal(out2, out)  # the C launcher ran the same bulk kernel


def test_paged_decode_zero_length_sequence(lib):
    B, Hq, Hkv, D, bs = 2, 8, 2, 64, 16
    gen = torch.Generator(device="cuda").manual_seed(11)
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, [0, 40], torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)
    out = torch.full_like(q, float("nan"))
    for splits in (1, 3):
        out.fill_(float("nan"))
        lib.paged_decode(q, k_pool, v_pool, tables, torch.tensor([0, 40], dtype=torch.int32, device="cuda"),
                         out, num_splits=splits)
        torch.cuda.synchronize()
        assert torch.count_nonzero(out[0]).item() == 0
        expect = ref.paged_attention(_np(q), _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy(),
                                     np.array([0, 40]), out_dtype=np.float64)
        assert _rel_err(out, expect) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("new_tokens", [1, 3])
@pytest.mark.parametrize("bs", [16, 32, 64])
@pytest.mark.parametrize("D", [80, 128, 256])
def test_append_kv_then_decode(lib, dtype, new_tokens, bs, D):
    """Append new tokens in place (exact copy), then decode over the updated pool."""
    B, Hq, Hkv = 3, 16, 4
    lens = [bs * 2 + 5, bs - 1, 1 + new_tokens]  # after the append
    gen = torch.Generator(device="cuda").manual_seed(bs * 10 + new_tokens + D)
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    k_new = _rand((B, new_tokens, Hkv, D), dtype, gen)
    v_new = _rand((B, new_tokens, Hkv, D), dtype, gen)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    exp_k, exp_v = ref.append_kv(_np(k_pool), _np(v_pool), _np(k_new), _np(v_new), tables.cpu().numpy(), lens)
    lib.append_kv(k_new, v_new, k_pool, v_pool, tables, seq)
    torch.cuda.synchronize()
    assert np.array_equal(_np(k_pool), exp_k, equal_nan=True)
    assert np.array_equal(_np(v_pool), exp_v, equal_nan=True)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    lib.paged_decode(q, k_pool, v_pool, tables, seq, out)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), np.nan_to_num(exp_k), np.nan_to_num(exp_v), tables.cpu().numpy(),
                                 np.array(lens), out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL[dtype]


# ---------------------------------------------------------- prefill over a paged prefix (sm_90a)

PP_CASES = [
    # B, Hq, Hkv, D, block_size, prefix lens, new-token counts, causal, packed (cu_seqlens)
    (3, 8, 2, 128, 16, [0, 100, 1000], [130, 1, 300], True, True),
    (2, 4, 4, 64, 32, [5, 513], [128, 77], True, True),
    (2, 16, 1, 128, 64, [2000, 0], [256, 256], True, False),
    (2, 8, 8, 64, 16, [300, 40], [200, 200], False, False),
    (1, 4, 2, 128, 8, [4096], [512], True, True),
    (3, 6, 3, 128, 16, [10, 20, 30], [0, 5, 129], True, True),
    (2, 12, 4, 64, 128, [700, 1], [1, 383], False, True),
]


def _pp_reference(q_rows, k_pool, v_pool, tables, ctx, causal):
    """float64 attention of one sequence's new tokens [n, Hq, D] over its cached tokens."""
    n = q_rows.shape[0]
    if causal:  # the project's reference: new token i sits at position ctx - n + i
        return ref.paged_attention(q_rows[None], k_pool, v_pool, tables[None], np.array([ctx]),
                                   out_dtype=np.float64)[0]
    bs = k_pool.shape[1]
    pos = np.arange(ctx)
    kc = k_pool[tables[pos // bs], pos % bs].astype(np.float64)  # [ctx, Hkv, D]
    vc = v_pool[tables[pos // bs], pos % bs].astype(np.float64)
    g = q_rows.shape[1] // kc.shape[1]
    kc, vc = np.repeat(kc, g, axis=1), np.repeat(vc, g, axis=1)
    s = np.einsum("ihd,jhd->hij", q_rows.astype(np.float64), kc) / np.sqrt(q_rows.shape[2])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", p, vc).reshape(n, *q_rows.shape[1:])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PP_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}{}{}".format(
    c[0], c[1], c[2], c[3], c[4], "c" if c[7] else "", "-packed" if c[8] else ""))
def test_paged_prefill_matches_reference(lib, case, dtype):
    """New tokens appended with append_kv, then attend over prefix + themselves from the pool
    (the producer warpgroup's cp.async loads; TMA in test_fused_attention_tma_paged_prefill_*)."""
    _run_paged_prefill_case(lib, case, dtype, "cp.async")


def _run_paged_prefill_case(lib, case, dtype, loads):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("paged prefill runs the sm_90a warp-specialized kernel only")
    B, Hq, Hkv, D, bs, prefix, new, causal, packed = case
    ctx = [p + n for p, n in zip(prefix, new)]
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode() + str(dtype).encode()))
    k_pool, v_pool, tables = _make_pool(B, Hkv, D, bs, ctx, dtype, gen)
    seq = torch.tensor(ctx, dtype=torch.int32, device="cuda")
    cu = np.concatenate([[0], np.cumsum(new)]).astype(np.int32)
    total = int(cu[-1])
    # new K/V packed like the queries; appended per sequence (append_kv takes [1, n, Hkv, D])
    k_new = _rand((total, Hkv, D), dtype, gen)
    v_new = _rand((total, Hkv, D), dtype, gen)
    for b in range(B):
        if new[b]:
            lib.append_kv(k_new[cu[b]:cu[b + 1]][None], v_new[cu[b]:cu[b + 1]][None], k_pool, v_pool,
                          tables[b:b + 1], seq[b:b + 1])
    # queries: a strided view into a packed QKV buffer
    qkv = _rand((max(total, 1), (Hq + 2 * Hkv) * D), dtype, gen)
    q = qkv[:total, :Hq * D].view(total, Hq, D)
    out = torch.full((total, Hq, D), float("nan"), dtype=dtype, device="cuda")
    if packed:
        lib.paged_prefill(q, k_pool, v_pool, tables, seq, out, causal=causal,
                          cu_seqlens_q=torch.tensor(cu, device="cuda"), loads=loads)
    else:
        assert len(set(new)) == 1
        lib.paged_prefill(q.view(B, new[0], Hq, D), k_pool, v_pool, tables, seq,
                          out.view(B, new[0], Hq, D), causal=causal, loads=loads)
    torch.cuda.synchronize()
    kp, vp, tb = _ref_pool(k_pool), _ref_pool(v_pool), tables.cpu().numpy()
    qn = _np(q)
    expect = np.zeros((total, Hq, D))
    for b in range(B):
        if new[b]:
            expect[cu[b]:cu[b + 1]] = _pp_reference(qn[cu[b]:cu[b + 1]], kp, vp, tb[b], ctx[b], causal)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"


# TMA producer (K/V gathered block by block): the cases above plus tile-edge ones: a kv length
# that is a whole number of 128-key tiles (no tail), blocks of 128 with a short last block, a
# long prefix over blocks of 16 with one new token, non-packed equal chunks over blocks of 64.
PP_TMA_CASES = PP_CASES + [
    (2, 8, 2, 128, 128, [1000, 37], [24, 219], True, True),
    (1, 4, 1, 64, 32, [256], [128], False, True),
    (1, 4, 1, 128, 16, [256], [128], True, True),
    (2, 8, 4, 128, 16, [4000, 4095], [96, 1], True, True),
    (2, 4, 2, 64, 64, [64, 127], [65, 65], False, False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PP_TMA_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}{}{}".format(
    c[0], c[1], c[2], c[3], c[4], "c" if c[7] else "", "-packed" if c[8] else ""))
def test_fused_attention_tma_paged_prefill_matches_reference(lib, case, dtype):
    """TMA loads forced where the block size allows them (16..128), planned elsewhere (block 8:
    the planner takes cp.async). Named for gpu_session's TMA-first pytest process."""
    from onnx_fuse.plugins import launch_plan as lp

    _run_paged_prefill_case(lib, case, dtype, "tma" if case[4] in lp.PP_TMA_BLOCK_SIZES else None)


@pytest.mark.parametrize("bs", [8, 256])
def test_fused_attention_tma_paged_prefill_falls_back(lib, bs):
    """Block sizes the TMA producer cannot take: refused when TMA is forced (by the launcher:
    the wrapper passes 'tma' straight through), planned as cp.async and correct."""
    from onnx_fuse.plugins.kernel_lib import KernelError

    case = (2, 8, 2, 128, bs, [300, 7], [200, 129], True, True)
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("paged prefill runs the sm_90a warp-specialized kernel only")
    gen = torch.Generator(device="cuda").manual_seed(11)
    k_pool, v_pool, tables = _make_pool(1, 2, 128, bs, [40], torch.float16, gen)
    seq = torch.tensor([40], dtype=torch.int32, device="cuda")
    q = _rand((1, 8, 8, 128), torch.float16, gen)
    with pytest.raises(KernelError):
        lib.paged_prefill(q, k_pool, v_pool, tables, seq, torch.empty_like(q), loads="tma")
    _run_paged_prefill_case(lib, case, torch.float16, None)


def test_paged_prefill_refuses_bad_arguments(lib):
    from onnx_fuse.plugins.kernel_lib import KernelError

    gen = torch.Generator(device="cuda").manual_seed(5)
    k_pool, v_pool, tables = _make_pool(1, 2, 128, 16, [40], torch.float16, gen)
    seq = torch.tensor([40], dtype=torch.int32, device="cuda")
    q = _rand((1, 8, 4, 128), torch.float16, gen)
    out = torch.empty_like(q)
    with pytest.raises(KernelError):  # block size 24 is not a power of two
        lib.paged_prefill(q, k_pool.view(-1, 24, 2, 128)[:1], v_pool.view(-1, 24, 2, 128)[:1], tables, seq, out)
    q80 = _rand((1, 8, 4, 80), torch.float16, gen)
    with pytest.raises(KernelError):  # head size 80 has no paged-prefill kernel yet
        lib.paged_prefill(q80, k_pool[..., :80].contiguous(), v_pool[..., :80].contiguous(), tables, seq,
                          torch.empty_like(q80))


# ------------------------------------------------------------- fp8 (e4m3) pool: append + decode
#
# Pools are uint8 e4m3 bytes with float32 per-kv-head scales (value = e4m3 * scale). The pools
# are filled by append_kv_fp8 from fp16/bf16 K/V whose magnitude differs per kv head (so the
# scales differ and a wrong head's scale fails); every slot the kernels must neither write nor
# read holds 0x7F (e4m3 NaN). Two references: the float64 attention over the DEQUANTIZED pool
# (checks the kernel, TOL8) and over the ORIGINAL 16-bit K/V (the quantization error the docs
# quote, FP8_QUANT_TOL).

TOL8 = {torch.float16: 4e-3, torch.bfloat16: 1e-2}  # the math runs in fp16 (P, Q) for both
FP8_QUANT_TOL = 0.08  # e4m3 keeps 3 mantissa bits: ~3.6 % rms per element of K and V
E4M3_NAN = 0x7F


def _e4m3_bytes(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Reference quantization: x / scale (IEEE fp32), saturated to +-448, RNE to e4m3 (CPU)."""
    y = x.float().cpu() / scale.float().cpu()[None, None, :, None]
    return y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def _dequant(pool8: torch.Tensor, scale: torch.Tensor) -> np.ndarray:
    return np.nan_to_num(_np(pool8.view(torch.float8_e4m3fn).float() * scale[None, None, :, None]))


def _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen, scale_div=448.0):
    """16-bit pools (per-head magnitudes 0.5x..4x, NaN outside the sequences), the same tokens
    appended into fp8 pools with append_kv_fp8 (right-aligned [B, max_len, Hkv, D] batch: the
    append skips positions < 0), and scales amax_h / scale_div."""
    k16, v16, tables = _make_pool(B, Hkv, D, bs, lens, dtype, gen)
    h = torch.arange(Hkv, device="cuda")
    fk = (2.0 ** (h % 4 - 1)).float()[None, None, :, None]
    fv = (2.0 ** (2 - h % 4)).float()[None, None, :, None]
    k16 = (k16.float() * fk).to(dtype)
    v16 = (v16.float() * fv).to(dtype)
    lmax = max(max(lens), 1)
    kd = torch.zeros((B, lmax, Hkv, D), dtype=dtype, device="cuda")
    vd = torch.zeros_like(kd)
    for b, L in enumerate(lens):
        if L > 0:
            t = torch.arange(L, device="cuda")
            blk = tables[b, t // bs].long()
            kd[b, lmax - L:] = k16[blk, t % bs]
            vd[b, lmax - L:] = v16[blk, t % bs]
    k_scale = (kd.float().abs().amax(dim=(0, 1, 3)) / scale_div).clamp_min(1e-6).contiguous()
    v_scale = (vd.float().abs().amax(dim=(0, 1, 3)) / scale_div).clamp_min(1e-6).contiguous()
    k8 = torch.full(k16.shape, E4M3_NAN, dtype=torch.uint8, device="cuda")
    v8 = torch.full_like(k8, E4M3_NAN)
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    lib.append_kv_fp8(kd, vd, k8, v8, k_scale, v_scale, tables, seq)
    torch.cuda.synchronize()
    return k16, v16, k8, v8, k_scale, v_scale, tables, seq


def _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype):
    """An fp8-pool decode's output: against the float64 reference on the dequantized pool (the
    kernel's error), against the one on the original 16-bit K/V (the quantization's), and zero
    rows for empty sequences."""
    tabs = tables.cpu().numpy()
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tabs, np.array(lens), out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL8[dtype], f"relative error against the dequantized pool {err:.3e}"
    orig = ref.paged_attention(_np(q), _ref_pool(k16), _ref_pool(v16), tabs, np.array(lens), out_dtype=np.float64)
    qerr = _rel_err(out, orig)
    assert qerr < FP8_QUANT_TOL, f"relative error against the 16-bit K/V {qerr:.3e}"
    for b, L in enumerate(lens):
        if L == 0:
            assert torch.count_nonzero(out[b]).item() == 0


PA8_CASES = PA_CASES[:6] + [  # the 16-bit pool's first six, then the fp8 pool's own
    # B, Hq, Hkv, D, block_size, lens, num_splits
    (5, 12, 4, 64, 32, [31, 32, 33, 300, 0], None),
    (2, 4, 4, 64, 16, [15, 17], 2),
    (2, 28, 4, 128, 8, [640, 65], 1),
    (3, 12, 4, 96, 16, [700, 5, 64], None),
    (3, 8, 2, 256, 16, [900, 1, 300], None),
    (2, 16, 1, 256, 32, [2049, 0], 4),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA8_CASES, ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_fp8_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8", case)).encode()))
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    assert len(set(ks.tolist())) >= min(Hkv, 4)  # per-head scales differ (magnitudes 0.5x..4x)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits)
    torch.cuda.synchronize()
    _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype)


@pytest.mark.parametrize("variant", [(4, 3), (4, 4), (4, 6), (8, 3)], ids=lambda v: f"w{v[0]}s{v[1]}")
@pytest.mark.parametrize("splits", [1, None, 5])
@pytest.mark.parametrize("D", [64, 96, 128, 256])
def test_paged_decode_fp8_variants(lib, variant, splits, D):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa8_variants(D):
        pytest.skip(f"fp8 variant {variant} is not compiled for D={D}")
    B, Hq, Hkv, bs, lens = 3, 24, 4, 16, [1500, 47, 0]
    dtype = torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8", variant, splits, D)).encode()))
    _, _, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    assert (plan.warps, plan.stages) == variant and plan.kv_fp8
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL8[dtype]
    assert torch.count_nonzero(out[2]).item() == 0  # zero-length sequence


# MQA over the fp8 pool (16 query rows per kv head: every row of the warp merge live, v_scale folded into
# its final scale) with every per-kv-head variant, cp.async and TMA: ragged lengths ending mid-tile, an
# empty sequence, 1 and 3 splits.
@pytest.mark.parametrize("variant", [(4, 3), (4, 4), (4, 6), (8, 3), (4, 3, "tma"), (4, 4, "tma"), (4, 6, "tma"),
                                     (8, 3, "tma")], ids=lambda v: f"w{v[0]}s{v[1]}{'t' if len(v) == 3 else ''}")
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("D", [64, 96, 128, 256])
def test_paged_decode_fp8_mqa_variants(lib, variant, splits, D):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa8_variants(D):
        pytest.skip(f"fp8 variant {variant} is not compiled for D={D}")
    B, Hq, Hkv, bs, lens = 5, 16, 1, 16, [1500, 0, 129, 640, 77]
    dtype = torch.bfloat16 if D in (96, 256) else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8-mqa", variant, splits, D)).encode()))
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    assert (plan.warps, plan.stages) == variant[:2] and plan.kv_fp8 and plan.tma == (len(variant) == 3)
    _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype)


# fp8 pool with TMA loads (variants (warps, stages, "tma"), sm_90): the pools' NaN slots past each
# sequence's end sit in the boxes the kernel copies, so these cases also check that those rows
# are masked (K) and zeroed (V) rather than merely never read.
def _fp8_tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, variant, dtype, seed):
    from onnx_fuse.plugins import launch_plan as lp

    if variant not in lp.pa8_variants(D):
        pytest.skip(f"fp8 variant {variant} is not compiled for D={D}")
    assert lib.fp8_tma_supported(D, bs, variant[0], variant[1])  # the GPU tests run on sm_90
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8-tma", seed)).encode()))
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    assert plan.tma and plan.kernel.endswith(f"w{variant[0]}s{variant[1]}t")
    _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [c for c in PA8_CASES if c[3] != 96],
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}".format(c[0], c[1], c[2], c[3], c[4], c[6]))
def test_paged_decode_fp8_tma_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits = case
    _fp8_tma_check(lib, B, Hq, Hkv, D, bs, lens, splits, (4, 3, "tma"), dtype, case)


@pytest.mark.parametrize("variant", [(4, 3, "tma"), (4, 4, "tma"), (4, 6, "tma"), (8, 3, "tma")],
                         ids=lambda v: f"w{v[0]}s{v[1]}t")
@pytest.mark.parametrize("splits", [1, None, 5])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_paged_decode_fp8_tma_variants(lib, variant, splits, D):
    _fp8_tma_check(lib, 3, 24, 4, D, 16, [1500, 47, 0], splits, variant, torch.float16, (variant, splits, D))


@pytest.mark.parametrize("bs", [8, 32, 64, 128, 256])
@pytest.mark.parametrize("variant", [(4, 3, "tma"), (8, 3, "tma")], ids=lambda v: f"w{v[0]}s{v[1]}t")
@pytest.mark.parametrize("splits", [1, 5])
def test_paged_decode_fp8_tma_block_sizes(lib, bs, variant, splits):
    # blocks smaller than, equal to and larger than the 64-row box; 5 splits of 1500 tokens
    # start splits at 320, 640, ... (mid-block for blocks of 128 and 256 tokens)
    _fp8_tma_check(lib, 3, 16, 2, 128, bs, [1500, 200, 9], splits, variant, torch.bfloat16, (bs, variant, splits))


def test_paged_decode_fp8_tma_falls_back(lib):
    """Where TMA does not apply the planner picks the cp.async kernel, and the C launcher itself
    falls back when handed a TMA plan it cannot run (block size 12 here)."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp

    assert not lib.fp8_tma_supported(128, 12, 4, 3) and not lib.fp8_tma_supported(96, 16, 4, 3)
    assert not lib.fp8_tma_supported(128, 4, 4, 3) and not lib.fp8_tma_supported(256, 16, 8, 3)
    assert lib.fp8_tma_supported(64, 16, 4, 6)
    B, Hq, Hkv, D, bs, lens = 2, 16, 4, 128, 12, [300, 7]
    gen = torch.Generator(device="cuda").manual_seed(12)
    _, _, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 out_dtype=np.float64)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, variant=(4, 3, "tma"))
    torch.cuda.synchronize()
    assert not plan.tma and plan.kernel.endswith("w4s3")
    assert _rel_err(out, expect) < TOL8[torch.float16]
    forced = dataclasses.replace(lp.plan_paged_decode(B, Hq, Hkv, D, bs, tables.shape[1], kv_dtype="fp8",
                                                      variant=(4, 3)), tma=True)
    out2 = torch.full_like(q, float("nan"))
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out2, plan=forced)
    torch.cuda.synchronize()
    assert torch.equal(out2, out)  # the same cp.async kernel ran


# fp8 pool, head-group tiles (variants (warps, stages, "heads"), sm_90): one CTA per group of
# `warps` kv heads, each warp with its own kv head's scales; the NaN slots past each sequence's end
# sit in the 16-row boxes (masked / zeroed as on the per-head TMA path).
def _fp8_heads_check(lib, B, Hq, Hkv, D, bs, lens, splits, variant, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8-heads", seed)).encode()))
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    assert lib.fp8_tma_heads_map_ok(k8, variant[0]) and lib.fp8_tma_heads_map_ok(v8, variant[0])
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, num_splits=splits, variant=variant)
    torch.cuda.synchronize()
    cluster = variant[2] == "cluster"  # splits combined in a thread-block cluster: no workspace, no reduce
    assert plan.bulk == (4 if cluster else 3) and plan.tma and plan.cluster == cluster
    assert plan.kernel.endswith(f"w{variant[0]}s{variant[1]}{'hc' if cluster else 'h'}")
    assert not cluster or (plan.workspace_bytes == 0 and plan.reduce_kernel is None)
    assert plan.grid[0] == Hkv // variant[0]
    _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype)


PA8_HEADS_CASES = [
    # B, Hq, Hkv, D, block_size, lens, num_splits, variant
    (3, 8, 8, 128, 16, [1, 16, 33], None, (8, 2, "heads")),  # G = 1
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 1, (8, 3, "heads")),
    (4, 32, 8, 128, 16, [1000, 1, 64, 777], 7, (4, 3, "heads")),  # two groups, empty splits
    (3, 32, 16, 128, 32, [900, 0, 300], None, (8, 2, "heads")),  # two groups of 8, G = 2
    (5, 12, 4, 64, 32, [31, 32, 33, 300, 0], None, (4, 4, "heads")),
    (2, 64, 4, 64, 16, [513, 70], 3, (4, 3, "heads")),  # G = 16
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA8_HEADS_CASES,
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}w{}s{}".format(*c[:5], c[6], *c[7][:2]))
def test_paged_decode_fp8_tma_heads_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits, variant = case
    _fp8_heads_check(lib, B, Hq, Hkv, D, bs, lens, splits, variant, dtype, case)


@pytest.mark.parametrize("variant", [(4, 3, "heads"), (4, 4, "heads"), (8, 2, "heads"), (8, 3, "heads")],
                         ids=lambda v: f"w{v[0]}s{v[1]}h")
@pytest.mark.parametrize("splits", [None, 5])
@pytest.mark.parametrize("D", [64, 128])
def test_paged_decode_fp8_tma_heads_variants(lib, variant, splits, D):
    _fp8_heads_check(lib, 3, 24, 8, D, 16, [1500, 47, 0], splits, variant, torch.float16, (variant, splits, D))


@pytest.mark.parametrize("bs", [32, 128, 256])
def test_paged_decode_fp8_tma_heads_block_sizes(lib, bs):
    # 5 splits of 1500 tokens start at 320, 640, ... (mid-block for blocks of 128 and 256 tokens)
    _fp8_heads_check(lib, 3, 16, 8, 128, bs, [1500, 200, 9], 5, (8, 2, "heads"), torch.bfloat16, bs)


# fp8 pool, cluster-reduce head groups (variants (warps, stages, "cluster"), sm_90): the head-group
# kernel with the splits of each row combined inside a thread-block cluster through distributed shared
# memory; empty splits (short sequences) and an empty sequence take part in their cluster; up to 8 splits.
# The head-group cases in their cluster form (w4s3 / w8s3, not compiled as clusters since run 18, as
# w4s4 / w8s2), then the largest cluster.
PA8_CLUSTER_CASES = [c[:7] + (({4: (4, 4), 8: (8, 2)}[c[7][0]] if c[7][:2] in ((4, 3), (8, 3)) else c[7][:2])
                              + ("cluster",),) for c in PA8_HEADS_CASES] + [
    # B, Hq, Hkv, D, block_size, lens, num_splits, variant
    (2, 16, 8, 128, 64, [4000, 70], 8, (8, 2, "cluster")),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", PA8_CLUSTER_CASES,
                         ids=lambda c: "B{}H{}/{}D{}bs{}sp{}w{}s{}".format(*c[:5], c[6], *c[7][:2]))
def test_paged_decode_fp8_cluster_matches_reference(lib, case, dtype):
    B, Hq, Hkv, D, bs, lens, splits, variant = case
    _fp8_heads_check(lib, B, Hq, Hkv, D, bs, lens, splits, variant, dtype, ("cluster", case))


@pytest.mark.parametrize("variant", [(4, 4, "cluster"), (8, 2, "cluster")], ids=lambda v: f"w{v[0]}s{v[1]}hc")
@pytest.mark.parametrize("splits", [None, 2, 5])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("bs", [16, 128])
def test_paged_decode_fp8_cluster_variants(lib, variant, splits, D, bs):
    _fp8_heads_check(lib, 3, 24, 8, D, bs, [1500, 47, 0], splits, variant, torch.float16,
                     ("cluster", variant, splits, D, bs))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
def test_paged_decode_fp8_default_plan_takes_the_cluster_form(lib, dtype):
    """The planned fp8 decode at B64 H32/8 D128 (head groups, two splits in one wave) is the cluster
    form w4s4hc for fp16, w8s2h at four splits for bf16; ragged lengths, an empty sequence and one
    shorter than a split."""
    B, Hq, Hkv, D, bs = 64, 32, 8, 128, 16
    lens = torch.randint(1, 1025, (B,), generator=torch.Generator().manual_seed(64)).tolist()
    lens[0], lens[1], lens[2] = 1024, 0, 100
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(("fp8-default", dtype)).encode()))
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen)
    q = _rand((B, Hq, D), dtype, gen)
    out = torch.full_like(q, float("nan"))
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out)
    torch.cuda.synchronize()
    if dtype == torch.float16:
        assert plan.kernel.endswith("_d128_w4s4hc") and plan.cluster and plan.num_splits == 2, plan.kernel
    else:
        assert plan.kernel.endswith("_d128_w8s2h") and not plan.cluster and plan.num_splits == 4, plan.kernel
    _check_fp8_out(out, q, k16, v16, k8, v8, ks, vs, tables, lens, dtype)


def test_paged_decode_fp8_cluster_odd_rows_and_refusals(lib):
    """The cluster kernel writes any output row stride (no fallback needed): the same output as the
    head-group kernel on rows Hq * D + 2 elements apart; plans it cannot run are refused (more splits
    than a portable cluster, a group that does not divide Hkv, a block size under 16)."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelError

    B, Hq, Hkv, D, bs, lens = 2, 16, 8, 128, 16, [1500, 7]
    gen = torch.Generator(device="cuda").manual_seed(31)
    _, _, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)

    def odd_rows():  # [B, Hq, D] rows Hq * D + 2 elements apart
        return torch.full((B, Hq * D + 2), float("nan"), dtype=q.dtype, device="cuda")[:, :Hq * D].view(B, Hq, D)
    out = odd_rows()
    plan = lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, variant=(8, 2, "cluster"), num_splits=4)
    base = torch.full_like(q, float("nan"))
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, base, variant=(8, 2, "heads"), num_splits=4)
    torch.cuda.synchronize()
    assert plan.cluster and out.stride(0) % 4 == 2
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL8[torch.float16] and _rel_err(base, expect) < TOL8[torch.float16]
    assert (out.float() - base.float()).abs().max().item() < 2e-3  # same partials, combined in another order
    with pytest.raises(ValueError):
        lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, variant=(8, 2, "cluster"), num_splits=9)
    with pytest.raises(KernelError):  # 12 splits of 128 tokens: past the portable cluster size
        lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out,
                             plan=dataclasses.replace(plan, num_splits=12, part_tokens=128, grid=(1, 12, B)))
    with pytest.raises(KernelError):  # a group of 16 kv heads: not compiled
        lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, plan=dataclasses.replace(plan, warps=16))
    _, _, k_b8, v_b8, ks8, vs8, t_b8, seq8 = _make_fp8_pool(lib, B, Hkv, D, 8, [100, 7], torch.float16, gen)
    with pytest.raises(KernelError):  # block size 8 under a plan made for 16
        lib.paged_decode_fp8(q, k_b8, v_b8, ks8, vs8, t_b8, seq8, out,
                             plan=lp.plan_paged_decode(B, Hq, Hkv, D, 16, t_b8.shape[1], kv_dtype="fp8",
                                                       variant=(8, 2, "cluster"), num_splits=2))
    torch.cuda.synchronize()


def test_paged_decode_fp8_tma_heads_falls_back(lib):
    """An output whose row stride is not a multiple of 4 elements (the head-group kernel stores 4
    columns at once) runs the per-kv-head TMA kernel (4, 3): the same output as that kernel; map
    checks and plans the launcher cannot run are refused."""
    import dataclasses

    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelError

    B, Hq, Hkv, D, bs, lens = 2, 16, 8, 128, 16, [300, 7]
    gen = torch.Generator(device="cuda").manual_seed(13)
    _, _, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, B, Hkv, D, bs, lens, torch.float16, gen)
    q = _rand((B, Hq, D), torch.float16, gen)
    assert lib.fp8_tma_heads_map_ok(k8, 8) and lib.fp8_tma_heads_map_ok(k8, 4)
    assert not lib.fp8_tma_heads_map_ok(k8, 3) and not lib.fp8_tma_heads_map_ok(k8, 16)

    def odd_rows():  # [B, Hq, D] rows Hq * D + 2 elements apart
        return torch.full((B, Hq * D + 2), float("nan"), dtype=q.dtype, device="cuda")[:, :Hq * D].view(B, Hq, D)
    out, base = odd_rows(), odd_rows()
    assert out.stride(0) % 4 == 2
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, variant=(8, 2, "heads"), num_splits=2)
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, base, variant=(4, 3, "tma"), num_splits=2)
    torch.cuda.synchronize()
    assert torch.equal(out, base)
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL8[torch.float16]
    good = lp.plan_paged_decode(B, Hq, Hkv, D, bs, tables.shape[1], kv_dtype="fp8", variant=(8, 2, "heads"))
    with pytest.raises(KernelError):  # group of 16 kv heads: not compiled
        lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, plan=dataclasses.replace(good, warps=16))
    with pytest.raises(ValueError):  # Hkv % warps != 0
        lib.paged_decode_fp8(q[:, :4], k8[:, :, :2].contiguous(), v8[:, :, :2].contiguous(), ks[:2].contiguous(),
                             vs[:2].contiguous(), tables, seq, out[:, :4], variant=(4, 3, "heads"))


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_append_kv_fp8_quantizes_exactly(lib, dtype, D):
    """Every written byte equals e4m3_rne(clamp(x / scale, +-448)); nothing else is written.
    The scales are half the amax/448 choice, so the largest values saturate."""
    B, Hkv, bs, lens = 3, 4, 16, [37, 1, 16]
    gen = torch.Generator(device="cuda").manual_seed(D + (1 if dtype == torch.bfloat16 else 0))
    k16, v16, k8, v8, ks, vs, _, _ = _make_fp8_pool(lib, B, Hkv, D, bs, lens, dtype, gen, scale_div=896.0)
    for p16, p8, s in ((k16, k8, ks), (v16, v8, vs)):
        written = ~torch.isnan(p16.float()).cpu()
        expect = torch.where(written, _e4m3_bytes(torch.nan_to_num(p16), s), torch.full_like(p8.cpu(), E4M3_NAN))
        got = p8.cpu()
        assert torch.equal(got, expect), f"{int((got != expect).sum())} bytes differ"
        assert int(((got[written] & 0x7F) == 0x7E).sum()) > 0  # some values saturated at 448


def test_append_kv_fp8_then_decode_new_tokens(lib):
    """Decode after appending 3 more tokens per sequence into a pool already holding a prefix."""
    B, Hq, Hkv, D, bs = 2, 16, 4, 128, 16
    gen = torch.Generator(device="cuda").manual_seed(77)
    lens0 = [40, 15]
    k16, v16, k8, v8, ks, vs, tables, _ = _make_fp8_pool(lib, B, Hkv, D, bs, lens0, torch.float16, gen)
    new = 3
    lens = [L + new for L in lens0]  # 43 and 18: still inside each sequence's blocks (+1 spare entry)
    # _make_pool's tables end in -1 entries: give the sequences spare pool blocks where they grow
    tables = tables.cpu()
    spare = sorted(set(range(k8.shape[0])) - set(tables[tables >= 0].tolist()))
    for b, L in enumerate(lens):
        for j in range(-(-L // bs)):
            if int(tables[b, j]) < 0:
                tables[b, j] = spare.pop()
    tables = tables.cuda()
    k_new = _rand((B, new, Hkv, D), torch.float16, gen) * 0.5
    v_new = _rand((B, new, Hkv, D), torch.float16, gen) * 0.5
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    lib.append_kv_fp8(k_new, v_new, k8, v8, ks, vs, tables, seq)
    q = _rand((B, Hq, D), torch.float16, gen)
    out = torch.full_like(q, float("nan"))
    lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array(lens),
                                 out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL8[torch.float16]
    # the new tokens are in the pool, quantized with their head's scale
    for b, L in enumerate(lens):
        for i in range(new):
            pos = L - new + i
            blk, slot = int(tables[b, pos // bs]), pos % bs
            got = k8[blk, slot].cpu()
            assert torch.equal(got, _e4m3_bytes(k_new[b, i][None, None], ks)[0, 0]), (b, i)


def test_paged_decode_fp8_accepts_float8_dtype_and_refuses_bad_arguments(lib):
    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins.kernel_lib import KernelError

    gen = torch.Generator(device="cuda").manual_seed(9)
    k16, v16, k8, v8, ks, vs, tables, seq = _make_fp8_pool(lib, 2, 2, 64, 16, [40, 9], torch.float16, gen)
    q = _rand((2, 8, 64), torch.float16, gen)
    out = torch.full_like(q, float("nan"))
    lib.paged_decode_fp8(q, k8.view(torch.float8_e4m3fn), v8.view(torch.float8_e4m3fn), ks, vs, tables, seq, out)
    torch.cuda.synchronize()
    expect = ref.paged_attention(_np(q), _dequant(k8, ks), _dequant(v8, vs), tables.cpu().numpy(), np.array([40, 9]),
                                 out_dtype=np.float64)
    assert _rel_err(out, expect) < TOL8[torch.float16]
    with pytest.raises(ValueError):  # a 16-bit pool is not an fp8 pool
        lib.paged_decode_fp8(q, k16, v16, ks, vs, tables, seq, out)
    with pytest.raises(ValueError):  # one scale per kv head
        lib.paged_decode_fp8(q, k8, v8, ks[:1].contiguous(), vs, tables, seq, out)
    # head size 80 has no fp8 kernel: the C launchers refuse it (plan of D = 64 forced through)
    plan = lp.plan_paged_decode(2, 8, 2, 64, 16, tables.shape[1], kv_dtype="fp8", num_splits=1)
    q80 = _rand((2, 8, 80), torch.float16, gen)
    k80 = torch.zeros((k8.shape[0], 16, 2, 80), dtype=torch.uint8, device="cuda")
    with pytest.raises(KernelError):
        lib.paged_decode_fp8(q80, k80, k80, ks, vs, tables, seq, torch.empty_like(q80), plan=plan)
    with pytest.raises(KernelError):
        lib.append_kv_fp8(q80[:, None, :2], q80[:, None, :2], k80, k80, ks, vs, tables, seq)
    with pytest.raises(ValueError):  # a 16-bit plan for an fp8 pool
        lib.paged_decode_fp8(q, k8, v8, ks, vs, tables, seq, out, plan=lp.plan_paged_decode(2, 8, 2, 64, 16, 4))
