"""rules/attention/grouped_rows.yaml: grouped attention with the G query heads of one kv head stacked
along the rows, as tf2onnx decomposes keras-hub GemmaAttention's einsum("btkgh,bskh->bkgts")
(MQA): q5 [B, 1, G, T, D] viewed [B, G*T, D] @ K^T [B, D, S], scores viewed [B, 1, G, T, S] for the
mask and softmax, viewed back [B, G*T, S] @ V [B, S, D], viewed [B, 1, G, T, D]. Built with onnx.helper
(view targets read from Shape, as tf2onnx writes them); numerics in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import onnx_fuse

B, G, S, D = 2, 4, 5, 8


def n(*args, **kw):
    return helper.make_node(*args, **kw)


def _block(h, *, mask="keras", softmax_axis=-1, out_order=(0, 1, 2, 3)):
    """mask "keras": where(m, softmax(where(m, s, -1e9)), 0) with a boolean keep-mask [B, 1, 1, T, S]
    (Keras' Softmax(mask), which masked-softmax-keep-zero reads first); "add": an additive
    [B, 1, 1, T, S] bias. out_order: the four leading dims of the output view, taken from q5's."""
    c = {"c0": np.array([0], np.int64), "c1": np.array([1], np.int64), "c4": np.array([4], np.int64),
         "dd": np.array([D], np.int64), "m1": np.array([-1], np.int64), "perm": np.array(out_order, np.int64),
         "fill": np.array(-1e9, np.float32), "zero": np.array(0.0, np.float32)}
    nodes = [
        n("Shape", ["q5"], ["qs"]), n("Slice", ["qs", "c0", "c4"], ["lead"]),      # [B, 1, G, T]
        n("Shape", ["k"], ["ks"]), n("Slice", ["ks", "c1", "c1x"], ["slen"]),      # [S]
        n("Concat", ["c0", "m1", "dd"], ["t3"], axis=0),                           # [0, -1, D]
        n("Reshape", ["q5", "t3"], ["q3"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q3", "kt"], ["sc"]),
        n("Concat", ["lead", "slen"], ["t5"], axis=0),
        n("Reshape", ["sc", "t5"], ["s5"]),
    ]
    c["c1x"] = np.array([2], np.int64)
    if mask == "keras":
        nodes += [n("Where", ["m", "s5", "fill"], ["sw"]), n("Softmax", ["sw"], ["p0"], axis=softmax_axis),
                  n("Where", ["m", "p0", "zero"], ["p"])]
        mvi = h.vi("m", ["b", 1, 1, "s", "s"], 9)
    else:
        nodes += [n("Add", ["s5", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=softmax_axis)]
        mvi = h.vi("mask", ["b", 1, 1, "s", "s"])
    nodes += [n("Slice", ["ks", "c0", "c1"], ["bsz"]), n("Concat", ["bsz", "m1", "slen"], ["t3p"], axis=0),
              n("Reshape", ["p", "t3p"], ["p3"]), n("MatMul", ["p3", "v"], ["o3"]),
              n("Gather", ["lead", "perm"], ["lead2"], axis=0), n("Concat", ["lead2", "dd"], ["to"], axis=0),
              n("Reshape", ["o3", "to"], ["y"])]
    inputs = [h.vi("q5", ["b", 1, G, "s", D]), h.vi("k", ["b", "s", D]), h.vi("v", ["b", "s", D]), mvi]
    return h.make_model(nodes, inputs, [h.vi("y", None)], c, opset=17)


def _feeds(h, mask="keras"):
    keep = np.tril(np.ones((S, S), bool))[None, None, None].repeat(B, 0)
    keep[1, ..., :2] = False     # left padding on row 1: its first two queries keep no key
    feeds = {"q5": h.rng.standard_normal((B, 1, G, S, D)).astype(np.float32),
             "k": h.rng.standard_normal((B, S, D)).astype(np.float32),
             "v": h.rng.standard_normal((B, S, D)).astype(np.float32)}
    if mask == "keras":
        feeds["m"] = keep
    else:
        keep[1, ..., :2, 0] = True
        feeds["mask"] = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return feeds


@pytest.mark.parametrize("mask", ["keras", "add"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_grouped_rows_fuse_as_one_kv_head(h, target, mask):
    """One attention over the kv head (GroupQueryAttention kv_num_heads 1 at ort); left-padded rows
    whose keys are all masked stay 0 in the Keras form. Unfused before grouped_rows.yaml."""
    model = _block(h, mask=mask)
    res = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True)
    assert res.report.rule_fires.get("attention-grouped-rows") == 1, res.report.rule_fires
    out = res.to_proto()
    assert "Softmax" not in h.ops(out), h.ops(out)
    if target == "ort":
        (node,) = [x for x in out.graph.node if x.op_type == "GroupQueryAttention"]
        assert {a.name: a.i for a in node.attribute}["kv_num_heads"] == 1
    h.assert_close(model, out, _feeds(h, mask))


def test_softmax_over_the_group_axis_is_refused(h):
    model = _block(h, mask="add", softmax_axis=2)
    assert any("last axis" in r for r in h.reasons(model, "onnx", "attention-grouped-rows"))
    assert "Softmax" in h.ops(h.fuse(model, "onnx"))


def test_output_viewed_in_another_order_is_refused(h):
    """The output viewed [B, 1, T, G, D] from [B, G*T, D] rows is not q's head layout."""
    model = _block(h, mask="add", out_order=(0, 1, 3, 2))
    assert any("viewed [B, 1, G, T, Dv]" in r for r in h.reasons(model, "onnx", "attention-grouped-rows"))
    out = h.fuse(model, "onnx")
    assert "attention-grouped-rows" not in onnx_fuse.optimize(model, level=3, target="onnx").report.rule_fires
    h.assert_close(model, out, _feeds(h, "add"))
