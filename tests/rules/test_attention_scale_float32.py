"""A score scale that is a positive finite number only before it is stored (trust30, session 30): the
recognizers multiply the constants on q, on k and on the scores in Python floats (float64), and an
attribute holds a float32. softmax((c q)(c k)^T) with c = 1e-23 has the scale 1e-46, which is 0 as a
float32: MultiHeadAttention read that 0 as its default 1/sqrt(D) (0.93 off at ort) and ONNX Attention-23
refuses it at load (onnx / trt). The rewriter now refuses any float attribute whose finite nonzero value
is 0 or inf as a float32 (c = 1e20: 1e40, inf), so that scale is never stored; a product that is a float32
subnormal (1e-40) is still a scale and fuses."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8


def _model(h, c):
    n = h.node
    nodes = [n("Mul", ["q", "c"], ["qs"]), n("Mul", ["k", "c"], ["ks"]),
             n("Transpose", ["ks"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["qs", "kt"], ["sc"]),
             n("Softmax", ["sc"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    return h.make_model(nodes, [h.vi(x, [B, H, S, D]) for x in "qkv"], [h.vi("o", [B, H, S, D])],
                        {"c": np.array(c, np.float32)})


def _feeds(h):
    return {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}


def _scales(model):
    return [a.f for nd in model.graph.node for a in nd.attribute if a.name == "scale"]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("c", [1e-23, 1e20], ids=["underflow", "overflow"])
def test_scale_that_a_float32_cannot_hold_is_not_stored(h, target, c):
    """The product is refused; a recognizer that takes one operand's scale (1e-23, k's Mul kept) may fuse."""
    model = _model(h, c)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert all(0 < s < np.inf for s in _scales(out)), (_scales(out), h.ops(out))
    if c < 1:   # (c = 1e20 overflows the original's scores to inf: NaN both ways)
        h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("c", [1e-20, 0.5], ids=["subnormal", "plain"])
def test_scale_a_float32_holds_still_fuses(h, target, c):
    model = _model(h, c)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "Softmax" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))
