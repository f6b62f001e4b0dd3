"""CommonSubexpressionEliminationPass: merges twins, never random ops, keeps output names."""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto)
    return proto, model, modified, p


def test_twins_merge_and_cascade():
    proto, model, modified, p = run('''
    g (float[N, 4] x) => (float[N, 4] y)
    {
        a = Relu(x)
        b = Relu(x)
        c = Exp(a)
        d = Exp(b)
        y = Add(c, d)
    }''')
    assert modified and p.stats == {"Relu": 1, "Exp": 1}
    assert ops(model) == {"Relu": 1, "Exp": 1, "Add": 1}
    check_same(proto, model)


def test_different_attributes_or_input_order_not_merged():
    proto, model, modified, _ = run('''
    g (float[N, 4] x, float[N, 4] z) => (float[N, 4] y, float[N, 4] w)
    {
        a = Softmax<axis = 1>(x)
        b = Softmax<axis = 0>(x)
        y = Sub(a, b)
        s = Sub(x, z)
        t = Sub(z, x)
        w = Add(s, t)
    }''')
    assert not modified
    assert ops(model) == {"Softmax": 2, "Sub": 3, "Add": 1}


def test_nondeterministic_ops_never_merged():
    proto, model, modified, _ = run('''
    g (float[2, 3] x) => (float[2, 3] y)
    {
        r1 = RandomUniformLike(x)
        r2 = RandomUniformLike(x)
        d1 = Dropout(x)
        d2 = Dropout(x)
        b1 = Bernoulli(r1)
        b2 = Bernoulli(r1)
        s = Add(r1, r2)
        t = Add(d1, d2)
        u = Add(b1, b2)
        v = Add(s, t)
        y = Add(v, u)
    }''')
    assert not modified
    assert ops(model)["RandomUniformLike"] == 2 and ops(model)["Dropout"] == 2 and ops(model)["Bernoulli"] == 2


def test_both_graph_outputs_are_kept():
    proto, model, modified, _ = run('''
    g (float[3] x) => (float[3] y, float[3] z)
    {
        y = Relu(x)
        z = Relu(x)
    }''')
    assert not modified and ops(model) == {"Relu": 2}


def test_later_graph_output_name_moves_to_kept_value():
    proto, model, modified, _ = run('''
    g (float[3] x) => (float[3] z, float[3] w)
    {
        a = Relu(x)
        w = Neg(a)
        z = Relu(x)
    }''')
    assert modified and ops(model) == {"Relu": 1, "Neg": 1}
    assert [o.name for o in model.graph.outputs] == ["z", "w"]
    check_same(proto, model)


def test_subgraph_nodes_not_merged_across_scopes_but_inside_one():
    proto, model, modified, p = run('''
    g (bool c, float[2] x) => (float[2] y, float[2] r)
    {
        r = Relu(x)
        y = If(c) <
            then_branch = t () => (float[2] ty) {
                a = Relu(x)
                b = Relu(x)
                ty = Add(a, b)
            },
            else_branch = e () => (float[2] ey) {
                ey = Relu(x)
            }
        >
    }''')
    assert modified and p.stats == {"Relu": 1}
    assert ops(model) == {"Relu": 3, "If": 1, "Add": 1}
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": np.array([1.0, -2.0], np.float32)})


def test_nodes_with_subgraphs_not_merged():
    proto, model, modified, _ = run('''
    g (bool c, float[2] x) => (float[2] y)
    {
        i1 = If(c) <
            then_branch = t () => (float[2] ty) { ty = Neg(x) },
            else_branch = e () => (float[2] ey) { ey = Abs(x) }
        >
        i2 = If(c) <
            then_branch = t () => (float[2] ty) { ty = Neg(x) },
            else_branch = e () => (float[2] ey) { ey = Abs(x) }
        >
        y = Add(i1, i2)
    }''')
    assert not modified and ops(model)["If"] == 2


def test_duplicate_initializers_and_constants_merged_but_not_graph_inputs():
    proto, model, modified, p = run('''
    g (float[N, 3] x, float[3] w1) => (float[N, 3] y)
    <float[3] c1 = {1.0, 2.0, 3.0}, float[3] c2 = {1.0, 2.0, 3.0}, float[3] w1 = {1.0, 2.0, 3.0},
     int64[3] i1 = {1, 2, 3}>
    {
        k1 = Constant<value = float[3] {4.0, 5.0, 6.0}>()
        k2 = Constant<value = float[3] {4.0, 5.0, 6.0}>()
        a = Mul(x, c1)
        b = Mul(x, c2)
        d = Mul(x, w1)
        e = Add(a, b)
        f = Add(e, d)
        g1 = Add(f, k1)
        h = Add(g1, k2)
        ii = Cast<to = 1>(i1)
        y = Add(h, ii)
    }''')
    assert modified
    # c2 -> c1 (w1 is a graph input and int64 i1 differs by dtype); then b -> a; k2 -> k1.
    assert p.stats == {"initializers": 1, "Mul": 1, "Constant": 1}
    assert set(model.graph.initializers) == {"c1", "w1", "i1"}
    assert ops(model) == {"Constant": 1, "Mul": 2, "Add": 5, "Cast": 1}
    check_same(proto, model)


def test_float_attribute_nan_and_signed_zero():
    proto, model, modified, _ = run('''
    g (float[3] x) => (float[3] y)
    {
        a = LeakyRelu<alpha = 0.0>(x)
        b = LeakyRelu<alpha = -0.0>(x)
        c = LeakyRelu<alpha = 0.0>(x)
        s = Add(a, b)
        y = Add(s, c)
    }''')
    assert modified and ops(model) == {"LeakyRelu": 2, "Add": 2}
    check_same(proto, model)


def test_noop_reports_unmodified():
    proto, model, modified, p = run('''
    g (float[N, 3] x) => (float[N, 3] y)
    {
        t = Relu(x)
        y = Add(t, x)
    }''')
    assert not modified and not p.stats
