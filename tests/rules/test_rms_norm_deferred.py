"""rules/norm/rms_norm.yaml rms-norm-deferred: MatMul(x, W) * 1/sqrt(mean(x^2) + eps) == MatMul(RMSNorm(x), W) for a
2-D W (the per-row factor commutes with the product over x's last axis). HY-V4 / HY-V4-VL's hyper-connection mixers
scale the projection of the flattened streams by their inverse RMS (hold-out 38)."""

from __future__ import annotations

import re

import numpy as np
import pytest

D, N = 8, 6


def _model(h, *, div=False, inv_first=False, w_shape=(D, N), axis=-1, inv_out=False, w_input=False):
    """y = (x @ W) * 1 / sqrt(mean(x^2, axis) + eps) (``div``: Div(1, Sqrt) as TorchScript writes it)."""
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq", "axm"], ["ms"], keepdims=1),
             n("Add", ["ms", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
             n("Div", ["one", "sd"], ["inv"]) if div else n("Reciprocal", ["sd"], ["inv"]),
             n("MatMul", ["x", "w"], ["p"]), n("Mul", ["inv", "p"] if inv_first else ["p", "inv"], ["y"])]
    r = np.random.default_rng(5)
    inits = {"two": np.array(2.0, np.float32), "one": np.array(1.0, np.float32), "axm": np.array([axis], np.int64),
             "eps": np.array(1e-6, np.float32)}
    inputs = [h.vi("x", ["b", "s", D])]
    if w_input:
        inputs.append(h.vi("w", list(w_shape)))
    else:
        inits["w"] = r.standard_normal(w_shape).astype(np.float32)
    outputs = [h.vi("y", None)] + ([h.vi("inv", ["b", "s", 1])] if inv_out else [])
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=3, w_shape=None):
    f = {"x": (3 * h.rng.standard_normal((2, s, D))).astype(np.float32)}
    if w_shape:
        f["w"] = h.rng.standard_normal(w_shape).astype(np.float32)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("div,inv_first", [(False, False), (True, False), (False, True)])
def test_projection_of_the_normalized_input(h, target, div, inv_first):
    model = _model(h, div=div, inv_first=inv_first)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops == {"RMSNormalization": 1, "MatMul": 1}, ops
    assert h.fired(out)["rms-norm-deferred"] == 2, h.fired(out)  # the norm and the moved MatMul
    for s in (3, 7):
        h.assert_close(model, out, _feeds(h, s))


def test_a_computed_2d_matrix_is_taken(h):
    model = _model(h, w_input=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out) == {"RMSNormalization": 1, "MatMul": 1}, h.ops(out)
    h.assert_close(model, out, _feeds(h, 4, (D, N)))


def test_a_batched_matrix_stays(h):
    """W [2, D, N] multiplies each batch row by its own matrix: still a per-row factor, but the rule takes a 2-D W
    only (its check names why)."""
    model = _model(h, w_shape=(2, D, N))
    out = h.fuse(model, "ort")
    assert not h.fired(out)["rms-norm-deferred"] and h.ops(out)["ReduceMean"] == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h))
    reasons = h.reasons(model, "ort", "rms-norm-deferred")
    assert any(re.search("2-D matrix", r) for r in reasons), reasons


def test_a_mean_over_another_axis_stays(h):
    """The mean over the sequence, [b, 1, D], broadcast over a square projection: not an RMS norm of each row."""
    model = _model(h, axis=1, w_shape=(D, D))
    out = h.fuse(model, "onnx")
    assert not h.fired(out)["rms-norm-deferred"] and h.ops(out)["ReduceMean"] == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h))
    reasons = h.reasons(model, "onnx", "rms-norm-deferred")
    assert any(re.search("last axis", r) for r in reasons), reasons


def test_an_inverse_read_elsewhere_stays(h):
    model = _model(h, inv_out=True)
    out = h.fuse(model, "ort")
    assert not h.fired(out)["rms-norm-deferred"], h.fired(out)
    assert [o.name for o in out.graph.output] == ["y", "inv"]
    h.assert_close(model, out, _feeds(h))
