"""rules/attention/grouped_rows.yaml: grouped attention with the G query heads of each kv head stacked
along the rows, as tf2onnx decomposes keras-hub GemmaAttention's einsum("btkgh,bskh->bkgts"):
q5 [B, K, G, T, D] viewed [B*K, G*T, D] @ K^T [B*K, D, S], scores viewed [B, K, G, T, S] for the
mask and softmax, viewed back [B*K, G*T, S] @ V [B*K, S, D], viewed [B, K, G, T, D]. Built with onnx.helper
(view targets read from Shape, as tf2onnx writes them); numerics in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import onnx_fuse

B, G, S, D = 2, 4, 5, 8


def n(*args, **kw):
    return helper.make_node(*args, **kw)


def _block(h, *, mask="keras", softmax_axis=-1, out_order=(0, 1, 2, 3), kv=1):
    """q5 [B, K, G, T, D], k / v [B, S, K, D] (K = kv), viewed as tf2onnx writes the einsums: q5 as
    [B*K, G*T, D] (B*K a ReduceProd of its shape), k moved to [B, K, D, S] and viewed [B*K, D, S], v to
    [B, K, S, D] and viewed [B*K, S, D]. mask "keras": where(m, softmax(where(m, s, -1e9)), 0) with a
    boolean keep-mask [B, 1, 1, T, S] (Keras' Softmax(mask), which masked-softmax-keep-zero reads
    first); "add": an additive [B, 1, 1, T, S] bias. out_order: the four leading dims of the output
    view, taken from q5's."""
    c = {"c0": np.array([0], np.int64), "c2": np.array([2], np.int64), "c3": np.array([3], np.int64),
         "c4": np.array([4], np.int64), "dd": np.array([D], np.int64), "m1": np.array([-1], np.int64),
         "perm": np.array(out_order, np.int64), "fill": np.array(-1e9, np.float32),
         "zero": np.array(0.0, np.float32)}
    nodes = [
        n("Shape", ["q5"], ["qs"]), n("Slice", ["qs", "c0", "c2"], ["qbk"]),
        n("ReduceProd", ["qbk"], ["bk"], keepdims=1),                               # [B*K]
        n("Slice", ["qs", "c0", "c4"], ["lead"]),                                   # [B, K, G, T]
        n("Concat", ["bk", "m1", "dd"], ["t3"], axis=0), n("Reshape", ["q5", "t3"], ["q3"]),
        n("Transpose", ["k"], ["x"], perm=[0, 2, 3, 1]), n("Shape", ["x"], ["xs"]),
        n("Slice", ["xs", "c3", "c4"], ["slen"]),                                   # [S]
        n("Concat", ["m1", "dd", "slen"], ["tk"], axis=0), n("Reshape", ["x", "tk"], ["kt"]),
        n("Transpose", ["v"], ["y"], perm=[0, 2, 1, 3]), n("Shape", ["y"], ["ys"]),
        n("Slice", ["ys", "c2", "c4"], ["ytail"]), n("Concat", ["m1", "ytail"], ["tv"], axis=0),
        n("Reshape", ["y", "tv"], ["v3"]),
        n("MatMul", ["q3", "kt"], ["sc"]),
        n("Concat", ["lead", "slen"], ["t5"], axis=0), n("Reshape", ["sc", "t5"], ["s5"]),
    ]
    if mask == "keras":
        nodes += [n("Where", ["m", "s5", "fill"], ["sw"]), n("Softmax", ["sw"], ["p0"], axis=softmax_axis),
                  n("Where", ["m", "p0", "zero"], ["p"])]
        mvi = h.vi("m", ["b", 1, 1, "s", "s"], 9)
    else:
        nodes += [n("Add", ["s5", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=softmax_axis)]
        mvi = h.vi("mask", ["b", 1, 1, "s", "s"])
    nodes += [n("Concat", ["bk", "m1", "slen"], ["tp"], axis=0), n("Reshape", ["p", "tp"], ["p3"]),
              n("MatMul", ["p3", "v3"], ["o3"]),
              n("Gather", ["lead", "perm"], ["lead2"], axis=0), n("Concat", ["lead2", "dd"], ["to"], axis=0),
              n("Reshape", ["o3", "to"], ["y5"])]
    inputs = [h.vi("q5", ["b", kv, G, "s", D]), h.vi("k", ["b", "s", kv, D]), h.vi("v", ["b", "s", kv, D]), mvi]
    return h.make_model(nodes, inputs, [h.vi("y5", None)], c, opset=17)


def _feeds(h, mask="keras", kv=1):
    keep = np.tril(np.ones((S, S), bool))[None, None, None].repeat(B, 0)
    keep[1, ..., :2] = False     # left padding on row 1: its first two queries keep no key
    feeds = {"q5": h.rng.standard_normal((B, kv, G, S, D)).astype(np.float32),
             "k": h.rng.standard_normal((B, S, kv, D)).astype(np.float32),
             "v": h.rng.standard_normal((B, S, kv, D)).astype(np.float32)}
    if mask == "keras":
        feeds["m"] = keep
    else:
        keep[1, ..., :2, 0] = True
        feeds["mask"] = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return feeds


@pytest.mark.parametrize("kv", [1, 2])
@pytest.mark.parametrize("mask", ["keras", "add"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_grouped_rows_fuse_as_one_kv_head(h, target, mask, kv):
    """One attention over a batch of B*K rows with one kv head each (GroupQueryAttention kv_num_heads
    1 at ort): MQA (K = 1, keras-hub Gemma's own export) and GQA (K = 2); left-padded rows whose keys
    are all masked stay 0 in the Keras form. Unfused before grouped_rows.yaml."""
    model = _block(h, mask=mask, kv=kv)
    res = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True)
    assert res.report.rule_fires.get("attention-grouped-rows") == 1, res.report.rule_fires
    out = res.to_proto()
    assert "Softmax" not in h.ops(out), h.ops(out)
    (node,) = [x for x in out.graph.node if x.op_type in ("GroupQueryAttention", "Attention")]
    if node.op_type == "GroupQueryAttention":   # ort (Attention-23 where its mask form needs it)
        assert {a.name: a.i for a in node.attribute}["kv_num_heads"] == 1
    h.assert_close(model, out, _feeds(h, mask, kv))


def test_softmax_over_the_group_axis_is_refused(h):
    model = _block(h, mask="add", softmax_axis=2)
    assert any("last axis" in r for r in h.reasons(model, "onnx", "attention-grouped-rows"))
    assert "Softmax" in h.ops(h.fuse(model, "onnx"))


def test_output_viewed_in_another_order_is_refused(h):
    """The output viewed [B, K, T, G, D] from [B*K, G*T, D] rows is not q's head layout."""
    model = _block(h, mask="add", out_order=(0, 1, 3, 2))
    assert any("viewed [B, K, G, T, Dv]" in r for r in h.reasons(model, "onnx", "attention-grouped-rows"))
    out = h.fuse(model, "onnx")
    assert "attention-grouped-rows" not in onnx_fuse.optimize(model, level=3, target="onnx").report.rule_fires
    h.assert_close(model, out, _feeds(h, "add"))
