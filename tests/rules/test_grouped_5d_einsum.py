"""Grouped-query attention written with einsum over a 5-D grouped view (research code), K > 1 kv
heads of G > 1 query heads: the scores 'bthgd,bshd->bhgts' (q viewed [B, T, K, G, D]) or
'bkgtd,bksd->bkgts' (heads first), the output 'bhgts,bshd->bthgd' / 'bkgts,bksd->bkgtd', with or
without a scale after the scores, a masked fill or an additive mask. einsum-to-matmul writes them as
the 5-D MatMuls attention-grouped-5d(-scaled) read (rules/attention/grouped_5d.yaml), which view them
4-D over K / V repeated; attention-repeat-kv folds the repeat into kv heads.

On the old code the sequence-first spelling fused in no case (the output einsum's product read the
probabilities transposed to [B, T, H, G, S]) and a masked fill without a scale in neither spelling
(attention-grouped-5d-scaled needed a scale)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from tests.rules.test_grouped_5d_scaled import _feeds  # the same B, K, G, T, D and masks

B, K, G, T, D = 2, 2, 3, 5, 8


def _einsum_gqa(spelling: str, scale: str, masks: str):
    inits = [helper.make_tensor("qshape", TensorProto.INT64, [5], [0, 0, K, G, D]),
             helper.make_tensor("kshape", TensorProto.INT64, [4], [0, 0, K, D]),
             helper.make_tensor("ax123", TensorProto.INT64, [3], [1, 2, 3]),
             helper.make_tensor("fill", TensorProto.FLOAT, [], [-np.inf]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, K * G * D])]
    if spelling == "seq":  # q [B, T, K, G, D], k / v [B, S, K, D]
        nodes = [helper.make_node("Reshape", ["q", "qshape"], ["q5"]),
                 helper.make_node("Reshape", ["k", "kshape"], ["k4"]),
                 helper.make_node("Reshape", ["v", "kshape"], ["v4"])]
        eq_s, eq_o = "bthgd,bshd->bhgts", "bhgts,bshd->bthgd"
    else:  # heads first: q [B, K, G, T, D], k / v [B, K, S, D]
        nodes = [helper.make_node("Reshape", ["q", "qshape"], ["q5s"]),
                 helper.make_node("Transpose", ["q5s"], ["q5"], perm=[0, 2, 3, 1, 4]),
                 helper.make_node("Reshape", ["k", "kshape"], ["k4s"]),
                 helper.make_node("Transpose", ["k4s"], ["k4"], perm=[0, 2, 1, 3]),
                 helper.make_node("Reshape", ["v", "kshape"], ["v4s"]),
                 helper.make_node("Transpose", ["v4s"], ["v4"], perm=[0, 2, 1, 3])]
        eq_s, eq_o = "bkgtd,bksd->bkgts", "bkgts,bksd->bkgtd"
    nodes.append(helper.make_node("Einsum", ["q5", "k4"], ["sc"], equation=eq_s))
    s = "sc"
    if scale != "none":
        inits.append(helper.make_tensor("sv", TensorProto.FLOAT, [], [D ** 0.5 if scale == "div" else D ** -0.5]))
        nodes.append(helper.make_node("Div" if scale == "div" else "Mul", [s, "sv"], ["ss"]))
        s = "ss"
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", "seq", K * G * D]),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", "seq", K * D]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", "seq", K * D])]
    if masks == "fill":  # scores.masked_fill(~keep[:, None, None, None, :], -inf)
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, ["batch", "seq"]))
        nodes += [helper.make_node("Not", ["keep"], ["drop"]),
                  helper.make_node("Unsqueeze", ["drop", "ax123"], ["drop5"]),
                  helper.make_node("Where", ["drop5", "fill", s], ["sw"])]
        s = "sw"
    if masks == "add":  # + bias[:, None, None, None, :]
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["batch", "seq"]))
        nodes += [helper.make_node("Unsqueeze", ["bias", "ax123"], ["bias5"]),
                  helper.make_node("Add", [s, "bias5"], ["sa"])]
        s = "sa"
    nodes += [helper.make_node("Softmax", [s], ["p"], axis=-1),
              helper.make_node("Einsum", ["p", "v4"], ["o5"], equation=eq_o)]
    if spelling == "seq":  # o [B, T, K, G, D]
        nodes.append(helper.make_node("Reshape", ["o5", "merge"], ["y"]))
    else:  # o [B, K, G, T, D]
        nodes += [helper.make_node("Transpose", ["o5"], ["ot"], perm=[0, 3, 1, 2, 4]),
                  helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "einsum_gqa", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", K * G * D])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def _fuses(h, model, masks: str, target: str, level: int) -> None:
    result = onnx_fuse.optimize(model, target=target, level=level, verify=True,
                                **({"float32_plugins": True} if level == 4 else {}))
    assert result.report.status == "PASSED", result.report.status_reason
    fires = result.report.rule_fires
    assert (fires.get("attention-grouped-5d", 0) + fires.get("attention-grouped-5d-scaled", 0)) == 1, fires
    assert fires.get("attention-repeat-kv") == 1, fires  # kv heads, not K / V repeated
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["Einsum"] == 0 and ops["Softmax"] == 0 and ops["MatMul"] == 0, ops
    h.assert_close(model, result.to_proto(), _feeds(masks))


@pytest.mark.parametrize("masks", ["none", "fill", "add"])
@pytest.mark.parametrize("scale", ["none", "mul"])
@pytest.mark.parametrize("spelling", ["seq", "heads"])
@pytest.mark.parametrize("target,level", [("onnx", 3), ("ort", 3), ("trt", 4)])
def test_einsum_grouped_gqa_fuses(h, spelling, scale, masks, target, level):
    _fuses(h, _einsum_gqa(spelling, scale, masks), masks, target, level)


@pytest.mark.parametrize("spelling", ["seq", "heads"])
def test_einsum_grouped_gqa_divided_fuses(h, spelling):
    _fuses(h, _einsum_gqa(spelling, "div", "fill"), "fill", "onnx", 3)


def test_a_fill_that_is_not_minus_inf_is_left():
    """masked_fill(-1.0) is no mask (a score of -1 is still weighed): neither rule takes it."""
    model = _einsum_gqa("seq", "none", "fill")
    for t in model.graph.initializer:
        if t.name == "fill":
            t.CopyFrom(helper.make_tensor("fill", TensorProto.FLOAT, [], [-1.0]))
    result = onnx_fuse.optimize(model, target="onnx", level=3, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert not result.report.rule_fires.get("attention-grouped-5d-scaled"), result.report.rule_fires
    assert not result.report.rule_fires.get("attention-grouped-5d"), result.report.rule_fires


@pytest.mark.parametrize("scale", ["none", "mul"])
@pytest.mark.parametrize("spelling", ["seq", "heads"])
def test_einsum_grouped_gqa_is_one_attention(spelling, scale):
    """At onnx-O3 nothing is left beside the 3-D Attention-23: einsum-to-matmul's Unsqueeze of K / V
    under the body's Reshape is read as a view (reshape-of-reshape), so their head splits cancel, and
    the scale is the op's (it stays on the scores, not on K^T). The old code kept 4 Transposes."""
    model = _einsum_gqa(spelling, scale, "none")
    result = onnx_fuse.optimize(model, target="onnx", level=3, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert collections.Counter(n.op_type for n in result.model.graph) == {"Attention": 1}
    att = next(n for n in result.model.graph if n.op_type == "Attention")
    got = att.attributes["scale"].value if "scale" in att.attributes else D ** -0.5
    assert got == pytest.approx(D ** -0.5 if scale == "mul" else 1.0, rel=1e-6), got
