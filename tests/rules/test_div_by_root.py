"""rules/norm/rsqrt.yaml div-by-root: x / sqrt(v), v a norm's moment, is x * Reciprocal(Sqrt(v)), the form every norm
rule takes. It replaces rms-norm-div (ImageGPT's x / sqrt(mean(x^2) + eps) * g, the only Div form of the scaled
RMSNorm rule) and brings the Div spelling to the rules that never had it: the deferred norm (MatMul(x, W) / sqrt(...),
hold-out 38's mixers written with a division) and Keras' scaled inverse (x * (g / sqrt(...)))."""

from __future__ import annotations

import numpy as np
import pytest

TARGETS = ["ort", "onnx", "trt"]
D, N = 16, 6


def _moment(h, x="x", axes="axes"):
    """sd = sqrt(mean(x^2, axes) + eps)."""
    n = h.node
    return [n("Pow", [x, "two"], ["sq"]), n("ReduceMean", ["sq", axes], ["ms"], keepdims=1),
            n("Add", ["ms", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"])]


def _inits(h, **more):
    base = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32), "axes": np.array([-1], np.int64),
            "g": (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)}
    base.update(more)
    return base


def _feeds(h, s=5):
    return {"x": (3 * h.rng.standard_normal((2, s, D)) + 1).astype(np.float32)}


def _scaled(h):
    """ImageGPT's LayerNorm: x / sqrt(mean(x^2) + eps) * g (an RMSNorm)."""
    n = h.node
    nodes = _moment(h) + [n("Div", ["x", "sd"], ["nrm"]), n("Mul", ["nrm", "g"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", D])], _inits(h))


@pytest.mark.parametrize("target", TARGETS)
def test_divided_rms_norm_is_the_rms_norm(h, target):
    model = _scaled(h)
    out = h.fuse(model, target)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    # rms-norm itself takes it now (the Div became Mul(x, Reciprocal(Sqrt)) first); no rule of its own
    assert set(h.fired(out)) == {"rms-norm"}, h.fired(out)
    for s in (1, 5):
        h.assert_close(model, out, _feeds(h, s))


@pytest.mark.parametrize("target", TARGETS)
def test_divided_projection_is_the_deferred_norm(h, target):
    """MatMul(x, W) / sqrt(mean(x^2) + eps): rms-norm-deferred's value, written with a division (missed before)."""
    n = h.node
    nodes = _moment(h) + [n("MatMul", ["x", "w"], ["p"]), n("Div", ["p", "sd"], ["y"])]
    w = np.random.default_rng(3).standard_normal((D, N)).astype(np.float32)
    model = h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", N])], _inits(h, w=w))
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert h.ops(out) == {"RMSNormalization": 1, "MatMul": 1}, h.ops(out)
    assert h.fired(out)["rms-norm-deferred"] == 2, h.fired(out)
    for s in (2, 7):
        h.assert_close(model, out, _feeds(h, s))


@pytest.mark.parametrize("target", TARGETS)
def test_divided_gamma_is_the_scaled_inverse(h, target):
    """x * (g / sqrt(mean(x^2) + eps)) (Keras' scale folded into the inverse RMS, with a division): missed before."""
    n = h.node
    nodes = _moment(h) + [n("Div", ["g", "sd"], ["s"]), n("Mul", ["x", "s"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", D])], _inits(h))
    out = h.fuse(model, target)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out)["rms-norm-tf-scaled-inverse"] == 1, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_a_root_read_twice_stays_for_its_other_reader(h):
    """Two values divided by one root: each Div becomes a product, the Sqrt stays (it escapes the match)."""
    n = h.node
    nodes = _moment(h) + [n("Div", ["x", "sd"], ["a"]), n("Div", ["z", "sd"], ["y2"]), n("Mul", ["a", "g"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", ["b", "s", D]), h.vi("z", ["b", "s", D])],
                         [h.vi("y", ["b", "s", D]), h.vi("y2", ["b", "s", D])], _inits(h))
    out = h.fuse(model, "onnx")
    assert h.fired(out)["div-by-root"] >= 2 and h.ops(out)["Div"] == 0, (h.fired(out), h.ops(out))
    feeds = _feeds(h)
    feeds["z"] = h.rng.standard_normal((2, 5, D)).astype(np.float32)
    h.assert_close(model, out, feeds)


def test_a_root_of_no_moment_stays(h):
    """x / sqrt(|z| + 1): no mean or sum under the root (an attention scale, say): the Div stays as written."""
    n = h.node
    nodes = [n("Abs", ["z"], ["az"]), n("Add", ["az", "one"], ["v"]), n("Sqrt", ["v"], ["sd"]),
             n("Div", ["x", "sd"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", ["b", "s", D]), h.vi("z", ["b", "s", D])], [h.vi("y", ["b", "s", D])],
                         {"one": np.array(1.0, np.float32)})
    feeds = _feeds(h)
    feeds["z"] = h.rng.standard_normal((2, 5, D)).astype(np.float32)
    h.stays(model, "div-by-root", "norm's moment", feeds, op="Reciprocal", target="onnx")


def test_one_over_the_root_stays(h):
    """1 / sqrt(v) is already the reciprocal the norm rules take (Div(1, Sqrt) is their alternative)."""
    n = h.node
    nodes = _moment(h) + [n("Div", ["one", "sd"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", 1])],
                         _inits(h, one=np.array(1.0, np.float32)))
    h.stays(model, "div-by-root", "already the reciprocal", _feeds(h), op="Reciprocal", target="onnx")
