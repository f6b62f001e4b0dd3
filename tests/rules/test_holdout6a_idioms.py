"""Idioms found on the sixth hold-out sweep, part A (tools/holdout_specs.py HOLDOUT6A: transformers 5.24
decoders, docs/holdout.md), each as a tiny graph that failed before its fix; numerics against the
original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

D = 32


def _i64(*v):
    return np.array(v, np.int64)


# ---- L2 norm x * 1/sqrt(sum(x^2) + eps): Dory's nGPT norms (0 norms before) ---------------------------

def _l2(h, *, reduce="ReduceSum", axis=-1, gamma=False, div=False, shape=("b", "s", D), eps=1e-6):
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n(reduce, ["sq", "ax"], ["ss"], keepdims=1),
             n("Add", ["ss", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"])]
    nodes += [n("Div", ["x", "sd"], ["nn" if gamma else "y"])] if div else \
        [n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["x", "inv"], ["nn" if gamma else "y"])]
    inits = {"two": np.array(2.0, np.float32), "ax": _i64(axis), "eps": np.array(eps, np.float32)}
    if gamma:
        nodes.append(n("Mul", ["nn", "g"], ["y"]))
        inits["g"] = (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)
    return h.make_model(nodes, [h.vi("x", list(shape))], [h.vi("y", list(shape))], inits)


def _x(h, shape=(2, 3, D)):
    return {"x": (3 * h.rng.standard_normal(shape)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("gamma,div", [(False, False), (True, False), (False, True)])
def test_l2_norm_is_an_rms_norm(h, target, gamma, div):
    model = _l2(h, gamma=gamma, div=div)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out)["l2-norm-scale" if gamma else "l2-norm"] == 1
    h.assert_close(model, out, _x(h))


def test_l2_norm_with_a_large_epsilon_keeps_it(h):
    """epsilon / D is what RMSNormalization adds to the mean: a tiny x shows whether the epsilon was
    carried (the norm of a near-zero row is x / sqrt(eps), not x / ||x||)."""
    model = _l2(h, eps=1e-2)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    tiny = {"x": (1e-3 * h.rng.standard_normal((2, 3, D))).astype(np.float32)}
    h.assert_close(model, out, tiny)


def test_l2_norm_of_heads(h):
    """q / k norms: [B, S, H, Dh] normalized over the head size."""
    model = _l2(h, shape=("b", "s", 2, D))
    out = h.fuse(model, "trt", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    h.assert_close(model, out, _x(h, (2, 3, 2, D)))


def test_sum_over_another_axis_is_no_norm(h):
    """sum over the sequence axis is no per-vector norm: refused with the reason, graph unchanged."""
    model = _l2(h, axis=1)
    out = h.fuse(model, "ort", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    assert any("last axis" in r for r in h.reasons(model, "ort", "l2-norm")), h.reasons(model, "ort", "l2-norm")
    h.assert_close(model, out, _x(h))


def test_dynamic_last_axis_is_refused(h):
    model = _l2(h, shape=("b", "s", "d"))
    out = h.fuse(model, "ort", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    assert any("static size" in r for r in h.reasons(model, "ort", "l2-norm"))
