"""attention-grouped-5d-scaled (rules/attention/grouped_5d.yaml): grouped-query attention written by
hand over 5-D views, q [B, K, G, T, D] @ k [B, K, 1, S, D]^T with the scores scaled after the product
(/ sqrt(D) or * 1 / sqrt(D)) and masked by a fill (masked_fill(-inf)), an additive mask, or both, K > 1
kv heads of G > 1 query heads and T > 1 queries. attention-grouped-5d read lower_plain's own chain
only (MatMul -> Add? -> Softmax -> MatMul): on the old code none of these fused."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_fuse

B, K, G, T, D = 2, 2, 3, 5, 8


def _chain(scale: str, masks: str):
    nodes = [helper.make_node("Reshape", ["q", "qshape"], ["q5"]),        # [B, T, K*G*D] -> [B, T, K, G, D]
             helper.make_node("Transpose", ["q5"], ["qt"], perm=[0, 2, 3, 1, 4]),
             helper.make_node("Reshape", ["k", "kshape"], ["k4"]),         # [B, S, K*D] -> [B, S, K, D]
             helper.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
             helper.make_node("Unsqueeze", ["kh", "ax2"], ["k5"]),
             helper.make_node("Transpose", ["k5"], ["kt5"], perm=[0, 1, 2, 4, 3]),
             helper.make_node("Reshape", ["v", "kshape"], ["v4"]),
             helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
             helper.make_node("Unsqueeze", ["vh", "ax2"], ["v5"]),
             helper.make_node("MatMul", ["qt", "kt5"], ["sc"]),
             helper.make_node("Div" if scale == "div" else "Mul", ["sc", "sv"], ["ss"])]
    sv = D ** 0.5 if scale == "div" else D ** -0.5
    inits = [helper.make_tensor("qshape", TensorProto.INT64, [5], [0, 0, K, G, D]),
             helper.make_tensor("kshape", TensorProto.INT64, [4], [0, 0, K, D]),
             helper.make_tensor("ax2", TensorProto.INT64, [1], [2]),
             helper.make_tensor("ax123", TensorProto.INT64, [3], [1, 2, 3]),
             helper.make_tensor("sv", TensorProto.FLOAT, [], [sv]),
             helper.make_tensor("fill", TensorProto.FLOAT, [], [-np.inf]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, K * G * D])]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", "seq", K * G * D]),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", "seq", K * D]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", "seq", K * D])]
    s = "ss"
    if "fill" in masks:  # scores.masked_fill(~keep[:, None, None, None, :], -inf)
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, ["batch", "seq"]))
        nodes += [helper.make_node("Not", ["keep"], ["drop"]),
                  helper.make_node("Unsqueeze", ["drop", "ax123"], ["drop5"]),
                  helper.make_node("Where", ["drop5", "fill", s], ["sw"])]
        s = "sw"
    if "add" in masks:  # + bias[:, None, None, None, :]
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", "seq"]))
        nodes += [helper.make_node("Unsqueeze", ["bias", "ax123"], ["bias5"]),
                  helper.make_node("Add", [s, "bias5"], ["sa"])]
        s = "sa"
    nodes += [helper.make_node("Softmax", [s], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v5"], ["o5"]),               # [B, K, G, T, D]
              helper.make_node("Transpose", ["o5"], ["ot"], perm=[0, 3, 1, 2, 4]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "hand5d", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", K * G * D])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def _feeds(masks: str) -> dict:
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((B, T, K * G * D), dtype=np.float32),
             "k": rng.standard_normal((B, T, K * D), dtype=np.float32),
             "v": rng.standard_normal((B, T, K * D), dtype=np.float32)}
    if "fill" in masks:
        keep = np.ones((B, T), bool)
        keep[1, 3:] = False  # the second row padded after 3 keys
        feeds["keep"] = keep
    if "add" in masks:
        feeds["bias"] = rng.uniform(-1, 0, (B, T)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("masks", ["fill", "add", "fill+add", "none"])
@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("target,level", [("onnx", 3), ("ort", 3), ("trt", 4)])
def test_hand_written_grouped_5d_fuses(h, scale, masks, target, level):
    model = _chain(scale, masks)
    result = onnx_fuse.optimize(model, target=target, level=level, verify=True,
                                **({"float32_plugins": True} if level == 4 else {}))
    assert result.report.status == "PASSED", result.report.status_reason
    assert result.report.rule_fires.get("attention-grouped-5d-scaled") == 1, result.report.rule_fires
    assert result.report.rule_fires.get("attention-repeat-kv") == 1, result.report.rule_fires
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["Softmax"] == 0 and ops["MatMul"] == 0, ops
    h.assert_close(model, result.to_proto(), _feeds(masks))


def test_a_mask_with_a_row_per_query_head_is_left():
    """A fill mask over the G axis ([B, 1, G, T, S]) is not one mask for a kv head's G heads."""
    model = _chain("div", "fill")
    for n in model.graph.node:
        if n.output[0] == "drop5":  # keep [B, G, T, S] unsqueezed at 1 instead
            n.input[1] = "ax1"
    model.graph.initializer.append(helper.make_tensor("ax1", TensorProto.INT64, [1], [1]))
    model.graph.input[3].CopyFrom(helper.make_tensor_value_info("keep", TensorProto.BOOL, ["batch", G, "seq", "seq"]))
    result = onnx_fuse.optimize(model, target="onnx", level=3, verify=True)
    assert not result.report.rule_fires.get("attention-grouped-5d-scaled"), result.report.rule_fires
