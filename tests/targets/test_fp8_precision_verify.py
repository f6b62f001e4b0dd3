"""verify of a model on fp8 pools that --precision also converted (docs/paged_kv.md, fp8 section).

optimize(precision=...) used to hand verify the precision's tolerance as atol / rtol, which
replaced every per-output bound, fp8's included: a correct fp16 + fp8 decoder failed on its
present outputs (e4m3 rounds the new token by up to 2^-4 relative, fp16's bound is 1e-2). Now the
precision's bound is the base and e4m3's rounding adds to it (fp8_tolerance / fp8_pool_tolerance).
The first layer's presents are held to e4m3's own bound, so a swapped K / V scale fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_fuse
from onnx_fuse.reference.attention import dequantize_e4m3, quantize_e4m3
from onnx_fuse.targets.paged_kv_feeds import (E4M3_U, FP8_TOL, fp8_pool_tolerance, fp8_tolerance,
                                              paged_feeds, pool_scales, total_length)
from onnx_fuse.verify import make_session, to_proto, verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from fuzz_motifs import make_decoder_case  # noqa: E402

# fuzz_decoder seed 11 as the sinks helper ran it: head 64, GQA 4 / 2, window 3, decode
SPEC = dict(head=64, heads=4, kv_heads=2, layers=1, window=3, sinks=False, sink_shape="export",
            fp16=False, upcast=False, positions="offset", padded=False, dim_names="optimum",
            repeat="static", present_dims=True, kv_fp8=False, decode=True)


def test_the_bounds_add_e4m3_to_the_precision_bound():
    ref = np.array([[-30.0, 2.0], [0.5, np.inf]], np.float32)
    grow = 1.0 + 2.0 ** -4
    assert E4M3_U == 2.0 ** -4   # 3 mantissa bits, round to nearest
    assert fp8_tolerance(ref, (1e-2, 2e-2)) == pytest.approx((FP8_TOL[1] * 30 + grow * 1e-2,
                                                              FP8_TOL[0] + grow * 2e-2))
    assert fp8_tolerance(ref) == pytest.approx((FP8_TOL[1] * 30, FP8_TOL[0]))
    assert fp8_pool_tolerance(np.array([0.5, 2.0], np.float32), (1e-2, 2e-2)) == pytest.approx(
        (2.0 ** -10 * 2.0 + grow * 1e-2, 2.0 ** -4 + grow * 2e-2))


@pytest.mark.parametrize("base", [(0.0, 0.0), (1e-2, 1e-2), (5e-2, 5e-2)])
def test_e4m3_of_a_value_within_the_base_bound_is_within_the_pool_bound(base):
    """The derivation checked on the reference's own rounding (quantize_e4m3): x, then y at the
    edge of the base bound (fp16 / bf16), then e4m3(y / s) * s; over normal and subnormal e4m3,
    the bound holds and is nearly reached (it is not loose), and e4m3's bound alone (base
    dropped) does not hold once base is nonzero."""
    rng = np.random.default_rng(0)
    scale = np.array([0.05, 0.4], np.float32)
    x = (rng.standard_normal((4096, 2, 8)) * np.exp(rng.uniform(-9, 4, (4096, 2, 8)))).astype(np.float64)
    x = np.clip(x, -400 * scale[:, None], 400 * scale[:, None])   # below saturation (448 x scale)
    a, r = base
    y = x + np.sign(rng.standard_normal(x.shape)) * (a + r * np.abs(x))
    got = dequantize_e4m3(quantize_e4m3(y.astype(np.float32), scale), scale)
    err = np.abs(got - x)
    for h in range(2):
        atol, rtol = fp8_pool_tolerance(scale[h:h + 1], base)
        ratio = err[:, h] / (atol + rtol * np.abs(x[:, h]))
        assert ratio.max() <= 1.0 and ratio.max() > 0.85, ratio.max()
        if a or r:
            alone = fp8_pool_tolerance(scale[h:h + 1])
            assert (err[:, h] > alone[0] + alone[1] * np.abs(x[:, h])).any()


@pytest.mark.parametrize("precision, sinks", [("fp16", False), ("fp16", True), ("bf16", False)])
def test_fp8_pools_with_precision_pass_verify(precision, sinks):
    """fp16 failed before (present.0.key: max abs 0.105, max rel 0.058 against fp16's 1e-2)."""
    case = make_decoder_case(11, **{**SPEC, "sinks": sinks})
    result = onnx_fuse.optimize(case.model, level=4, target="trt", kv_cache_dtype="fp8",
                                precision=precision, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert result.report.verify["precision"] == precision
    keys = [o for o in result.report.verify["outputs"] if o["name"] == "present.0.key"]
    assert keys and keys[0]["max_rel"] > 1e-2   # e4m3's rounding is there, above fp16's bound


def _swap_scales(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = next(n for n in out.graph.node if n.op_type == "PagedAttention")
    node.input[7], node.input[8] = node.input[8], node.input[7]
    return out


@pytest.mark.parametrize("precision", [None, "fp16"])
def test_swapped_k_and_v_scales_fail_on_the_first_layers_present(precision):
    """The new token quantized with V's scale and read back with K's: off by their ratio. It
    passed at the output-scaled fp8 bound; e4m3's own bound on the first layer's pool catches it."""
    case = make_decoder_case(11, **SPEC)
    good = to_proto(onnx_fuse.optimize(case.model, level=4, target="trt", kv_cache_dtype="fp8",
                                       precision=precision, float32_plugins=True).model)
    assert verify(case.model, good, precision=precision)["passed"]
    bad = verify(case.model, _swap_scales(good), precision=precision)
    failed = {o["name"] for o in bad["outputs"] if not o["passed"]}
    assert "present.0.key" in failed, bad["outputs"]


def test_later_layers_presents_take_the_output_bound():
    """A second layer's new K / V come from the first layer's fp8 attention, so they carry its
    error: only the first layer's pools get the pool bound (pool_scales), and a 3-layer fp16 +
    fp8 decoder verifies."""
    case = make_decoder_case(7, **{**SPEC, "layers": 3, "window": 0, "repeat": "hf", "positions": "range"})
    result = onnx_fuse.optimize(case.model, level=4, target="trt", kv_cache_dtype="fp8",
                                precision="fp16", verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    original, paged = case.model, to_proto(result.model)
    ref = make_session(original).run(None, case.feeds)
    _, run = paged_feeds(original, paged, case.feeds, total=total_length(paged, ref))
    assert sorted(pool_scales(original, paged, run)) == ["present.0.key", "present.0.value"]
