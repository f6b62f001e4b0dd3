"""GPU tests of FusedAttention's TensorRT AOT twins (the ``*_trt`` entries TensorRT launches from a
serialized plan, plugins/fused_attention_plugin.py AOT_ADAPTER_HEADER), run without TensorRT.

The adapter PTX is compiled as aot_impl compiles it, loaded with CuPy and launched with the grid,
block, shared memory and int32 scalars aot_impl gives TensorRT; the output is checked against the
NumPy reference. TensorRT launches a twin alone, so it must zero the rows in front of a
left-padded span itself (the library's launcher runs fa_zero_lead_rows for its own launches).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest


pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU available (torch.cuda.is_available() is False)", allow_module_level=True)
cp = pytest.importorskip("cupy", reason="CuPy loads the AOT PTX here (TensorRT does in a plan)")
from . import cuda_reference as ref  # noqa: E402  (float64 on the GPU; after the skips: it imports torch)

from onnx_fuse.plugins import fused_attention_plugin as fa  # noqa: E402

from .test_kernels_gpu import TOL, _assert_padding_zero, _np, _poison_padding, _rand, _rel_err  # noqa: E402

_TAGS = {torch.float16: "f16", torch.bfloat16: "bf16"}


@pytest.fixture(scope="module")
def aot_module(tmp_path_factory):
    from onnx_fuse.plugins.aot_ptx import compile_adapter

    ptx = tmp_path_factory.mktemp("aot") / "fused_attention_trt.ptx"
    ptx.write_bytes(compile_adapter("fused_attention", fa.adapter_source()))
    return cp.RawModule(path=str(ptx))


def _launch(module, entry, variant, q, k, v, lens, Hq, Hkv, scale, cap, window, out):
    bm, bn, warps, _ = variant
    B, S, _, D = q.shape
    fn = module.get_function(entry)
    smem = fa.smem_bytes(D, bm, bn)
    fn.max_dynamic_shared_size_bytes = smem
    bits = [np.int32(fa._float_bits(x)) for x in fa.softcap_scalars(scale, cap)]
    seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
    ptr = [np.uint64(t.data_ptr()) for t in (q, k, v, seq)]
    torch.cuda.synchronize()
    fn(((S + bm - 1) // bm, Hq, B), (32 * warps,),
       (*ptr, np.int32(S), np.int32(Hq), np.int32(Hkv), *bits, np.int32(window), np.uint64(out.data_ptr())),
       shared_mem=smem)
    cp.cuda.Device().synchronize()


def _cases():
    out = []
    for D in (64, 128):
        for variant in fa.aot_variants(D):
            for causal in (0, 1):
                out.append((D, variant, causal, 0.0, 0))
        out.append((D, fa.aot_variants(D, softcap=True)[0], 1, 5.0, 0))
        out.append((D, fa.aot_variants(D)[0], 1, 0.0, 40))
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: "D{}-{}-{}{}{}".format(
    c[0], c[1][3], "causal" if c[2] else "full", f"-cap{c[3]:g}" if c[3] else "",
    f"-win{c[4]}" if c[4] else ""))
def test_aot_twin_matches_reference_with_left_padding(aot_module, case, dtype):
    D, variant, causal, cap, window = case
    B, S, Hq, Hkv = 4, 150, 4, 2
    lens = [S, 61, -90, -1]  # full, right-padded, left-padded (rows in front span several blocks), one row
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr(case).encode()))
    q = (_rand((B, S, Hq, D), torch.float32, gen) * (4.0 if cap else 1.0)).to(dtype)
    k = _rand((B, S, Hkv, D), dtype, gen)
    v = _rand((B, S, Hkv, D), dtype, gen)
    clean = [np.nan_to_num(_np(t)) for t in (q, k, v)]
    _poison_padding(lens, q, k, v)
    out = torch.full_like(q, float("nan"))
    scale = 0.7 / D**0.5
    entry = fa.aot_entry(_TAGS[dtype], D, variant[3], causal, cap > 0)
    _launch(aot_module, entry, variant, q, k, v, lens, Hq, Hkv, scale, cap, window, out)
    expect = ref.fused_attention(*clean, seq_lens=lens, causal=bool(causal), scale=scale, softcap=cap,
                                 window=window, out_dtype=np.float64)
    err = _rel_err(out, expect)
    assert err < TOL[dtype], f"{entry}: relative error {err:.3e}"
    _assert_padding_zero(lens, out)
