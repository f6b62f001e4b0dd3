"""ScalarTwinReadsPass (passes/shape_cse.py, stage scalar-twins): a scalar Gather(Shape(x), j) beside a [1] read of
the same dim becomes Squeeze of that twin only where every reader of every whole Shape(x) is such a Gather, so that
the whole Shapes die: a node less, never a Gather swapped for a Squeeze at equal count (1a31ab2, reverted)."""

from __future__ import annotations

import numpy as np

import onnx_fuse
from onnx_fuse.levels import build_stages
from onnx_fuse.passes.shape_cse import ScalarTwinReadsPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# torch's noopt export: a Range's end Gather(Shape(b), 1) beside a Concat's part Shape(a, 1, 2)
SCALAR_BESIDE_VECTOR = '''
    g (float[B, P] a, float[B, P] b) => (int64[1] v, int64 s)
    {
        v = Shape<start = 1, end = 2>(a)
        w = Shape(b)
        one = Constant<value = int64 {1}>()
        s = Gather<axis = 0>(w, one)
    }'''


def _run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(ScalarTwinReadsPass, proto, shape_inference=True)
    return proto, model, modified, p


def _feeds(*names, shape=(3, 5)):
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal(shape, dtype=np.float32) for n in names}


def test_scalar_read_beside_its_vector_twin_is_a_squeeze_of_it():
    """The whole Shape(b) is read only by the Gather of P, which Shape(a, 1, 2) holds as [1]: Squeeze(v), and
    Shape(b), its index and the Gather go (3 nodes -> 2 besides v)."""
    proto, model, modified, p = _run(SCALAR_BESIDE_VECTOR)
    assert modified and p.stats["scalar read of a twin"] == 1
    assert ops(model) == {"Shape": 1, "Squeeze": 1}, ops(model)
    check_same(proto, model, inputs=_feeds("a", "b"))


def test_a_whole_shape_read_otherwise_keeps_every_gather():
    """Shape(b) also read by a Gather of B, which has no [1] twin: the Shape lives on, so a Squeeze would only
    replace the Gather of P (no node less): nothing changes."""
    text = SCALAR_BESIDE_VECTOR.replace("=> (int64[1] v, int64 s)", "=> (int64[1] v, int64 s, int64 t)").replace(
        "s = Gather<axis = 0>(w, one)", "s = Gather<axis = 0>(w, one)\n        zero = Constant<value = int64 {0}>()\n"
        "        t = Gather<axis = 0>(w, zero)")
    proto, model, modified, p = _run(text)
    assert not modified and ops(model) == ops(proto)


def test_two_whole_shapes_of_one_tensor_count_together():
    """Two whole Shape(b): one read by the Gather of P (which has a twin), the other by a Gather of B (none):
    the second keeps b's shape read, so the first Gather stays too (dropping one Shape for a Squeeze would be a
    swap at equal count)."""
    text = '''
    g (float[B, P] a, float[B, P] b) => (int64[1] v, int64 s, int64 t)
    {
        v = Shape<start = 1, end = 2>(a)
        w = Shape(b)
        one = Constant<value = int64 {1}>()
        s = Gather<axis = 0>(w, one)
        w2 = Shape(b)
        zero = Constant<value = int64 {0}>()
        t = Gather<axis = 0>(w2, zero)
    }'''
    proto, model, modified, p = _run(text)
    assert not modified and ops(model) == ops(proto)


# a Range's Gather of P above the [1] read of P a Concat takes (torch's order)
TWIN_BELOW = '''
    g (float[B, P] a, float[B, P] b) => (float[P] s, int64[3] v)
    {
        w = Shape(b)
        one = Constant<value = int64 {1}>()
        r = Gather<axis = 0>(w, one)
        zero = Constant<value = int64 {0}>()
        step = Constant<value = int64 {1}>()
        i = Range(zero, r, step)
        s = Cast<to = 1>(i)
        x = Shape<start = 1, end = 2>(a)
        c = Constant<value = int64[2] {1, 1}>()
        v = Concat<axis = 0>(x, c)
    }'''


def test_a_twin_of_an_input_read_further_down_moves_up():
    """The [1] read Shape(a, 1, 2) comes below the Gather's reader: a Shape of a graph input, it moves up to the
    Gather and the Squeeze reads it."""
    proto, model, modified, p = _run(TWIN_BELOW)
    assert modified and "Gather" not in ops(model) and ops(model)["Shape"] == 1, ops(model)
    check_same(proto, model, inputs=_feeds("a", "b"))


def test_a_twin_of_an_intermediate_read_further_down_is_not_read():
    """The same with the [1] read of an intermediate (Shape(Relu(a), 1, 2)): the Squeeze would go after the twin,
    past the Gather's reader, and an intermediate's read does not move: unchanged."""
    text = TWIN_BELOW.replace("x = Shape<start = 1, end = 2>(a)", "h = Relu(a)\n        x = Shape<start = 1, end = 2>(h)")
    proto, model, modified, p = _run(text)
    assert not modified and ops(model) == ops(proto)


def test_gathers_that_are_graph_outputs_keep_their_names():
    """Two scalar reads of P from Shape(b), both graph outputs: each becomes a Squeeze of the twin under the
    output's name; the whole Shape goes."""
    text = SCALAR_BESIDE_VECTOR.replace("=> (int64[1] v, int64 s)", "=> (int64[1] v, int64 s, int64 t)").replace(
        "s = Gather<axis = 0>(w, one)", "s = Gather<axis = 0>(w, one)\n        t = Gather<axis = 0>(w, one)")
    proto, model, modified, p = _run(text)
    assert modified and [o.name for o in model.graph.outputs] == ["v", "s", "t"]
    assert "Gather" not in ops(model) and ops(model)["Shape"] == 1, ops(model)
    check_same(proto, model, inputs=_feeds("a", "b"))


def test_end_to_end_a_range_beside_a_view_reads_the_view_s_dim():
    """optimize at O2 / O3: positions Range(0, Gather(Shape(x), 1)) beside the view target Concat(Shape(x, 0, 1),
    Shape(x, 1, 2), [4]) (a noopt export's two reads of the sequence length): the whole Shape goes, one node
    fewer than with the stage disabled, the outputs match in ONNX Runtime."""
    text = '''
    g (float[B, S, 8] x) => (float[B, S, 2, 4] y, int64[S] pos)
    {
        w = Shape(x)
        one = Constant<value = int64 {1}>()
        s = Gather<axis = 0>(w, one)
        zero = Constant<value = int64 {0}>()
        step = Constant<value = int64 {1}>()
        pos = Range(zero, s, step)
        b = Shape<start = 0, end = 1>(x)
        sv = Shape<start = 1, end = 2>(x)
        tail = Constant<value = int64[2] {2, 4}>()
        t = Concat<axis = 0>(b, sv, tail)
        y = Reshape(x, t)
    }'''
    proto = parse(HEADER + text)
    for level, target in ((2, "ort"), (3, "onnx"), (3, "trt")):
        on = onnx_fuse.optimize(proto, level=level, target=target, verify=True)
        off = onnx_fuse.optimize(proto, level=level, target=target, disable=["scalar-twins"])
        assert on.report.passed
        assert sum(ops(on.model).values()) == sum(ops(off.model).values()) - 1, (ops(on.model), ops(off.model))
        assert "Gather" not in ops(on.model) and ops(on.model)["Squeeze"] == 1, ops(on.model)


def test_the_stage_runs_once_after_the_last_cleanup():
    for level in (2, 3):
        for target in ("ort", "onnx", "trt"):
            names = [s.name for s in build_stages(level, target)]
            assert names.count("scalar-twins") == 1 and names[names.index("scalar-twins") - 1] == "cleanup", names
            assert all(n != "cleanup" for n in names[names.index("scalar-twins"):]), names
    assert "scalar-twins" not in [s.name for s in build_stages(1, "ort")]


# glue50: a [1] read written Gather(Shape(x), [j]) (one-entry 1-D index) beside the scalar Gather(Shape(x), j)
ONE_ENTRY_GATHER = '''
    g (float[B, S, 8] x) => (float[B, S, 2, 4] y, int64[S] pos)
    {
        w = Shape(x)
        one = Constant<value = int64 {1}>()
        s = Gather<axis = 0>(w, one)
        zero = Constant<value = int64 {0}>()
        step = Constant<value = int64 {1}>()
        pos = Range(zero, s, step)
        w2 = Shape(x)
        idx = Constant<value = int64[1] {1}>()
        sv = Gather<axis = 0>(w2, idx)
        head = Constant<value = int64[1] {-1}>()
        tail = Constant<value = int64[2] {2, 4}>()
        t = Concat<axis = 0>(head, sv, tail)
        y = Reshape(x, t)
    }'''


_ONE_SHAPE = ONE_ENTRY_GATHER.replace("w2 = Shape(x)\n", "").replace("(w2, idx)", "(w, idx)")   # as node CSE leaves it


def test_a_one_entry_gather_is_read_as_the_twin():
    """Gather(Shape(x), [1]) beside Gather(Shape(x), 1) (node CSE merged the two Shapes): the [1] Gather becomes
    Shape(x, 1, 2), the scalar one its Squeeze, the whole Shape goes (Shape + 2 Gathers -> Shape + Squeeze)."""
    proto, model, modified, p = _run(_ONE_SHAPE)
    assert modified and p.stats["[1] Gather of a whole Shape as a Shape slice"] == 1
    assert p.stats["scalar read of a twin"] == 1
    got = ops(model)
    assert "Gather" not in got and got["Shape"] == 1 and got["Squeeze"] == 1, got
    check_same(proto, model, inputs=_feeds("x", shape=(2, 3, 8)))


def test_a_shape_of_every_axis_is_a_whole_shape():
    """The whole Shape written Shape(x, 0, 3) (shape_cse's read of a whole vector from an input) counts as whole:
    the same rewrite."""
    text = ONE_ENTRY_GATHER.replace("w = Shape(x)", "w = Shape<start = 0, end = 3>(x)").replace(
        "w2 = Shape(x)\n", "").replace("(w2, idx)", "(w, idx)")
    proto, model, modified, p = _run(text)
    got = ops(model)
    assert modified and "Gather" not in got and got["Shape"] == 1, got
    check_same(proto, model, inputs=_feeds("x", shape=(2, 3, 8)))


def test_a_one_entry_gather_of_another_dim_stays():
    """The [1] Gather reads dim 0 while the scalar reads dim 1 (no twin): the whole Shape lives on, nothing
    changes; below opset 15 (no Shape start / end) neither."""
    text = _ONE_SHAPE.replace(
        "int64[1] {1}>()\n        sv", "int64[1] {0}>()\n        sv").replace("int64[1] {-1}", "int64[1] {1}").replace(
        "float[B, S, 2, 4] y", "float[B, 1, 2, 4] y")
    proto, model, modified, p = _run(text.replace("Reshape(x, t)", "Reshape(x, t)"))
    assert not modified and ops(model) == ops(proto)
    old = parse('<ir_version: 8, opset_import: ["" : 14]>' + _ONE_SHAPE)
    model, modified, p = apply(ScalarTwinReadsPass, old, shape_inference=True)
    assert not modified


def test_end_to_end_a_one_entry_gather_beside_a_range():
    """optimize at O2 / O3 on the same graph (two Shapes as written): the whole Shape goes, no Gather left, a node
    fewer than with the stage disabled, values equal in ONNX Runtime (before: both Gathers and the Shape stayed)."""
    proto = parse(HEADER + ONE_ENTRY_GATHER)
    for level, target in ((2, "ort"), (3, "onnx"), (3, "trt")):
        on = onnx_fuse.optimize(proto, level=level, target=target, verify=True)
        off = onnx_fuse.optimize(proto, level=level, target=target, disable=["scalar-twins"])
        assert on.report.passed
        assert sum(ops(on.model).values()) == sum(ops(off.model).values()) - 1, (ops(on.model), ops(off.model))
        assert "Gather" not in ops(on.model), ops(on.model)
