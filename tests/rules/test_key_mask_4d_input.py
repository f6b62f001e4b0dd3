"""A bool key mask given as a [B, 1, 1, T] graph input (dims 1 and 2 declared 1) is read as the key padding
(rewrite/_key_padding_proof.py _key_mask_4d): the probe feeds it as the attention mask on its batch and key axes,
True = kept or, tried next, True = masked (masked_fill(m, min), padding_inverted). The ort lowering then gives
MultiHeadAttention a [B, T] key_padding_mask (Reshape, Not where it marks masked keys, Cast) instead of
re-expanding the bias to [B, 1, S, T] (Shape + Concat + Expand: ORT 1.32's MHA refuses attention_bias dim 2 = 1);
onnx / trt rebuild the bias from it (key-keep-4d). regress48's gap (notes/run47/gaps.md)."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 3, 2, 5, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
LOWEST = float(np.finfo(np.float32).min)


def _model(h, *, t="s", inverted=True, mdims=None):
    """softmax(q k^T / sqrt(D) masked by m) v over q [b, H, s, D], k / v [b, H, t, D]; m bool mdims (default
    [b, 1, 1, t]); inverted: Where(m, min, s) (True = masked), else Where(m, s, min) (True = kept)."""
    n = h.node
    sel = ["m", "fill", "sd"] if inverted else ["m", "sd", "fill"]
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "scale"], ["sd"]), n("Where", sel, ["w"]), n("Softmax", ["w"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k", ["b", H, t, D]), h.vi("v", ["b", H, t, D]),
              h.vi("m", mdims or ["b", 1, 1, t], 9)]
    inits = {"fill": np.array(LOWEST, np.float32), "scale": np.array(np.sqrt(D), np.float32)}
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)


def _feeds(h, t=S, inverted=True, mshape=None):
    keep = np.ones((B, 1, 1, t), bool)
    keep[1, ..., t - 2:] = False   # batch 1 right-padded
    keep[2, ..., 0] = False        # batch 2 left-padded
    keep[0] = False                # batch 0 fully masked: every row averages V in the export
    m = ~keep if inverted else keep
    if mshape is not None:
        m = np.broadcast_to(m, mshape).copy()
    feeds = {"q": h.rng.standard_normal((B, H, S, D)).astype(np.float32)}
    feeds.update({x: h.rng.standard_normal((B, H, t, D)).astype(np.float32) for x in "kv"})
    return {**feeds, "m": m}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("inverted", [True, False])
def test_a_4d_bool_key_mask_input_is_key_padding(h, target, inverted):
    model = _model(h, inverted=inverted)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    if target == "ort":   # the [B, T] key_padding_mask: no re-expanded bias
        assert "Expand" not in ops and "Concat" not in ops and "Shape" not in ops, ops
        mha = next(nd for nd in out.graph.node if nd.op_type == "MultiHeadAttention")
        assert len(mha.input) == 5 and mha.input[4], list(mha.input)
        assert ops["Not"] == (1 if inverted else 0), ops
    h.assert_close(model, out, _feeds(h, inverted=inverted))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_4d_bool_key_mask_over_keys_of_another_length(h, target):
    # cross-attention: T keys (another dim name) != S queries
    model = _model(h, t="t")
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    if target == "ort":
        assert "Expand" not in ops, ops
    h.assert_close(model, out, _feeds(h, t=7))


def test_a_mask_with_a_query_axis_is_no_key_mask_input(h):
    # m [b, 1, s, s]: one row per query (it could be causal): not read as key padding, the bias stays
    model = _model(h, mdims=["b", 1, "s", "s"])
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    mha = [nd for nd in out.graph.node if nd.op_type == "MultiHeadAttention"]
    assert len(mha) == 1 and (len(mha[0].input) < 5 or not mha[0].input[4]), ops
    h.assert_close(model, out, _feeds(h, mshape=(B, 1, S, S)))
