"""gelu-erf (rules/activation/gelu.yaml) reads the product x * 0.5 * (1 + erf(x / sqrt 2)) by value
(optimizer/rewrite/_gelu_product.py): every grouping of its three factors, operands in either
order, 0.5 as a Div by 2 or folded from several constants, x with other readers; near misses (another
constant, another x, erf(0.7 x), an intermediate read elsewhere) keep their ops. Numerics in ORT."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto

D = 8
RSQRT2 = 0.7071067811865476
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
        ml_dtypes.bfloat16: TensorProto.BFLOAT16}


def _gelus(ops) -> int:
    """Fused GELU ops: Gelu-20, com.microsoft::Gelu, or BiasGelu at ort (x = u + b here)."""
    return sum(n for op, n in ops.items() if op in ("Gelu", "com.microsoft::Gelu", "com.microsoft::BiasGelu"))

# product groupings of x, h (the constant 0.5 unless told) and a = 1 + erf(t); each entry is the
# list of nodes (op, inputs, output) ending in y
GROUPINGS = {
    "(x*h)*a": [("Mul", ["x", "h"], "p"), ("Mul", ["p", "a"], "y")],            # ESM, gelu-erf-half-first
    "(x*a)*h": [("Mul", ["x", "a"], "p"), ("Mul", ["p", "h"], "y")],            # BERT, the old gelu-erf
    "x*(h*a)": [("Mul", ["h", "a"], "p"), ("Mul", ["x", "p"], "y")],            # missed before
    "(a*h)*x": [("Mul", ["a", "h"], "p"), ("Mul", ["p", "x"], "y")],            # missed before
    "(x*a)/2": [("Mul", ["x", "a"], "p"), ("Div", ["p", "two"], "y")],          # missed before
    "x*(a/2)": [("Div", ["a", "two"], "p"), ("Mul", ["x", "p"], "y")],          # missed before
    "(x*q)*(a*2)": [("Mul", ["x", "q"], "p"), ("Mul", ["a", "two"], "r"), ("Mul", ["p", "r"], "y")],
}


def _gelu(h, grouping="(x*a)*h", *, half=0.5, swap=False, erf_by="div", scale=RSQRT2, erf_x="x",
          dtype=np.float32, residual=False, extra_output=None):
    """x = u + b (a computed x); swap: every binary op's inputs reversed; erf_by "div" x / sqrt 2,
    "mul" x * (1 / sqrt 2); erf_x: the value the erf reads; residual: y + x as a second reader of x."""
    def node(op, ins, out):
        ins = ins[::-1] if swap and op in ("Mul", "Add") else ins
        return h.node(op, ins, [out])

    nodes = [node("Add", ["u", "b"], "x")]
    nodes.append(node("Div", [erf_x, "sqrt2"], "t") if erf_by == "div" else node("Mul", [erf_x, "rsqrt2"], "t"))
    nodes += [h.node("Erf", ["t"], ["e"]), node("Add", ["e", "one"], "a")]
    nodes += [node(op, ins, out) for op, ins, out in GROUPINGS[grouping]]
    outputs = ["y"]
    if residual:
        nodes.append(h.node("Add", ["y", "x"], ["r_out"]))
        outputs = ["r_out"]
    if extra_output:
        outputs.append(extra_output)
    c = {"sqrt2": 1 / scale, "rsqrt2": scale, "one": 1.0, "h": half, "two": 2.0, "q": half / 2}
    inits = {k: np.array(v, dtype) for k, v in c.items()}
    inits["b"] = (0.1 * h.rng.standard_normal(D)).astype(dtype)
    elem = ELEM[dtype]
    inputs = [h.vi("u", ["batch", "seq", D], elem)] + ([h.vi("z", ["batch", "seq", D], elem)] if erf_x == "z" else [])
    return h.make_model(nodes, inputs, [h.vi(o, ["batch", "seq", D], elem) for o in outputs], inits)


def _feeds(model, dtype=np.float32):
    rng = np.random.default_rng(1)
    return {i.name: (2 * rng.standard_normal((2, 3, D))).astype(dtype) for i in model.graph.input}


@pytest.mark.parametrize("grouping", list(GROUPINGS))
@pytest.mark.parametrize("swap", [False, True])
def test_every_grouping_fuses(h, grouping, swap):
    model = _gelu(h, grouping, swap=swap)
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert _gelus(h.ops(out)) == 1 and "Erf" not in h.ops(out), (target, h.ops(out))
        h.assert_close(model, out, _feeds(model))


@pytest.mark.parametrize("grouping", ["x*(h*a)", "(x*h)*a"])
def test_erf_argument_as_a_product_and_x_with_other_readers(h, grouping):
    """x * (1 / sqrt 2) either order; x also read by a residual Add after the GELU."""
    model = _gelu(h, grouping, erf_by="mul", residual=True, swap=True)
    out = h.fuse(model, "ort")
    assert _gelus(h.ops(out)) == 1, h.ops(out)
    assert "Erf" not in h.ops(out)
    h.assert_close(model, out, _feeds(model))


@pytest.mark.parametrize("kw,why", [
    (dict(half=0.4), r"constant factor is 0\.4, not 0\.5"),
    (dict(half=0.4, grouping="x*(h*a)"), r"constant factor is 0\.4, not 0\.5"),
    (dict(half=1.0, grouping="(x*q)*(a*2)"), r"constant factor is 1, not 0\.5"),
    (dict(erf_x="z"), r"the erf reads 'z', not the product's factor 'x'"),
    (dict(erf_x="z", grouping="x*(h*a)"), r"the erf reads 'z', not the product's factor 'x'"),
    (dict(scale=0.7, erf_by="mul"), r"x times 0\.7, not 1 / sqrt\(2\)"),
    (dict(scale=0.7, grouping="x*(h*a)"), r"x times 0\.7, not 1 / sqrt\(2\)"),
    (dict(extra_output="e"), r"the erf 'e' has readers outside the GELU \(a graph output\)"),
    (dict(extra_output="p", grouping="x*(h*a)"), r"no factor of 'y' is 1 \+ erf\(\.\) read by the product alone"),
    (dict(extra_output="p", grouping="(x*a)*h"), r"'y' is a product of 1 non-constant factors"),
])
def test_near_misses_keep_the_erf(h, kw, why):
    model = _gelu(h, **kw)
    h.stays(model, "gelu-erf", why, _feeds(model), op="com.microsoft::Gelu")
    for target in ("onnx", "trt"):
        out = h.fuse(model, target)
        assert "Erf" in h.ops(out) and "Gelu" not in h.ops(out), (target, h.ops(out))


@pytest.mark.parametrize("grouping", ["x*(h*a)", "(x*a)/2"])
def test_float16_constants_read_at_their_dtype(h, grouping):
    """float16 0.5 and 1 / sqrt 2 (0.70703125 as float16, within 1e-3) fuse; 0.4 (0.39990234) does not."""
    model = _gelu(h, grouping, dtype=np.float16, erf_by="mul")
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Gelu"] == 1 and "Erf" not in h.ops(out), h.ops(out)
    feeds = _feeds(model, np.float16)
    ref, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=1e-2, rtol=1e-2)
    near = _gelu(h, "x*(h*a)", dtype=np.float16, half=0.4)
    assert "Erf" in h.ops(h.fuse(near, "onnx"))
    assert any("0.3999" in r for r in h.reasons(near, "onnx", "gelu-erf"))


def test_bfloat16_constants_read_at_their_dtype(h):
    """bfloat16 stores 1 / sqrt 2 as 0.70703125 and 0.5 exactly: the GELU fuses (the product's
    constant read as bfloat16, not as the float32 it was written from)."""
    model = _gelu(h, "x*(h*a)", dtype=ml_dtypes.bfloat16, erf_by="mul")
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Gelu"] == 1 and "Erf" not in h.ops(out), h.ops(out)
    onnx.checker.check_model(out)


def test_constant_holding_one_number_in_any_shape(h):
    """0.5 as a [D] vector of 0.5 counts (a rule's `scalar:` reads it so); a [D] vector of other
    numbers is a factor of its own, and refuses."""
    model = _gelu(h, "x*(h*a)")
    model.graph.initializer[[i.name for i in model.graph.initializer].index("h")].CopyFrom(
        onnx.numpy_helper.from_array(np.full(D, 0.5, np.float32), "h"))
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Gelu"] == 1 and "Erf" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(model))
    model.graph.initializer[[i.name for i in model.graph.initializer].index("h")].CopyFrom(
        onnx.numpy_helper.from_array(np.linspace(0.4, 0.6, D).astype(np.float32), "h"))
    h.stays(model, "gelu-erf", r"product of 3 non-constant factors", _feeds(model), op="com.microsoft::Gelu")


@pytest.mark.parametrize("grouping", ["x*(h*a)", "(x*a)*h", "(x*a)/2"])
def test_per_rewrite_check_sees_the_whole_product(h, grouping):
    """gelu-erf matches one node, the product's root: optimize(verify=True)'s per-rewrite check must
    bridge from x (what the Gelu reads) through the unmatched erf and inner product (a bridge now
    passes a Mul of two bridged values), else it feeds them random data and rolls the GELU back."""
    import onnx_fuse

    model = _gelu(h, grouping, residual=True)
    for target in ("ort", "onnx"):
        result = onnx_fuse.optimize(model, level=2, target=target, verify=True)
        rewrites = result.report.verify["rewrites"]
        assert result.report.status == "PASSED" and rewrites["rolled_back"] == 0, (target, rewrites)
        assert result.report.rule_fires.get("gelu-erf") == 1, result.report.rule_fires
