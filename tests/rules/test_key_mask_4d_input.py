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


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("batch", [1, "c"])
def test_a_key_mask_of_another_batch_dim_is_no_key_padding(h, target, batch):
    # m [1, 1, 1, t] (one pattern broadcast over the batch) or [c, 1, 1, t] (a batch of another name): read as a
    # [B, T] key padding it was a [1, T] key_padding_mask ORT refuses (fuzz50: fuzz_s46 mask4d_every batch-one)
    model = _model(h, mdims=[batch, 1, 1, "s"])
    out = h.fuse(model, target)
    feeds = _feeds(h)
    if batch == 1:
        feeds["m"] = feeds["m"][1:2]   # batch 1's right padding in every row
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_2d_attention_mask_of_one_row_is_no_key_padding(h, target):
    # attention_mask [1, s] (one pattern for every batch row) over q [b, H, s, D]: (1 - m) * min added to the
    # scores; read as a [B, T] key padding it was a [1, T] key_padding_mask ORT refuses (fuzz50)
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "scale"], ["sd"]), n("Unsqueeze", ["attention_mask", "ax"], ["m4"]),
             n("Cast", ["m4"], ["mf"], to=1), n("Sub", ["one", "mf"], ["inv"]), n("Mul", ["inv", "fill"], ["bias"]),
             n("Add", ["sd", "bias"], ["w"]), n("Softmax", ["w"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k", ["b", H, "s", D]), h.vi("v", ["b", H, "s", D]),
              h.vi("attention_mask", [1, "s"], 7)]
    inits = {"fill": np.array(LOWEST, np.float32), "scale": np.array(np.sqrt(D), np.float32),
             "ax": np.array([1, 2], np.int64), "one": np.array(1.0, np.float32)}
    model = h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    feeds["attention_mask"] = np.array([[1, 1, 1, 0, 0]], np.int64)
    h.assert_close(model, h.fuse(model, target), feeds)


def _float_model(h, form):
    """The same attention over a FLOAT key mask input m [b, 1, 1, s] (glue50): read through Less(m, -1) (0 keeps,
    large negative masks: Where(m < -1, min, s)), Cast(m, bool) (nonzero masks) or Equal(m, 0) (Where(m == 0, s,
    min)), or added to the scores as it is (``add``: a bias of arbitrary values)."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "scale"], ["sd"])]
    nodes += {"less": [n("Less", ["m", "thr"], ["mb"]), n("Where", ["mb", "fill", "sd"], ["w"])],
              "cast": [n("Cast", ["m"], ["mb"], to=9), n("Where", ["mb", "fill", "sd"], ["w"])],
              "equal": [n("Equal", ["m", "zero"], ["mb"]), n("Where", ["mb", "sd", "fill"], ["w"])],
              "add": [n("Add", ["sd", "m"], ["w"])]}[form]
    nodes += [n("Softmax", ["w"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k", ["b", H, "s", D]), h.vi("v", ["b", H, "s", D]),
              h.vi("m", ["b", 1, 1, "s"])]
    inits = {"fill": np.array(LOWEST, np.float32), "scale": np.array(np.sqrt(D), np.float32),
             "thr": np.array(-1.0, np.float32), "zero": np.array(0.0, np.float32)}
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)


def _float_feeds(h, form, odd=False):
    """The key padding of _feeds as floats (0 kept; masked -1e9, or 1 for the Cast form); ``odd``: kept keys of
    batch 1 carry values a bias would read (-0.5, 0.25: still 0 under the comparison / nonzero under the Cast)."""
    feeds = _feeds(h, inverted=True)
    masked = feeds.pop("m")
    m = np.where(masked, 1.0 if form == "cast" else -1e9, 0.0).astype(np.float32)
    if odd and form in ("less", "add"):
        m[1, ..., 0], m[1, ..., 1] = -0.5, 0.25
    return {**feeds, "m": m}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["less", "cast", "equal"])
def test_a_float_key_mask_input_made_bool_is_key_padding(h, target, form):
    """A float [b, 1, 1, s] key mask compared with one number (or cast to bool): the bool's two values are all it can
    be, so the probe proves it the key padding as it does a bool input (fed in the bool's place). ort: a [B, T]
    key_padding_mask, no Where / Shape / Concat / Expand (before: Where + Shape + Concat + Expand of the bias); onnx /
    trt: the bias rebuilt from the keep-mask (before: Mul + Add + Max on the float bias); values equal in ORT, also
    with kept keys of odd values."""
    model = _float_model(h, form)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    if target == "ort":
        assert not {"Expand", "Concat", "Shape", "Where"} & set(ops), ops
        mha = next(nd for nd in out.graph.node if nd.op_type == "MultiHeadAttention")
        assert len(mha.input) == 5 and mha.input[4], list(mha.input)
    else:   # the bias rebuilt from the key keep-mask (key-padding-bias), not the float mask's floor arithmetic
        assert "Max" not in ops and "Mul" not in ops, ops
    for odd in (False, True):
        h.assert_close(model, out, _float_feeds(h, form, odd))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_float_mask_added_as_it_is_stays_a_bias(h, target):
    """The float mask added to the scores as it is: its values are unknown (a bias of any values), so it is no key
    padding: no key_padding_mask at ort, and the outputs match with values no padding mask holds (-0.5, 0.25)."""
    model = _float_model(h, "add")
    out = h.fuse(model, target)
    if target == "ort":
        mha = next(nd for nd in out.graph.node if nd.op_type == "MultiHeadAttention")
        assert len(mha.input) < 5 or not mha.input[4], list(mha.input)
    for odd in (False, True):
        h.assert_close(model, out, _float_feeds(h, "add", odd))
