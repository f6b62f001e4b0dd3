"""Quantized weights stay quantized: a DequantizeLinear of a constant is a compressed weight, and
folding it into a float initializer would undo the compression (hold-out 15, docs/holdout.md)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse
from onnx_fuse.passes.constant_folding import ConstantFoldingPass
from pass_testing import apply, check_same, ops

RNG = np.random.default_rng(7)


def _dq_matmul_model(k: int = 64, n: int = 64, opset: int = 21) -> onnx.ModelProto:
    """y = (x @ DQ(w, per-channel scale, zero point) + b) * DQ(c): an int8 weight and an int8 scalar."""
    w = RNG.integers(-127, 128, (k, n)).astype(np.int8)
    scale = (RNG.random(n) * 0.01 + 0.001).astype(np.float32)
    zp = RNG.integers(-3, 4, n).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(scale, "w_scale"),
             numpy_helper.from_array(zp, "w_zp"), numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(50, np.int8), "c_q"), numpy_helper.from_array(np.array(0.02, np.float32), "c_scale")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["xwb"]),
             helper.make_node("DequantizeLinear", ["c_q", "c_scale"], ["c"]),
             helper.make_node("Mul", ["xwb", "c"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_weight_dequantize_is_not_folded_scalar_is():
    proto = _dq_matmul_model()
    model, modified, p = apply(ConstantFoldingPass, proto)
    assert ops(model) == {"DequantizeLinear": 1, "MatMul": 1, "Add": 1, "Mul": 1}
    assert model.graph.initializers["w_q"].const_value.dtype == ir.DataType.INT8
    assert p.stats.get("DequantizeLinear") == 1 and p.stats.get("skipped: quantized weight") == 1
    check_same(proto, model)


def test_optimized_model_is_no_bigger_on_every_target():
    proto = _dq_matmul_model()
    weight_bytes = lambda m: sum(t.ByteSize() for t in m.graph.initializer)  # noqa: E731 -- shapes in value_info aside
    size = weight_bytes(proto)
    for target in ("ort", "onnx", "trt"):
        result = onnx_fuse.optimize(proto, level=3, target=target, verify=True)
        out = result.to_proto()
        assert result.report.passed, (target, result.report.verify_failure)
        assert weight_bytes(out) <= size, target
        weights = {t.name: t.data_type for t in out.graph.initializer}
        assert TensorProto.INT8 in weights.values() and TensorProto.FLOAT not in {
            t.data_type for t in out.graph.initializer if numpy_helper.to_array(t).size >= 64 * 64}, target
