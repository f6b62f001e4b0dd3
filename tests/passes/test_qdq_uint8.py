"""int8 activation Q/DQ as uint8 at opset >= 21 (passes/qdq_uint8.py).

ONNX Runtime 1.32 refuses int8-activation QDQ graphs at opset >= 21 under its default optimizations
(onnxruntime issue 25526); a fusion that needs opset 23 (here RMSNormalization-23) raised such a model
there, so at ort / onnx the optimized model no longer loaded. The rewrite to uint8 is exact."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse
from onnx_fuse.passes.qdq_uint8 import Int8QdqToUint8Pass
from onnx_fuse.verify import make_session

RNG = np.random.default_rng(21)


def _rms_qdq(opset: int = 18, zp: int = 3) -> onnx.ModelProto:
    """x -> RMSNorm -> Q/DQ (int8 activation) -> Reshape -> MatMul with an int8 per-channel weight DQ."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["x", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "s", "zp"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s", "zp"], ["yd"]),
             helper.make_node("Reshape", ["yd", "shape"], ["r"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=1),
             helper.make_node("MatMul", ["r", "w"], ["out"])]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array((1 + 0.1 * RNG.standard_normal(16)).astype(np.float32), "g"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, np.int8), "zp"),
             numpy_helper.from_array(np.array([16, 16], np.int64), "shape"),
             numpy_helper.from_array(RNG.integers(-127, 128, (16, 8)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.full(8, 0.01, np.float32), "w_s")]
    graph = helper.make_graph(nodes, "rms_qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [16, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ops(model: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in model.graph.node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def _zero_point_types(model: onnx.ModelProto, op: str) -> list[int]:
    inits = {t.name: t.data_type for t in model.graph.initializer}
    return [inits[n.input[2]] for n in model.graph.node if n.op_type == op and len(n.input) > 2]


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_fused_int8_qdq_model_loads_in_ort(target):
    # old code: RMSNormalization-23 raised the model to 23 with int8 activation Q/DQ, and verify
    # failed with ORT's refusal ("output_dtype INT8 does not match y_zero_point type UINT8")
    result = onnx_fuse.optimize(_rms_qdq(), level=2, target=target, verify=True)
    assert result.report.passed, result.report.verify_failure
    out = result.to_proto()
    assert _ops(out)["RMSNormalization"] == 1 and out.opset_import[0].version == 23
    assert _zero_point_types(out, "QuantizeLinear") == [TensorProto.UINT8]
    # the activation DQ follows its Q; the weight's DQ (no zero point, int8 data) is untouched
    dqs = [n for n in out.graph.node if n.op_type == "DequantizeLinear"]
    assert sorted(len(n.input) for n in dqs) == [2, 3]
    assert {t.name: t.data_type for t in out.graph.initializer}["w_q"] == TensorProto.INT8


def test_trt_keeps_int8_and_verifies_without_qdq_propagation():
    # TensorRT parses int8 Q/DQ only; ORT checks the numbers with its QDQ propagation off (old code:
    # verify failed with the refusal)
    result = onnx_fuse.optimize(_rms_qdq(), level=2, target="trt", verify=True)
    assert result.report.passed, result.report.verify_failure
    out = result.to_proto()
    assert _ops(out)["RMSNormalization"] == 1
    assert _zero_point_types(out, "QuantizeLinear") == [TensorProto.INT8]
    assert any("QDQPropagationTransformer" in n for n in result.report.verify["notes"])


@pytest.mark.parametrize("zp", [-128, 0, 3, 127])
def test_rewrite_is_exact(zp):
    model = _rms_qdq(opset=23, zp=zp)
    work = ir.serde.deserialize_model(model)
    assert Int8QdqToUint8Pass()(work).modified
    x = {"x": (RNG.standard_normal((2, 8, 16)) * 4).astype(np.float32)}   # saturates both ends
    a = make_session(model).run(None, x)[0]
    b = make_session(work).run(None, x)[0]   # both with ORT's optimizations off: the same kernels
    np.testing.assert_array_equal(a, b)
    make_session(work, ort_optimizations=True)   # and it loads with them on


def test_left_alone_below_21_or_when_int8_is_read():
    assert not Int8QdqToUint8Pass()(ir.serde.deserialize_model(_rms_qdq(opset=20))).modified
    model = _rms_qdq(opset=23)
    model.graph.output.append(helper.make_tensor_value_info("yq", TensorProto.INT8, None))
    assert not Int8QdqToUint8Pass()(ir.serde.deserialize_model(model)).modified
