"""Hold-out 15's quantized exports end to end (tools/quant_holdout.py, tests/data/holdout_quant): the
corpus LLaMA kv export after onnxruntime.quantization's static QDQ (int8 per-channel weights and int8
activations on the projections only) and after MatMulNBitsQuantizer (int4 blocks of 32, asymmetric).
Attention, RMSNorm and RoPE fuse around the quantized projections; the weights stay quantized (no
DequantizeLinear of a weight folded into floats, MatMulNBits lowered only where the target needs it)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

import onnx_fuse

DATA = Path(__file__).resolve().parents[2] / "tests/data/holdout_quant"
QDQ, NBITS = "llama__kv__trained__qdq_s8pc.onnx", "llama__kv__trained__nbits32.onnx"
FP16_QDQ = "gpt2__dyn_mask__trained__fp16_qdq.onnx"   # qdq_s8pc then float16 (tenth sweep, part B)


def _ops(model: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in model.graph.node:
        key = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
        out[key] = out.get(key, 0) + 1
    return out


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(t.ByteSize() for t in model.graph.initializer)


def test_manifest_lists_the_files():
    files = json.loads((DATA / "manifest.json").read_text())["files"]
    assert set(files) == {QDQ, NBITS, FP16_QDQ}
    for name, entry in files.items():
        assert (DATA / name).stat().st_size == entry["bytes"] < 120_000


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_qdq_projections_keep_their_weights_and_fuse(target):
    src = onnx.load(str(DATA / QDQ))
    result = onnx_fuse.optimize(str(DATA / QDQ), level=3, target=target, verify=True)
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    ops, before = _ops(out), _ops(src)
    attention = ops.get("Attention", 0) + ops.get("com.microsoft::MultiHeadAttention", 0) + ops.get(
        "com.microsoft::GroupQueryAttention", 0)
    assert attention == 2
    # every weight DequantizeLinear and activation QuantizeLinear is still there
    assert ops["DequantizeLinear"] == before["DequantizeLinear"] and ops["QuantizeLinear"] == before["QuantizeLinear"]
    assert _weight_bytes(out) <= _weight_bytes(src)


@pytest.mark.parametrize("target,level,nbits", [("ort", 3, 15), ("onnx", 3, 0), ("trt", 4, 0)])
def test_matmul_nbits(target, level, nbits):
    src = onnx.load(str(DATA / NBITS))
    result = onnx_fuse.optimize(str(DATA / NBITS), level=level, target=target, verify=True,
                                **({"float32_plugins": True} if target == "trt" else {}))
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    ops = _ops(out)
    assert ops.get("com.microsoft::MatMulNBits", 0) == nbits
    if target == "onnx":   # lowered to 4-bit blocked DequantizeLinear + MatMul, no bigger
        assert ops["DequantizeLinear"] == 15 and _weight_bytes(out) <= _weight_bytes(src) + 1024
    if target == "trt":    # asymmetric blocks: int4 q - 8 and the zero points' share as its own term
        # one block-sum per distinct input (CSE: q / k / v and gate / up share theirs): 2 x 4 + lm_head
        assert ops["DequantizeLinear"] == 15 and ops["ReduceSum"] == 9
        assert not any("trt-quantized-ops" in w for w in result.report.warnings)
    assert sum(ops.get(k, 0) for k in ("Attention", "com.microsoft::GroupQueryAttention",
                                        "com.microsoft::MultiHeadAttention", "onnx_fuse::FusedAttention",
                                        "onnx_fuse::PagedAttention")) == 2


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_int8_activations_fused_above_opset_20(target, level):
    # Attention-23 raises the model to 23, where ORT 1.32 refuses int8-activation QDQ (issue 25526):
    # at onnx the activation Q/DQ become uint8 (exact), at trt they stay int8 and verify runs the
    # model with ORT's optimizations off (with only QDQ propagation off, ORT's other QDQ fusions moved
    # the logits by 0.42). Before: onnx / trt failed verify with the refusal; trt then on numbers.
    src = onnx.load(str(DATA / FP16_QDQ))
    result = onnx_fuse.optimize(str(DATA / FP16_QDQ), level=level, target=target, verify=True,
                                **({"float32_plugins": True} if target == "trt" else {}))
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    ops, before = _ops(out), _ops(src)
    assert sum(ops.get(k, 0) for k in ("Attention", "com.microsoft::MultiHeadAttention")) == 2
    assert ops["QuantizeLinear"] == before["QuantizeLinear"]
    zero_points = {t.name: t.data_type for t in out.graph.initializer}
    q_types = {zero_points[n.input[2]] for n in out.graph.node if n.op_type == "QuantizeLinear"}
    opset = next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx"))
    assert q_types == ({onnx.TensorProto.UINT8} if target == "onnx" else {onnx.TensorProto.INT8})
    assert opset == (20 if target == "ort" else 23)
