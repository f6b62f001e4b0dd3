"""A score scale that is not positive is no attention scale (review29, session 29): ONNX Attention-23 refuses
scale <= 0 at load time ("scale must be greater than 0 if specified") and com.microsoft::MultiHeadAttention reads
scale=0 as its default 1/sqrt(D), so softmax(q k^T * c) with c = 0 must keep its Softmax at every target (the
rewriter refuses a canonical Attention / AttentionKV whose scale is 0 or not finite). A negative c fuses since
session 30 (left30): the rewriter writes the op on Neg(q) with scale -c, exact (before: refused everywhere)."""

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


def _feeds(h, masked):
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    if masked:
        feeds["keep"] = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked_fill"])
def test_zero_score_scale_keeps_the_softmax(h, target, masked):
    model = _model(h, 0.0, masked)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, masked))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked_fill"])
@pytest.mark.parametrize("scale", [-D ** -0.5, -3.0])
def test_negative_score_scale_fuses_on_negated_q(h, target, masked, scale):
    model = _model(h, scale, masked)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert "Softmax" not in ops and ops["Neg"] == 1, ops
    for n in out.graph.node:    # every attention op of the result carries a positive scale
        for a in n.attribute:
            if a.name == "scale":
                assert a.f > 0, (n.op_type, a.f)
    h.assert_close(model, out, _feeds(h, masked))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_positive_score_scale_still_fuses(h, target):
    model = _model(h, D ** -0.5, True)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" not in h.ops(out), h.ops(out)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_negative_scale_over_a_cache_fuses(h, target):
    """AttentionKV (a past, grouped k / v heads, an additive padding mask) with a negative scale: exact."""
    import attention_testing as at

    nodes, inputs, outputs, inits = at.decoder_attention(h, 4, 8, True, kv_heads=2)
    inits["scale"] = np.array(-8 ** -0.5, np.float32)
    inputs.append(h.vi("mask", ["batch", 1, "seq", "total"]))
    model = h.make_model(nodes, inputs, outputs, inits)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" not in h.ops(out) and h.ops(out)["Neg"] == 1, h.ops(out)
    b, s, p = 2, 3, 4
    mask = np.zeros((b, 1, s, p + s), np.float32)
    mask[1, ..., :2] = np.finfo(np.float32).min
    feeds = {"x": h.rng.standard_normal((b, s, 32)).astype(np.float32), "mask": mask,
             "past_k": h.rng.standard_normal((b, 2, p, 8)).astype(np.float32),
             "past_v": h.rng.standard_normal((b, 2, p, 8)).astype(np.float32)}
    h.assert_close(model, out, feeds)
