"""IdentityEliminationPass: removes provable no-ops, keeps graph output names, keeps real work."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def run(text: str, *, shape_inference: bool = True):
    proto = parse(HEADER + text)
    model, modified, p = apply(IdentityEliminationPass, proto, shape_inference=shape_inference)
    return proto, model, modified, p


def test_identity_with_second_consumer_and_graph_output_renames_producer():
    proto, model, modified, p = run('''
    g (float[N, 4] x) => (float[N, 4] y, float[N, 4] z)
    {
        a = Relu(x)
        b = Identity(a)
        z = Neg(b)
        y = Identity(b)
    }''')
    assert modified and p.stats == {"Identity": 2}
    assert ops(model) == {"Relu": 1, "Neg": 1}
    assert [o.name for o in model.graph.outputs] == ["y", "z"]
    assert model.graph.outputs[0].producer().op_type == "Relu"
    check_same(proto, model)


def test_identity_of_graph_input_to_graph_output_is_kept():
    proto, model, modified, _ = run('''
    g (float[3] x) => (float[3] y)
    {
        y = Identity(x)
    }''')
    assert not modified and ops(model) == {"Identity": 1}


def test_identity_of_value_that_is_already_a_graph_output_is_kept():
    # Renaming would give one value two output names; the Identity must stay.
    proto, model, modified, _ = run('''
    g (float[3] x) => (float[3] a, float[3] y)
    {
        a = Relu(x)
        y = Identity(a)
    }''')
    assert not modified and ops(model) == {"Relu": 1, "Identity": 1}
    check_same(proto, model)


def test_noop_whose_output_is_graph_output_of_graph_input_becomes_identity():
    proto, model, modified, p = run('''
    g (float[N, 4] x) => (float[N, 4] y)
    <float[4] z = {0.0, 0.0, 0.0, 0.0}>
    {
        y = Add(x, z)
    }''')
    assert modified and p.stats == {"Add": 1}
    assert ops(model) == {"Identity": 1}
    check_same(proto, model)
    # Running again changes nothing: the Identity must stay.
    _, again, _ = apply(IdentityEliminationPass, check_same(proto, model))
    assert not again


def test_inference_dropout_and_same_type_cast():
    proto, model, modified, p = run('''
    g (float[N, 4] x) => (float[N, 4] y)
    {
        a = Relu(x)
        d = Dropout(a)
        c = Cast<to = 1>(d)
        y = Neg(c)
    }''')
    assert modified and p.stats == {"Dropout": 1, "Cast": 1}
    assert ops(model) == {"Relu": 1, "Neg": 1}
    check_same(proto, model)


def test_dropout_with_used_mask_or_training_mode_is_kept():
    proto, model, modified, _ = run('''
    g (float[4] x, bool t) => (float[4] y, bool[4] m, float[4] z)
    <float r = {0.5}>
    {
        y, m = Dropout(x)
        z = Dropout(x, r, t)
    }''')
    assert not modified and ops(model) == {"Dropout": 2}


def test_bool_cast_to_a_number_and_back_is_the_bool():
    proto, model, modified, p = run('''
    g (bool[N, 4] x, int64[N, 4] n) => (bool[N, 4] y, int64[N, 4] z)
    {
        a = Cast<to = 7>(x)
        r = Cast<to = 9>(a)
        y = Not(r)
        b = Cast<to = 9>(n)
        c = Cast<to = 7>(b)
        z = Neg(c)
    }''')
    # the bool round trip goes; int64 -> bool -> int64 is no round trip (2 becomes 1) and stays
    assert modified and p.stats == {"Cast": 1}, p.stats
    assert model.graph.outputs[0].producer().inputs[0].name == "x"   # Not(x); the Cast to int64 is left to DCE
    check_same(proto, model)


def test_cast_to_other_type_is_kept():
    proto, model, modified, _ = run('''
    g (float[4] x) => (float16[4] y)
    {
        y = Cast<to = 10>(x)
    }''')
    assert not modified


def test_shape_noops_with_symbolic_batch():
    proto, model, modified, p = run('''
    g (float[B, 6, 4] x) => (float[B, 6, 4] y)
    <int64[3] s = {0, 6, -1}, int64[2] e = {6, 1}, int64[1] st = {0}, int64[1] en = {9223372036854775807},
     int64[1] ax = {0}, int64[6] pz = {0, 0, 0, 0, 0, 0}>
    {
        r = Reshape(x, s)
        t = Transpose<perm = [0, 1, 2]>(r)
        ex = Expand(t, e)
        sl = Slice(ex, st, en, ax)
        pd = Pad(sl, pz)
        cc = Concat<axis = 1>(pd)
        y = Relu(cc)
    }''')
    assert modified
    assert p.stats == {"Reshape": 1, "Transpose": 1, "Expand": 1, "Slice": 1, "Pad": 1, "Concat": 1}
    assert ops(model) == {"Relu": 1}
    check_same(proto, model)


def test_shape_changing_ops_are_kept():
    proto, model, modified, _ = run('''
    g (float[B, 6, 4] x) => (float[B, 4, 6] y, float[B, 24] y2, float[B, 6, 2] y3)
    <int64[2] s = {0, -1}, int64[1] st = {0}, int64[1] en = {2}, int64[1] ax = {2}>
    {
        y = Transpose<perm = [0, 2, 1]>(x)
        y2 = Reshape(x, s)
        y3 = Slice(x, st, en, ax)
    }''')
    assert not modified and ops(model) == {"Transpose": 1, "Reshape": 1, "Slice": 1}


def test_slice_to_end_of_symbolic_dim_is_only_noop_with_huge_end():
    # end = 5 on a symbolic axis might cut it; must be kept.
    proto, model, modified, _ = run('''
    g (float[B, 4] x) => (float[B, 4] y)
    <int64[1] st = {0}, int64[1] en = {5}, int64[1] ax = {0}>
    {
        s = Slice(x, st, en, ax)
        y = Relu(s)
    }''')
    assert not modified


def test_broadcasting_neutral_constant_that_grows_the_shape_is_kept():
    # x:[4] + zeros[2,4] -> [2,4]: not an identity.
    proto, model, modified, _ = run('''
    g (float[4] x) => (float[2, 4] y)
    <float[2, 4] z = {0, 0, 0, 0, 0, 0, 0, 0}>
    {
        y = Add(x, z)
    }''')
    assert not modified and ops(model) == {"Add": 1}


@pytest.mark.parametrize("expr,removed", [
    ("Add(x, zero)", True), ("Add(zero, x)", True), ("Sub(x, zero)", True), ("Sub(zero, x)", False),
    ("Mul(x, one)", True), ("Mul(one, x)", True), ("Div(x, one)", True), ("Div(one, x)", False),
    ("Mul(x, zero)", False), ("Add(x, one)", False),
])
@pytest.mark.parametrize("dtype", ["float", "int64"])
def test_neutral_elements(expr, removed, dtype):
    proto, model, modified, _ = run(f'''
    g ({dtype}[N, 3] x) => ({dtype}[N, 3] y)
    <{dtype}[3] zero = {{0, 0, 0}}, {dtype}[1] one = {{1}}>
    {{
        t = {expr}
        y = Neg(t)
    }}''')
    assert modified == removed
    assert ops(model) == ({"Neg": 1} if removed else {"Neg": 1, expr.split("(")[0]: 1})
    if dtype == "int64":
        inputs = {"x": np.array([[1, -2, 3], [4, 5, 6]], np.int64)}
    else:
        inputs = None
    check_same(proto, model, inputs=inputs)


def test_squeeze_flatten_noops_need_static_proof():
    proto, model, modified, p = run('''
    g (float[2, 3] x, float[B, 3] z) => (float[2, 3] y, float[3] w)
    {
        s = Squeeze(x)
        f = Flatten<axis = 1>(s)
        y = Relu(f)
        sz = Squeeze(z)
        w = Relu(sz)
    }''')
    assert modified and p.stats == {"Squeeze": 1, "Flatten": 1}
    assert ops(model) == {"Relu": 2, "Squeeze": 1}


def test_subgraph_identity_removed_and_outer_scope_output_kept():
    proto, model, modified, p = run('''
    g (bool c, float[2] x) => (float[2] y)
    {
        y = If(c) <
            then_branch = t () => (float[2] ty) {
                n = Neg(x)
                ty = Identity(n)
            },
            else_branch = e () => (float[2] ey) {
                ey = Identity(x)
            }
        >
    }''')
    assert modified and p.stats == {"Identity": 1}
    assert ops(model) == {"If": 1, "Neg": 1, "Identity": 1}
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": np.array([1.0, -2.0], np.float32)})


def test_noop_model_reports_unmodified():
    proto, model, modified, p = run('''
    g (float[N, 3] x) => (float[N, 3] y)
    {
        t = Relu(x)
        y = Add(t, x)
    }''')
    assert not modified and not p.stats


def test_renamed_graph_output_keeps_its_declared_type_without_inference():
    proto, model, modified, _ = run('''
    g (float[N, 4] x) => (float[N, 4] y)
    {
        a = Relu(x)
        y = Identity(a)
    }''', shape_inference=False)
    assert modified and ops(model) == {"Relu": 1}
    assert model.graph.outputs[0].dtype is not None and model.graph.outputs[0].shape is not None
    check_same(proto, model)


DYNAMO_CHAIN = '''
    g (float[B, S, 8] x, int64[B, S] mask) => (float[B, S, 8] y)
    <int64[1] m1 = {-1}, int64[1] eight = {8}>
    {
        s0 = Shape<start = 0, end = 1>(mask)
        s1 = Shape<start = 1, end = 2>(mask)
        q0 = Squeeze(s0)
        q1 = Squeeze(s1)
        r0 = Reshape(q0, m1)
        r1 = Reshape(q1, m1)
        shape = Concat<axis = 0>(%s)
        t = Reshape(x, shape)
        y = Relu(t)
    }'''


def test_dynamo_style_reshape_to_own_symbolic_shape_is_removed():
    proto, model, modified, p = run(DYNAMO_CHAIN % "r0, r1, eight")
    assert modified and p.stats == {"Reshape": 1}
    assert ops(model)["Reshape"] == 2 and ops(model)["Relu"] == 1  # the two on the shape path stay
    check_same(proto, model, inputs={"x": np.ones((2, 3, 8), np.float32),
                                     "mask": np.ones((2, 3), np.int64)})


def test_reshape_with_swapped_symbolic_dims_is_kept():
    proto, model, modified, _ = run(DYNAMO_CHAIN.replace("float[B, S, 8] y", "float[S, B, 8] y")
                                    % "r1, r0, eight")
    assert not modified and ops(model)["Reshape"] == 3


# torch.baddbmm(torch.zeros(B * H, S, T), q3, k3^T) (GPT-NeoX / GPT-J attention before transformers
# 4.4x, TorchScript): the zeros are a ConstantOfShape of a shape vector read from q, whose first entry
# is the product batch * heads; the scores already have that shape, so the Add passes them through.
BADDBMM = '''
    g (float[batch, 2, seq, 16] q) => (float[M, seq, seq] y)
    <int64[1] two = {2}, int64[1] d = {16}, int64[1] i0 = {0}, int64[1] i2 = {2}>
    {
        sh = Shape(q)
        b = Gather(sh, i0)
        s = Gather(sh, i2)
        bh = Mul(b, two)
        t3 = Concat <axis = 0> (bh, s, d)
        q3 = Reshape(q, t3)
        kt = Transpose <perm = [0, 2, 1]> (q3)
        sc = MatMul(q3, kt)
        zs = Concat <axis = 0> (bh, s, s)
        zeros = ConstantOfShape%s (zs)
        y = Add(%s)
    }'''


def test_baddbmm_zeros_of_a_product_shape_are_removed_either_side():
    for operands in ("zeros, sc", "sc, zeros"):
        proto, model, modified, p = run(BADDBMM % ("", operands))
        assert modified and p.stats["Add"] == 1, p.stats
        assert "Add" not in ops(model) and "ConstantOfShape" in ops(model)  # dead code goes later
        check_same(proto, model)


def test_zeros_with_an_explicit_zero_value_are_removed():
    proto, model, modified, p = run(BADDBMM % (" <value = float[1] {0.0}>", "sc, zeros"))
    assert modified and p.stats["Add"] == 1
    check_same(proto, model)


def test_constant_of_shape_that_is_not_zero_or_widens_the_scores_stays():
    # a non-zero fill is real work
    _, model, _, p = run(BADDBMM % (" <value = float[1] {1.0}>", "sc, zeros"))
    assert "Add" not in p.stats and ops(model)["Add"] == 1
    # zeros of a larger shape broadcast the scores: [2 * batch, seq, seq] + [2, 2 * batch, seq, seq]
    wide = BADDBMM.replace("zs = Concat <axis = 0> (bh, s, s)", "zs = Concat <axis = 0> (two, bh, s, s)")
    wide = wide.replace("float[M, seq, seq] y", "float[2, M, seq, seq] y")
    proto, model, _, p = run(wide % ("", "sc, zeros"))
    assert "Add" not in p.stats and ops(model)["Add"] == 1
    check_same(proto, model)


def test_slice_to_the_axis_own_symbolic_dim_is_a_noop():
    """TorchScript's h[:, :q.shape[1]] (BLIP-2's Q-Former slices its layer output to the query length, read from
    the mask over the same queries): the end is the sliced axis's own dim S, read back through Shape."""
    proto, model, modified, p = run('''
    g (float[B, S, 4] x, int64[B, S] m) => (float[B, S, 4] y)
    <int64[1] st = {0}, int64[1] ax = {1}>
    {
        e = Shape<start = 1, end = 2>(m)
        s = Slice(x, st, e, ax)
        y = Relu(s)
    }''')
    assert modified and p.stats == {"Slice": 1} and ops(model) == {"Shape": 1, "Relu": 1}
    check_same(proto, model)


@pytest.mark.parametrize("sig,shape_attrs", [
    ("float[B, S, 4] x, int64[B, T] m", "start = 1, end = 2"),  # another dim T: might cut
    ("float[B, S, 4] x, int64[B, S] m", "start = 0, end = 1"),  # the batch dim read as the end of axis 1
])
def test_slice_to_another_symbolic_dim_is_kept(sig, shape_attrs):
    proto, model, modified, _ = run(f'''
    g ({sig}) => (float[B, S, 4] y)
    <int64[1] st = {{0}}, int64[1] ax = {{1}}>
    {{
        e = Shape<{shape_attrs}>(m)
        s = Slice(x, st, e, ax)
        y = Relu(s)
    }}''')
    assert not modified and ops(model).get("Slice") == 1
