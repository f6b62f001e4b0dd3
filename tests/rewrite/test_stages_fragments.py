"""Rule-language features for recognize-once / lower-per-target: stages, per-target rewrite blocks,
fragments, the canonical-domain guard, computed None inputs and choices, per-output type hints."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import rw_testing as rt

from onnx_fuse.errors import InternalError
from onnx_fuse.rewrite import RuleSet, load_text

RELU2 = """
<ir_version: 10, opset_import: ["" : 20]>
g (float[2, 3] x) => (float[2, 3] y) { a = Relu(x)  y = Relu(a) }"""

CANON = """
fragments:
  - name: relu-pair
    doc: two Relus
    inputs: [x]
    outputs: [y]
    match: |
      a = Relu(x)
      y = Relu(a)
    where:
      x: {dtype: float}
      check:
        - "rank(x) >= 1 : x must have a rank"
  - name: sigmoid-of
    doc: Sigmoid then Identity
    inputs: [x]
    outputs: [y]
    rewrite: |
      t = Sigmoid(x)
      y = Identity(t)
rules:
  - name: relu-pair-to-canon
    doc: Relu(Relu(x)) -> canonical Thing(x)
    targets: [ort, onnx]
    match: |
      y = @relu-pair(x)
    rewrite: |
      y = onnx_fuse.canonical::Thing(x) : like(x)
  - name: lower-thing
    doc: canonical Thing -> Sigmoid (ort), Relu (onnx)
    stage: lower
    targets: [ort, onnx]
    match: |
      y = onnx_fuse.canonical::Thing(x)
    rewrite:
      ort: |
        y = @sigmoid-of(x)
      onnx: |
        y = Relu(x)
"""


def _rules(text: str) -> list:
    rules, errors = load_text(textwrap.dedent(text), "<test>")
    assert not errors, [str(e) for e in errors]
    return rules


@pytest.mark.parametrize("target,want", [("ort", ["Sigmoid", "Identity"]), ("onnx", ["Relu"])])
def test_recognize_then_lower_per_target(target, want):
    proto = rt.model_from_text(RELU2)
    model, p, modified = rt.apply(proto, RuleSet(_rules(CANON)).select(target=target))
    assert modified and rt.ops(model) == want
    assert dict(p.stats) == {"relu-pair-to-canon": 1, "lower-thing": 1}
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    got = rt.run(model, {"x": x})[0]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x)) if target == "ort" else np.maximum(x, 0), rtol=1e-6)


def test_fragment_where_and_checks_are_renamed_and_joined():
    (canon, _) = _rules(CANON)
    assert [st.source for st in canon.match] == ["y__a = Relu(x)", "y = Relu(y__a)"]
    assert set(canon.where) == {"x"}
    assert [c.message for c in canon.checks] == ["x must have a rank"]
    assert canon.checks[0].line == 26  # the line of the `@relu-pair` call in CANON


def test_a_canonical_op_left_unlowered_is_an_internal_error():
    proto = rt.model_from_text(RELU2)
    only_recognizer = RuleSet(_rules(CANON)[:1]).select(target="ort")
    with pytest.raises(InternalError, match="canonical op Thing .*relu-pair-to-canon.* no lowering"):
        rt.apply(proto, only_recognizer)


def test_stages_run_in_order_whatever_the_priority():
    """A simplify-stage rule with the highest priority still runs after the fuse stage."""
    text = """
    rules:
      - name: late
        doc: Sigmoid -> Tanh, in the last stage
        stage: simplify
        priority: 1000
        targets: [ort]
        match: |
          y = Sigmoid(x)
        rewrite: |
          y = Tanh(x)
      - name: early
        doc: Relu(Relu(x)) -> Sigmoid(x)
        targets: [ort]
        match: |
          a = Relu(x)
          y = Relu(a)
        rewrite: |
          y = Sigmoid(x)
    """
    model, p, _ = rt.apply(rt.model_from_text(RELU2), RuleSet(_rules(text)))
    assert rt.ops(model) == ["Tanh"] and dict(p.stats) == {"early": 1, "late": 1}


@pytest.mark.parametrize("text,error", [
    ("    match: |\n      y = @nope(x)\n    rewrite: |\n      y = Relu(x)\n", "unknown fragment @nope"),
    ("    match: |\n      y = @relu-pair(x, x)\n    rewrite: |\n      y = Relu(x)\n",
     "@relu-pair takes 1 input"),
    ("    match: |\n      y = Relu(x)\n    rewrite: |\n      y = @relu-pair(x)\n",
     "@relu-pair is a match fragment, used in `rewrite`"),
    ("    match: |\n      y = Relu(x)\n    rewrite:\n      tpu: |\n        y = Relu(x)\n",
     "rewrite block 'tpu' is not one of the rule's targets"),
    ("    match: |\n      y = Relu(x)\n    rewrite:\n      onnx: |\n        y = Relu(x)\n",
     "no rewrite block for target.*ort"),
    ("    stage: later\n    match: |\n      y = Relu(x)\n    rewrite: |\n      y = Relu(x)\n",
     "`stage` must be one of fuse, lower, simplify"),
])
def test_bad_rules_fail_at_load_with_the_line(text, error):
    frag = CANON[:CANON.index("rules:")]
    src = frag + "rules:\n  - name: bad\n    doc: bad\n    targets: [ort, onnx]\n" + text
    rules, errors = load_text(textwrap.dedent(src), "bad.yaml")
    assert not rules and len(errors) == 1
    import re
    assert re.search(error, str(errors[0])), str(errors[0])
    assert str(errors[0]).startswith("bad.yaml:")


def test_computed_none_omits_an_input_and_unbound_branches_are_not_built():
    """`m = b if bound(b) else None` drops the optional input; a statement reading a leaf of the
    other alternative is built only if used."""
    text = """
    rules:
      - name: add-or-not
        doc: Relu(x + b) or Relu(x) -> Clip(x, lo?) ...
        targets: [ort]
        match: |
          s = Add(x, b) | Identity(x)
          y = Relu(s)
        rewrite: |
          nb = Neg(b)
          lo = nb if bound(b) else None
          y = Clip(x, lo)
    """
    rules = RuleSet(_rules(text))
    with_add = rt.model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[3] x) => (float[3] y) <float[1] b = {0.5}> { s = Add(x, b)  y = Relu(s) }""")
    model, p, _ = rt.apply(with_add, rules)
    assert rt.ops(model) == ["Neg", "Clip"]
    x = np.array([-1.0, -0.2, 2.0], np.float32)
    np.testing.assert_allclose(rt.run(model, {"x": x})[0], np.maximum(x, -0.5))
    without = rt.model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[3] x) => (float[3] y) { s = Identity(x)  y = Relu(s) }""")
    model, p, _ = rt.apply(without, rules)
    (clip,) = [n for n in model.graph if n.op_type == "Clip"]
    assert len(clip.inputs) == 1 and rt.ops(model) == ["Clip"]


def test_per_output_type_hints_prove_graph_outputs():
    """A custom op with two outputs of different shapes: one hint per output."""
    text = """
    rules:
      - name: split-two
        doc: (Relu(x), Relu(z)) -> custom::Pair(x, z)
        targets: [ort]
        outputs: [y, w]
        match: |
          y = Relu(x)
          w = Relu(z)
          t = Add(y, w)
        rewrite: |
          y, w = custom::Pair(x, z) : like(x, z)
    """
    rules, errors = load_text(textwrap.dedent(text), "<test>")
    assert errors and "not an input (direct or indirect)" in str(errors[0])  # the anchor must reach both
    text = """
    rules:
      - name: pair
        doc: (Relu(x), Tanh(x)) -> custom::Pair(x)
        targets: [ort]
        outputs: [y, w]
        match: |
          w = Tanh(x)
          y = Relu(w)
        rewrite: |
          y, w = custom::Pair(x) : like(x, x)
    """
    proto = rt.model_from_text("""
    <ir_version: 10, opset_import: ["" : 20]>
    g (float[2, 3] x) => (float[2, 3] y, float[2, 3] w) { w = Tanh(x)  y = Relu(w) }""")
    model, p, _ = rt.apply(proto, RuleSet(_rules(text)))
    assert dict(p.stats) == {"pair": 1} and rt.ops(model) == ["custom::Pair"]
    bad = text.replace("like(x, x)", "like(x, x, x)")
    rules, errors = load_text(textwrap.dedent(bad), "<test>")
    assert errors and "type hint gives 3 types for 2 outputs" in str(errors[0])


NESTED = """
fragments:
  - name: relu-once
    doc: one Relu, with a check on its input
    inputs: [x]
    outputs: [y]
    match: |
      y = Relu(x)
    where:
      check:
        - "rank(x) >= 1 : inner input must have a rank"
  - name: relu-twice
    doc: two Relus through the fragment above, called twice
    inputs: [x]
    outputs: [y]
    match: |
      a = @relu-once(x)
      y = @relu-once(a)
  - name: sig-id
    doc: Sigmoid then Identity
    inputs: [x]
    outputs: [y]
    rewrite: |
      t = Sigmoid(x)
      y = Identity(t)
  - name: sig-id-twice
    doc: the rewrite fragment above, nested
    inputs: [x]
    outputs: [y]
    rewrite: |
      m = @sig-id(x)
      y = Identity(m)
rules:
  - name: nested
    doc: Relu(Relu(x)) -> Sigmoid, Identity, Identity
    targets: [ort]
    match: |
      y = @relu-twice(x)
    rewrite: |
      y = @sig-id-twice(x)
"""


def test_nested_fragments_expand_inside_out_with_unique_names_and_composed_checks():
    (rule,) = _rules(NESTED)
    assert [st.source for st in rule.match] == ["y__a = Relu(x)", "y = Relu(y__a)"]
    # the inner fragment's check, once per call, each on the value that call saw
    assert [c.message for c in rule.checks] == ["inner input must have a rank"] * 2
    assert sorted(c.expr.text for c in rule.checks) == ["rank(x) >= 1", "rank(y__a) >= 1"]
    model, p, modified = rt.apply(rt.model_from_text(RELU2), RuleSet([rule]).select(target="ort"))
    assert modified and rt.ops(model) == ["Sigmoid", "Identity", "Identity"]
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(rt.run(model, {"x": x})[0], 1 / (1 + np.exp(-x)), rtol=1e-6)


@pytest.mark.parametrize("body,error", [
    ("y = @loop-a(x)", r"fragment @loop-a calls itself \(@loop-a -> @loop-b -> @loop-a\)"),
    ("y = @nope(x)", "in @bad-inner: unknown fragment @nope"),
])
def test_nested_fragment_errors_point_at_the_outer_call(body, error):
    src = f"""
    fragments:
      - name: loop-a
        doc: a
        inputs: [x]
        outputs: [y]
        match: |
          y = @loop-b(x)
      - name: loop-b
        doc: b
        inputs: [x]
        outputs: [y]
        match: |
          y = @loop-a(x)
      - name: bad-inner
        doc: calls an unknown fragment
        inputs: [x]
        outputs: [y]
        match: |
          y = @nope(x)
    rules:
      - name: user
        doc: uses one of them
        targets: [ort]
        match: |
          {body.replace("@nope", "@bad-inner")}
        rewrite: |
          y = Relu(x)
    """
    rules, errors = load_text(textwrap.dedent(src), "nest.yaml")
    assert not rules and len(errors) == 1
    import re
    assert re.search(error, str(errors[0])), str(errors[0])
    assert str(errors[0]).startswith("nest.yaml:26:"), str(errors[0])  # the rule's call line
