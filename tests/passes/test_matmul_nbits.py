"""ORT's int4 MatMulNBits at the onnx and trt targets: blocked int4 DequantizeLinear + MatMul, still
compressed, checked against ORT's own MatMulNBits kernel (passes/matmul_nbits.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse


def _nbits_model(k: int, n: int, block: int, *, zero_points: str, bias: bool = False,
                 opset: int = 21, seed: int = 0) -> onnx.ModelProto:
    """y = MatMulNBits(x, B, scales[, zero_points][, bias]): random packed 4-bit weights.
    zero_points: 'none' (8 implied), 'eight' (stored, all 8), 'random'."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    b = rng.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8)
    scales = (rng.random((n, blocks)) * 0.05 + 0.01).astype(np.float32)
    inputs, inits = ["x", "B", "scales"], [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    if zero_points != "none":
        zp = np.full((n, blocks), 8, np.uint8) if zero_points == "eight" else rng.integers(0, 16, (n, blocks)).astype(np.uint8)
        zp = np.concatenate([zp, np.zeros((n, blocks % 2), np.uint8)], axis=1)      # pad to whole bytes
        packed = (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)
        inputs.append("zero_points")
        inits.append(numpy_helper.from_array(packed, "zero_points"))
    if bias:
        inputs += [""] * (4 - len(inputs)) + ["", "bias"]
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"))
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.microsoft", 1)])


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(t.ByteSize() for t in model.graph.initializer)


def _ops(model: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in model.graph.node:
        key = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("k, block, zero_points, bias, opset", [
    (64, 32, "random", False, 21),
    (64, 32, "none", True, 21),
    (48, 32, "random", False, 20),      # a partial last block; an opset-20 model raised to 21
    (32, 128, "eight", False, 21),      # one block longer than K
])
def test_onnx_target_lowers_exactly(k, block, zero_points, bias, opset):
    proto = _nbits_model(k, 24, block, zero_points=zero_points, bias=bias, opset=opset)
    result = onnx_fuse.optimize(proto, level=2, target="onnx", verify=True)
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    ops = _ops(out)
    assert "com.microsoft::MatMulNBits" not in ops and ops["DequantizeLinear"] == 1 and ops["MatMul"] == 1
    assert {t.data_type for t in out.graph.initializer} >= {TensorProto.UINT4}
    assert _weight_bytes(out) <= _weight_bytes(proto) + 64     # still 4-bit (the scale layout aside)


@pytest.mark.parametrize("zero_points", ["none", "eight"])
def test_trt_target_writes_signed_int4_without_zero_point(zero_points):
    proto = _nbits_model(64, 16, 32, zero_points=zero_points)
    result = onnx_fuse.optimize(proto, level=2, target="trt", verify=True)
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    dq = [n for n in out.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and len(dq[0].input) == 2      # TensorRT: no zero point
    assert TensorProto.INT4 in {t.data_type for t in out.graph.initializer}
    assert "com.microsoft::MatMulNBits" not in _ops(out)


@pytest.mark.parametrize("k", [64, 48])   # 48: a partial last block, padded for the block sums
def test_trt_target_adds_the_zero_points_share_for_asymmetric_blocks(k):
    proto = _nbits_model(k, 16, 32, zero_points="random")
    result = onnx_fuse.optimize(proto, level=2, target="trt", verify=True)
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    ops = _ops(out)
    assert "com.microsoft::MatMulNBits" not in ops and ops["ReduceSum"] == 1 and ops["MatMul"] == 2
    assert ops.get("Pad", 0) == (k % 32 != 0)
    dq = [n for n in out.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and len(dq[0].input) == 2      # int4, no zero point
    assert _weight_bytes(out) <= _weight_bytes(proto) + 512   # + the [blocks, N] float shift


def test_ort_target_keeps_matmul_nbits():
    proto = _nbits_model(64, 16, 32, zero_points="random")
    result = onnx_fuse.optimize(proto, level=2, target="ort", verify=True)
    assert result.report.passed and _ops(result.to_proto()).get("com.microsoft::MatMulNBits") == 1


def _dynamic_model() -> onnx.ModelProto:
    """ORT's dynamic quantization of y = x @ w: DynamicQuantizeLinear + MatMulInteger."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    inits = [numpy_helper.from_array(rng.integers(0, 256, (16, 8)).astype(np.uint8), "wq"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ws")]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_trt_target_names_dynamic_quantization_it_cannot_run():
    result = onnx_fuse.optimize(_dynamic_model(), level=2, target="trt", verify=True)
    assert result.report.passed
    note = [w for w in result.report.warnings if w.startswith("trt-quantized-ops")]
    assert note and "1 DynamicQuantizeLinear" in note[0] and "1 MatMulInteger" in note[0]
    plain = onnx_fuse.optimize(_dynamic_model(), level=2, target="onnx", verify=True)
    assert not any(w.startswith("trt-quantized-ops") for w in plain.report.warnings)


def test_shape_inference_knows_matmul_nbits_output():
    # a quantized TorchScript export has no value_info: the projections' shapes come from here
    import onnx_ir as ir

    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    proto = _nbits_model(64, 24, 32, zero_points="random")
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5
    relu = helper.make_node("Relu", ["y"], ["z"])
    proto.graph.node.append(relu)
    proto.graph.output[0].name = "z"
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    y = next(n for n in model.graph if n.op_type == "Relu").inputs[0]   # MatMulNBits' output
    assert y.shape is not None and list(y.shape)[1:] == [5, 24] and y.dtype == ir.DataType.FLOAT


def test_opset_ceiling_below_21_keeps_matmul_nbits():
    proto = _nbits_model(64, 16, 32, zero_points="random", opset=20)
    result = onnx_fuse.optimize(proto, level=2, target="onnx", verify=True, opset=20)
    out = result.to_proto()
    assert result.report.passed
    assert _ops(out).get("com.microsoft::MatMulNBits") == 1
    assert next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx")) == 20
    assert any("ceiling 20" in w for w in result.report.warnings)


def _uint4_dq_model(k: int, n: int, block: int, seed: int = 2) -> onnx.ModelProto:
    """MatMulNBitsQuantizer's QDQ form: y = x @ DQ(uint4 w, scales, uint4 zero points, axis 0, block)."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    w = helper.make_tensor("w_q", TensorProto.UINT4, [k, n], rng.integers(0, 16, k * n).tolist())
    zp = helper.make_tensor("w_zp", TensorProto.UINT4, [blocks, n], rng.integers(0, 16, blocks * n).tolist())
    scale = numpy_helper.from_array((rng.random((blocks, n)) * 0.05 + 0.01).astype(np.float32), "w_scale")
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], axis=0, block_size=block),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "dq4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", n])], [w, zp, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_trt_target_takes_the_zero_points_out_of_a_uint4_dequantize():
    proto = _uint4_dq_model(64, 16, 32)
    result = onnx_fuse.optimize(proto, level=2, target="trt", verify=True)
    out = result.to_proto()
    assert result.report.passed, result.report.verify_failure
    dq = [n for n in out.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and len(dq[0].input) == 2
    assert TensorProto.INT4 in {t.data_type for t in out.graph.initializer}
    assert not any("trt-quantized-ops" in w for w in result.report.warnings)
    # the onnx target runs uint4 with zero points as it is
    plain = onnx_fuse.optimize(proto, level=2, target="onnx", verify=True).to_proto()
    assert [len(n.input) for n in plain.graph.node if n.op_type == "DequantizeLinear"] == [3]
