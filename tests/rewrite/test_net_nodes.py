"""The rule function net_nodes (rewrite/_rebuild_cost.py): what rebuilding a value costs, computed from
the nodes the rewrite planned against the graph's, in place of a hand-written freed_ops threshold.

The rule rebuilds 4x from x (Mul(x, 4): one node) in place of (x + x) * 2 where that makes the graph
smaller: where both of the export's nodes die (2 freed, 1 added), not where x + x is read elsewhere too
(1 freed, 1 added: a tie keeps it), and again there when the graph computes Mul(x, 4) already
(cse merges the rebuild into it: 0 added). Shape reads of another tensor with the same symbolic dims
count as present (shape-cse merges them)."""

from __future__ import annotations

import numpy as np
import pytest

from rw_testing import apply, assert_same_outputs, model_from_text, ops, rules_from_yaml
from onnx_fuse.rewrite._expr import FUNCTIONS

REBUILD = """\
rules:
  - name: rebuild-four-x
    doc: Relu((x + x) * 2) -> Relu(x * 4) where that is fewer nodes
    targets: [ort]
    match: |
      a = Add(x, x)
      m = Mul(a, two)
      y = Relu(m)
    where:
      check:
        - "allclose(value(two), 2.0) : the factor must be 2"
    rewrite: |
      four = initializer(array([4.0], "float"))
      n = Mul(x, four)
      r = n if net_nodes(n, m) < 0 else m
      y = Relu(r)
"""


TWICE = """\
rules:
  - name: rebuild-twice
    doc: Relu(a * 2) -> Relu(a + a) where that is fewer nodes
    targets: [ort]
    match: |
      m = Mul(a, two)
      y = Relu(m)
    where:
      check:
        - "allclose(value(two), 2.0) : the factor must be 2"
    rewrite: |
      n = Add(a, a)
      r = n if net_nodes(n, m) < 0 else m
      y = Relu(r)
"""


def _model(extra_outputs: str = "", extra_nodes: str = ""):
    return model_from_text(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N] x) => (float[N] y{extra_outputs}) <float[1] two = {{2.0}}, float[1] four0 = {{4.0}}, float[1] half0 = {{0.5}}, float[1] third0 = {{0.25}}> {{
            a = Add(x, x)
            m = Mul(a, two)
            y = Relu(m)
            {extra_nodes}
        }}""")


def _fire(proto, rules):
    """(model, whether y's Relu reads the rebuild) after the rule ran."""
    model, p, _ = apply(proto, rules)
    feeds = {"x": np.array([-1.5, 0.25, 3.0], np.float32)}
    assert_same_outputs(proto, model, feeds)
    relu = [n for n in model.graph if n.op_type == "Relu"][0]
    src = relu.inputs[0].producer()
    return model, not (src.op_type == "Mul" and src.inputs[1].name == "two")


def test_rebuilt_where_the_cone_dies():
    # Add and Mul die (2), Mul(x, 4) is 1 new node
    model, modified = _fire(_model(), REBUILD)
    assert modified
    relu = [n for n in model.graph if n.op_type == "Relu"][0]
    assert relu.inputs[0].producer().op_type == "Mul" and relu.inputs[0].producer().inputs[0].name == "x"


def test_kept_where_the_rebuild_reads_the_cone():
    # Add(a, a) keeps a's Add alive: only the Mul dies, and the rebuild adds one (a tie keeps the export's)
    model, modified = _fire(_model(), TWICE)
    assert not modified
    assert sorted(ops(model)) == ["Add", "Mul", "Relu"]


def test_kept_where_nothing_is_shared():
    model, modified = _fire(_model(", float[N] a2", "a2 = Identity(a)"), TWICE)
    assert not modified


def test_rebuilt_where_the_graph_has_it():
    # the same tie, but the graph computes a + a already (cse merges the rebuild into it): 0 added
    model, modified = _fire(_model(", float[N] q", "q = Add(a, a)"), TWICE)
    assert modified


HALVED = TWICE.replace("rebuild-twice", "rebuild-halved").replace("a + a", "a / 0.5").replace(
    "      n = Add(a, a)\n", "      half = initializer(array([0.5], \"float\"))\n      n = Div(a, half)\n")


def test_constants_compare_by_value():
    # Div(a, half0) in the graph is the rule's Div(a, 0.5) (its initializer has another name): 0 added
    assert _fire(_model(", float[N] q", "q = Div(a, half0)"), HALVED)[1]
    assert not _fire(_model(", float[N] q", "q = Div(a, third0)"), HALVED)[1]


def test_shape_reads_of_equal_dims_are_present():
    """net_nodes sees Gather(Shape(p1), 1) as present where the graph reads dim 'P' from p0."""
    proto = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[B, P] p0, float[B, P] p1) => (int64 n, float[B, P] y) <int64 one = {1}, float[1] two = {2.0}> {
            s0 = Shape(p0)
            n = Gather<axis=0>(s0, one)
            a = Add(p1, p1)
            m = Mul(a, two)
            y = Relu(m)
        }""")
    rule = """\
rules:
  - name: rebuild-read
    doc: counts a planned Shape read of p1 against the graph's of p0
    targets: [ort]
    match: |
      a = Add(x, x)
      m = Mul(a, two)
      y = Relu(m)
    rewrite: |
      one = initializer(array(1, "int64"))
      sh = Shape(x)
      d = Gather(sh, one, axis=0)
      df = Cast(d, to=1)
      n = Mul(x, df)
      r = n if net_nodes(n, m) == 0 else m
      y = Relu(r)
"""
    # Shape and Gather are present (shape-cse), Cast and Mul are new, Add and Mul die: 2 - 2 = 0
    model, _, modified = apply(proto, rule)
    assert modified
    assert sorted(ops(model)).count("Cast") == 1


def test_only_in_a_rewrite():
    # a where: check has no planned nodes to count
    with pytest.raises(Exception, match="rewrite"):
        FUNCTIONS["net_nodes"](type("Ctx", (), {"planned": None, "graph": None})(), None, None)


def _layers(third: str):
    import onnx
    import onnx_ir as ir

    text = f"""
        <ir_version: 8, opset_import: ["" : 17, "onnx_fuse.canonical" : 1]>
        g (float[N] x, float[N] q) => (float[N] y0, float[N] y1, float[N] y2) {{
            a = Add(x, x)
            m = Mul(a, a)
            mh = Cast<to = 10>(m)
            m0 = Cast<to = 1>(mh)
            y0 = onnx_fuse.canonical.Attention(q, q, q, m0)
            y1 = onnx_fuse.canonical.Attention(q, q, q, mh)
            m2 = {third}(mh)
            y2 = onnx_fuse.canonical.Attention(q, q, q, m2)
        }}"""
    g = ir.serde.deserialize_model(onnx.parser.parse_model(text)).graph
    node = {n.outputs[0].name: n for n in g}
    return g, node


@pytest.mark.parametrize("third, dead", [("Identity", 5), ("Relu", 1)])
def test_layers_reading_a_view_of_the_mask_decide_alike(third, dead):
    """Optimum's float16 decoders: the first layer reads Cast(mask16), the next layers mask16 itself. The
    first layer's Cast alone dies with its mask (freed_ops 1), but the other layers decide alike (the same
    values), so net_nodes counts the cone as it dies once they all rebuild: Cast, Cast, Mul, Add (4). A
    layer that reads another function of the mask (Relu) is no such reader: only the Cast dies."""
    from onnx_fuse.rewrite._rebuild_cost import dead_cone, sibling_readers

    g, node = _layers(third)
    m0 = node["m0"].outputs[0]
    assert len(dead_cone(m0)) == 1
    glue, anchors = sibling_readers(m0, {node["y0"]})
    assert {n.outputs[0].name for n in dead_cone(m0, 512, glue, anchors)} == (
        {"m0", "mh", "m", "a", "m2"} if dead == 5 else {"m0"})
    assert len(dead_cone(m0, 512, glue, anchors)) == dead
