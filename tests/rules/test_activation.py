"""rules/activation: gelu.yaml (tanh forms, QuickGelu; the erf forms, the rule language's example, are
tested in tests/rewrite/test_language.py) and bias_gelu.yaml; rules/linear/gemm.yaml."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

D = 12
TANH_C = 0.7978845834732056


def _tanh_graph(h, *, half_last=False, coef=0.044715, cube=3.0, with_bias=False, cube_by="pow",
                extra_output=False):
    """cube_by: "pow" Pow(x, 3); "mul" x * (x * x) (TorchScript's gelu(approximate="tanh"));
    "mul-y" x * (x * y) with another input y (not a cube)."""
    n = h.node
    x = "x"
    nodes = []
    if with_bias:
        nodes.append(n("Add", ["x", "bias"], ["xb"]))
        x = "xb"
    if cube_by == "pow":
        nodes.append(n("Pow", [x, "c3"], ["p"]))
    else:
        nodes += [n("Mul", [x, x if cube_by == "mul" else "yy"], ["x2"]), n("Mul", [x, "x2"], ["p"])]
    nodes += [n("Mul", ["p", "coef"], ["pm"]), n("Add", [x, "pm"], ["a"]),
              n("Mul", ["a", "k"], ["s"]), n("Tanh", ["s"], ["t"]), n("Add", ["t", "one"], ["a1"])]
    if half_last:
        nodes += [n("Mul", [x, "a1"], ["m"]), n("Mul", ["m", "half"], ["y"])]
    else:
        nodes += [n("Mul", [x, "half"], ["hx"]), n("Mul", ["hx", "a1"], ["y"])]
    inits = {"c3": np.array(cube, np.float32), "coef": np.array(coef, np.float32),
             "k": np.array(TANH_C, np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32), "bias": (0.1 * h.rng.standard_normal(D)).astype(np.float32)}
    if not with_bias:
        del inits["bias"]
    inputs = [h.vi("x", ["b", "s", D])] + ([h.vi("yy", ["b", "s", D])] if cube_by == "mul-y" else [])
    outputs = [h.vi("y", ["b", "s", D])] + ([h.vi("x2", ["b", "s", D])] if extra_output else [])
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, model=None):
    names = [i.name for i in model.graph.input] if model is not None else ["x"]
    return {k: (2 * h.rng.standard_normal((2, 3, D))).astype(np.float32) for k in names}


@pytest.mark.parametrize("half_last", [False, True])
@pytest.mark.parametrize("target,expected", [("onnx", "Gelu"), ("trt", "Gelu"),
                                             ("ort", "com.microsoft::FastGelu")])
def test_gelu_tanh(h, target, expected, half_last):
    model = _tanh_graph(h, half_last=half_last)
    out = h.fuse(model, target)
    assert h.ops(out) == {expected: 1}, h.ops(out)
    if expected == "Gelu":
        assert onnx.helper.get_attribute_value(out.graph.node[0].attribute[0]) == b"tanh"
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("half_last", [False, True])
@pytest.mark.parametrize("target,expected", [("onnx", "Gelu"), ("trt", "Gelu"),
                                             ("ort", "com.microsoft::FastGelu")])
def test_gelu_tanh_cube_as_products(h, target, expected, half_last):
    """x^3 written x * (x * x): the TorchScript exporter's gelu(approximate="tanh") (Gemma)."""
    model = _tanh_graph(h, half_last=half_last, cube_by="mul")
    out = h.fuse(model, target)
    assert h.ops(out) == {expected: 1}, h.ops(out)
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("kw,why", [
    (dict(cube_by="mul-y"), "the tanh's argument reads 'yy', not the product's factor 'x'"),  # x * (x * y)
    (dict(cube_by="mul", extra_output=True),                                                # x * x used elsewhere
     "'x2' in the tanh's argument has readers outside the GELU (a graph output)"),
])
def test_gelu_tanh_product_near_misses(h, kw, why):
    model = _tanh_graph(h, **kw)
    for target in ("onnx", "ort"):
        out = h.fuse(model, target)
        assert "Tanh" in h.ops(out), h.ops(out)
        h.assert_close(model, out, _feeds(h, model))
    rs = h.reasons(model, "onnx", "gelu-tanh")
    assert any(why in r for r in rs), rs


@pytest.mark.parametrize("coef,cube,why", [(0.05, 3.0, "x^3's coefficient over x's is 0.05, not 0.044715"),
                                           (0.044715, 2.0, "x^3's coefficient over x's is 0, not 0.044715")])
def test_gelu_tanh_wrong_constant_does_not_fuse(h, coef, cube, why):
    model = _tanh_graph(h, coef=coef, cube=cube)
    for target in ("onnx", "ort"):
        out = h.fuse(model, target)
        assert "Tanh" in h.ops(out), h.ops(out)
    rs = h.reasons(model, "onnx", "gelu-tanh")
    assert any(why in r for r in rs), rs


def test_bias_fast_gelu_ort(h):
    model = _tanh_graph(h, with_bias=True)
    out = h.fuse(model, "ort")
    assert h.ops(out) == {"com.microsoft::FastGelu": 1}
    assert len(out.graph.node[0].input) == 2  # the bias moved into FastGelu
    h.assert_close(model, out, _feeds(h))


def _erf_bias_graph(h, *, bias_shape=(D,), fused=True):
    """Add(x, bias) -> Gelu-20 (what the dynamo exporter emits for BERT)."""
    n = h.node
    nodes = [n("Add", ["x", "bias"], ["t"]), n("Gelu", ["t"], ["y"])]
    inits = {"bias": (0.1 * h.rng.standard_normal(bias_shape)).astype(np.float32)}
    return h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", D])], inits)


def test_bias_gelu_ort(h):
    model = _erf_bias_graph(h)
    out = h.fuse(model, "ort")
    assert h.ops(out) == {"com.microsoft::BiasGelu": 1}
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_bias_gelu_keeps_standard_ops_off_ort(h, target):
    out = h.fuse(_erf_bias_graph(h), target)
    assert h.ops(out) == {"Add": 1, "Gelu": 1}


def test_bias_gelu_needs_vector_bias(h):
    model = _erf_bias_graph(h, bias_shape=(3, D))
    out = h.fuse(model, "ort")
    assert "com.microsoft::BiasGelu" not in h.ops(out)


def _quick_gelu(h, alpha=1.702):
    n = h.node
    nodes = [n("Mul", ["x", "alpha"], ["s"]), n("Sigmoid", ["s"], ["g"]), n("Mul", ["g", "x"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["b", "s", D])], [h.vi("y", ["b", "s", D])],
                        {"alpha": np.array(alpha, np.float32)})


def test_quick_gelu_ort(h):
    model = _quick_gelu(h)
    out = h.fuse(model, "ort")
    assert h.ops(out) == {"com.microsoft::QuickGelu": 1}
    alpha = out.graph.node[0].attribute[0].f
    assert alpha == pytest.approx(1.702, rel=1e-6)
    h.assert_close(model, out, _feeds(h))


def test_quick_gelu_is_left_alone_for_standard_targets(h):
    assert h.ops(h.fuse(_quick_gelu(h), "onnx")) == {"Mul": 2, "Sigmoid": 1}


def test_quick_gelu_vector_alpha_does_not_fuse(h):
    model = _quick_gelu(h, alpha=np.full(D, 1.702, np.float32))
    assert "com.microsoft::QuickGelu" not in h.ops(h.fuse(model, "ort"))
    assert any("single number" in r for r in h.reasons(model, "ort", "quick-gelu-ort"))


# --- Gemm ------------------------------------------------------------------------------------

def _mm_add(h, *, rank=2, bias_shape=(8,), w_const=True):
    n = h.node
    nodes = [n("MatMul", ["a", "w"], ["m"]), n("Add", ["bias", "m"], ["y"])]
    shape_a = ["n", 6] if rank == 2 else ["b", "n", 6]
    inits = {"w": h.rng.standard_normal((6, 8)).astype(np.float32),
             "bias": h.rng.standard_normal(bias_shape).astype(np.float32)}
    inputs = [h.vi("a", shape_a)]
    if not w_const:
        del inits["w"]
        inputs.append(h.vi("w", [6, 8]))
    return h.make_model(nodes, inputs, [h.vi("y", shape_a[:-1] + [8])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("bias_shape", [(8,), (1, 8)])
def test_matmul_add_to_gemm(h, target, bias_shape):
    model = _mm_add(h, bias_shape=bias_shape)
    out = h.fuse(model, target)
    assert h.ops(out) == {"Gemm": 1}
    h.assert_close(model, out, {"a": h.rng.standard_normal((5, 6)).astype(np.float32)})


@pytest.mark.parametrize("kw", [{"rank": 3}, {"bias_shape": (5, 8)}, {"w_const": False}])
def test_matmul_add_near_misses(h, kw):
    model = _mm_add(h, **kw)
    out = h.fuse(model, "onnx")
    assert "Gemm" not in h.ops(out), kw
