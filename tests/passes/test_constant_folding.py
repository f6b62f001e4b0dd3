"""ConstantFoldingPass: folds what is constant, keeps what is not, keeps dtypes and names."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import pytest

from onnx_fuse.passes import constant_folding
from onnx_fuse.passes.constant_folding import ConstantFoldingPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def test_folds_chain_with_second_consumer():
    proto = parse(HEADER + '''
    g (float[N, 4] x) => (float[N, 4] y, float[N, 4] z)
    <float[4] a = {1.0, 2.0, 3.0, 4.0}, float[4] b = {0.5, 0.5, 0.5, 0.5}>
    {
        t = Add(a, b)
        u = Mul(t, b)
        y = Mul(x, t)
        z = Add(x, u)
    }''')
    model, modified, p = apply(ConstantFoldingPass, proto)
    assert modified and p.stats == {"Add": 1, "Mul": 1}
    assert ops(model) == {"Mul": 1, "Add": 1}
    # Results are initializers named after the values they replace.
    assert {"t", "u"} <= set(model.graph.initializers)
    np.testing.assert_array_equal(model.graph.initializers["u"].const_value.numpy(),
                                  np.array([0.75, 1.25, 1.75, 2.25], np.float32))
    check_same(proto, model)


def test_intermediate_that_is_graph_output_keeps_its_name():
    proto = parse(HEADER + '''
    g (float[3] x) => (float[3] t, float[3] y)
    <float[3] a = {1.0, 2.0, 3.0}>
    {
        t = Neg(a)
        y = Add(x, t)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified
    assert ops(model) == {"Constant": 1, "Add": 1}
    assert [o.name for o in model.graph.outputs] == ["t", "y"]
    check_same(proto, model)


def test_initializer_that_is_graph_input_is_not_folded():
    proto = parse(HEADER + '''
    g (float[N, 3] x, float[3] w) => (float[N, 3] y)
    <float[3] w = {1.0, 2.0, 3.0}, float[3] b = {1.0, 1.0, 1.0}>
    {
        t = Add(w, b)
        y = Mul(x, t)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert not modified
    assert ops(model) == {"Add": 1, "Mul": 1}


def test_integer_division_truncates_like_onnx_and_keeps_int64():
    proto = parse(HEADER + '''
    g (int64[4] x) => (int64[4] y)
    <int64[4] a = {-7, 7, -8, 9}, int64[4] b = {2, -2, 3, 3}>
    {
        q = Div(a, b)
        y = Add(x, q)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"Add": 1}
    q = model.graph.initializers["q"].const_value
    assert q.dtype == ir.DataType.INT64
    np.testing.assert_array_equal(q.numpy(), [-3, -3, -2, 3])
    check_same(proto, model)


def test_integer_division_by_zero_is_left_to_the_runtime():
    proto = parse(HEADER + '''
    g (int32[2] x) => (int32[2] y)
    <int32[2] a = {4, 5}, int32[2] b = {2, 0}>
    {
        q = Div(a, b)
        y = Add(x, q)
    }''')
    _, modified, _ = apply(ConstantFoldingPass, proto)
    assert not modified


def test_broadcasting_and_float16_dtype_kept():
    proto = parse(HEADER + '''
    g (float16[3, 4] x) => (float16[3, 4] y)
    <float16[3, 1] a = {15360, 16384, 16896}, float16[1, 4] b = {11878, 12902, 13517, 13926}>
    {
        t = Mul(a, b)
        y = Add(x, t)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"Add": 1}
    t = model.graph.initializers["t"].const_value
    assert t.dtype == ir.DataType.FLOAT16 and tuple(t.shape) == (3, 4)
    check_same(proto, model)


def test_empty_tensor_concat_folds():
    proto = parse(HEADER + '''
    g (float[2, 6] x) => (float[3, 4] y)
    <int64[0] e = {}, int64[2] s = {3, 4}>
    {
        shape = Concat<axis = 0>(e, s)
        y = Reshape(x, shape)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"Reshape": 1}
    np.testing.assert_array_equal(model.graph.initializers["shape"].const_value.numpy(), [3, 4])
    check_same(proto, model)


def test_shape_of_static_dims_folds_dynamo_style_chain():
    # Dynamo style: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, batch dim symbolic.
    proto = parse(HEADER + '''
    g (float[B, 6, 4] x) => (float[B, 24] y, int64 n)
    <int64 one = {1}, int64 two = {2}, int64[1] m1 = {-1}, int64[1] ax = {0}>
    {
        s = Shape(x)
        d1 = Gather<axis = 0>(s, one)
        d2 = Gather<axis = 0>(s, two)
        p = Mul(d1, d2)
        pu = Unsqueeze(p, ax)
        shape = Concat<axis = 0>(m1, pu)
        tail = Shape<start = 1>(x)
        n = Size(tail)
        y0 = Reshape(x, shape)
        y = Identity(y0)
    }''')
    model, modified, p = apply(ConstantFoldingPass, proto, shape_inference=True)
    assert modified
    # The full Shape(x) has a symbolic dim, so it stays (dead now: DCE's job), but the Gathers
    # pick static dims 1 and 2, so everything after them folds.
    assert ops(model) == {"Shape": 1, "Reshape": 1, "Identity": 1, "Constant": 1}
    np.testing.assert_array_equal(model.graph.initializers["shape"].const_value.numpy(), [-1, 24])
    assert p.stats["Shape"] == 1 and p.stats["Size"] == 1
    check_same(proto, model)


def test_shape_of_fully_static_value_folds_whole_chain():
    proto = parse(HEADER + '''
    g (float[2, 6, 4] x) => (float[2, 24] y)
    <int64 one = {1}, int64 two = {2}, int64[1] m1 = {-1}, int64[1] ax = {0}>
    {
        s = Shape(x)
        d1 = Gather<axis = 0>(s, one)
        d2 = Gather<axis = 0>(s, two)
        p = Mul(d1, d2)
        pu = Unsqueeze(p, ax)
        shape = Concat<axis = 0>(m1, pu)
        y = Reshape(x, shape)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"Reshape": 1}
    np.testing.assert_array_equal(model.graph.initializers["shape"].const_value.numpy(), [-1, 24])
    check_same(proto, model)


def test_nondeterministic_ops_never_folded():
    proto = parse(HEADER + '''
    g (float[2, 3] x) => (float[2, 3] y)
    <float[2, 3] c = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}>
    {
        r = RandomNormalLike<seed = 1.0>(c)
        b = Bernoulli(c)
        s = Add(r, b)
        y = Add(x, s)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert not modified
    assert ops(model) == {"RandomNormalLike": 1, "Bernoulli": 1, "Add": 2}


def test_reference_fallback_folds_op_without_numpy_impl_and_checks_dtype():
    # Pow(float, int64) gives float; Sqrt and Softmax are not in the NumPy table.
    proto = parse(HEADER + '''
    g (float[4] x) => (float[4] y)
    <float[4] a = {1.0, 4.0, 9.0, 16.0}, int64 k = {2}>
    {
        r = Sqrt(a)
        p = Pow(r, k)
        s = Softmax<axis = 0>(p)
        y = Mul(x, s)
    }''')
    model, modified, p = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"Mul": 1}
    assert model.graph.initializers["s"].const_value.dtype == ir.DataType.FLOAT
    assert p.stats == {"Sqrt": 1, "Pow": 1, "Softmax": 1}
    check_same(proto, model)


def test_cast_nan_to_int_not_folded_but_float_to_half_is():
    proto = parse(HEADER + '''
    g (int32[2] x, float16[2] h) => (int32[2] y, float16[2] z)
    <float[2] a = {1.5, NaN}, float[2] b = {0.1, 65504.0}>
    {
        ai = Cast<to = 6>(a)
        y = Add(x, ai)
        bh = Cast<to = 10>(b)
        z = Add(h, bh)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified
    assert ops(model) == {"Cast": 1, "Add": 2}
    assert model.graph.initializers["bh"].const_value.dtype == ir.DataType.FLOAT16


def test_output_size_cap():
    proto = parse(HEADER + '''
    g (float[2048, 1024] x) => (float[2048, 1024] y)
    <int64[2] s = {2048, 1024}>
    {
        big = ConstantOfShape<value = float[1] {1.0}>(s)
        y = Add(x, big)
    }''')
    _, modified, p = apply(ConstantFoldingPass, proto)
    assert not modified and p.stats["skipped: output too large"] == 1


def test_input_size_cap_does_not_read_large_initializers(monkeypatch):
    monkeypatch.setattr(constant_folding, "MAX_INPUT_BYTES", 8)
    proto = parse(HEADER + '''
    g (float[4] x) => (float[4] y)
    <float[4] a = {1.0, 2.0, 3.0, 4.0}>
    {
        t = Neg(a)
        y = Add(x, t)
    }''')
    model = ir.from_proto(proto)
    read = []
    tensor = model.graph.initializers["a"].const_value
    original_numpy = type(tensor).numpy

    def spy(self):
        read.append(self.name)
        return original_numpy(self)

    monkeypatch.setattr(type(tensor), "numpy", spy)
    p = ConstantFoldingPass()
    assert not p(model).modified
    assert read == []


def test_subgraph_folds_inside_as_its_own_initializers_and_if_stays():
    proto = parse(HEADER + '''
    g (bool c, float[2] x) => (float[2] y)
    <float[2] a = {1.0, 2.0}>
    {
        y = If(c) <
            then_branch = t () => (float[2] ty) {
                k = Constant<value = float[2] {3.0, 4.0}>()
                s = Add(a, k)
                ty = Mul(s, x)
            },
            else_branch = e () => (float[2] ey) {
                ey = Neg(x)
            }
        >
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified
    # as in the main graph: the Constant and the folded Add become initializers, of the branch
    assert ops(model) == {"If": 1, "Mul": 1, "Neg": 1}
    then = model.graph.node(0).attributes["then_branch"].as_graph()
    assert set(then.initializers) == {"k", "s"} and set(model.graph.initializers) == {"a"}   # k: for DCE
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": np.array([1.0, -2.0], np.float32)})


def test_no_constants_reports_unmodified():
    proto = parse(HEADER + '''
    g (float[N, 3] x) => (float[N, 3] y)
    {
        t = Relu(x)
        y = Add(t, x)
    }''')
    _, modified, p = apply(ConstantFoldingPass, proto)
    assert not modified and not p.stats


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", ["float", "double", "int32", "int64", "uint8"])
def test_binary_ops_match_onnxruntime(op, dtype):
    proto = parse(HEADER + f'''
    g ({dtype}[3] x) => ({dtype}[3] y)
    <{dtype}[3] a = {{9, 200, 7}}, {dtype}[3] b = {{2, 3, 5}}>
    {{
        t = {op}(a, b)
        y = Add(x, t)
    }}''')
    model, modified, p = apply(ConstantFoldingPass, proto)
    if dtype == "uint8" and op == "Mul":  # 200 * 3 overflows uint8: left to the runtime
        assert not modified and p.stats == {"skipped: integer overflow": 1}
        return
    assert modified and ops(model) == {"Add": 1}
    assert model.graph.initializers["t"].const_value.dtype == model.graph.initializers["a"].const_value.dtype
    check_same(proto, model, atol=0, rtol=0)


def test_large_weight_transpose_is_folded_lazily_and_correctly():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((640, 512)).astype(np.float32)  # 1.3 MB > LAZY_BYTES
    proto = onnx.parser.parse_model(HEADER + '''
    g (float[N, 640] x) => (float[N, 640] y)
    <float[1, 1] w = {0.0}>
    {
        wt = Transpose<perm = [1, 0]>(w)
        h = MatMul(x, w)
        y = MatMul(h, wt)
    }''')
    proto.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    onnx.checker.check_model(proto, full_check=True)
    model, modified, _ = apply(ConstantFoldingPass, proto)
    assert modified and ops(model) == {"MatMul": 2}
    folded = model.graph.initializers["wt"].const_value
    assert isinstance(folded, ir.LazyTensor) and list(folded.shape) == [512, 640]
    np.testing.assert_array_equal(folded.numpy(), w.T)
    check_same(proto, model)


def test_constant_nodes_lift_to_initializers_and_castlike_folds_by_dtype():
    proto = parse(HEADER + '''
    g (int64[N] n, float[N] x) => (float[N] y, int64[2] k)
    {
        k = Constant<value_ints = [3, 4]>()
        z = Constant<value = float {0.5}>()
        zi = CastLike(z, n)
        zf = Cast<to = 1>(zi)
        y = Add(x, zf)
    }''')
    model, modified, p = apply(ConstantFoldingPass, proto)
    assert modified
    # k is a graph output: it stays a Constant node. z is lifted; CastLike needs only n's dtype.
    assert ops(model) == {"Constant": 1, "Add": 1}
    assert p.stats == {"Constant-lifted": 1, "CastLike": 1, "Cast": 1}
    zi = model.graph.initializers["zi"].const_value
    assert zi.dtype == ir.DataType.INT64 and zi.numpy() == 0  # 0.5 cast to int64 truncates
    check_same(proto, model)


def test_gather_of_symbolic_dim_is_not_folded():
    # an Expand target (a Reshape's would become [-1, 6]: test_reshape_target.py)
    proto = parse(HEADER + '''
    g (float[B, 6] x) => (float[B, 6] y)
    <int64 zero = {0}, int64[1] ax = {0}, int64[1] six = {6}>
    {
        s = Shape(x)
        d0 = Gather<axis = 0>(s, zero)
        u = Unsqueeze(d0, ax)
        shape = Concat<axis = 0>(u, six)
        y = Expand(x, shape)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    assert not modified
    assert ops(model) == {"Shape": 1, "Gather": 1, "Unsqueeze": 1, "Concat": 1, "Expand": 1}


def test_slice_of_partly_symbolic_shape_picks_static_tail():
    # Dynamo's attention reshape: Slice(Shape(x), -1, INT64_MAX) where only the last dim is static.
    proto = parse(HEADER + '''
    g (float[B, S, 64] x) => (float[B, S, 64] y)
    <int64[1] s = {-1}, int64[1] e = {9223372036854775807}, int64[1] lo = {0},
     int64[1] m2 = {-1}, int64[1] m1 = {-1}>
    {
        sh = Shape(x)
        last = Slice(sh, s, e)
        head = Slice(sh, lo, m2)
        c = Cast<to = 7>(last)
        shape = Concat<axis = 0>(m1, c)
        flat = Reshape(x, shape)
        back = Concat<axis = 0>(head, c)
        y = Reshape(flat, back)
    }''')
    model, modified, p = apply(ConstantFoldingPass, proto, shape_inference=True)
    assert modified
    # last, c and shape fold; head holds symbolic dims and stays, and so does back.
    assert p.stats == {"Slice": 1, "Cast": 1, "Concat": 1}
    assert ops(model) == {"Shape": 1, "Slice": 1, "Concat": 1, "Reshape": 2}
    np.testing.assert_array_equal(model.graph.initializers["shape"].const_value.numpy(), [-1, 64])
    check_same(proto, model, inputs={"x": np.random.default_rng(0).standard_normal((2, 3, 64)).astype(np.float32)})


# --- integer overflow: fold only what every runtime computes the same way ---------------------

I64_MAX = np.iinfo(np.int64).max


@pytest.mark.parametrize("body, values", [
    ("y = ReduceProd <keepdims: int = 0> (a)", "{1099511627776, 1099511627776}"),     # 2^80
    ("y = ReduceSum <keepdims: int = 0> (a)", "{4611686018427387904, 4611686018427387904}"),
    ("y = Mul(a, a)", "{4294967296, 3}"),
    ("y = Add(a, a)", "{4611686018427387904, 1}"),
    ("y = Neg(a)", "{-9223372036854775808, 1}"),
    ("y = Abs(a)", "{-9223372036854775808, 1}"),
    ("y = CumSum(a, ax)", "{1, 2}"),            # integer arithmetic through the reference
])
def test_integer_overflow_is_not_folded(body, values):
    proto = parse(HEADER + f'''
    g (int64[2] x) => (int64 z)
    <int64[2] a = {values}, int64 ax = {{0}}>
    {{
        {body}
        s = Add(y, x)
        z = ReduceMax <keepdims: int = 0> (s)
    }}''')
    model, _, p = apply(ConstantFoldingPass, proto)
    assert "y" not in model.graph.initializers and ops(model).get("ReduceMax") == 1, p.stats
    assert any(k.startswith("skipped: integer") for k in p.stats), p.stats


def test_integer_arithmetic_that_fits_is_still_folded():
    proto = parse(HEADER + '''
    g (int64[2] x) => (int64[2] z)
    <int64[2] a = {3037000000, 2}>
    {
        p = ReduceProd <keepdims: int = 1> (a)
        m = Mul(a, a)
        y = Add(p, m)
        z = Add(y, x)
    }''')
    model, _, p = apply(ConstantFoldingPass, proto)
    assert ops(model) == {"Add": 1}, p.stats
    y = model.graph.initializers["y"].const_value.numpy()
    np.testing.assert_array_equal(y, np.array([6074000000 + 3037000000 ** 2, 6074000000 + 4], np.int64))


def test_folded_reduce_prod_matches_ort_where_it_folds():
    """Where ORT saturates (ReduceProd over int64 overflow gives INT64_MAX) we refuse; where the
    product fits we fold to exactly what ORT computes."""
    from onnx_fuse.verify import make_session

    for values in ("{1099511627776, 1099511627776}", "{3037000499, 3037000499}", "{94906265, 94906265}"):
        proto = parse(HEADER + f'''
        g (int64[1] x) => (int64[1] z)
        <int64[2] a = {values}>
        {{
            y = ReduceProd <keepdims: int = 1> (a)
            z = Add(y, x)
        }}''')
        model, _, _ = apply(ConstantFoldingPass, proto)
        feeds = {"x": np.zeros(1, np.int64)}
        want = make_session(proto).run(None, feeds)[0]
        got = make_session(ir.to_proto(model)).run(None, feeds)[0]
        np.testing.assert_array_equal(got, want)


def test_integer_range_overflow_is_not_folded():
    proto = parse(HEADER + '''
    g (int64[3] x) => (int64[3] z)
    <int64 s = {9223372036854775806}, int64 l = {9223372036854775807}, int64 d = {1}>
    {
        r = Range(s, l, d)
        z = Add(x, r)
    }''')
    model, _, p = apply(ConstantFoldingPass, proto)
    # one element (INT64_MAX - 1) fits: folded
    assert "Range" not in ops(model)
    proto = parse(HEADER + '''
    g (int64[3] x) => (int64[3] z)
    <int64 s = {9223372036854775800}, int64 l = {-9223372036854775800}, int64 d = {9223372036854775807}>
    {
        r = Range(s, l, d)
        z = Add(x, r)
    }''')
    model, _, p = apply(ConstantFoldingPass, proto)
    assert ops(model).get("Range") in (None, 1)  # empty (negative count) folds; never wraps
