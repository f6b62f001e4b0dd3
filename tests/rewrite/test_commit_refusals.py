"""A rewrite that can only be refused late (an attribute value ONNX cannot hold, a graph_io input
clashing with an existing one) is refused before commit touches the graph: it is counted as a
rejection, the model stays whole, and nothing escapes as a crash."""

from __future__ import annotations

import onnx_ir as ir

from tests.rewrite.rw_testing import apply, model_from_text

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y) {
  y = Relu(x)
}
"""

BAD_ATTR = """
rules:
  - name: relu-to-custom
    doc: an attribute list mixing a float and a string has no ONNX attribute type
    targets: [ort]
    match: |
      y = Relu(x)
    rewrite: |
      y = my.dom::Foo(x, dims=[1.5, name(x)]) : like(x)
"""


def test_unconvertible_attribute_is_a_rejection_not_a_crash():
    model, p, modified = apply(model_from_text(MODEL), BAD_ATTR)
    assert not modified
    assert [n.op_type for n in model.graph] == ["Relu"]
    assert [r[0] for r in p.rejected] == ["relu-to-custom"]
    assert "attribute dims" in p.rejected[0][2]


CLASH_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N] x, float[N] state_0, int64[N] gain) => (float[N] y, int64[N] g2) {
  two = Constant <value = float {2.0}> ()
  s = Mul(state_0, two)
  y = Add(x, s)
  g2 = Identity(gain)
}
"""

CLASH_RULE = """
rules:
  - name: state-to-gain
    doc: a graph_io input named like an existing input of another dtype
    targets: [ort]
    match: |
      s2 = Mul(st, c)
      y = Add(x, s2)
    where:
      c: {scalar: 2.0}
    graph_io:
      inputs:
        gain: {name: gain, dtype: "{dtype(st)}", shape: ["{dim(st, 0)}"]}
      retire: [st]
    rewrite: |
      y = Add(x, gain)
"""


def test_graph_io_input_clash_is_refused_before_commit():
    model, p, modified = apply(model_from_text(CLASH_MODEL), CLASH_RULE)
    assert not modified
    assert [v.name for v in model.graph.inputs] == ["x", "state_0", "gain"]
    assert [n.op_type for n in model.graph] == ["Constant", "Mul", "Add", "Identity"]
    assert any("gain" in u and "another dtype" in u for u in p.unsettled), p.unsettled
    ir.to_proto(model)  # still a whole model
