"""Attention with quantized scores / probabilities is left as written and named in the report
(passes/quantized_attention.py): no attention op quantizes inside, and dropping the Q/DQ pairs
changes the numbers. The same attention in float fuses."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse

ATTENTION = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention")


def _attention(quantized: bool) -> onnx.ModelProto:
    """softmax(q k^T / sqrt(8)) v on [1, 2, 4, 8], with uint8 Q/DQ on the scores and probabilities
    (quantize_static on every op) when ``quantized``."""
    def qdq(x: str, scale: str, zp: str) -> tuple[list, str]:
        if not quantized:
            return [], x
        return [helper.make_node("QuantizeLinear", [x, scale, zp], [f"{x}_q"]),
                helper.make_node("DequantizeLinear", [f"{x}_q", scale, zp], [f"{x}_dq"])], f"{x}_dq"

    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]),
             helper.make_node("Mul", ["s0", "scale"], ["s"])]
    more, s = qdq("s", "s_scale", "s_zp")
    nodes += more + [helper.make_node("Softmax", [s], ["p"], axis=-1)]
    more, p = qdq("p", "p_scale", "p_zp")
    nodes += more + [helper.make_node("MatMul", [p, "v"], ["o"])]
    inits = [numpy_helper.from_array(np.array(8 ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s_scale"),
             numpy_helper.from_array(np.array(128, np.uint8), "s_zp"),
             numpy_helper.from_array(np.array(1 / 255, np.float32), "p_scale"),
             numpy_helper.from_array(np.array(0, np.uint8), "p_zp")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 4, 8]) for n in ("q", "k", "v", "o")]
    graph = helper.make_graph(nodes, "attn", io[:3], io[3:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_quantized_scores_and_probabilities_stay_and_are_named(target, level):
    result = onnx_fuse.optimize(_attention(True), level=level, target=target, verify=True)
    assert result.report.passed, result.report.verify_failure
    ops = _ops(result.to_proto())
    assert "Softmax" in ops and not ops & set(ATTENTION)
    assert any(w.startswith("quantized-attention: 1 Softmax") for w in result.report.warnings), result.report.warnings


def test_float_attention_fuses_without_the_note():
    result = onnx_fuse.optimize(_attention(False), level=3, target="onnx", verify=True)
    assert result.report.passed, result.report.verify_failure
    assert "Attention" in _ops(result.to_proto()) and "Softmax" not in _ops(result.to_proto())
    assert not any(w.startswith("quantized-attention") for w in result.report.warnings)
