"""A score scale that is not positive is no attention scale (review29, session 29): ONNX Attention-23 refuses
scale <= 0 at load time ("scale must be greater than 0 if specified") and com.microsoft::MultiHeadAttention reads
scale=0 as its default 1/sqrt(D), so softmax(q k^T * c) with c <= 0 must keep its Softmax at every target (the
rewriter refuses a canonical Attention / AttentionKV whose scale is not a positive finite number)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 8


def _model(h, scale, masked):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"])]
    inits = {"scale": np.array(scale, np.float32)}
    inputs = [h.vi(x, [B, H, S, D]) for x in "qkv"]
    s = "ss"
    if masked:   # masked_fill with float32's lowest: the recognizers' boolean mask
        nodes += [n("Not", ["keep"], ["masked"]), n("Where", ["masked", "fill", "ss"], ["sw"])]
        inits["fill"] = np.array(np.finfo(np.float32).min, np.float32)
        inputs.append(h.vi("keep", [B, 1, S, S], TensorProto.BOOL))
        s = "sw"
    nodes += [n("Softmax", [s], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked_fill"])
@pytest.mark.parametrize("scale", [0.0, -D ** -0.5], ids=["zero", "negative"])
def test_non_positive_score_scale_keeps_the_softmax(h, target, masked, scale):
    model = _model(h, scale, masked)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" in h.ops(out), h.ops(out)
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    if masked:
        feeds["keep"] = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_positive_score_scale_still_fuses(h, target):
    model = _model(h, D ** -0.5, True)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" not in h.ops(out), h.ops(out)
