"""rules/norm/rms_norm.yaml rms-norm-scalar-scale: RMSNorm(x, g) * c == RMSNorm(x, g * c) for a constant single
number c (Muse Glimmer / Spark multiply the RMS-normalized query, a ones-scale norm, by qk_scale_factor)."""

from __future__ import annotations

import re

import numpy as np
import pytest

D = 8


def _model(h, *, c_shape=(), c_value=0.25, scale=True, g_input=False, normed_out=False, op=False):
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
        inits["g"] = (1 + 0.1 * r.standard_normal(D)).astype(np.float32)
    outputs = [h.vi("y", None)] + ([h.vi("nrm", ["b", "s", D])] if normed_out else [])
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=3, g_input=False):
    f = {"x": h.rng.standard_normal((2, s, D)).astype(np.float32)}
    if g_input:
        f["g"] = (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale,c_shape", [(False, ()), (True, ()), (True, (1, 1, 1))])
def test_factor_joins_the_scale(h, target, scale, c_shape):
    model = _model(h, scale=scale, c_shape=c_shape)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops == {"RMSNormalization": 1}, ops
    assert h.fired(out)["rms-norm-scalar-scale"] == 1, h.fired(out)
    for s in (3, 7):
        h.assert_close(model, out, _feeds(h, s))


def test_a_factor_per_head_size_is_rms_norm_channel_scale(h):
    """c of shape [D] is not one number: not this rule's; rms-norm-channel-scale (rules/norm/norm_channel_scale.yaml)
    takes a per-channel factor into the scale instead (TimesFM 2.5's per-dim query scale)."""
    for op in (False, True):
        model = _model(h, c_shape=(D,), op=op)
        out = h.fuse(model, "ort")
        assert h.ops(out)["Mul"] == 0 and not h.fired(out)["rms-norm-scalar-scale"], h.ops(out)
        assert h.fired(out)["rms-norm-channel-scale"] == 1, h.fired(out)
        h.assert_close(model, out, _feeds(h))
    reasons = h.reasons(model, "ort", "rms-norm-scalar-scale")
    assert any(re.search("single number", r) for r in reasons), reasons


def test_a_computed_scale_stays(h):
    model = _model(h, g_input=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Mul"] == 1 and not h.fired(out)["rms-norm-scalar-scale"], h.ops(out)
    h.assert_close(model, out, _feeds(h, g_input=True))


def test_a_norm_read_elsewhere_stays(h):
    model = _model(h, normed_out=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Mul"] == 1 and not h.fired(out)["rms-norm-scalar-scale"], h.ops(out)
    assert [o.name for o in out.graph.output] == ["y", "nrm"]
    h.assert_close(model, out, _feeds(h))
