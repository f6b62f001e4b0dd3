"""Dims onnx leaves unknown, named from earlier values (passes/_dim_source.py, run by shape
inference), so that CSE reads them from a graph input (passes/shape_cse.py) and the intermediate
they were read from no longer escapes a fusion by its size."""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from pass_testing import apply, check_same, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# BLOOM's idiom (TorchScript/Optimum): k [B,H,T,D] viewed as [B*H,T,D] for bmm, transposed, and
# the causal mask sliced at the key length read from Shape(k^T)[2]. onnx cannot size the view
# (its target is computed), so the dims of k3 and kt are invented; the length is k's dim 2.
KT_LENGTH = '''
g (float[B, 2, T, 16] k, float[B, 2, S, 16] q, float[B, 1, S, M] mask)
    => (float[?, ?, ?] scores, float[?, ?, ?, ?] m)
{
    zero = Constant<value = int64 {0}>()
    two = Constant<value = int64 {2}>()
    ax0 = Constant<value = int64[1] {0}>()
    tail = Constant<value = int64[2] {-1, 16}>()
    sk = Shape(k)
    b = Gather<axis = 0>(sk, zero)
    bh = Mul(b, two)
    bh1 = Unsqueeze(bh, ax0)
    t3 = Concat<axis = 0>(bh1, tail)
    k3 = Reshape(k, t3)
    q3 = Reshape(q, t3)
    kt = Transpose<perm = [0, 2, 1]>(k3)
    scores = MatMul(q3, kt)
    skt = Shape(kt)
    len = Gather<axis = 0>(skt, two)
    len1 = Unsqueeze(len, ax0)
    three = Constant<value = int64[1] {3}>()
    m = Slice(mask, ax0, len1, three)
}'''


def _run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(CommonSubexpressionEliminationPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, p


def _shape_readers(model) -> set[str]:
    return {n.inputs[0].name for n in model.graph if n.op_type == "Shape"}


def _feeds(b=3, t=7, s=4, m=9, kv_heads=2) -> dict:
    rng = np.random.default_rng(0)
    f = lambda *sh: rng.standard_normal(sh, dtype=np.float32)  # noqa: E731
    return {"k": f(b, kv_heads, t, 16), "q": f(b, 2, s, 16), "mask": f(b, 1, s, m)}


def _dims(model, name):
    v = next(o for n in model.graph for o in n.outputs if o.name == name)
    return [d if isinstance(d, int) else (None if d.value is None else str(d.value)) for d in v.shape]


def _unknown(d) -> bool:
    return d is None or (isinstance(d, str) and d.startswith("unk__"))


def test_length_read_from_kt_is_read_from_k():
    proto, model, modified, p = _run(KT_LENGTH)
    # the views are named from their targets and k: [2*B, T, 16], k^T [2*B, 16, T]
    assert _dims(model, "k3") == ["2*B", "T", 16] and _dims(model, "kt") == ["2*B", 16, "T"]
    assert modified and p.stats["shape values"] >= 1
    assert _shape_readers(model) == {"k"}
    check_same(proto, model, inputs=_feeds())


def test_second_run_changes_nothing():
    _, model, _, _ = _run(KT_LENGTH)
    assert not CommonSubexpressionEliminationPass()(model).modified


def test_view_not_provably_of_k_is_kept():
    # near miss: the view's first entry is read from q, not k, so the -1 is not provably k's T
    # (the two batch dims are different symbols); the read of Shape(kt) must stay
    text = KT_LENGTH.replace("float[B, 2, S, 16] q", "float[C, 2, S, 16] q").replace(
        "sk = Shape(k)", "sk = Shape(q)").replace("float[B, 1, S, M] mask", "float[C, 1, S, M] mask")
    proto, model, modified, p = _run(text)
    # k3's -1 stays unproven (only the Transpose is proven): named after the view k3 itself
    # (passes/_dim_source.py, _unsolved), not k's T, so nothing earlier to read instead
    d = _dims(model, "kt")[2]
    assert _unknown(d) or d.startswith("dim__k3_1_"), d
    assert not p.stats.get("shape values") and _shape_readers(model) == {"q", "kt"}
    # where C != B the view is k with another split (T*B/C rows): the mask is cut at that length
    feeds = _feeds(b=2)
    feeds["q"] = np.ones((4, 2, 4, 16), np.float32)
    feeds["mask"] = np.ones((4, 1, 4, 9), np.float32)
    feeds["k"] = np.ones((2, 2, 8, 16), np.float32)
    check_same(proto, model, inputs=feeds)


def test_broadcast_of_two_unsized_operands_is_kept():
    # near miss: Shape(y)[0] of y = a3 + b3 where both views' first dims are unknown (either may be
    # 1 and broadcast): no operand provably carries the dim, so the read stays on y
    proto, model, modified, p = _run('''
    g (float[B, 2, T, 16] a, float[N, 16] b) => (float[?, ?, ?] y, int64 n)
    {
        zero = Constant<value = int64 {0}>()
        ax0 = Constant<value = int64[1] {0}>()
        tail = Constant<value = int64[2] {-1, 16}>()
        sa = Shape(a)
        c = Gather<axis = 0>(sa, zero)
        c1 = Unsqueeze(c, ax0)
        t3 = Concat<axis = 0>(c1, tail)
        a3 = Reshape(a, t3)
        sb = Shape(b)
        n0 = Gather<axis = 0>(sb, zero)
        n1 = Unsqueeze(n0, ax0)
        tb = Concat<axis = 0>(n1, tail)
        b3 = Reshape(b, tb)
        y = Add(a3, b3)
        sy = Shape(y)
        n = Gather<axis = 0>(sy, zero)
    }''')
    # y's dim is named after y itself (two sizes broadcast: passes/_dim_source.py, _unsolved)
    d = _dims(model, "y")[0]
    assert _dims(model, "a3")[0] == "B" and (_unknown(d) or d.startswith("dim__y_0_")), d
    assert "y" in _shape_readers(model)
    rng = np.random.default_rng(0)
    check_same(proto, model, inputs={"a": rng.standard_normal((3, 2, 5, 16), dtype=np.float32),
                                     "b": rng.standard_normal((1, 16), dtype=np.float32)})


# BERT-family TorchScript embeddings: word embeddings [B, S] plus position_ids[:, :S] cut from a
# [1, 128] buffer (min(S, 128) rows: onnx cannot tell), and a Range(0, S) of relative positions
POSITIONS = '''
g (int64[B, S] ids, float[1, 128] pos, int64[B, T] other) => (float[?, ?] y, int64[?] r)
{
    one = Constant<value = int64[1] {1}>()
    two = Constant<value = int64[1] {2}>()
    zero = Constant<value = int64[1] {0}>()
    s = Shape(READ)
    e = Slice(s, one, two)
    p = Slice(pos, zero, e, one)
    x = Cast<to = 1>(ids)
    y = Add(x, p)
    n = Squeeze(e, zero)
    z = Constant<value = int64 {0}>()
    d = Constant<value = int64 {1}>()
    r = Range(z, n, d)
}'''


def test_position_slice_broadcast_and_range_are_named():
    proto, model, _, _ = _run(POSITIONS.replace("READ", "ids"))
    assert _dims(model, "p") == [1, None] or _unknown(_dims(model, "p")[1])
    assert _dims(model, "y") == ["B", "S"] and _dims(model, "r") == ["S"]
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, 9, (2, 5)), "pos": rng.standard_normal((1, 128), dtype=np.float32),
             "other": rng.integers(0, 9, (2, 5))}
    check_same(proto, model, inputs=feeds)


def test_slice_cut_at_another_length_is_not_named():
    # near miss: the buffer is cut at T, not at S: min(T, 128) may be 1 and broadcast, or T == S
    _, model, _, _ = _run(POSITIONS.replace("READ", "other"))
    assert _dims(model, "y")[0] == "B" and _unknown(_dims(model, "y")[1])
    assert _dims(model, "r") == ["T"]


def test_equal_of_one_symbol_folds():
    from onnx_fuse.passes.constant_folding import ConstantFoldingPass

    proto = parse(HEADER + '''
    g (int64[B, S] a, float[B, S, 8] b) => (bool e, bool f, bool h)
    {
        one = Constant<value = int64 {1}>()
        two = Constant<value = int64 {2}>()
        sa = Shape(a)
        sb = Shape(b)
        x = Gather<axis = 0>(sa, one)
        y = Gather<axis = 0>(sb, one)
        z = Gather<axis = 0>(sb, two)
        w = Gather<axis = 0>(sb, one)
        e = Equal(x, y)
        f = Equal(x, z)
        h = Equal(z, w)
    }''')
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    # S == S folds to true; S == 8 is unknown (S may be 8) and stays; 8 == S likewise
    assert modified and [n.op_type for n in model.graph].count("Equal") == 2
    rng = np.random.default_rng(0)
    check_same(proto, model, inputs={"a": rng.integers(0, 9, (2, 8)),
                                     "b": rng.standard_normal((2, 8, 8), dtype=np.float32)})


# GPT-NeoX under TorchScript (transformers 4.38): the causal buffer [1, 1, M, M] cut to the queries'
# rows at [T - S : T] and the keys' columns at [: T], where T = Shape(key)[2] (past + new with a
# cache) and S = Shape(q)[2]; onnx sizes none of the slice's dims, so the Where over the scores
# (and all that follows it: the layer's output, every later layer) got invented dims.
CAUSAL_BUFFER = '''
g (float[B, 2, P, 16] past, float[B, 2, S, 16] k, float[B, 2, S, 16] q, bool[1, 1, 64, 64] bias)
    => (float[?, ?, ?, ?] w, float[?, ?, ?, ?] key)
{
    two = Constant<value = int64 {2}>()
    ax0 = Constant<value = int64[1] {0}>()
    ax2 = Constant<value = int64[1] {2}>()
    ax3 = Constant<value = int64[1] {3}>()
    low = Constant<value = float {-3.4e38}>()
    key = Concat<axis = 2>(past, k)
    sk = Shape(key)
    t = Gather<axis = 0>(sk, two)
    sq = Shape(q)
    s = Gather<axis = 0>(sq, two)
    t1 = Unsqueeze(t, ax0)
    START
    rows = Slice(bias, start1, END, ax2)
    causal = Slice(rows, ax0, t1, ax3)
    kt = Transpose<perm = [0, 1, 3, 2]>(key)
    scores = MatMul(q, kt)
    w = Where(causal, scores, low)
}'''
_T_MINUS_S = '''d = Sub(t, s)
    start1 = Unsqueeze(d, ax0)'''


def _causal_feeds(b=2, p=3, s=4, m=64):
    rng = np.random.default_rng(0)
    f = lambda *sh: rng.standard_normal(sh, dtype=np.float32)  # noqa: E731
    bias = np.tril(np.ones((m, m), dtype=bool)).reshape(1, 1, m, m)
    return {"past": f(b, 2, p, 16), "k": f(b, 2, s, 16), "q": f(b, 2, s, 16), "bias": bias}


def test_causal_buffer_rows_at_t_minus_s_are_named():
    proto, model, _, _ = _run(CAUSAL_BUFFER.replace("START", _T_MINUS_S).replace("END", "t1"))
    # the slice keeps the buffer's leading 1s (its computed bounds cut axes 2 and 3 only); its
    # rows hold min(T, 64) - min(T - S, 64) <= S entries, so the Where is the scores' size
    assert _dims(model, "rows")[:2] == [1, 1] and _dims(model, "causal")[:2] == [1, 1]
    assert _dims(model, "w") == ["B", 2, "S", "P + S"]
    check_same(proto, model, inputs=_causal_feeds())
    check_same(proto, model, inputs=_causal_feeds(p=0, s=1))


def test_causal_buffer_rows_past_the_queries_are_not_named():
    # near misses: rows [T - S : T + 1] may hold S + 1 entries (and broadcast-fail at run time),
    # and rows [S - T : T] start at a difference that may be negative (counted from the end)
    one = "\n    e1 = Constant<value = int64[1] {1}>()\n    t2 = Add(t1, e1)"
    _, model, _, _ = _run(CAUSAL_BUFFER.replace("START", _T_MINUS_S + one).replace("END", "t2"))
    assert _unknown(_dims(model, "w")[2]) and _dims(model, "w")[3] == "P + S"
    neg = _T_MINUS_S.replace("Sub(t, s)", "Sub(s, t)")
    _, model, _, _ = _run(CAUSAL_BUFFER.replace("START", neg).replace("END", "t1"))
    assert _unknown(_dims(model, "w")[2])


# The same buffer in a decode-only export (S fixed at 1, so TorchScript's T - S is T - 1): rows
# [T - 1 : T] hold at most one entry, and broadcast against the scores' static 1 they are 1.
DECODE = CAUSAL_BUFFER.replace("float[B, 2, S, 16] k, float[B, 2, S, 16] q",
                               "float[B, 2, 1, 16] k, float[B, 2, 1, 16] q")
_T_MINUS_1 = '''e1 = Constant<value = int64 {1}>()
    d = Sub(t, e1)
    start1 = Unsqueeze(d, ax0)'''


def test_decode_causal_row_against_one_query_is_named():
    proto, model, _, _ = _run(DECODE.replace("START", _T_MINUS_1).replace("END", "t1"))
    assert _dims(model, "w") == ["B", 2, 1, "P + 1"]
    feeds = {k: v[:, :, :1] if k in ("k", "q") else v for k, v in _causal_feeds().items()}
    check_same(proto, model, inputs=feeds)
    check_same(proto, model, inputs={**feeds, "past": feeds["past"][:, :, :0]})


def test_decode_causal_rows_that_may_hold_two_are_not_named():
    two = "\n    e2 = Constant<value = int64[1] {1}>()\n    t2 = Add(t1, e2)"
    _, model, _, _ = _run(DECODE.replace("START", _T_MINUS_1 + two).replace("END", "t2"))
    assert _unknown(_dims(model, "w")[2]) and _dims(model, "w")[3] == "P + 1"
