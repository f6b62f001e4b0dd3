"""where-causal-select-half (rules/attention/score_select.yaml): a float16 causal select with the
dtype's lowest as fill, softmax(where(causal, q k^T, -65504) / scale) (GPT-J 4.38 without a padding
mask, the fuzz select_scale motif in float16), which the recognizers did not take (they read only a
-inf fill as a mask in float16). Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_fuse

F16 = TensorProto.FLOAT16
H, D = 2, 8


def _graph(h, *, scale="div", pad=False, causal="computed", fill=-65504.0):
    """q, k, v [B, H, S, D] float16 (dynamic B, S); the causal mask a Trilu of ones sized from q
    (or a graph input, or the upper triangle: near misses)."""
    n = h.node
    nodes = [n("Shape", ["q"], ["qs"], start=2, end=3), n("Concat", ["qs", "qs"], ["ss"], axis=0),
             n("ConstantOfShape", ["ss"], ["ones"], value=oh.make_tensor("one", TensorProto.INT64, [1], [1])),
             n("Trilu", ["ones"], ["tri"], upper=1 if causal == "upper" else 0),
             n("Cast", ["tri"], ["trib"], to=TensorProto.BOOL), n("Unsqueeze", ["trib", "ax01"], ["cm"])]
    c = "c_in" if causal == "input" else "cm"
    nodes += [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
              n("Where", [c, "sc", "fill"], ["w"])]
    s = "w"
    if scale == "div":
        nodes.append(n("Div", ["w", "d"], ["wd"]))
        s = "wd"
    elif scale == "mul":
        nodes.append(n("Mul", ["w", "e"], ["wd"]))
        s = "wd"
    if pad:
        nodes.append(n("Add", [s, "pad"], ["wp"]))
        s = "wp"
    nodes += [n("Softmax", [s], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inits = {"ax01": np.array([0, 1], np.int64), "fill": np.array(fill, np.float16),
             "d": np.array(np.sqrt(D), np.float16), "e": np.array(D ** -0.5, np.float16)}
    shape = ["batch", H, "seq", D]
    inputs = [h.vi(x, shape, F16) for x in ("q", "k", "v")]
    if pad:
        inputs.append(h.vi("pad", ["batch", 1, 1, "seq"], F16))
    if causal == "input":
        inputs.append(h.vi("c_in", [1, 1, "seq", "seq"], TensorProto.BOOL))
    return h.make_model(nodes, inputs, [h.vi("y", shape, F16)], inits)


def _feeds(h, batch, seq, **extra):
    f = {x: h.rng.standard_normal((batch, H, seq, D)).astype(np.float16) for x in ("q", "k", "v")}
    f.update(extra)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale", ["div", "mul", None])
def test_float16_causal_select_is_fused(h, target, scale):
    """Before: attention 0/1 (the select's fill -65504 is not the -inf the recognizers read). Since
    f304874 the lowering proves the causal part from shapes (causal_only) and drops the bias for the
    causal flag, so no node the recognizer emitted survives: its fire is read from the report."""
    model = _graph(h, scale=scale)
    result = onnx_fuse.optimize(model, level=3, target=target)
    assert result.report.rule_fires["where-causal-select-half"] == 1
    out = result.to_proto()
    counts = h.ops(out)
    assert "Softmax" not in counts and "Trilu" not in counts, counts
    causal = {(n.op_type, a.name): onnx.helper.get_attribute_value(a) for n in out.graph.node
              for a in n.attribute if a.name in ("is_causal", "unidirectional", "causal")}
    assert list(causal.values()) == [1], causal   # the fused attention is causal by its flag
    for batch, seq in ((2, 5), (1, 1), (3, 7)):
        h.assert_close(model, out, _feeds(h, batch, seq), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("kw, why, fused", [
    (dict(causal="input"), "computed from shapes", True),
    (dict(causal="upper"), "must be causal", True),
    (dict(fill=-1.0), "finite number <= -1e4", False),
])
def test_float16_select_near_misses(h, kw, why, fused):
    """where-causal-select-half refuses each. Since session 30 an input mask and a non-causal one fuse
    anyway, by the route every other float16 select of -65504 takes (scores-scale-before-mask keeps the
    floor, the recognizer reads it as the op's mask): a row that keeps no key is then the half-masked-rows
    class (tests/rules/test_half_fill_scale_floor.py), not exact, like the masked_fill order since af83ea8
    (docs/holdout.md "Session-30: unfused leftovers (left30)"). A fill of -1 is no mask: left."""
    model = _graph(h, **kw)
    reasons = h.reasons(model, "ort", "where-causal-select-half")
    assert any(why in r for r in reasons), reasons
    result = onnx_fuse.optimize(model, level=3, target="ort")
    out = result.to_proto()
    assert "where-causal-select-half" not in result.report.rule_fires
    assert ("Softmax" not in h.ops(out)) == fused, h.ops(out)
    extra = {"c_in": np.tril(np.ones((5, 5), bool))[None, None]} if kw.get("causal") == "input" else {}
    h.assert_close(model, out, _feeds(h, 2, 5, **extra), atol=3e-3, rtol=3e-3)


def test_float16_select_with_a_padding_mask_after_it_is_left(h):
    """A padding mask after the select: a left-padded query whose causally kept keys are all
    padded weighs the masked keys uniformly in the original; no additive mask does that."""
    model = _graph(h, pad=True)
    out = h.fuse(model, "ort")
    assert h.fired(out)["where-causal-select-half"] == 0
    assert "Softmax" in h.ops(out)
    pad = np.zeros((2, 1, 1, 5), np.float16)
    pad[1, ..., :2] = -65504.0
    h.assert_close(model, out, _feeds(h, 2, 5, pad=pad), atol=3e-3, rtol=3e-3)
