"""The rule language, one construct at a time: each test builds a tiny graph, applies a rule to a
copy, and asserts the op list, the numerics in ORT (optimizations off) and the checker."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from rw_testing import (RELU_RELU, apply, assert_same_outputs, builtin, model_from_text, ops,
                        rules_from_yaml)

from onnx_fuse.rewrite import RULE_TAG, MatchStatus, explain

RNG = np.random.default_rng(0)


def x_feed(*shape, dtype=np.float32):
    return {"x": RNG.standard_normal(shape).astype(dtype)}


GELU = """
<ir_version: 10, opset_import: ["" : {opset}]>
g (float[B, S, 8] x) => (float[B, S, 8] y) {{
  c_sqrt2 = Constant<value = float {{1.4142135}}>()
  c_one = Constant<value = float {{1.0}}>()
  c_half = Constant<value = float {{{half}}}>()
  t = Div(x, c_sqrt2)
  e = Erf(t)
  a = {add}
  m = {mul}
  y = Mul(m, c_half)
}}
"""


def gelu(opset=20, add="Add(e, c_one)", mul="Mul(x, a)", half="0.5"):
    return model_from_text(GELU.format(opset=opset, add=add, mul=mul, half=half))


# --- the built-in example rules (erf GELU), commutative inputs, targets, opset gates ------------


@pytest.mark.parametrize("add", ["Add(e, c_one)", "Add(c_one, e)"])
@pytest.mark.parametrize("mul", ["Mul(x, a)", "Mul(a, x)"])
def test_gelu_commutative_orders_fuse_for_onnx(add, mul):
    proto = gelu(add=add, mul=mul)
    model, p, modified = apply(proto, builtin("onnx"))
    assert modified and p.stats == {"gelu-erf": 1, "gelu-onnx": 1}   # recognized, then lowered
    assert [o for o in ops(model) if o != "Constant"] == ["Gelu"]
    assert_same_outputs(proto, model, x_feed(2, 3, 8))


def test_gelu_ort_target_emits_contrib_op():
    proto = gelu()
    model, p, _ = apply(proto, builtin("ort"))
    assert "com.microsoft::Gelu" in ops(model)
    assert model.opset_imports["com.microsoft"] == 1
    assert_same_outputs(proto, model, x_feed(2, 3, 8))


def test_opset_gate_skips_rule_below_min():
    """Gelu-20's lowering is gated at opset 20; below it (and without the pipeline's on-demand
    upgrade) the recognized GELU falls back to its formula as plain ops, never a stranded op."""
    proto = gelu(opset=18)
    model, p, modified = apply(proto, builtin("onnx"))
    assert p.stats == {"gelu-erf": 1, "gelu-plain-erf": 1} and "Erf" in ops(model) and "Gelu" not in ops(model)
    (r,) = {x.status for x in explain(model, builtin("onnx"), "gelu-onnx")}
    assert r is MatchStatus.SKIPPED
    assert_same_outputs(proto, model, x_feed(2, 3, 8))


def test_near_miss_constant_does_not_fire_and_explain_says_why():
    proto = gelu(half="0.6")
    model, p, modified = apply(proto, builtin("onnx"))
    assert not modified and not p.stats
    results = explain(model, builtin("onnx"), "gelu-erf")
    failed = [r for r in results if r.status is MatchStatus.CHECK_FAILED]
    assert failed and any("0.6" in r.reason and "not 0.5" in r.reason for r in failed)


def test_escaping_intermediate_blocks_the_fusion():
    text = GELU.format(opset=20, add="Add(e, c_one)", mul="Mul(x, a)", half="0.5").replace(
        "=> (float[B, S, 8] y)", "=> (float[B, S, 8] y, float[B, S, 8] e)")
    proto = model_from_text(text)
    model, p, modified = apply(proto, builtin("onnx"))
    assert not modified
    results = explain(model, builtin("onnx"), "gelu-erf")
    assert any(r.status is MatchStatus.CHECK_FAILED and "graph output" in r.reason for r in results)


def test_int_dtype_near_miss():
    rules = """
    rules:
      - name: double-relu
        doc: Relu(Relu(x)) -> Relu(x)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Relu(a)
        where:
          x: {dtype: float}
        rewrite: |
          y = Relu(x)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (int32[4] x) => (int32[4] y) { a = Relu(x)
      y = Relu(a) }""")
    model, p, modified = apply(proto, rules)
    assert not modified
    results = explain(model, rules_from_yaml(rules), "double-relu")
    assert any(r.status is MatchStatus.CHECK_FAILED and "dtype int32" in r.reason for r in results)


# --- alternatives and optional nodes --------------------------------------------------------------


def test_alternative_mul_by_rsqrt2():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 8] x) => (float[2, 8] y) {
      c = Constant<value = float {0.70710678}>()
      one = Constant<value = float[1] {1.0}>()
      half = Constant<value = float[1, 1] {0.5}>()
      t = Mul(c, x)
      e = Erf(t)
      a = Add(e, one)
      m = Mul(x, a)
      y = Mul(half, m)
    }""")
    model, p, _ = apply(proto, builtin("onnx"))
    assert p.stats == {"gelu-erf": 1, "gelu-onnx": 1}
    assert_same_outputs(proto, model, x_feed(2, 8))


OPTIONAL_RULE = """
rules:
  - name: relu-relu-cast
    doc: Relu(Relu(Cast?(x))) -> Relu(Cast?(x))
    targets: [ort]
    match: |
      xc = Cast?(x, to=1)
      a = Relu(xc)
      y = Relu(a)
    rewrite: |
      y = Relu(xc)
"""


def test_optional_node_present_and_absent():
    with_cast = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float16[4] x) => (float[4] y) { xc = Cast<to=1>(x)
      a = Relu(xc)
      y = Relu(a) }""")
    model, p, _ = apply(with_cast, OPTIONAL_RULE)
    assert ops(model) == ["Cast", "Relu"]
    assert_same_outputs(with_cast, model, x_feed(4, dtype=np.float16))
    without = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) { a = Relu(x)
      y = Relu(a) }""")
    model, p, _ = apply(without, OPTIONAL_RULE)
    assert ops(model) == ["Relu"] and p.stats == {"relu-relu-cast": 1}


def test_optional_node_attribute_applies_only_when_present():
    # Cast to double does not satisfy to=1: the Cast is "absent" and xc binds to its output.
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (double[4] y) { xc = Cast<to=11>(x)
      a = Relu(xc)
      y = Relu(a) }""")
    model, p, _ = apply(proto, OPTIONAL_RULE)
    assert ops(model) == ["Cast", "Relu"]
    assert_same_outputs(proto, model, x_feed(4))


def test_optional_with_named_pass_through_input():
    rules = """
    rules:
      - name: nan-guard-relu
        doc: Relu(Where?(IsNaN(p), 0, p)) -> Relu(p)
        targets: [ort]
        match: |
          isn = IsNaN(p)
          z = Where?(isn, c_zero, p, pass=p)
          y = Relu(z)
        where:
          c_zero: {scalar: 0.0}
        rewrite: |
          y = Relu(p)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) {
      c = Constant<value = float {0.0}>()
      isn = IsNaN(x)
      z = Where(isn, c, x)
      y = Relu(z) }""")
    model, p, _ = apply(proto, rules)
    assert [o for o in ops(model) if o != "Constant"] == ["Relu"]
    plain = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) { y = Relu(x) }""")
    model, p, modified = apply(plain, rules)
    assert not modified and not p.stats  # absent optional part: the rewrite would be the match itself


# --- attributes, defaults, opset-dependent forms ---------------------------------------------------


MEAN_RULE = """
rules:
  - name: mean-last-axis
    doc: ReduceMean(x, axes=[-1]) -> onnx_fuse::MeanLast(x)
    targets: [trt]
    match: |
      y = ReduceMean(x, axes=ax, keepdims=1)
    where:
      check: ["ax == [-1] or ax == [rank(x) - 1] : must reduce the last axis"]
    rewrite: |
      y = onnx_fuse::MeanLast(x, axis=ax[0]) : like(y)
"""


@pytest.mark.parametrize("opset,body", [
    (17, "y = ReduceMean<axes=[-1]>(x)"),              # attribute form, keepdims by default
    (18, "ax = Constant<value = int64[1] {-1}>()\n y = ReduceMean(x, ax)"),   # input form
    (18, "ax = Constant<value = int64[1] {2}>()\n y = ReduceMean<keepdims=1>(x, ax)"),
])
def test_promoted_attribute_both_forms_and_default(opset, body):
    proto = model_from_text(f"""
    <ir_version: 10, opset_import: ["" : {opset}]>
    g (float[2, 3, 4] x) => (float[2, 3, 1] y) {{ {body} }}""")
    model, p, _ = apply(proto, MEAN_RULE)
    assert p.stats == {"mean-last-axis": 1}
    (node,) = [n for n in model.graph if n.op_type == "MeanLast"]
    assert node.attributes["axis"].value in (-1, 2)
    assert node.metadata_props[RULE_TAG] == "mean-last-axis"


def test_attribute_literal_mismatch_and_non_constant_axes():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 17]>
    g (float[2, 3, 4] x) => (float[2, 3] y) { y = ReduceMean<axes=[-1], keepdims=0>(x) }""")
    model, p, _ = apply(proto, MEAN_RULE)
    assert not p.stats
    (r,) = explain(model, rules_from_yaml(MEAN_RULE), "mean-last-axis")
    assert r.status is MatchStatus.NO_MATCH and "keepdims=0" in r.reason
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 18]>
    g (float[2, 3, 4] x, int64[1] ax) => (float[2, 3, 1] y) { y = ReduceMean(x, ax) }""")
    model, p, _ = apply(proto, MEAN_RULE)
    assert not p.stats
    (r,) = explain(model, rules_from_yaml(MEAN_RULE), "mean-last-axis")
    assert "not a constant" in r.reason


# --- constants, dtype/rank/shape constraints, checks ----------------------------------------------

LEAKY = """
rules:
  - name: leaky-relu
    doc: Max(x, x * c) with 0 < c < 1  ->  LeakyRelu(x, alpha=c)
    targets: [onnx]
    match: |
      n = Mul(x, c)
      y = Max(x, n)
    where:
      c: {const: true, rank: {max: 1}}
      x: {shape: [_, D], dtype: [float, float16]}
      check:
        - "0 < float(value(c)) < 1 : alpha must be in (0, 1)"
    rewrite: |
      y = LeakyRelu(x, alpha=float(value(c)))
"""


def leaky(c="float {0.1}", xtype="float[N, 8]"):
    return model_from_text(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g ({xtype} x) => ({xtype} y) {{
      c = Constant<value = {c}>()
      n = Mul(c, x)
      y = Max(n, x) }}""")


def test_computed_attribute_from_constant():
    proto = leaky()
    model, p, _ = apply(proto, LEAKY)
    (node,) = [n for n in model.graph if n.op_type == "LeakyRelu"]
    assert node.attributes["alpha"].value == pytest.approx(0.1)
    assert_same_outputs(proto, model, x_feed(3, 8))


@pytest.mark.parametrize("c,xtype,reason", [
    ("float {1.5}", "float[N, 8]", "alpha must be in"),
    ("float[1, 1] {0.1}", "float[N, 8]", "rank 2"),
    ("float {0.1}", "float[N, 2, 8]", "shape pattern"),
    ("float {0.1}", "double[N, 8]", "dtype double"),
])
def test_constraint_near_misses(c, xtype, reason):
    model, p, modified = apply(leaky(c, xtype), LEAKY)
    assert not modified
    results = explain(model, rules_from_yaml(LEAKY), "leaky-relu")
    assert any(r.status is MatchStatus.CHECK_FAILED and reason in r.reason for r in results), \
        [r.reason for r in results]


def test_initializer_that_is_a_graph_input_is_not_constant():
    proto = leaky()
    proto = onnx.helper.make_model(proto.graph, opset_imports=proto.opset_import)
    # turn the Constant into an overridable initializer (also a graph input)
    const = proto.graph.node[0]
    proto.graph.node.remove(const)
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.array(0.1, np.float32), "c"))
    proto.graph.input.append(onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, []))
    model, p, modified = apply(proto, LEAKY)
    assert not modified


def test_scalar_constraint_accepts_filled_broadcast_tensor_only():
    rules = """
    rules:
      - name: half-to-div
        doc: Mul(x, 0.5) -> Div(x, 2)
        targets: [onnx]
        match: |
          y = Mul(x, h)
        where:
          h: {scalar: 0.5}
        rewrite: |
          two = initializer(array(2.0, dtype(x)))
          y = Div(x, two)
    """
    filled = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] x) => (float[2, 3] y) {
      h = Constant<value = float[1, 3] {0.5, 0.5, 0.5}>()
      y = Mul(x, h) }""")
    model, p, _ = apply(filled, rules)
    assert [o for o in ops(model) if o != "Constant"] == ["Div"]
    assert_same_outputs(filled, model, x_feed(2, 3))
    mixed = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] x) => (float[2, 3] y) {
      h = Constant<value = float[3] {0.5, 0.5, 0.25}>()
      y = Mul(x, h) }""")
    model, p, modified = apply(mixed, rules)
    assert not modified


def test_new_initializer_from_folded_constants():
    rules = """
    rules:
      - name: fold-scales
        doc: (x * a) * b  ->  x * (a*b)
        targets: [ort]
        match: |
          m = Mul(x, a)
          y = Mul(m, b)
        where:
          a: {const: true}
          b: {const: true}
          x: {const: false}
        rewrite: |
          k = initializer(value(a) * value(b))
          y = Mul(x, k)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] x) => (float[2, 3] y) {
      a = Constant<value = float[3] {1.0, 2.0, 3.0}>()
      b = Constant<value = float {0.5}>()
      m = Mul(x, a)
      y = Mul(m, b) }""")
    model, p, _ = apply(proto, rules)
    assert p.stats == {"fold-scales": 1}
    (k,) = [v for v in model.graph.initializers.values()]
    np.testing.assert_allclose(k.const_value.numpy(), [0.5, 1.0, 1.5])
    assert k.const_value.numpy().dtype == np.float32
    assert_same_outputs(proto, model, x_feed(2, 3))


CHOICE = """
rules:
  - name: row-broadcast-add
    doc: Add(x, b)  ->  Add(x, Expand(b, Shape(x))) when b has one row
    targets: [ort]
    match: |
      y = Add(x, b)
    where:
      x: {rank: 2, const: false}
      b: {rank: 2, const: false}
    rewrite: |
      one = initializer(array([1], "int64"))
      xs = Shape(x)
      bx = Expand(b, xs)
      bb = bx if dim(b, 0) == 1 else b
      s = Sub(x, bb)
      y = Add(x, bb)
"""


@pytest.mark.parametrize("rows,emitted", [(1, ["Shape", "Expand", "Add"]), (4, ["Add"])])
def test_computed_choice_of_value_builds_only_the_branch_taken(rows, emitted):
    """`bb = bx if ... else b` picks a tensor; new nodes and initializers nothing uses (the Expand
    branch not taken, the unused Sub, `one`) are not built."""
    proto = model_from_text(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4, 8] x, float[{rows}, 8] b) => (float[4, 8] y) {{
      y = Add(x, b) }}""")
    model, p, _ = apply(proto, CHOICE)
    assert ops(model) == emitted
    assert not model.graph.initializers
    if rows == 1:
        assert p.stats == {"row-broadcast-add": 1}
        assert_same_outputs(proto, model, {**x_feed(4, 8), "b": np.ones((1, 8), np.float32)})
    else:
        assert p.stats == {}  # only the same Add would be rebuilt: no progress


def test_symbolic_shape_equality_in_check():
    rules = """
    rules:
      - name: scale-last
        doc: Mul(x, g) where g covers the last axis -> onnx_fuse::ScaleLast(x, g)
        targets: [trt]
        match: |
          y = Mul(x, g)
        where:
          check: ["shape(x)[-1] == shape(g)[0] : g must cover the last axis"]
        rewrite: |
          y = onnx_fuse::ScaleLast(x, g) : like(y)
    """
    ok = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[B, H] x, float[H] g) => (float[B, H] y) { y = Mul(x, g) }""")
    model, p, _ = apply(ok, rules, infer=False)
    assert p.stats == {"scale-last": 1}
    bad = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[B, H] x, float[K] g) => (float[B, H] y) { y = Mul(x, g) }""")
    model, p, _ = apply(bad, rules, infer=False)
    assert not p.stats
    (r,) = explain(model, rules_from_yaml(rules), "scale-last")
    assert r.status is MatchStatus.CHECK_FAILED and r.reason == "g must cover the last axis"


# --- several outputs, escapes, graph outputs ---------------------------------------------------------

SKIP_LN = """
rules:
  - name: skip-layer-norm
    doc: LayerNormalization(a + b) -> com.microsoft::SkipLayerNormalization (sum as extra output)
    targets: [ort]
    outputs: [y, s]
    match: |
      s = Add(a, b)
      y = LayerNormalization(s, g, beta, axis=-1, epsilon=eps)
    where:
      check: ["rank(a) == 3 and rank(b) == 3 : SkipLayerNormalization wants 3D inputs"]
    rewrite: |
      y, _, _, s? = com.microsoft::SkipLayerNormalization(a, b, g, beta, epsilon=eps) : like(a)
"""


def skip_ln(extra_consumer: str = "", outputs: str = "float[2, 3, 8] y", before: bool = False):
    consumer = "r = Relu(s)\n" if extra_consumer else ""
    ln = "y = LayerNormalization<axis=-1, epsilon=0.001>(s, g, beta)\n"
    body = "s = Add(a, b)\n" + (consumer + ln if before else ln + consumer)
    return model_from_text(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3, 8] a, float[2, 3, 8] b, float[8] g, float[8] beta) => ({outputs}) {{
      {body} }}""")


def feeds_skip():
    return {"a": RNG.standard_normal((2, 3, 8)).astype(np.float32),
            "b": RNG.standard_normal((2, 3, 8)).astype(np.float32),
            "g": RNG.standard_normal(8).astype(np.float32),
            "beta": RNG.standard_normal(8).astype(np.float32)}


# an output made only on one alternative (attention-batched-heads' o3: the 3-D bmm's output, absent
# where folding merged its views into a 4-D MatMul)
ALT_OUTPUT = """
rules:
  - name: abs-of-sum
    doc: Abs(Neg(a + b)) -> Abs(a + b) (the sum kept as an output), or Relu(d) -> Max(d, 0)
    targets: [ort]
    outputs: [y, s]
    match: |
      s = Add(a, b)
      t = Neg(s)
      y = Abs(t) | Relu(d)
    rewrite: |
      s2 = Add(a, b)
      ya = Abs(s2)
      z = initializer(array([0.0], "float32"))
      yr = Max(d, z)
      y = ya if bound(a) else yr
      s? = Identity(s2)
"""


@pytest.mark.parametrize("form", ["neg", "relu"])
def test_output_unbound_on_the_alternative_taken(form):
    """On the Relu alternative s is never bound: the match leaves it out (no KeyError, no s? node)."""
    body = ("s = Add(a, b)\n t = Neg(s)\n y = Abs(t)\n r = Sigmoid(s)" if form == "neg" else
            "y = Relu(a)\n r = Sigmoid(b)")
    proto = model_from_text(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] a, float[2, 3] b) => (float[2, 3] y, float[2, 3] r) {{
      {body} }}""")
    model, p, _ = apply(proto, ALT_OUTPUT)
    assert p.stats == {"abs-of-sum": 1}
    assert ("Identity" in ops(model)) == (form == "neg") and ("Max" in ops(model)) == (form == "relu"), ops(model)
    assert_same_outputs(proto, model, {"a": RNG.standard_normal((2, 3)).astype(np.float32),
                                       "b": RNG.standard_normal((2, 3)).astype(np.float32)})


def test_multi_output_rule_without_outside_consumer():
    proto = skip_ln()
    model, p, _ = apply(proto, SKIP_LN)
    assert ops(model) == ["com.microsoft::SkipLayerNormalization"]
    (node,) = model.graph
    assert [o.name for o in node.outputs][3] == ""  # s? not consumed: slot left empty
    assert node.attributes["epsilon"].value == pytest.approx(1e-3)
    assert_same_outputs(proto, model, feeds_skip())


@pytest.mark.parametrize("before", [False, True])
def test_multi_output_rule_with_consumed_sum(before):
    proto = skip_ln("r", outputs="float[2, 3, 8] y, float[2, 3, 8] r", before=before)
    model, p, _ = apply(proto, SKIP_LN)
    assert ops(model) == ["com.microsoft::SkipLayerNormalization", "Relu"]
    assert_same_outputs(proto, model, feeds_skip())


def test_pattern_output_that_is_a_graph_output_keeps_its_name():
    proto = skip_ln(outputs="float[2, 3, 8] y, float[2, 3, 8] s")
    model, p, _ = apply(proto, SKIP_LN)
    assert [o.name for o in model.graph.outputs] == ["y", "s"]
    assert_same_outputs(proto, model, feeds_skip())


def test_escape_true_keeps_the_shared_intermediate():
    rules = """
    rules:
      - name: relu-relu
        doc: Relu(Relu(x)) -> Relu(x)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Relu(a)
        where:
          a: {escape: ESCAPE}
        rewrite: |
          y = Relu(x)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y, float[4] z) {
      a = Relu(x)
      y = Relu(a)
      z = Neg(a) }""")
    model, p, _ = apply(proto, rules.replace("ESCAPE", "false"))
    assert not p.stats
    model, p, _ = apply(proto, rules.replace("ESCAPE", "true"))
    assert p.stats == {"relu-relu": 1}
    assert sorted(ops(model)) == ["Neg", "Relu", "Relu"]
    assert_same_outputs(proto, model, x_feed(4))


# --- application: names, metadata, priority, fixed point, determinism, rollback ----------------------


def relu_chain(n: int):
    lines = ["r0 = Relu(x)"] + [f"r{i} = Relu(r{i - 1})" for i in range(1, n - 1)] + [f"y = Relu(r{n - 2})"]
    return model_from_text(f"""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) {{ {chr(10).join(lines)} }}""")


def test_fixed_point_collapses_a_chain():
    proto = relu_chain(6)
    model, p, _ = apply(proto, RELU_RELU)
    assert ops(model) == ["Relu"] and p.stats == {"relu-relu": 5}
    assert model.graph.outputs[0].name == "y"
    assert_same_outputs(proto, model, x_feed(4))


def test_names_are_unique_and_output_is_deterministic():
    proto = relu_chain(6)
    m1, _, _ = apply(proto, RELU_RELU)
    m2, _, _ = apply(proto, RELU_RELU)
    import onnx_ir as ir
    b1, b2 = ir.to_proto(m1).SerializeToString(), ir.to_proto(m2).SerializeToString()
    assert b1 == b2
    names = [n.name for n in m1.graph]
    assert len(set(names)) == len(names) and all(names)
    assert all(n.metadata_props.get(RULE_TAG) == "relu-relu" for n in m1.graph)


def test_priority_decides_between_rules_on_one_anchor():
    two = """
    rules:
      - name: to-sigmoid
        doc: test
        targets: [ort]
        priority: PA
        match: |
          a = Relu(x)
          y = Relu(a)
        rewrite: |
          y = Relu(x)
      - name: to-abs
        doc: test
        targets: [ort]
        priority: PB
        match: |
          a = Relu(x)
          y = Relu(a)
        rewrite: |
          z = Relu(x)
          y = Identity(z)
    """
    proto = relu_chain(2)
    _, p, _ = apply(proto, two.replace("PA", "10").replace("PB", "1"))
    assert p.stats == {"to-sigmoid": 1}
    _, p, _ = apply(proto, two.replace("PA", "1").replace("PB", "10"))
    assert p.stats == {"to-abs": 1}


def test_invalid_rewrite_is_rejected_and_graph_untouched():
    rules = """
    rules:
      - name: wrong-type
        doc: Relu(Relu(x)) -> Cast(x) to int64 (wrong on purpose)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Relu(a)
        rewrite: |
          y = Cast(x, to=7)
    """
    proto = relu_chain(2)
    model, p, modified = apply(proto, rules)
    assert not modified and ops(model) == ["Relu", "Relu"]
    assert "wrong-type" in p.stats_reason and "dtype INT64" in p.stats_reason
    statuses = {r.status for r in explain(model, rules_from_yaml(rules), "wrong-type")}
    assert MatchStatus.REWRITE_FAILED in statuses
    onnx.checker.check_model(__import__("onnx_ir").to_proto(model), full_check=True)


def test_rewrite_op_missing_at_model_opset_is_rejected():
    rules = """
    rules:
      - name: ungated-gelu
        doc: Relu(Relu(x)) -> Gelu (needs opset 20; no gate on purpose)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Relu(a)
        rewrite: |
          y = Gelu(x)
    """
    proto = relu_chain(2)
    proto.opset_import[0].version = 17
    model, p, modified = apply(proto, rules)
    assert not modified and "Gelu" in p.stats_reason


def test_change_flag_false_on_no_op_input():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) { y = Relu(x) }""")
    _, p, modified = apply(proto, RELU_RELU)
    assert modified is False and not p.stats


def test_subgraph_is_rewritten_too():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (bool c, float[4] x) => (float[4] y) {
      y = If(c) <then_branch = t () => (float[4] o) { a = Relu(x)
                                                      o = Relu(a) },
                 else_branch = e () => (float[4] o) { o = Neg(x) }>
    }""")
    model, p, _ = apply(proto, RELU_RELU, infer=False)
    assert p.stats == {"relu-relu": 1}
    feeds = {"c": np.array(True), "x": RNG.standard_normal(4).astype(np.float32)}
    assert_same_outputs(proto, model, feeds)


def test_nodes_left_dead_by_a_rewrite_are_removed_in_the_same_pass():
    rules = """
    rules:
      - name: noop-reshape-relu
        doc: Relu(Reshape(x, Shape(x))) -> Relu(x)
        targets: [ort]
        match: |
          r = Reshape(x, s)
          y = Relu(r)
        where:
          check: ["shape(r) == shape(x) : the Reshape must be a no-op"]
        rewrite: |
          y = Relu(x)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[N, 4] x) => (float[N, 4] y) {
      s = Shape(x)
      r = Reshape(x, s)
      y = Relu(r) }""")
    model, p, _ = apply(proto, rules)
    assert p.stats == {"noop-reshape-relu": 1}
    assert ops(model) == ["Relu"]  # the Shape that only fed the Reshape went with it
    assert_same_outputs(proto, model, x_feed(3, 4))


def test_type_hint_for_custom_op_outputs():
    rules = """
    rules:
      - name: custom-then-reshape
        doc: Reshape(Relu(x), s) -> Reshape(mycorp::MyRelu(x), s)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Reshape(a, s)
        rewrite: |
          b = mycorp::MyRelu(x) : like(x)
          y = Reshape(b, s)
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 4] x) => (float[8] y) {
      s = Constant<value = int64[1] {8}>()
      a = Relu(x)
      y = Reshape(a, s) }""")
    model, p, _ = apply(proto, rules)
    assert p.stats == {"custom-then-reshape": 1}
    (node,) = [n for n in model.graph if n.op_type == "MyRelu"]
    assert node.outputs[0].dtype == ir.DataType.FLOAT and list(node.outputs[0].shape) == [2, 4]
    bad = rules.replace(": like(x)", ": shape(x)")
    from onnx_fuse.rewrite import load_text
    _, errors = load_text(bad, "f.yaml")
    assert errors and "unknown type hint shape()" in str(errors[0])


IDENTITY_ALIAS = """
rules:
  - name: drop-identity
    doc: Identity(x) -> x
    targets: [ort]
    match: |
      y = Identity(x)
    rewrite: |
      y = x
"""


def test_alias_rewrite_removes_inner_identity():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] z) {
      a = Identity(x)
      z = Relu(a) }""")
    model, p, _ = apply(proto, IDENTITY_ALIAS)
    assert ops(model) == ["Relu"] and p.stats == {"drop-identity": 1}
    assert_same_outputs(proto, model, x_feed(4))


def test_alias_of_graph_output_terminates():
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] y) {
      r = Relu(x)
      y = Identity(r) }""")
    model, p, modified = apply(proto, IDENTITY_ALIAS)
    # the graph output needs a node to carry its name: rewriting Identity into Identity is no
    # progress, so the rule does not fire (and never loops)
    assert not modified and not p.stats and ops(model) == ["Relu", "Identity"]


def test_rules_undoing_each_other_stop_and_warn():
    rules = """
    rules:
      - name: relu-to-neg-neg
        doc: Relu(x) -> Relu(Neg(Neg(x)))  (test only)
        targets: [ort]
        match: |
          y = Relu(x)
        where:
          x: {const: false}
        rewrite: |
          a = Neg(x)
          b = Neg(a)
          y = Relu(b)
      - name: neg-neg
        doc: Neg(Neg(x)) -> x  (test only)
        targets: [ort]
        match: |
          a = Neg(x)
          y = Neg(a)
        rewrite: |
          y = x
    """
    proto = model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[4] x) => (float[4] z) { r = Relu(x)
      z = Sigmoid(r) }""")
    model, p, _ = apply(proto, rules)
    assert "still firing after 16 rounds" in p.stats_reason
    assert_same_outputs(proto, model, x_feed(4))
