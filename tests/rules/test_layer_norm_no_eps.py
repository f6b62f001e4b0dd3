"""rules/norm/layer_norm.yaml: a LayerNorm whose `+ eps` the exporter dropped (epsilon 0).

I-BERT's unquantized IntLayerNorm writes sqrt(1e-12 + var) and torch's exporter drops the Add of an
epsilon it takes for zero, leaving (x - mean) / sqrt(mean((x - mean)^2)) * g + b. The RMSNorm rules
already read "no Add" as epsilon 0; the LayerNorm rules asked for the Add, so the same value fused as
Sub + RMSNormalization of the centered x (hold-out 26 ibert: ReduceMean 5, Sub 5, RMSNormalization 5
left at every level). Graphs are built here; numerics are checked in ONNX Runtime against the original.
"""

from __future__ import annotations

import numpy as np
import pytest

TARGETS = ["ort", "onnx", "trt"]
D = 16


def _graph(h, *, tail="affine", axes=(2,), eps=None, hidden=D, residual=False):
    """x [batch, seq, hidden] -> (x - mean) / sqrt(mean((x - mean)^2) (+ eps)) -> tail.

    tail: "affine" (* g + b), "scale" (* g), "bias" (+ b), "none". axes (2,): the positive last axis
    of a rank-3 x, as I-BERT's x.mean(axis=2) exports."""
    n = h.node
    var, src = "v", "s" if residual else "x"
    nodes = [n("Add", ["r", "x"], ["s"])] if residual else []
    nodes += [n("ReduceMean", [src, "axes"], ["m"], keepdims=1), n("Sub", [src, "m"], ["d"]),
             n("Pow", ["d", "two"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["v"], keepdims=1)]
    if eps is not None:
        nodes.append(n("Add", ["eps", "v"], ["ve"]))
        var = "ve"
    nodes += [n("Sqrt", [var], ["sd"]), n("Div", ["d", "sd"], ["nrm"])]
    if tail == "affine":
        nodes += [n("Mul", ["nrm", "g"], ["ng"]), n("Add", ["ng", "b"], ["y"])]
    elif tail == "scale":
        nodes.append(n("Mul", ["nrm", "g"], ["y"]))
    elif tail == "bias":
        nodes.append(n("Add", ["nrm", "b"], ["y"]))
    else:
        nodes.append(n("Identity", ["nrm"], ["y"]))
    inits = {"axes": np.array(axes, np.int64), "two": np.array(2.0, np.float32),
             "g": (1.0 + 0.1 * h.rng.standard_normal(D)).astype(np.float32),
             "b": (0.1 * h.rng.standard_normal(D)).astype(np.float32)}
    if eps is not None:
        inits["eps"] = np.asarray(eps, np.float32)
    shape = ["batch", "seq", hidden]
    inputs = [h.vi("x", shape)] + ([h.vi("r", shape)] if residual else [])
    return h.make_model(nodes, inputs, [h.vi("y", shape)], inits)


def _feeds(h, model):
    return {i.name: (h.rng.standard_normal((2, 5, D)) * 2 + 0.5).astype(np.float32) for i in model.graph.input}


def _epsilon(node):
    return next(a.f for a in node.attribute if a.name == "epsilon")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tail,rule", [("affine", "layer-norm"), ("scale", "layer-norm-no-bias"),
                                       ("bias", "layer-norm-bias-only"), ("none", "layer-norm-no-scale")])
def test_layer_norm_without_eps_add_is_layer_normalization(h, target, tail, rule):
    model = _graph(h, tail=tail)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    assert h.fired(out) == {rule: 1}, h.fired(out)
    assert _epsilon(out.graph.node[0]) == 0.0
    h.assert_close(model, out, _feeds(h, model))


def test_ibert_form_at_ort_level_3_with_a_residual_is_skip_layer_norm(h):
    """The residual Add in front (BERT's post-norm) folds into SkipLayerNormalization."""
    model = _graph(h, residual=True)
    out = h.fuse(model, "ort", level=3)
    assert h.ops(out) == {"com.microsoft::SkipLayerNormalization": 1}, h.ops(out)
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", TARGETS)
def test_with_eps_unchanged(h, target):
    model = _graph(h, eps=1e-5)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    assert _epsilon(out.graph.node[0]) == pytest.approx(1e-5)
    h.assert_close(model, out, _feeds(h, model))


# --- near-misses ---------------------------------------------------------------------------------

def test_not_the_last_axis_does_not_fuse(h):
    model = _graph(h, axes=(1,))
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    assert any("last axis" in r for r in h.reasons(model, "onnx", "layer-norm"))


def test_a_per_channel_eps_does_not_fuse(h):
    model = _graph(h, eps=np.full(D, 1e-5, np.float32))
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    assert any("single number" in r for r in h.reasons(model, "onnx", "layer-norm"))
