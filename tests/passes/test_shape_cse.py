"""CSE of shape values: the same symbolic dims read from different tensors are one value."""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# Two layers' glue: each reads the past length from its own cache and the batch from its own
# query, as the per-layer attention and RoPE lowerings do.
PER_LAYER = '''
g (float[B, 4, P, 8] pk0, float[B, 4, P, 8] pk1, float[B, 1, 1, P] m, float[B, 1, 1, P] m1,
   float[B, 2, 8] x0, float[B, 2, 8] x1)
    => (float[B, 1, 1, P] y0, float[B, 1, 1, P] y1, float[B, 2, 8] z0, float[B, 2, 8] z1)
{
    two = Constant<value = int64[1] {2}>()
    three = Constant<value = int64[1] {3}>()
    ones = Constant<value = int64[3] {1, 1, 1}>()
    s0 = Shape(pk0)
    p0 = Slice(s0, two, three)
    t0 = Concat<axis = 0>(ones, p0)
    y0 = Expand(m, t0)
    s1 = Shape(pk1)
    p1 = Slice(s1, two, three)
    t1 = Concat<axis = 0>(ones, p1)
    y1 = Expand(m1, t1)
    b0 = Shape<start = 0, end = 1>(x0)
    b1 = Shape<start = 0, end = 1>(x1)
    c = Constant<value = int64[2] {2, 8}>()
    e0 = Concat<axis = 0>(b0, c)
    e1 = Concat<axis = 0>(b1, c)
    z0 = Expand(x0, e0)
    z1 = Expand(x1, e1)
}'''


def _run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, p


def _feeds(b: int, p: int) -> dict:
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    return {"pk0": f(b, 4, p, 8), "pk1": f(b, 4, p, 8), "m": f(b, 1, 1, p), "m1": f(b, 1, 1, p), "x0": f(b, 2, 8),
            "x1": f(b, 2, 8)}


def test_same_dim_names_from_different_tensors_merge():
    proto, model, modified, p = _run(PER_LAYER)
    assert modified and p.stats["shape values"] >= 4  # p1 -> p0, t1 -> t0, b1 -> b0, e1 -> e0
    # one value per dim list, each read straight from a graph input: [P] as Shape(pk0)[2:3],
    # [B, 2, 8] (b0 concatenated with [2, 8]) as Shape(x0); the twin Concats merged too
    assert ops(model) == {"Constant": 1, "Shape": 2, "Concat": 1, "Expand": 4}
    assert all(n.inputs[0].is_graph_input() for n in model.graph if n.op_type == "Shape")
    check_same(proto, model, inputs=_feeds(3, 5))


def test_different_or_unnamed_dims_are_kept():
    text = PER_LAYER.replace("float[B, 4, P, 8] pk1", "float[B, 4, Q, 8] pk1").replace(
        "float[B, 1, 1, P] m1", "float[B, 1, 1, Q] m1").replace(
        "float[B, 2, 8] x1", "float[?, 2, 8] x1").replace("float[B, 1, 1, P] y1", "float[B, 1, 1, Q] y1")
    text = text.replace("float[B, 2, 8] z1", "float[?, 2, 8] z1")
    proto, model, modified, p = _run(text)
    assert ops(model)["Expand"] == 4 and ops(model)["Concat"] == 3  # e1 is e0 (both B): fine
    feeds = _feeds(3, 5)
    feeds["pk1"] = np.zeros((3, 4, 6, 8), np.float32)  # Q != P: merging would be wrong
    feeds["m1"] = np.ones((3, 1, 1, 6), np.float32)
    check_same(proto, model, inputs=feeds)


def test_scalar_and_vector_of_one_dim_stay_apart():
    proto, model, modified, _ = _run('''
    g (float[B, P] a, float[B, P] b) => (int64[1] v, int64 s)
    {
        v = Shape<start = 1, end = 2>(a)
        w = Shape(b)
        one = Constant<value = int64 {1}>()
        s = Gather<axis = 0>(w, one)
    }''')
    assert not modified and ops(model) == {"Shape": 2, "Constant": 1, "Gather": 1}


# A cache's present read by its own length (BLOOM 4.45 and GPT-NeoX 4.38 cut their masks at the
# keys' length): P + S is no input's dim, so the read is rebuilt as Shape(past)[2] + Shape(k)[2]
# (and P + 1 as Shape(past)[2] + 1); a size plus 0 (0 + P) is left as written.
PRESENT_LENGTH = '''
g (float[B, 2, P, 8] past, float[B, 2, S, 8] k, float[B, 1, S, M] mask)
    => (float[B, 2, ?, 8] present, float[B, 1, S, ?] y, int64[1] q)
{
    zero = Constant<value = int64[1] {0}>()
    two = Constant<value = int64[1] {2}>()
    three = Constant<value = int64[1] {3}>()
    present = Concat<axis = 2>(past, k)
    sp = Shape(present)
    t = Slice(sp, two, three)
    y = Slice(mask, zero, t, three)
    spast = Shape(past)
    p = Slice(spast, two, three)
    q = Add(zero, p)
}'''


def test_a_present_length_is_read_from_the_inputs():
    proto, model, modified, _ = _run(PRESENT_LENGTH)
    assert modified
    readers = {n.inputs[0].name for n in model.graph if n.op_type == "Shape"}
    assert readers == {"past", "k"}, readers
    assert ops(model)["Add"] == 2   # the sum, and 0 + P as written
    assert not CommonSubexpressionEliminationPass()(model).modified
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    check_same(proto, model, inputs={"past": f(2, 2, 3, 8), "k": f(2, 2, 4, 8), "mask": f(2, 1, 4, 9)})


def test_a_decode_present_length_plus_one_is_read_from_the_inputs():
    """Decode-only (S = 1): the present's length is ``P + 1``, which shape_entries reads as that sum,
    so Shape(past)[2] + 1 replaces the present's read (a mask cut there made attention-kv-cache a
    cycle: GPT-NeoX 4.38's decode step); 0 + P still stays as written."""
    text = PRESENT_LENGTH.replace("float[B, 2, S, 8] k", "float[B, 2, 1, 8] k").replace(
        "float[B, 1, S, M] mask", "float[B, 1, 1, M] mask").replace("float[B, 1, S, ?] y", "float[B, 1, 1, ?] y")
    proto, model, modified, _ = _run(text)
    assert modified
    readers = {n.inputs[0].name for n in model.graph if n.op_type == "Shape"}
    assert readers == {"past"}, readers
    assert ops(model)["Add"] == 2   # past + 1, and 0 + P as written
    assert not CommonSubexpressionEliminationPass()(model).modified
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    check_same(proto, model, inputs={"past": f(2, 2, 3, 8), "k": f(2, 2, 1, 8), "mask": f(2, 1, 1, 9)})


# A cache mask rebuild's glue (rules/attention/lower.yaml, cache-causal-grid): the scalar P + S
# feeds a Range that stays, and its Unsqueeze is the end of a cut of the mask. The 1-D [P + S]
# read fresh from the inputs is Shape(past)[2:3] + Shape(ids)[1:2], 3 nodes; the Unsqueeze is 1.
REBUILT_LENGTH = '''
g (float[B, 2, P, 8] past, int64[B, S] ids, float[B, T] mask) => (int64[?] keys, float[B, ?] cut)
{
    zero = Constant<value = int64 {0}>()
    one = Constant<value = int64 {1}>()
    two = Constant<value = int64 {2}>()
    zero1 = Constant<value = int64[1] {0}>()
    one1 = Constant<value = int64[1] {1}>()
    sp = Shape(past)
    p = Gather<axis = 0>(sp, two)
    si = Shape(ids)
    s = Gather<axis = 0>(si, one)
    t = Add(p, s)
    keys = Range(zero, t, one)
    te = Unsqueeze(t, zero1)
    cut = Slice(mask, zero1, te, one1)
}'''


def _rebuilt_feeds() -> dict:
    rng = np.random.default_rng(0)
    return {"past": rng.standard_normal((2, 2, 3, 8), dtype=np.float32), "ids": np.ones((2, 4), np.int64),
            "mask": rng.standard_normal((2, 9), dtype=np.float32)}


def test_a_copy_cheaper_than_the_input_read_is_kept():
    """The Unsqueeze of a scalar that stays alive costs 1 node; the fresh read of [P + S] from the
    inputs would cost 3 (2 Shapes and the Add): the copy stays the representative."""
    proto, model, _, _ = _run(REBUILT_LENGTH)
    assert ops(model) == {"Constant": 5, "Shape": 2, "Gather": 2, "Add": 1, "Range": 1, "Unsqueeze": 1,
                          "Slice": 1}, ops(model)
    check_same(proto, model, inputs=_rebuilt_feeds())


def test_a_dead_copy_is_no_representative():
    """An equal [P + S] the rewrite left dead (its Slice reaches no output) comes first and reads
    the inputs, but it must not take the live Unsqueeze's uses: that would keep its 3 nodes alive
    instead of the 1."""
    text = REBUILT_LENGTH.replace("    sp = Shape(past)\n", '''    sp = Shape(past)
    dp = Shape<start = 2, end = 3>(past)
    ds = Shape<start = 1, end = 2>(ids)
    dt = Add(dp, ds)
    dead = Slice(mask, zero1, dt, one1)
''')
    proto, model, _, _ = _run(text)
    assert ops(model) == {"Constant": 5, "Shape": 2, "Gather": 2, "Add": 1, "Range": 1, "Unsqueeze": 1,
                          "Slice": 1}, ops(model)
    check_same(proto, model, inputs=_rebuilt_feeds())


def test_an_input_read_cheaper_than_the_copy_is_taken():
    """Without the Range the scalar dies with its Unsqueeze (5 nodes): the 3-node read wins."""
    text = REBUILT_LENGTH.replace("(int64[?] keys, float[B, ?] cut)", "(float[B, ?] cut)").replace(
        "    keys = Range(zero, t, one)\n", "")
    proto, model, _, _ = _run(text)
    assert ops(model) == {"Constant": 2, "Shape": 2, "Add": 1, "Slice": 1}, ops(model)
    assert {n.inputs[0].name for n in model.graph if n.op_type == "Shape"} == {"past", "ids"}
    check_same(proto, model, inputs=_rebuilt_feeds())


def test_a_copy_reading_another_input_gives_way():
    """The scalar reads S from m's shape, the fresh read from ids' (the first input holding S): the
    copy is not kept, cheaper or not. Which input a size comes from matters to the mask probes
    (they vary input_ids' length, not attention_mask's)."""
    text = REBUILT_LENGTH.replace("int64[B, S] ids,", "int64[B, S] ids, float[B, S] m,").replace(
        "si = Shape(ids)", "si = Shape(m)")
    proto, model, _, _ = _run(text)
    (cut,) = [n for n in model.graph if n.op_type == "Slice"]
    end = cut.inputs[2].producer()
    assert end.op_type == "Add", end.op_type
    assert sorted(x.producer().inputs[0].name for x in end.inputs) == ["ids", "past"]
    feeds = _rebuilt_feeds()
    feeds["m"] = np.zeros((2, 4), np.float32)
    check_same(proto, model, inputs=feeds)


# roberta torchscript's glue: a 1-D [S] read straight from the input as Gather(Shape(ids), [1]),
# whose full Shape nothing else reads. The fresh read Shape<start = 1, end = 2>(ids) is 1 node
# against the copy's 2, so the cost check that other copies get applies to direct reads too.
DIRECT_READ = '''
g (int64[B, S] ids, float[B, 1, 1, 3] m) => (float[B, 1, S, 3] y)
{
    one = Constant<value = int64[1] {1}>()
    ones = Constant<value = int64[1] {1}>()
    three = Constant<value = int64[1] {3}>()
    si = Shape(ids)
    s = Gather<axis = 0>(si, one)
    b = Shape<start = 0, end = 1>(ids)
    t = Concat<axis = 0>(b, ones, s, three)
    y = Expand(m, t)
}'''


def _direct_feeds() -> dict:
    return {"ids": np.ones((2, 5), np.int64), "m": np.ones((2, 1, 1, 3), np.float32)}


def test_a_direct_read_dearer_than_the_input_read_gives_way():
    """Gather(Shape(ids), [1]) keeps 2 nodes alive, Shape(ids)[1:2] adds 1: the fresh read is
    taken (before, a direct read stayed the representative without the cost check)."""
    proto, model, _, _ = _run(DIRECT_READ)
    assert "Gather" not in ops(model), ops(model)
    assert ops(model)["Shape"] == 2, ops(model)
    check_same(proto, model, inputs=_direct_feeds())


def test_a_direct_read_as_cheap_as_the_input_read_is_kept():
    """When the full Shape stays alive for another reader the copy costs 1 node, as the fresh
    read does: ties keep the direct read (no churn)."""
    text = DIRECT_READ.replace("=> (float[B, 1, S, 3] y)", "=> (float[B, 1, S, 3] y, int64[2] si)")
    proto, model, _, _ = _run(text)
    assert ops(model)["Gather"] == 1 and ops(model)["Shape"] == 2, ops(model)
    check_same(proto, model, inputs=_direct_feeds())
