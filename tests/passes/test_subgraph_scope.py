"""Cleanup and shape inference across scopes: values of the main graph that only an If branch
reads (the classic bug: a main-graph pass drops or renames a value whose only reader is a branch),
constants inside branches, and the outer constants a branch's shapes depend on (Optimum's merged
decoders keep every weight and shape constant in the main graph and every layer in the branches).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_fuse.levels import cleanup_passes
from onnx_fuse.passes._infra import run_to_fixed_point
from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'
X = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)


def _branches(proto: onnx.ModelProto, model: ir.Model, **feeds) -> None:
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": X, **feeds})


def _cleanup(proto: onnx.ModelProto) -> ir.Model:
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    run_to_fixed_point(list(cleanup_passes()), model)
    return model


def _sub(model: ir.Model, name: str) -> ir.Graph:
    return next(g for g in model.graphs() if g.name == name)


def test_main_graph_values_only_a_branch_reads_survive_cleanup():
    # w: an initializer only the then-branch reads; t: a main-graph node only the else-branch reads
    proto = parse(HEADER + '''
    g (bool c, float[2, 2] x) => (float[2, 2] y)
    <float[2, 2] w = {1.0, 2.0, 3.0, 4.0}>
    {
        t = Neg(x)
        y = If(c) <
            then_branch = a () => (float[2, 2] ay) { ay = MatMul(x, w) },
            else_branch = b () => (float[2, 2] by) { by = Mul(t, x) }
        >
    }''')
    model = _cleanup(proto)
    assert "w" in model.graph.initializers and ops(model) == {"Neg": 1, "If": 1, "MatMul": 1, "Mul": 1}
    _branches(proto, model)


def test_cse_merging_a_twin_the_branch_reads_redirects_the_branch():
    # b is a twin of a (initializer) and r2 of r1 (node); only the branch reads b and r2
    proto = parse(HEADER + '''
    g (bool c, float[2, 2] x) => (float[2, 2] y, float[2, 2] z)
    <float[2] a = {1.0, 2.0}, float[2] b = {1.0, 2.0}>
    {
        r1 = Relu(x)
        r2 = Relu(x)
        z = Add(r1, a)
        y = If(c) <
            then_branch = t () => (float[2, 2] ty) { ty = Sub(r2, b) },
            else_branch = e () => (float[2, 2] ey) { ey = Mul(r2, b) }
        >
    }''')
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto)
    assert modified and ops(model)["Relu"] == 1 and len(model.graph.initializers) == 1
    DeadCodeEliminationPass()(model)
    kept = next(iter(model.graph.initializers.values()))
    readers = [n for g in model.graphs() for n in g if kept in n.inputs]
    assert {n.op_type for n in readers} == {"Add", "Sub", "Mul"}   # the branches follow the merge
    _branches(proto, model)


def test_constants_inside_a_branch_fold_from_outer_and_inner_constants():
    proto = parse(HEADER + '''
    g (bool c, float[2, 2] x) => (float[2, 2] y)
    <float[2] a = {1.0, 2.0}>
    {
        y = If(c) <
            then_branch = t () => (float[2, 2] ty) {
                k = Constant <value = float[2] {3.0, 4.0}> ()
                s = Add(a, k)
                e = Exp(s)
                ty = Mul(x, e)
            },
            else_branch = f () => (float[2, 2] fy) { fy = Neg(x) }
        >
    }''')
    model = _cleanup(proto)
    assert "Add" not in ops(model) and "Exp" not in ops(model)
    _branches(proto, model)


def _reshape_model(shape_is_input: bool) -> onnx.ModelProto:
    """A branch views x [2, N*4] as [2, N, 4] by an outer constant (an initializer, or one that
    is also a graph input and so may be fed)."""
    extra = ", int64[3] shp" if shape_is_input else ""
    return parse(HEADER + f'''
    g (bool c, float[2, M] x{extra}) => (float[2, K, 4] y)
    <int64[3] shp = {{0, -1, 4}}>
    {{
        y = If(c) <
            then_branch = t () => (float[2, K, 4] ty) {{
                r = Reshape(x, shp)
                ty = Relu(r)
            }},
            else_branch = e () => (float[2, K, 4] ey) {{
                q = Reshape(x, shp)
                ey = Neg(q)
            }}
        >
    }}''')


def test_branch_shapes_read_outer_constants():
    model = ir.from_proto(_reshape_model(False))
    ShapeInferencePass()(model)
    for name in ("t", "e"):
        body = _sub(model, name)
        view = next(n for n in body if n.op_type == "Reshape").outputs[0]
        assert view.shape is not None and view.shape[0] == 2 and view.shape[2] == 4, view.shape


def test_an_outer_initializer_that_is_also_an_input_is_no_constant_for_branches():
    model = ir.from_proto(_reshape_model(True))
    ShapeInferencePass()(model)
    view = next(n for n in _sub(model, "t") if n.op_type == "Reshape").outputs[0]
    assert view.shape is None or not any(isinstance(d, int) for d in view.shape), view.shape


@pytest.mark.parametrize("nested", [False, True])
def test_outer_constants_reach_nested_branches(nested):
    inner = '''
                r = Reshape(x, shp)
                ty = Relu(r)'''
    if nested:
        inner = '''
                ty = If(c) <
                    then_branch = u () => (float[2, K, 4] uy) { r = Reshape(x, shp)
                                                                uy = Relu(r) },
                    else_branch = v () => (float[2, K, 4] vy) { vy = Reshape(x, shp) }
                >'''
    proto = parse(HEADER + f'''
    g (bool c, float[2, M] x) => (float[2, K, 4] y)
    <int64[3] shp = {{0, -1, 4}}>
    {{
        y = If(c) <
            then_branch = t () => (float[2, K, 4] ty) {{{inner}
            }},
            else_branch = e () => (float[2, K, 4] ey) {{ ey = Reshape(x, shp) }}
        >
    }}''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    body = _sub(model, "u" if nested else "t")
    view = next(n for n in body if n.op_type == "Reshape").outputs[0]
    assert view.shape is not None and view.shape[0] == 2 and view.shape[2] == 4, view.shape
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": np.ones((2, 8), np.float32)})


def test_sibling_branches_with_the_same_value_names_keep_their_own_shapes():
    """onnx's data propagation keys the shape vectors it computes by value name, across subgraphs:
    the else branch's ``v`` (not computable: it reads an input) took the then branch's ``v``
    (the shape of a rank-5 input), and its Reshape got a rank-5 shape for a rank-2 result."""
    proto = parse(HEADER + '''
    g (bool c, float[2, 1, 3, 1, 4] big, float[2, 12] x, int64[1] k) => (float[2, 12] y)
    <int64[2] w = {2, 12}, int64[1] zero = {0}, int64[1] one = {1}>
    {
        y = If(c) <
            then_branch = t () => (float[2, 12] ty) {
                v = Shape(big)
                r = Reshape(x, v)
                s = Reshape(r, w)
                ty = Relu(s)
            },
            else_branch = e () => (float[2, 12] ey) {
                f = Shape(x)
                h = Slice(f, zero, one)
                v = Concat<axis=0>(h, k)
                r = Reshape(x, v)
                ey = Neg(r)
            }
        >
    }''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    then_r, else_r = (next(n for n in _sub(model, name) if n.op_type == "Reshape").outputs[0]
                      for name in ("t", "e"))
    assert then_r.shape is not None and list(then_r.shape) == [2, 1, 3, 1, 4]
    assert else_r.shape is not None and len(else_r.shape) == 2 and else_r.shape[0] == 2, else_r.shape
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "big": np.ones((2, 1, 3, 1, 4), np.float32),
                                         "x": np.ones((2, 12), np.float32), "k": np.array([12])})


def test_twin_constants_inside_a_branch_merge_as_in_the_main_graph():
    """A branch's own initializers (the rules write theirs there, one per match) and its Constant
    nodes are merged like the main graph's, so the nodes reading them become twins: two
    keep-masked-rows floors of one mask were two Max nodes in each branch of a merged decoder."""
    proto = parse(HEADER + '''
    g (bool c, float[2, 2] x) => (float[2, 2] y)
    {
        y = If(c) <
            then_branch = t () => (float[2, 2] ty)
            <float[1] f1 = {-1.0}, float[1] f2 = {-1.0}>
            {
                k = Constant <value = float[1] {-1.0}> ()
                m1 = Max(x, f1)
                m2 = Max(x, f2)
                m3 = Max(x, k)
                s = Add(m1, m2)
                ty = Add(s, m3)
            },
            else_branch = e () => (float[2, 2] ey) { ey = Neg(x) }
        >
    }''')
    model = _cleanup(proto)
    assert ops(model) == {"If": 1, "Max": 1, "Add": 2, "Neg": 1}
    assert len(_sub(model, "t").initializers) == 1
    _branches(proto, model)
