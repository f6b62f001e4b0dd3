"""ReduceKeepdimsPass: Reshape(ReduceX(x, axes, keepdims=0)) to x's dims with 1 at the reduced axes is
ReduceX(x, axes, keepdims=1) (torch's var decomposition; xLSTM's per-head LayerNorm), proved on dims; and
CSE's reduction twins whose axes differ only in sign (ReduceMean(x, [-1]) and ReduceMean(x, [3]))."""

from __future__ import annotations

from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from onnx_fuse.passes.reduce_keepdims import ReduceKeepdimsPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def _var(target: str, dims: str = "2, 8, 2, 16", axes: str = "3") -> str:
    return HEADER + f'''
    g (float[{dims}] x) => (float[2, 8, 2, 16] y)
    {{
        ax = Constant<value = int64[1] {{{axes}}}>()
        t = Constant<value = int64[4] {{{target}}}>()
        v = ReduceMean<keepdims = 0>(x, ax)
        r = Reshape(v, t)
        y = Sub(x, r)
    }}'''


def test_static_view_back_becomes_keepdims():
    proto = parse(_var("2, 8, 2, 1"))
    model, modified, p = apply(ReduceKeepdimsPass, proto, shape_inference=True)
    assert modified and p.stats == {"ReduceMean": 1}
    kept = [n for n in model.graph if n.op_type == "ReduceMean" and n.attributes["keepdims"].value == 1]
    sub = next(n for n in model.graph if n.op_type == "Sub")
    assert len(kept) == 1 and sub.inputs[1] is kept[0].outputs[0]
    check_same(proto, model)


def test_computed_target_from_shape():
    """A dynamic export computes the target: Concat(Shape(x)[0:3], [1]) is x's dims with the last one 1."""
    proto = parse(HEADER + '''
    g (float[B, S, 2, 16] x) => (float[B, S, 2, 16] y)
    {
        ax = Constant<value = int64[1] {-1}>()
        one = Constant<value = int64[1] {1}>()
        s = Shape<end = 3>(x)
        t = Concat<axis = 0>(s, one)
        v = ReduceMean<keepdims = 0>(x, ax)
        r = Reshape(v, t)
        y = Sub(x, r)
    }''')
    model, modified, _ = apply(ReduceKeepdimsPass, proto, shape_inference=True)
    assert modified
    check_same(proto, model)


def test_view_to_other_dims_is_left():
    """[2, 8, 1, 2] holds the same elements, but not as x's kept-axes shape: no rewrite."""
    proto = parse(_var("2, 8, 1, 2").replace("float[2, 8, 2, 16] y", "float[2, 8, 1, 2] y").replace(
        "y = Sub(x, r)", "y = Identity(r)"))
    _, modified, _ = apply(ReduceKeepdimsPass, proto, shape_inference=True)
    assert not modified


def test_unknown_dims_and_kept_axes_are_left():
    # x's first dim unnamed: not provable
    proto = parse(_var("2, 8, 2, 1", dims="2, 8, 2, 16").replace("float[2, 8, 2, 16] x", "float[?, 8, 2, 16] x"))
    _, modified, _ = apply(ReduceKeepdimsPass, proto, shape_inference=True)
    assert not modified
    kept = parse(_var("2, 8, 2, 1").replace("keepdims = 0", "keepdims = 1"))
    _, modified, _ = apply(ReduceKeepdimsPass, kept, shape_inference=True)
    assert not modified


def _twins(axes_a: str, axes_b: str, dims: str = "2, 8, 2, 16") -> str:
    return HEADER + f'''
    g (float[{dims}] x) => (float[2, 8, 2, 16] y)
    {{
        a1 = Constant<value = int64[1] {{{axes_a}}}>()
        a2 = Constant<value = int64[1] {{{axes_b}}}>()
        m1 = ReduceMean<keepdims = 1>(x, a1)
        m2 = ReduceMean<keepdims = 1>(x, a2)
        d1 = Sub(x, m1)
        d2 = Sub(x, m2)
        y = Mul(d1, d2)
    }}'''


def test_cse_merges_reductions_of_one_axis_spelled_two_ways():
    proto = parse(_twins("-1", "3"))
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto, shape_inference=True)
    assert modified and p.stats["ReduceMean"] == 1 and p.stats["Sub"] == 1
    assert ops(model)["ReduceMean"] == 1 and ops(model)["Sub"] == 1
    check_same(proto, model)


def test_cse_keeps_other_axes_and_unknown_rank():
    proto = parse(_twins("-1", "2"))
    model, _, _ = apply(CommonSubexpressionEliminationPass, proto, shape_inference=True)
    assert ops(model)["ReduceMean"] == 2
    no_rank = parse(_twins("-1", "3"))
    no_rank.graph.input[0].type.tensor_type.ClearField("shape")  # x's rank unknown: [-1] and [3] may differ
    model, _, _ = apply(CommonSubexpressionEliminationPass, no_rank)
    assert ops(model)["ReduceMean"] == 2
