"""verify on quantized originals: ORT's own graph optimizations move their outputs (DequantizeLinear +
MatMul becomes an integer kernel that quantizes the activation too), so the oracle (optimizations off)
and the optimized model (optimizations on) would differ for an unchanged graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.verify import verify

RNG = np.random.default_rng(3)
W = RNG.integers(-127, 128, (64, 64)).astype(np.int8)


def _model(scale_factor: float = 1.0) -> onnx.ModelProto:
    scale = np.full(64, 0.01 * scale_factor, np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
                              [numpy_helper.from_array(W, "w_q"), numpy_helper.from_array(scale, "w_scale")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_unchanged_quantized_model_verifies():
    model = _model()
    result = verify(model, model)
    assert result["passed"], result["outputs"]
    assert result["ort_optimizations"]["optimized"].startswith("off")
    assert any(n.startswith("quantized original") for n in result["notes"])


def test_wrong_scale_still_fails():
    good = _model()
    bad = _model(scale_factor=1.01)
    result = verify(good, bad)
    assert not result["passed"]


def test_float_model_keeps_the_usual_comparison():
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    result = verify(model, model)
    assert result["passed"] and result["ort_optimizations"]["optimized"] == "default"


def _qdq_output_model(weight_factor: float = 1.0, shift_steps: float = 0.0) -> onnx.ModelProto:
    """y = DQ(Q(x @ w)): an output on a grid of step 0.05 (optionally shifted by some steps)."""
    w = (np.random.default_rng(5).standard_normal((64, 64)) * weight_factor).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "s", "zp"], ["hq"]),
             helper.make_node("DequantizeLinear", ["hq", "s", "zp"], ["y" if not shift_steps else "yd"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "zp")]
    if shift_steps:
        nodes.append(helper.make_node("Add", ["yd", "shift"], ["y"]))
        inits.append(numpy_helper.from_array(np.array(0.05 * shift_steps, np.float32), "shift"))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_rounding_flip_of_a_quantized_output_passes():
    # the weights moved within float tolerance (a fused op's summation order): a few values cross a
    # rounding boundary of the output's grid and move by one step
    result = verify(_qdq_output_model(), _qdq_output_model(weight_factor=1 + 1e-4))
    out = result["outputs"][0]
    assert out["max_abs"] > 0.04, "no rounding flipped: the test would not show the step"
    assert result["passed"], result["outputs"]
    assert any("step 0.05" in n for n in result["notes"])


def test_quantized_output_off_by_more_than_a_step_fails():
    result = verify(_qdq_output_model(), _qdq_output_model(shift_steps=2.5))
    assert not result["passed"]


def _reshaped_qdq(opset: int) -> onnx.ModelProto:
    """x -> Q/DQ (int8) -> Reshape -> MatMul: the pattern ORT's QDQ propagation copies a Q/DQ pair to."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("Reshape", ["xd", "shape"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "zp"),
             numpy_helper.from_array(np.array([4, 4], np.int64), "shape"),
             numpy_helper.from_array(np.ones((4, 4), np.float32), "w")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_ort_refusal_of_int8_qdq_at_opset_21_is_explained():
    # ORT 1.32 refuses this valid graph at opset >= 21 under its default optimizations (onnxruntime
    # issue 25526); the fusions raise the opset, so the report says what it is and how to load it
    result = verify(_reshaped_qdq(20), _reshaped_qdq(21))
    if "error" in result:
        assert not result["passed"]
        assert "issue 25526" in result["error"] and "QDQPropagationTransformer" in result["error"]
    else:                   # a later ORT that fixes it loads the model: then it simply verifies
        assert result["passed"], result["outputs"]
