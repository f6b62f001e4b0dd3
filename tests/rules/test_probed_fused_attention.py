"""fused-attention-trt-probed (rules/attention/fused_attention_trt.yaml): at trt -O4 a padding mask
that Hugging Face's GatherND structure does not spell (transformers 4.x: attention_mask[:, None,
None, :] expanded to [B,1,S,S], (1 - m) * finfo.min, plus a causal Where) becomes FusedAttention
when padding_mask() proves it on its values, as attention-split-value-heads already asked before
splitting for the plugin: such a mask was split into two Attention-23 the plugin then did not take
(q k^T twice). Outputs equal the original on unpadded rows (padded rows are zeros by contract)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 6, 64
LOWEST = float(np.finfo(np.float32).min)


def _expand_mask_attention(h, *, dv=D, fill=LOWEST, causal=True, window=0):
    """``window`` W > 0: the causal part a band, keys i - W < j <= i (tril minus tril(-W))."""
    n = h.node
    nodes = [n("Shape", ["q"], ["qs"]), n("Gather", ["qs", "i0"], ["b"]), n("Gather", ["qs", "i2"], ["s"]),
             n("Concat", ["b", "one", "s", "s"], ["tgt"], axis=0),
             n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]), n("Expand", ["am4", "tgt"], ["ame"]),
             n("Cast", ["ame"], ["amf"], to=TensorProto.FLOAT), n("Sub", ["onef", "amf"], ["inv"]),
             n("Mul", ["inv", "fill"], ["pad"])]
    if causal:
        nodes += [n("Concat", ["s", "s"], ["ss"], axis=0), n("Expand", ["onesb", "ss"], ["ones"]),
                  n("Trilu", ["ones"], ["tri0"], upper=0)]
        nodes += ([n("Trilu", ["ones", "negw"], ["far"], upper=0), n("Sub", ["tri0", "far"], ["tri"])] if window
                  else [n("Identity", ["tri0"], ["tri"])])
        nodes += [n("Cast", ["tri"], ["trib"], to=TensorProto.BOOL),
                  n("Where", ["trib", "zerof", "fill"], ["cm"]), n("Add", ["pad", "cm"], ["mask"])]
    else:
        nodes += [n("Identity", ["pad"], ["mask"])]
    nodes += [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss_"]), n("Add", ["ss_", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o4"]),
              n("Transpose", ["o4"], ["o"], perm=[0, 2, 1, 3])]
    inits = {"i0": np.array([0], np.int64), "i2": np.array([2], np.int64), "one": np.array([1], np.int64),
             "ax12": np.array([1, 2], np.int64), "onef": np.array(1.0, np.float32),
             "fill": np.array(fill, np.float32), "zerof": np.array(0.0, np.float32),
             "onesb": np.array([[1]], np.int64), "scale": np.array(D ** -0.5, np.float32),
             "negw": np.array(-window, np.int64)}
    inputs = [h.vi("q", ["batch", H, "seq", D]), h.vi("k", ["batch", H, "seq", D]), h.vi("v", ["batch", H, "seq", dv]),
              h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", "seq", H, dv])], inits)


def _feeds(h, dv=D):
    f = {x: h.rng.standard_normal((B, H, S, d)).astype(np.float32) for x, d in (("q", D), ("k", D), ("v", dv))}
    am = np.ones((B, S), np.int64)
    am[1, 4:] = 0   # right padding: the plugin's contract
    return {**f, "attention_mask": am}


def _fused(model):
    return [nd for nd in model.graph.node if nd.op_type == "FusedAttention"]


def _attrs(node):
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
def test_expanded_padding_mask_becomes_the_plugin(h, causal):
    model = _expand_mask_attention(h, causal=causal)
    out = h.fuse(model, "trt", level=4)
    fused = _fused(out)
    assert len(fused) == 1 and "Attention" not in h.ops(out), h.ops(out)
    assert _attrs(fused[0])["causal"] == int(causal) and _attrs(fused[0]).get("window", 0) == 0
    f = _feeds(h)
    h.assert_close(model, out, f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])


def test_banded_padding_mask_gives_the_window(h):
    """A sliding window of 3 keys written as tril - tril(-3): padding_window() reads W = 3 from the
    probe (run past every constant of the cone)."""
    model = _expand_mask_attention(h, window=3)
    out = h.fuse(model, "trt", level=4)
    fused = _fused(out)
    assert len(fused) == 1 and _attrs(fused[0])["causal"] == 1 and _attrs(fused[0])["window"] == 3, h.ops(out)
    f = _feeds(h)
    h.assert_close(model, out, f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])


def test_split_value_heads_take_the_plugin_for_the_mask_they_prove(h):
    """v head size 2D: attention-split-value-heads splits on padding_mask(); both halves now become
    FusedAttention (two Attention-23 before)."""
    model = _expand_mask_attention(h, dv=2 * D)
    out = h.fuse(model, "trt", level=4)
    assert len(_fused(out)) == 2 and "Attention" not in h.ops(out), h.ops(out)
    f = _feeds(h, dv=2 * D)
    h.assert_close(model, out, f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])


def test_soft_fill_is_not_the_plugin_contract(h):
    """-1e4 on padded keys only down-weights them (the structural rules refuse it too)."""
    model = _expand_mask_attention(h, fill=-1e4)
    out = h.fuse(model, "trt", level=4)
    assert not _fused(out) and h.ops(out)["Attention"] == 1, h.ops(out)
    assert any("pushed to (nearly) -inf" in r for r in h.reasons(model, "trt", "fused-attention-trt-probed"))


@pytest.mark.parametrize("causal,window", [(True, 0), (False, 0), (True, 3)], ids=["causal", "encoder", "window"])
@pytest.mark.parametrize("rows", [((0, 1, 1, 1, 1, 1), (0, 0, 0, 1, 1, 1)), ((1, 1, 1, 1, 0, 0), (0, 0, 1, 1, 1, 1))],
                         ids=["left", "mixed"])
def test_left_padded_batch_matches_on_its_tokens(h, causal, window, rows):
    """Batched generation pads prompts on the left: seq_lens carries -L for a row that starts with
    zeros (its tokens are the last L), so the plugin attends to the same keys as the mask. Before,
    seq_lens only counted ones and a left-padded row attended to its padding."""
    model = _expand_mask_attention(h, causal=causal, window=window)
    out = h.fuse(model, "trt", level=4)
    assert len(_fused(out)) == 1, h.ops(out)
    f = {**_feeds(h), "attention_mask": np.array(rows, np.int64)}
    h.assert_close(model, out, f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])
