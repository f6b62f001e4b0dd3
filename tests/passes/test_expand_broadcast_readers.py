"""IdentityEliminationPass: an Expand whose every reader is an elementwise op that broadcasts its inputs, with
another input of a shape the Expand's output broadcasts into, goes: the readers read its input.

MobileViT V2's separable attention writes ``context_vector.expand_as(value) * relu(value)``: dynamo exports
Expand(sum [B, C, P, 1], Concat(Shape(pixels)[:1], [C, P, N])) read by a Mul whose other input is [B, C, P, N].
The Mul broadcasts the sum itself, so the Expand (and the shape read feeding it) is work for nothing
(hold-out 37 mobilevitv2 dyn_mask: it stayed with its Concat / Shape, 135 nodes at onnx-O3 since 7d2a7f6).
DistilBERT before transformers 4.46 writes ``scores.masked_fill(mask.expand_as(scores), min)``, CSE shares the
Expand across layers: each Where reads the mask itself (what the retired where-expanded-mask rule did).
"""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# x [N, 8, 4, 16]; s = sum over the last axis, kept [N, 8, 4, 1]; the target reads the batch from x
PRELUDE = '''
        s = ReduceSum <keepdims = 1> (x, ax)
        sh = Shape <start = 0, end = 1> (x)
        t = Concat <axis = 0> (sh, rest)
        e = Expand(s, t)
        r = Relu(x)'''
INITS = '<int64[1] ax = {3}, int64[3] rest = {8, 4, 16}>'


def run(body: str, outputs: str = "float[N, 8, 4, 16] y", inputs: str = "float[N, 8, 4, 16] x"):
    proto = parse(HEADER + f'''
    g ({inputs}) => ({outputs})
    {INITS}
    {{{PRELUDE}
{body}
    }}''')
    return (proto, *pass_and_dce(proto))


def pass_and_dce(proto):
    model, modified, p = apply(IdentityEliminationPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def batch(n: int, **more) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    feeds = {"x": rng.standard_normal((n, 8, 4, 16)).astype(np.float32)}
    for name, shape in more.items():
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def readers_of(model, op_type: str) -> list[list[str]]:
    return [[v.name if v is not None else "" for v in n.inputs] for n in model.graph if n.op_type == op_type]


def test_expand_read_by_mul_of_the_full_shape_goes():
    proto, model, modified, p = run("        y = Mul(r, e)")
    assert modified and p.stats["Expand"] == 1
    assert ops(model) == {"ReduceSum": 1, "Relu": 1, "Mul": 1}
    for n in (1, 3):
        check_same(proto, model, inputs=batch(n))


def test_expand_read_by_several_broadcasting_readers_goes():
    proto, model, modified, p = run('''
        m = Mul(e, r)
        a = Add(x, e)
        c = Greater(e, x)
        w = Where(c, m, a)
        y = Sub(w, e)''')
    assert modified and p.stats["Expand"] == 1 and "Expand" not in ops(model)
    for n in (1, 2):
        check_same(proto, model, inputs=batch(n))


def test_a_non_broadcasting_reader_keeps_the_expand_for_every_reader():
    # MatMul does not broadcast the last two axes: the Expand is its operand's real shape; the Mul keeps
    # reading it too (moving it off an Expand that stays saves nothing)
    proto, model, modified, p = run('''
        tr = Transpose <perm = [0, 1, 3, 2]> (r)
        mm = MatMul(e, tr)
        y = Mul(r, e)''', outputs="float[N, 8, 4, 16] y, float[N, 8, 4, 4] mm")
    assert not modified and ops(model)["Expand"] == 1
    assert readers_of(model, "Mul") == [["r", "e"]]
    check_same(proto, model, inputs=batch(2))


def test_expand_kept_when_the_other_input_is_narrower():
    # Mul(s2 [N, 8, 4, 1], e): without the Expand the product would be [N, 8, 4, 1]
    proto, model, modified, _ = run('''
        s2 = ReduceMax <keepdims = 1> (x, ax)
        y = Mul(s2, e)''')
    assert not modified and "Expand" in ops(model)
    check_same(proto, model, inputs=batch(2))


def test_expand_kept_when_read_twice_by_one_reader_or_a_graph_output():
    proto, model, modified, _ = run("        y = Mul(e, e)")
    assert not modified and "Expand" in ops(model)
    check_same(proto, model, inputs=batch(2))
    # e is a graph output: it stays
    proto, model, modified, p = run("        y = Mul(r, e)", outputs="float[N, 8, 4, 16] y, float[N, 8, 4, 16] e")
    assert not modified and "Expand" in ops(model)
    check_same(proto, model, inputs=batch(2))
    proto, model, modified, _ = run("        y = Neg(e)")
    assert not modified and "Expand" in ops(model)   # Neg does not broadcast a second input


def test_expand_kept_when_the_batch_dims_are_not_provably_equal():
    # z [M, 8, 4, 16]: M is not N, so Mul(z, s) need not be [N, 8, 4, 16]; z [?, 8, 4, 16]: nothing known
    for zdim in ("M", "?"):
        proto, model, modified, _ = run("        y = Mul(z, e)", inputs=f"float[N, 8, 4, 16] x, float[{zdim}, 8, 4, 16] z")
        assert not modified and "Expand" in ops(model), zdim
        check_same(proto, model, inputs=batch(2, z=(2, 8, 4, 16)))
    # z [N, 8, 4, 16]: the same model-given name, the same length
    proto, model, modified, _ = run("        y = Mul(z, e)", inputs="float[N, 8, 4, 16] x, float[N, 8, 4, 16] z")
    assert modified and "Expand" not in ops(model)
    check_same(proto, model, inputs=batch(2, z=(2, 8, 4, 16)))


def test_an_expand_that_grows_the_rank_or_a_reader_of_higher_rank():
    # b [16] expanded to [N, 8, 4, 16] under Add(x, .); c [1, 16] expanded to [4, 16] under Mul(x [N, 8, 4, 16], .)
    proto = parse(HEADER + '''
    g (float[N, 8, 4, 16] x, float[16] b, float[1, 16] c) => (float[N, 8, 4, 16] y)
    <int64[3] rest = {8, 4, 16}, int64[2] four = {4, 16}>
    {
        sh = Shape <start = 0, end = 1> (x)
        t = Concat <axis = 0> (sh, rest)
        eb = Expand(b, t)
        a = Add(x, eb)
        ec = Expand(c, four)
        y = Mul(a, ec)
    }''')
    model, modified, p = pass_and_dce(proto)
    assert modified and p.stats["Expand"] == 2 and "Expand" not in ops(model)
    assert readers_of(model, "Add") == [["x", "b"]] and readers_of(model, "Mul") == [["a", "c"]]
    check_same(proto, model, inputs=batch(3, b=(16,), c=(1, 16)))


def test_a_reader_of_another_shape_that_the_expand_would_grow_keeps_it():
    # Expand(c [1, 16], [4, 16]) read by Mul(z [N, 1, 16], .): the product is [N, 4, 16] only with the Expand
    proto = parse(HEADER + '''
    g (float[N, 1, 16] z, float[1, 16] c) => (float[N, 4, 16] y)
    <int64[2] four = {4, 16}>
    {
        ec = Expand(c, four)
        y = Mul(z, ec)
    }''')
    model, modified, _ = apply(IdentityEliminationPass, proto, shape_inference=True)
    assert not modified and "Expand" in ops(model)


def test_bool_and_int_expands():
    # a bool mask [N, 1, 1, 16] expanded to the scores' [N, 8, 4, 16] under Where and And, an int64 one under Add
    proto = parse(HEADER + '''
    g (float[N, 8, 4, 16] x, bool[N, 1, 1, 16] m, int64[N, 8, 4, 16] k, int64[1, 1, 1, 16] j)
        => (float[N, 8, 4, 16] y, bool[N, 8, 4, 16] both, int64[N, 8, 4, 16] z)
    <float low = {-3.0e38}>
    {
        sh = Shape(x)
        me = Expand(m, sh)
        y = Where(me, low, x)
        pos = Greater(x, low)
        both = And(pos, me)
        je = Expand(j, sh)
        z = Add(je, k)
    }''')
    model, modified, p = pass_and_dce(proto)
    assert modified and p.stats["Expand"] == 2 and "Expand" not in ops(model)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 8, 4, 16)).astype(np.float32),
             "m": rng.random((2, 1, 1, 16)) < 0.3,
             "k": rng.integers(-5, 5, (2, 8, 4, 16)).astype(np.int64),
             "j": rng.integers(-5, 5, (1, 1, 1, 16)).astype(np.int64)}
    check_same(proto, model, inputs=feeds)


def test_shared_expanded_mask_read_by_two_layers_selects():
    # DistilBERT after CSE: one Expand(mask, Shape(layer 0's scores)) read by both layers' Where; the Shape
    # also reads layer 0's scores, so it must go with the Expand
    proto = parse(HEADER + '''
    g (float[N, 2, S, 8] q, float[N, 2, S, 8] k, bool[N, 1, 1, S] m) => (float[N, 2, S, S] y)
    <float low = {-3.0e38}>
    {
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        s0 = MatMul(q, kt)
        sh = Shape(s0)
        me = Expand(m, sh)
        w0 = Where(me, low, s0)
        p0 = Softmax <axis = -1> (w0)
        s1 = MatMul(p0, s0)
        w1 = Where(me, low, s1)
        y = Softmax <axis = -1> (w1)
    }''')
    model, modified, p = pass_and_dce(proto)
    assert modified and p.stats["Expand"] == 1
    assert "Expand" not in ops(model) and "Shape" not in ops(model)
    assert all(ins[0] == "m" for ins in readers_of(model, "Where"))
    rng = np.random.default_rng(5)
    m = np.zeros((2, 1, 1, 5), bool)
    m[1, ..., 3:] = True
    feeds = {"q": rng.standard_normal((2, 2, 5, 8)).astype(np.float32),
             "k": rng.standard_normal((2, 2, 5, 8)).astype(np.float32), "m": m}
    check_same(proto, model, inputs=feeds)


# -- one-input elementwise readers (Not, Cast, Neg ...) read through: u(Expand(a)) = Expand(u(a)) ------------------

def mask_graph(body: str, outputs: str = "float[N, 8, 4, 16] y"):
    """x [N, 8, 4, 16] scores, m [N, 1, 1, 16] a key mask (True = keep), me = Expand(m, Shape(x))."""
    return parse(HEADER + f'''
    g (float[N, 8, 4, 16] x, bool[N, 1, 1, 16] m) => ({outputs})
    <float low = {{-3.0e38}}>
    {{
        sh = Shape(x)
        me = Expand(m, sh)
{body}
    }}''')


def mask_feeds(n: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    m = rng.random((n, 1, 1, 16)) < 0.7
    m[-1, ..., 9:] = False   # the last row padded
    return {"x": rng.standard_normal((n, 8, 4, 16)).astype(np.float32), "m": m}


def test_expand_read_through_a_not_under_a_where_goes():
    # masked_fill(~mask.expand_as(s), min): Where(Not(Expand(m, Shape(s))), min, s); the Not reads m
    proto = mask_graph('''
        nm = Not(me)
        y = Where(nm, low, x)''')
    model, modified, p = pass_and_dce(proto)
    assert modified and p.stats["Expand"] == 1
    assert ops(model) == {"Not": 1, "Where": 1}
    assert readers_of(model, "Not") == [["m"]]
    not_out = next(n for n in model.graph if n.op_type == "Not").outputs[0]
    assert [d if isinstance(d, int) else str(d) for d in not_out.shape] == ["N", 1, 1, 16]
    for n in (1, 3):
        check_same(proto, model, inputs=mask_feeds(n))


def test_expand_read_through_a_chain_of_unary_readers_and_direct_readers_goes():
    # Not -> Cast -> Neg chains, shared by two readers, beside a direct broadcasting reader
    proto = mask_graph('''
        nm = Not(me)
        w = Where(nm, low, x)
        f = Cast <to = 1> (nm)
        g = Neg(f)
        a = Add(w, g)
        b = Mul(g, x)
        pos = Greater(x, low)
        k = And(me, pos)
        y = Where(k, a, b)''')
    model, modified, p = pass_and_dce(proto)
    assert modified and p.stats["Expand"] == 1 and "Expand" not in ops(model) and "Shape" not in ops(model)
    check_same(proto, model, inputs=mask_feeds(2))


def test_a_unary_reader_with_a_reader_that_needs_the_expanded_form_keeps_the_expand():
    # the Not's output is a graph output, read by a Reshape, or by a Mul whose other input is narrower: the
    # Expand and every reader stay
    for body, outs in (('''
        nm = Not(me)
        y = Where(nm, low, x)''', "float[N, 8, 4, 16] y, bool[N, 8, 4, 16] nm"), ('''
        nm = Not(me)
        y = Where(nm, low, x)
        flat = Reshape(nm, minus1)''', "float[N, 8, 4, 16] y, bool[?] flat"), ('''
        f = Cast <to = 1> (me)
        ng = Neg(f)
        y = Where(me, x, low)
        s2 = ReduceMax <keepdims = 1> (x, ax)
        z = Mul(ng, s2)''', "float[N, 8, 4, 16] y, float[N, 8, 4, 16] z")):
        body = body.replace("minus1", "m1")
        proto = parse(HEADER + f'''
    g (float[N, 8, 4, 16] x, bool[N, 1, 1, 16] m) => ({outs})
    <float low = {{-3.0e38}}, int64[1] m1 = {{-1}}, int64[1] ax = {{3}}>
    {{
        sh = Shape(x)
        me = Expand(m, sh)
{body}
    }}''')
        model, modified, _ = pass_and_dce(proto)
        assert not modified and ops(model)["Expand"] == 1, body
        assert [r[0] for r in readers_of(model, "Not") + readers_of(model, "Cast")] == ["me"], body
        check_same(proto, model, inputs=mask_feeds(2))


def test_a_co_input_read_through_the_same_expand_does_not_count():
    # Add(e, Neg(e)): Neg(e) has the full dims, but only through the Expand; without it the sum is [N, 8, 4, 1]
    proto, model, modified, _ = run('''
        ng = Neg(e)
        y = Add(e, ng)''')
    assert not modified and ops(model)["Expand"] == 1
    check_same(proto, model, inputs=batch(2))
    # the same through a unary reader on each side: Add(Relu(e), Neg(e))
    proto, model, modified, _ = run('''
        ng = Neg(e)
        rl = Relu(e)
        y = Add(rl, ng)''')
    assert not modified and ops(model)["Expand"] == 1
    check_same(proto, model, inputs=batch(2))
