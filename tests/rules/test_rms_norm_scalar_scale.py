"""A single-number factor after an RMSNorm joins its scale: RMSNorm(x, g) * c == RMSNorm(x, g * c) for a constant
one-element c (Muse Glimmer / Spark multiply the RMS-normalized query, a ones-scale norm, by qk_scale_factor; T5's
decoder its last norm's output by d_model ** -0.5). Taken by rms-norm-channel-scale (rules/norm/norm_channel_scale.yaml),
which reads a per-channel factor the same way: rms-norm-scalar-scale, the rule that took one number alone, was
merged into it (session 41) with the gamma * c finiteness check it lacked."""

from __future__ import annotations

import re

import numpy as np
import pytest

D = 8
RULE = "rms-norm-channel-scale"


def _model(h, *, c_shape=(), c_value=0.25, scale=True, g_input=False, normed_out=False, op=False, g=None):
    """y = RMSNorm(x) (written out: x / sqrt(mean(x^2) + eps), times g where ``scale``; ``op``: as
    RMSNormalization) * c."""
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq", "axm"], ["ms"], keepdims=1),
             n("Add", ["ms", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["x", "sd"], ["nx"])]
    if op:
        nodes = [n("RMSNormalization", ["x", "g"], ["nrm"], epsilon=1e-6)]
    elif scale:
        nodes.append(n("Mul", ["nx", "g"], ["nrm"]))
    nodes.append(n("Mul", ["nrm" if scale else "nx", "c"], ["y"]))
    r = np.random.default_rng(3)
    inits = {"two": np.array(2.0, np.float32), "axm": np.array([-1], np.int64), "eps": np.array(1e-6, np.float32),
             "c": np.full(c_shape, c_value, np.float32)}
    inputs = [h.vi("x", ["b", "s", D])]
    if g_input:
        inputs.append(h.vi("g", [D]))
    elif scale:
        inits["g"] = (1 + 0.1 * r.standard_normal(D)).astype(np.float32) if g is None else g
    outputs = [h.vi("y", None)] + ([h.vi("nrm", ["b", "s", D])] if normed_out else [])
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=3, g_input=False):
    f = {"x": h.rng.standard_normal((2, s, D)).astype(np.float32)}
    if g_input:
        f["g"] = (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale,c_shape", [(False, ()), (True, ()), (True, (1, 1, 1)), (True, (1,))])
def test_factor_joins_the_scale(h, target, scale, c_shape):
    model = _model(h, scale=scale, c_shape=c_shape)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops == {"RMSNormalization": 1}, ops
    assert h.fired(out)[RULE] == 1, h.fired(out)
    for s in (3, 7):
        h.assert_close(model, out, _feeds(h, s))


def test_a_factor_per_head_size_joins_the_scale_too(h):
    """c of shape [D] (TimesFM 2.5's per-dim query scale): the same rule, per channel."""
    for op in (False, True):
        model = _model(h, c_shape=(D,), op=op)
        out = h.fuse(model, "ort")
        assert h.ops(out)["Mul"] == 0 and h.fired(out)[RULE] == 1, (h.ops(out), h.fired(out))
        h.assert_close(model, out, _feeds(h))


def test_a_factor_per_position_stays(h):
    model = _model(h, c_shape=(3, 1), op=True)
    out = h.fuse(model, "ort")
    assert h.ops(out)["Mul"] == 1 and not h.fired(out)[RULE], h.ops(out)
    reasons = h.reasons(model, "ort", RULE)
    assert any(re.search("one number or vary along the last axis", r) for r in reasons), reasons
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("op", [False, True])
def test_gamma_times_factor_past_the_dtypes_max_stays(h, op):
    """g[0] * c = 2e19 * 2e19 is past float32's max: folded, channel 0's scale is inf and a normalized 0 there
    gives 0 * inf = NaN where the original's (n * g) * c is 0. rms-norm-scalar-scale folded it (no finiteness
    check); the merged rule refuses, the Mul stays."""
    g = (1 + 0.1 * np.random.default_rng(3).standard_normal(D)).astype(np.float32)
    g[0] = 2e19
    model = _model(h, c_value=2e19, op=op, g=g)
    out = h.fuse(model, "onnx")
    assert not h.fired(out)[RULE] and h.ops(out)["Mul"] >= 1, (h.ops(out), h.fired(out))
    x = _feeds(h)["x"]
    x[..., 0] = 0.0
    h.assert_close(model, out, {"x": x})


def test_a_computed_scale_stays(h):
    model = _model(h, g_input=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Mul"] == 1 and not h.fired(out)[RULE], h.ops(out)
    h.assert_close(model, out, _feeds(h, g_input=True))


def test_a_norm_read_elsewhere_stays(h):
    model = _model(h, normed_out=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Mul"] == 1 and not h.fired(out)[RULE], h.ops(out)
    assert [o.name for o in out.graph.output] == ["y", "nrm"]
    h.assert_close(model, out, _feeds(h))
