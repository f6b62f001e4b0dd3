"""-O4 trt on a float32 model: the plugin ops it emits take fp16 / bf16 only (docs/tensorrt.md), so the
report says once per op type that TensorRT cannot build them without --precision; with it, no warning."""

from __future__ import annotations

from pathlib import Path

import onnx_fuse

MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "llama64_sdpa_dynamo.onnx"


def _plugin_warnings(result):
    return [w for w in result.report.warnings if "TensorRT cannot build them" in w]


def test_float32_plugin_ops_are_reported_once_per_op_type():
    result = onnx_fuse.optimize(MODEL, level=4, target="trt")
    fused = sum(n.op_type == "FusedAttention" for n in result.model.graph.all_nodes())
    assert fused == 2
    assert _plugin_warnings(result) == [
        "2 FusedAttention with float32 inputs: TensorRT cannot build them (the plugin kernels take fp16 / "
        "bf16); optimize with --precision fp16 or bf16"]


def test_no_warning_with_a_precision_or_below_the_plugin_level():
    assert _plugin_warnings(onnx_fuse.optimize(MODEL, level=4, target="trt", precision="fp16")) == []
    assert _plugin_warnings(onnx_fuse.optimize(MODEL, level=3, target="trt")) == []
    assert _plugin_warnings(onnx_fuse.optimize(MODEL, level=4, target="onnx")) == []
