"""Shape / Size reads moved off ops that only they read (passes/_shape_forward.py, in CSE).

flint kv at trt-O4 kept q's old 4-D rotation and its head Transpose alive for one Shape(q)[0:3] that
the sinks lowering reads, after rotary-between-head-transposes replaced them by a 3-D rotation; the
read now moves through the rotation (same shape as its input) and the Transpose (dims picked)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh

from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from pass_testing import apply, check_same, normal_feeds, ops, parse

H, D = 4, 8
STAT = "shape reads forwarded"


def _run(text: str, opset: int = 23):
    proto = parse(f'<ir_version: 10, opset_import: ["" : {opset}]>\n' + text)
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, p


def _rope_feeds(b: int, s: int, seed: int) -> dict:
    f = normal_feeds(seed, x=(b, s, H, D))
    ang = np.arange(s)[:, None] * (10000.0 ** (-np.arange(D // 2) / (D // 2)))[None, :]
    f["cs"], f["sn"] = (np.repeat(t[None], b, 0).astype(np.float32) for t in (np.cos(ang), np.sin(ang)))
    return f


# the flint glue: q's old rotation, read only by Shape(q)[0:3] ([B, H, S]); x itself is read by a view
ROPE = f'''
g (float[B, S, {H}, {D}] x, float[B, S, {D // 2}] cs, float[B, S, {D // 2}] sn) => (float[B, {H}, S, {D}] y)
{{
    t = Transpose<perm = [0, 2, 1, 3]>(x)
    r = RotaryEmbedding(t, cs, sn)
    bhs = Shape<start = 0, end = 3>(r)
    minus = Constant<value = int64[1] {{-1}}>()
    target = Concat<axis = 0>(bhs, minus)
    y = Reshape(x, target)
}}'''


def test_read_of_a_rotation_moves_through_it_and_its_transpose():
    proto, model, modified, p = _run(ROPE)
    assert modified and p.stats[STAT] == 2   # the rotation, then the Transpose
    counts = ops(model)
    assert "RotaryEmbedding" not in counts and "Transpose" not in counts, counts
    # [B, H, S] is x's dims 0, 2, 1: not a run of x's axes, so a Gather of Shape(x)
    assert counts["Gather"] == 1 and counts["Shape"] == 1
    assert next(n for n in model.graph if n.op_type == "Shape").inputs[0].name == "x"
    for b, s, seed in ((2, 5, 0), (1, 3, 1)):
        check_same(proto, model, _rope_feeds(b, s, seed))


def test_a_run_of_axes_is_one_shape_slice():
    # Shape(Transpose(x, [0, 2, 3, 1]))[1:3] is x's dims 2, 3: Shape(x, 2, 4), no Gather
    proto, model, modified, p = _run('''
    g (float[B, S, 3, 5] x) => (float[B, 3, 5] y)
    {
        t = Transpose<perm = [0, 2, 3, 1]>(x)
        tail = Shape<start = 1, end = -1>(t)
        b = Shape<start = 0, end = 1>(x)
        target = Concat<axis = 0>(b, tail)
        one = Constant<value = int64[1] {1}>()
        r = ReduceSum<keepdims = 0>(x, one)
        y = Reshape(r, target)
    }''')
    assert modified and p.stats[STAT] == 1
    counts = ops(model)
    assert "Transpose" not in counts and "Gather" not in counts, counts
    read = next(n for n in model.graph if n.op_type == "Shape" and n.attributes["start"].value == 2)
    assert read.attributes["end"].value == 4 and read.inputs[0].name == "x"
    check_same(proto, model, normal_feeds(0, x=(2, 4, 3, 5)))


UNARY = '''
g (float[B, S, 8] x, double[8] w, double[8] b) => (float[B, S, 8] y, int64 n)
{
    c = Cast<to = 11>(x)
    e = Sigmoid(c)
    ln = LayerNormalization<axis = -1>(e, w, b)
    s = Shape(ln)
    z = ConstantOfShape<value = float[1] {2.0}>(s)
    y = Mul(x, z)
    n = Size(e)
}'''


def test_unary_ops_cast_and_norm_are_read_through():
    proto, model, modified, p = _run(UNARY)
    assert modified and p.stats[STAT] == 3   # the norm, then the Sigmoid, then the Cast
    counts = ops(model)
    assert not {"Cast", "Sigmoid", "LayerNormalization"} & set(counts), counts
    assert all(n.inputs[0].name == "x" for n in model.graph if n.op_type in ("Shape", "Size"))
    feeds = normal_feeds(0, x=(2, 3, 8), w=(8,), b=(8,))
    feeds["w"], feeds["b"] = feeds["w"].astype(np.float64), feeds["b"].astype(np.float64)
    check_same(proto, model, feeds)


def test_broadcast_into_the_other_operand_is_read_through():
    # Add(x [B, S, 8], bias [8]) and Mul by [B, 1, 8]: the output is x's shape
    proto, model, modified, p = _run('''
    g (float[B, S, 8] x, float[8] bias, float[B, 1, 8] f) => (float[B, S, 8] y)
    {
        a = Add(x, bias)
        m = Mul(f, a)
        s = Shape(m)
        y = Expand(x, s)
    }''')
    assert modified and p.stats[STAT] == 2
    assert not {"Add", "Mul"} & set(ops(model)), ops(model)
    check_same(proto, model, normal_feeds(0, x=(2, 3, 8), bias=(8,), f=(2, 1, 8)))


def test_a_broadcast_that_grows_the_output_is_kept():
    # [B, 1, 8] + [1, S, 8] is [B, S, 8]: neither operand has the output's shape
    proto, model, modified, p = _run('''
    g (float[B, 1, 8] x, float[1, S, 8] k) => (float[B, S, 8] y)
    {
        a = Add(x, k)
        s = Shape(a)
        y = Expand(x, s)
    }''')
    assert p.stats[STAT] == 0 and ops(model)["Add"] == 1
    check_same(proto, model, normal_feeds(0, x=(2, 1, 8), k=(1, 3, 8)))


def test_unnamed_dims_prove_nothing():
    # x [?, 8] + k [?, 8]: the two unknown dims may differ (one may be 1 and broadcast)
    proto, model, modified, p = _run('''
    g (float[?, 8] x, float[?, 8] k) => (float[?, 8] y)
    {
        a = Add(x, k)
        s = Shape(a)
        y = Expand(x, s)
    }''')
    assert p.stats[STAT] == 0 and ops(model)["Add"] == 1
    feeds = {"x": np.ones((1, 8), np.float32), "k": np.ones((3, 8), np.float32)}   # the output has k's 3 rows
    check_same(proto, model, feeds)


def test_an_op_with_a_data_reader_or_a_graph_output_is_kept():
    # the rotation is also read by a Mul; the Sigmoid's output is a graph output
    proto, model, modified, p = _run(f'''
    g (float[B, {H}, S, {D}] x, float[B, S, {D // 2}] cs, float[B, S, {D // 2}] sn)
        => (float[B, {H}, S, {D}] y, float[B, {H}, S, {D}] e, int64[4] s2)
    {{
        r = RotaryEmbedding(x, cs, sn)
        s = Shape(r)
        z = ConstantOfShape<value = float[1] {{2.0}}>(s)
        y = Mul(r, z)
        e = Sigmoid(x)
        s2 = Shape(e)
    }}''')
    assert p.stats[STAT] == 0 and ops(model)["RotaryEmbedding"] == 1 and ops(model)["Sigmoid"] == 1


def test_an_op_whose_other_output_is_read_is_kept():
    # LayerNormalization's Mean is read: the node stays, so its Y's Shape stays where it is; a
    # Split (several outputs of their own shapes) is no shape-keeping op
    proto, model, modified, p = _run('''
    g (float[B, S, 8] x, float[8] w) => (float[B, S, 1] mean, int64[3] s, int64[3] s1)
    {
        ln, mean = LayerNormalization<axis = -1>(x, w)
        s = Shape(ln)
        a, b = Split<num_outputs = 2, axis = 1>(x)
        s1 = Shape(a)
    }''', opset=18)
    assert p.stats[STAT] == 0
    assert ops(model)["LayerNormalization"] == 1 and ops(model)["Split"] == 1


def test_transpose_without_perm_of_unknown_rank_is_kept():
    # no perm reverses the axes, which needs the rank: unknown here, so the read stays
    graph = oh.make_graph(
        [oh.make_node("Transpose", ["x"], ["t"]), oh.make_node("Size", ["t"], ["n"]),
         oh.make_node("Shape", ["t"], ["s"])], "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [oh.make_tensor_value_info("s", onnx.TensorProto.INT64, [None]),
         oh.make_tensor_value_info("n", onnx.TensorProto.INT64, [])])
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto)
    assert p.stats[STAT] == 0 and ops(model)["Transpose"] == 1
    # with the rank known, the reversed axes are picked (the whole shape: a Gather)
    proto.graph.input[0].CopyFrom(oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["B", 3, 5]))
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto)
    DeadCodeEliminationPass()(model)
    assert p.stats[STAT] == 1 and "Transpose" not in ops(model) and ops(model)["Gather"] == 1
    check_same(proto, model, normal_feeds(0, x=(2, 3, 5)))
