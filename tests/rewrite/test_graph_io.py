"""Rules that change the model's interface: the `graph_io` block (optimizer/rewrite/_graph_io.py,
docs/rules.md "Graph inputs and outputs"): new graph inputs shared by name, a new output in the
slot of a retired one, retired inputs removed, all or nothing per graph, load-time errors."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_fuse.rewrite import load_text
from tests.rewrite.rw_testing import apply, model_from_text

# y = x + 2*state (two layers), new_state = 2*state: the rule turns each `state` into a shared
# `gain` input and a per-layer output, and retires the state inputs.
MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N] x, float[N] state_0, float[N] state_1) => (float[N] y, float[N] new_0, float[N] new_1) {
  two = Constant <value = float {2.0}> ()
  new_0 = Mul(state_0, two)
  a = Add(x, new_0)
  new_1 = Mul(state_1, two)
  y = Add(a, new_1)
}
"""

RULE = """
rules:
  - name: state-to-gain
    doc: Add(x, Mul(state, c)), state a graph input  ->  Add(x, gain), gain a new shared input
    targets: [ort]
    outputs: [y, s2]
    match: |
      s2 = Mul(st, c)
      y = Add(x, s2)
    where:
      c: {scalar: 2.0}
    graph_io:
      inputs:
        gain: {name: gain, dtype: "{dtype(st)}", shape: ["{dim(st, 0)}"]}
      outputs:
        go: {name: "gain_out.{split(name(st), '_')[1]}", replaces: s2}
      retire: [st]
    rewrite: |
      y = Add(x, gain)
      go = Identity(gain)
"""


def _names(values) -> list[str]:
    return [v.name for v in values]


def test_inputs_added_shared_outputs_replaced_inputs_retired():
    model, p, modified = apply(model_from_text(MODEL), RULE)
    assert modified and p.stats["state-to-gain"] == 2
    assert _names(model.graph.inputs) == ["x", "gain"]
    assert _names(model.graph.outputs) == ["y", "gain_out.0", "gain_out.1"]
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    import onnxruntime as ort

    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x, g = np.arange(3, dtype=np.float32), np.full(3, 0.5, np.float32)
    y, o0, o1 = sess.run(None, {"x": x, "gain": g})
    np.testing.assert_allclose(y, x + 1.0)
    np.testing.assert_allclose(o0, g)


def test_output_still_read_refuses_every_match():
    """new_1 also feeds another output: that layer cannot retire it, so no layer fires."""
    text = MODEL.replace("=> (float[N] y, float[N] new_0, float[N] new_1)",
                         "=> (float[N] y, float[N] new_0, float[N] new_1, float[N] z)")
    text = text.replace("  y = Add(a, new_1)\n", "  y = Add(a, new_1)\n  z = Neg(new_1)\n")
    model, p, modified = apply(model_from_text(text), RULE)
    assert not modified and p.stats["state-to-gain"] == 0
    assert _names(model.graph.inputs) == ["x", "state_0", "state_1"]
    assert "state-to-gain: not rewritten: graph output 'new_1' is still read by Neg" in p.stats_reason


def test_retired_input_still_read_refuses():
    text = MODEL.replace("=> (float[N] y, float[N] new_0, float[N] new_1)",
                         "=> (float[N] y, float[N] new_0, float[N] new_1, float[N] z)")
    text = text.replace("  y = Add(a, new_1)\n", "  y = Add(a, new_1)\n  z = Neg(state_0)\n")
    model, p, modified = apply(model_from_text(text), RULE)
    assert not modified
    assert "graph input 'state_0' is still read by Neg" in p.stats_reason


def test_unchanged_without_the_structure():
    text = MODEL.replace("new_0 = Mul(state_0, two)", "new_0 = Sub(state_0, two)").replace(
        "new_1 = Mul(state_1, two)", "new_1 = Sub(state_1, two)")
    model, p, modified = apply(model_from_text(text), RULE)
    assert not modified and p.stats_reason is None
    assert _names(model.graph.inputs) == ["x", "state_0", "state_1"]


def test_a_candidate_failing_its_constraints_blocks_all():
    """Layer 1's constant is 3, not 2: layer 0 alone would half change the interface."""
    text = MODEL.replace("  new_1 = Mul(state_1, two)\n",
                         "  three = Constant <value = float {3.0}> ()\n  new_1 = Mul(state_1, three)\n")
    model, p, modified = apply(model_from_text(text), RULE)
    assert not modified and _names(model.graph.inputs) == ["x", "state_0", "state_1"]
    assert "state-to-gain: not rewritten:" in p.stats_reason and "3.0" in p.stats_reason


@pytest.mark.parametrize("edit, message", [
    ("retire: [st]", "retire: [s2]"),
    ("replaces: s2", "replaces: y"),
    ("replaces: s2", "replaces: nope"),
    ("      retire: [st]\n", "      retire: [st]\n      bogus: 1\n"),
    ("gain: {name: gain,", "x: {name: gain,"),
    ("shape: [\"{dim(st, 0)}\"]", "shape: [\"{dim(st, 0}\"]"),
    ("      go = Identity(gain)\n", ""),
], ids=["retire-intermediate", "replace-anchor", "replace-unknown", "unknown-key", "input-clash",
        "template-syntax", "output-undefined"])
def test_bad_graph_io_fails_at_load(edit, message):
    a, b = edit, message
    assert a in RULE
    rules, errors = load_text(RULE.replace(a, b), "<test>")
    assert errors and not rules
    text = str(errors[0])
    expected = {"retire: [s2]": "retires 's2'", "replaces: y": "not a pattern output other than the anchor",
                "replaces: nope": "not a pattern output", "bogus": "unknown key `bogus`",
                "x: {name": "already a name of the pattern", "dim(st, 0}": "graph_io",
                "": "graph_io output 'go' is not defined by the rewrite"}
    want = next(v for k, v in expected.items() if k and k in b) if b else expected[""]
    assert want in text, text
