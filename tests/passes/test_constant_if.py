"""InlineConstantIfPass: an If with a constant condition becomes the branch it takes."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_fuse.passes.constant_if import InlineConstantIfPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def if_model(cond: str, *, output_is_if: bool = False) -> onnx.ModelProto:
    """y = If(cond) then (x * two + one) else (-x - one); ``output_is_if``: the If output is the
    graph output."""
    inner = "t"
    out = "y" if output_is_if else "r"
    tail = "" if output_is_if else "y = Relu(r)"
    return parse(HEADER + f'''
    g (float[N, 3] x) => (float[N, 3] y)
    <bool c = {{{cond}}}, float one = {{1.0}}>
    {{
        m = Neg(x)
        {out} = If(c) <
            then_branch = t_br () => (float[N, 3] tb) <float two = {{2.0}}> {{
                {inner} = Mul(x, two)
                tb = Add({inner}, one)
            }},
            else_branch = e_br () => (float[N, 3] eb) {{
                eb = Sub(m, one)
            }}
        >
        {tail}
    }}''')


@pytest.mark.parametrize("cond, kept", [("1", {"Mul", "Add"}), ("0", {"Sub", "Neg"})])
def test_takes_the_branch_the_constant_selects(cond, kept):
    proto = if_model(cond)
    model, modified, p = apply(InlineConstantIfPass, proto)
    assert modified and p.stats == {"If": 1}
    found = set(ops(model))
    assert "If" not in found and kept <= found
    check_same(proto, model, atol=0, rtol=0)


def test_the_branch_not_taken_reads_nothing_afterwards():
    """m = Neg(x) is read only by the else branch: once the then branch is taken, m has no reader
    left (the discarded branch's nodes used to stay counted as its uses) and dead-code removes it."""
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

    model = ir.from_proto(if_model("1"))
    InlineConstantIfPass()(model)
    m = next(n for n in model.graph if n.op_type == "Neg").outputs[0]
    assert not list(m.uses())
    DeadCodeEliminationPass()(model)
    assert "Neg" not in {n.op_type for n in model.graph}


def test_non_constant_condition_is_left_alone():
    proto = parse(HEADER + '''
    g (bool c, float[2] x) => (float[2] y)
    {
        y = If(c) <
            then_branch = t () => (float[2] a) { a = Neg(x) },
            else_branch = e () => (float[2] b) { b = Abs(x) }
        >
    }''')
    _, modified, p = apply(InlineConstantIfPass, proto)
    assert not modified and not p.stats


def test_branch_names_that_clash_are_renamed():
    """Two branches may both define ``t``; once one moves into the main graph, the other would
    shadow it (not SSA), so the moved one is renamed."""
    proto = parse(HEADER + '''
    g (bool c, float[2] x) => (float[2] y)
    <bool k = {1}>
    {
        a = If(k) <
            then_branch = t1 () => (float[2] o1) { t = Neg(x)  o1 = Abs(t) },
            else_branch = e1 () => (float[2] o2) { o2 = Abs(x) }
        >
        y = If(c) <
            then_branch = t2 () => (float[2] o3) { t = Exp(a)  o3 = Abs(t) },
            else_branch = e2 () => (float[2] o4) { o4 = Neg(a) }
        >
    }''')
    model, modified, _ = apply(InlineConstantIfPass, proto)
    assert modified and "t" not in {v.name for n in model.graph for v in n.outputs}
    for c in (True, False):
        check_same(proto, model, inputs={"c": np.array(c), "x": np.array([1.0, -2.0], np.float32)},
                   atol=0, rtol=0)


def test_if_output_that_is_a_graph_output_keeps_its_name():
    proto = if_model("1", output_is_if=True)
    model, modified, _ = apply(InlineConstantIfPass, proto)
    assert modified and [o.name for o in model.graph.outputs] == ["y"]
    check_same(proto, model, atol=0, rtol=0)


def test_if_inside_a_subgraph_is_inlined_there():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array(3.0, np.float32), "w")
    vi = helper.make_tensor_value_info
    inner = helper.make_node(
        "If", ["k"], ["a"],
        then_branch=helper.make_graph([helper.make_node("Mul", ["x", "w"], ["aa"])], "tt", [],
                                      [vi("aa", TensorProto.FLOAT, [2])], [w]),
        else_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["ab"])], "te", [],
                                      [vi("ab", TensorProto.FLOAT, [2])]))
    outer = helper.make_node(
        "If", ["c"], ["y"],
        then_branch=helper.make_graph([inner], "t", [], [vi("a", TensorProto.FLOAT, [2])]),
        else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["b"])], "e", [],
                                      [vi("b", TensorProto.FLOAT, [2])]))
    graph = helper.make_graph([outer], "g", [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [2])],
                              [vi("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array(True), "k")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(proto, full_check=True)
    model, modified, _ = apply(InlineConstantIfPass, proto)
    # the branch's initializer becomes an initializer of the subgraph it moved into
    assert modified and ops(model) == {"If": 1, "Mul": 1, "Identity": 1, "Abs": 1}
    then = model.graph.node(0).attributes["then_branch"].as_graph()
    assert list(then.initializers) == ["w"]
    optimized = ir.to_proto(model)
    onnx.checker.check_model(optimized, full_check=True)
    # (ORT refuses the original: it loses the name of a nested branch's initializer)
    from onnx_fuse.verify import make_session

    sess = make_session(optimized)
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x})[0], 3 * x)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "x": x})[0], np.abs(x))


def test_affine_grid_expansion_loads_with_ort_default_optimizations():
    """The node-suite regression: O1 folded Size into the If condition; ORT's default graph
    optimizations then inlined the branch and refused Range's one-element 1-D constant input."""
    from onnx.backend.test import loader

    from onnx_fuse import optimize
    from onnx_fuse.verify import make_session

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the loader builds every case's data; some overflow on purpose
        case = next(t for t in loader.load_model_tests(kind="node") if t.name == "test_affine_grid_2d_expanded")
    result = optimize(case.model, level=1)
    assert "If" not in {n.op_type for n in ir.traversal.RecursiveGraphIterator(result.model.graph)}
    sess = make_session(result.model, ort_optimizations=True)
    (inputs, expected), = case.data_sets
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
