"""GPU test of the PagedAttention plugin's JIT launch sequence for every query length.

``paged_attention_plugin.run_jit`` is what the plugin's ``impl`` runs on TensorRT's buffers:
``append_kv`` then ``paged_decode`` (Sq = 1) or ``paged_prefill`` (Sq > 1). TensorRT cannot run
here, so the test hands run_jit the same buffer interface TensorRT does (device pointer, shape,
element strides) over torch CUDA tensors, and compares the output and both updated pools with
the ONNX-level reference ``reference.paged_attention_op`` on the same fp16/bf16 values. Pool
slots that are neither in a sequence's prefix nor written by the op hold NaN, and the output is
poisoned with NaN first. Run on a CUDA machine (sm_90 for Sq > 1):

    python -m onnx_fuse.plugins.build_kernels --what lib && pytest -m gpu tests/plugins/test_paged_chunked_gpu.py

The decode tests also run the JIT path's split-K plan with its per-stream Workspace, and fp8
(e4m3) pools through append_kv_fp8 + paged_decode_fp8.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from onnx_fuse.plugins import paged_attention_plugin as pa

from .conftest import make_paged_pool  # the `lib` fixture is there too

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)
from . import cuda_reference as ref  # noqa: E402  (float64 on the GPU; after the skips: it imports torch)

# ||out - ref|| / ||ref|| bounds (as tests/plugins/test_kernels_gpu.py)
TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


class _Buffer:
    """The part of ``tensorrt.plugin.Tensor`` run_jit reads, over a torch CUDA tensor."""

    def __init__(self, t):
        self.data_ptr = t.data_ptr()
        self.shape = tuple(t.shape)
        self.strides = tuple(t.stride())


CASES = [
    # B, Hq, Hkv, D, block_size, prefix lengths, Sq
    (2, 4, 2, 128, 16, [37, 0], 1),
    (2, 4, 2, 80, 16, [20, 5], 1),         # decode keeps every head size
    (2, 8, 2, 128, 16, [100, 3], 7),
    (3, 4, 4, 64, 16, [0, 64, 200], 64),   # first chunk (no prefix), block-aligned, long prefix
    (2, 16, 1, 64, 64, [500, 129], 130),   # MQA, chunk spanning blocks and query tiles
    (1, 32, 8, 128, 32, [1000], 512),
    (2, 4, 2, 128, 8, [3, 0], 5),          # tiny blocks
]


def _case_id(c):
    return f"B{c[0]}_h{c[1]}x{c[2]}_d{c[3]}_bs{c[4]}_p{'-'.join(map(str, c[5]))}_sq{c[6]}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_plugin_launch_sequence_matches_reference(lib, case, dtype):
    _run_sequence_case(lib, case, dtype)


# Sliding window (the node's `window`): decode and prefill over a prefix, windows shorter than the
# prefix, inside the new tokens and past everything
WINDOW_CASES = [
    (2, 8, 2, 128, 16, [100, 3], 7, 16),
    (2, 16, 1, 64, 64, [500, 129], 130, 100),
    (1, 32, 8, 128, 32, [1000], 512, 300),
    (3, 4, 4, 64, 16, [0, 64, 200], 64, 1),
    (2, 4, 2, 128, 16, [37, 0], 1, 17),
    (4, 32, 8, 128, 16, [4095, 4000, 1, 2500], 1, 1000),
    (2, 8, 2, 128, 16, [100, 3], 7, 5000),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: _case_id(c[:7]) + f"_w{c[7]}")
def test_plugin_launch_sequence_window_matches_reference(lib, case, dtype):
    _run_sequence_case(lib, case[:7], dtype, window=case[7])


def _run_sequence_case(lib, case, dtype, window=0):
    B, Hq, Hkv, D, bs, prefix, sq = case
    if sq > 1 and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Sq > 1 runs the sm_90a paged prefill kernel only")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((case, str(dtype))).encode()))

    def rand(*shape):
        return torch.randn(shape, generator=gen, device="cuda").to(dtype)

    lens = [p + sq for p in prefix]
    # blocks for prefix + new tokens; only the cached prefix is written, the rest stays NaN
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen, filled=prefix)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    # query/key/value as TensorRT would bind them: [B, Sq, H*D]; the query a strided view
    qkv = rand(B, sq, (Hq + 2 * Hkv) * D)
    query = qkv[..., :Hq * D]
    key, value = rand(B, sq, Hkv * D), rand(B, sq, Hkv * D)
    out = torch.full((B, sq, Hq * D), float("nan"), dtype=dtype, device="cuda")

    def host(t):
        return t.detach().float().cpu().numpy()

    expect, k_exp, v_exp = ref.paged_attention_op(
        host(query), host(key), host(value), host(k_pool), host(v_pool), tables.cpu().numpy(),
        seq_lens.cpu().numpy(), num_heads=Hq, kv_num_heads=Hkv, scale=0.0, window=window)

    stream = torch.cuda.current_stream().cuda_stream
    pa.run_jit(lib, *(_Buffer(t) for t in (query, key, value, k_pool, v_pool, tables, seq_lens,
                                           out)),
               num_heads=Hq, kv_num_heads=Hkv, scale=0.0,
               dtype=str(dtype).replace("torch.", ""), stream=stream, window=window)
    torch.cuda.synchronize()

    o = host(out).astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    err = np.linalg.norm(o - expect) / np.linalg.norm(expect)
    assert err < TOL[dtype], f"relative error {err:.3e}"
    # The pools: the new tokens written bit-exactly where the reference writes them, nothing
    # else touched (NaN slots compare equal to NaN).
    np.testing.assert_array_equal(host(k_pool), k_exp)
    np.testing.assert_array_equal(host(v_pool), v_exp)


def test_run_jit_refuses_prefill_head_sizes_it_has_no_kernel_for(lib):
    t = torch.zeros((1, 4, 2 * 80), dtype=torch.float16, device="cuda")
    pool = torch.zeros((2, 16, 2, 80), dtype=torch.float16, device="cuda")
    tables = torch.zeros((1, 2), dtype=torch.int32, device="cuda")
    lens = torch.full((1,), 4, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="head size 64 or 128"):
        pa.run_jit(lib, *(_Buffer(x) for x in (t, t, t, pool, pool, tables, lens, t)),
                   num_heads=2, kv_num_heads=2, scale=0.0, dtype="float16", stream=0)


# ----------------------------------------------------------------- split-K decode and fp8 pools

DECODE_CASES = [
    # B, Hq, Hkv, D, block_size, prefix lengths, num_splits (None: the planner's)
    (4, 32, 8, 128, 16, [4095, 4000, 1, 2500], None),   # the B4 ctx 4096 case of issue 12
    (2, 16, 1, 64, 64, [3000, 700], None),              # MQA
    (3, 8, 8, 96, 8, [900, 0, 333], 5),                 # MHA, tiny blocks, forced splits
    (2, 8, 2, 256, 32, [1500, 64], 3),
    (2, 4, 2, 80, 16, [1200, 17], 4),                   # D = 80 (16-bit pools only)
]


def _decode_id(c):
    return f"B{c[0]}_h{c[1]}x{c[2]}_d{c[3]}_bs{c[4]}_p{'-'.join(map(str, c[5]))}_s{c[6]}"


def _decode_setup(case, dtype, fp8, gen):
    """Pools with the prefix written (fp8: e4m3 bytes of prefix / scale via torch's cast), the
    other slots poisoned (NaN, or the e4m3 NaN byte 0x7F); tables with -1 past the used blocks."""
    B, Hq, Hkv, D, bs, prefix, _ = case
    lens = [p + 1 for p in prefix]
    k_pool, v_pool, tables = make_paged_pool(B, Hkv, D, bs, lens, dtype, gen, filled=prefix)
    k_scale = v_scale = None
    if fp8:
        k_scale = (torch.rand(Hkv, generator=gen, device="cuda") * 0.01 + 0.008).float()
        v_scale = (torch.rand(Hkv, generator=gen, device="cuda") * 0.01 + 0.008).float()

        def quantize(pool, sc):
            x = (pool.float() / sc[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
            return torch.where(pool.isnan(), 0x7F, x.view(torch.uint8)).to(torch.uint8)

        k_pool, v_pool = quantize(k_pool, k_scale), quantize(v_pool, v_scale)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    return k_pool, v_pool, k_scale, v_scale, tables, seq_lens


def _run_decode_case(lib, case, dtype, fp8, workspace, window=0):
    B, Hq, Hkv, D, bs, prefix, splits = case
    gen = torch.Generator(device="cuda").manual_seed(
        zlib.crc32(repr((case, str(dtype), fp8)).encode()))
    k_pool, v_pool, k_scale, v_scale, tables, seq_lens = _decode_setup(case, dtype, fp8, gen)
    qkv = torch.randn((B, 1, (Hq + 2 * Hkv) * D), generator=gen, device="cuda").to(dtype)
    query = qkv[..., :Hq * D]                      # strided, as TensorRT may bind it
    key = torch.randn((B, 1, Hkv * D), generator=gen, device="cuda").to(dtype)
    value = torch.randn((B, 1, Hkv * D), generator=gen, device="cuda").to(dtype)
    out = torch.full((B, 1, Hq * D), float("nan"), dtype=dtype, device="cuda")

    def host(t):
        return t.detach().cpu().numpy() if t.dtype == torch.uint8 else \
            t.detach().float().cpu().numpy()

    scales = (host(k_scale), host(v_scale)) if fp8 else ()
    expect, k_exp, v_exp = ref.paged_attention_op(
        host(query), host(key), host(value), host(k_pool), host(v_pool), tables.cpu().numpy(),
        seq_lens.cpu().numpy(), *scales, num_heads=Hq, kv_num_heads=Hkv, scale=0.0, window=window)
    extra = dict(k_scale=_Buffer(k_scale), v_scale=_Buffer(v_scale)) if fp8 else {}
    plan = pa.run_jit(lib, *(_Buffer(t) for t in (query, key, value, k_pool, v_pool, tables,
                                                 seq_lens, out)),
                      num_heads=Hq, kv_num_heads=Hkv, scale=0.0,
                      dtype=str(dtype).replace("torch.", ""),
                      stream=torch.cuda.current_stream().cuda_stream, workspace=workspace,
                      device=pa._device_info(), num_splits=splits, window=window, **extra)
    torch.cuda.synchronize()
    o = host(out).astype(np.float64)
    assert np.isfinite(o).all(), f"non-finite output: {np.count_nonzero(~np.isfinite(o))} elements"
    err = np.linalg.norm(o - expect) / np.linalg.norm(expect)
    # fp8: against the reference on the same (dequantized) pool, docs/ops.md's bounds
    tol = {torch.float16: 4e-3, torch.bfloat16: 1e-2} if fp8 else TOL
    assert err < tol[dtype], f"relative error {err:.3e} ({plan.num_splits} splits)"
    np.testing.assert_array_equal(host(k_pool), k_exp)
    np.testing.assert_array_equal(host(v_pool), v_exp)
    return plan


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", DECODE_CASES, ids=_decode_id)
def test_plugin_split_k_decode_matches_reference(lib, case, dtype):
    """The JIT decode as impl runs it: planned split-K, partials in a Workspace kept per stream
    (shared by all cases here, so it grows and is reused)."""
    plan = _run_decode_case(lib, case, dtype, False, SHARED_WORKSPACE)
    if case[6] is not None:
        assert plan.num_splits == case[6]
    if case[0] == 4:   # B4 ctx 4096: the planner splits (one split was 519 GB/s)
        assert plan.num_splits > 1
    stream = torch.cuda.current_stream().cuda_stream
    assert plan.num_splits == 1 or SHARED_WORKSPACE.nbytes(stream) >= plan.workspace_bytes


FP8_CASES = [c for c in DECODE_CASES if c[3] != 80] + [
    (2, 8, 4, 128, 16, [0, 37], None),    # an empty prefix: only the new token
    (1, 4, 2, 64, 16, [5000], 1),         # one split, no workspace
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", FP8_CASES, ids=_decode_id)
def test_plugin_fp8_decode_matches_reference(lib, case, dtype):
    """fp8 (e4m3) pool: append_kv_fp8 writes the bytes the reference's quantizer gives (pools
    compared bit-exactly, poisoned slots untouched), then split-K paged_decode_fp8 against the
    reference over the dequantized pool."""
    plan = _run_decode_case(lib, case, dtype, True, SHARED_WORKSPACE)
    assert plan.kv_fp8
    if case[6] is not None:
        assert plan.num_splits == case[6]


@pytest.mark.parametrize("window", [1, 100, 4096])
@pytest.mark.parametrize("fp8", [False, True], ids=["16bit", "fp8"])
@pytest.mark.parametrize("case", [DECODE_CASES[0], DECODE_CASES[1], FP8_CASES[-1]], ids=_decode_id)
def test_plugin_decode_window_matches_reference(lib, case, fp8, window):
    """The node's window through run_jit: the planned split-K sized for the window, 16-bit and fp8
    pools, against the reference with the same window."""
    plan = _run_decode_case(lib, case, torch.bfloat16, fp8, SHARED_WORKSPACE, window=window)
    assert plan.window == window


def test_plugin_decode_without_workspace_runs_one_split(lib):
    plan = _run_decode_case(lib, DECODE_CASES[0], torch.float16, True, None)
    assert plan.num_splits == 1


SHARED_WORKSPACE = pa.Workspace()
