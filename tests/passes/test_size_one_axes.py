"""SizeOneAxesPass: the size-1 axes of tf2onnx's einsum decomposition moved past Transposes and into
Reshapes, v's merged-heads view, the scores' scale before their view, Shape of a view, Max(a, a).
Each case checks op counts and the outputs against the original in ONNX Runtime; refusals stay."""

from __future__ import annotations

import pytest
from pass_testing import apply, check_same, ops, parse

from onnx_fuse.passes.size_one_axes import SizeOneAxesPass

HEAD = '<ir_version: 9, opset_import: ["" : 17]>'


def _run(text: str):
    proto = parse(text)
    model, modified, p = apply(SizeOneAxesPass, proto, shape_inference=True)
    return proto, model, modified, p


def test_query_view_through_unsqueeze():
    """q [B,S,N,H] -> Unsqueeze(3) -> Transpose [0,2,1,3,4] -> Reshape [B*N, -1, H] (tf2onnx's scores
    einsum) becomes Transpose [0,2,1,3] -> Reshape."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 5, 4, 16] q) => (float[8, 5, 16] y) {{
    ax = Constant<value = int64[1] {{3}}>()
    t = Constant<value = int64[3] {{8, -1, 16}}>()
    u = Unsqueeze(q, ax)
    p = Transpose<perm = [0, 2, 1, 3, 4]>(u)
    r = Reshape(p, t)
    y = Relu(r)
}}""")
    assert modified and p.stats["transpose-unsqueeze"] == 1 and p.stats["reshape-unsqueeze"] == 1
    assert ops(model) == {"Transpose": 1, "Reshape": 1, "Relu": 1, "Constant": 1}, ops(model)
    check_same(proto, model)


def test_product_view_squeezed_with_shape_read_target():
    """MatMul [B*N,S,T] -> Reshape(Concat(Shape(x)[0:1], [4, 5, 5], [1])) -> Squeeze(4): one Reshape
    whose Concat drops the constant 1."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[B, 5, 16] x, float[B4, 5, 16] a, float[B4, 16, 5] b) => (float[B, 4, 5, 5] y) {{
    mm = MatMul(a, b)
    sx = Shape<start = 0, end = 1>(x)
    c = Constant<value = int64[3] {{4, 5, 5}}>()
    one = Constant<value = int64[1] {{1}}>()
    t = Concat<axis = 0>(sx, c, one)
    r = Reshape(mm, t)
    ax = Constant<value = int64[1] {{4}}>()
    y = Squeeze(r, ax)
}}""")
    assert modified and p.stats["squeeze-reshape"] == 1
    assert "Squeeze" not in ops(model), ops(model)
    import numpy as np
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 5, 16)).astype(np.float32),
             "a": rng.standard_normal((8, 5, 16)).astype(np.float32),
             "b": rng.standard_normal((8, 16, 5)).astype(np.float32)}
    check_same(proto, model, inputs=feeds)


def test_squeeze_of_a_computed_entry_stays():
    """The squeezed entry is read from a shape (not a constant 1): the Squeeze stays."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 3, 1] x, float[6] a) => (float[2, 3] y) {{
    s = Shape(x)
    r = Reshape(a, s)
    ax = Constant<value = int64[1] {{2}}>()
    y = Squeeze(r, ax)
}}""")
    assert p.stats["squeeze-reshape"] == 0 and ops(model)["Squeeze"] == 1


def test_reshape_copying_a_dim_keeps_its_unsqueeze():
    """A 0 entry copies the input's dim at its index, which the Unsqueeze shifted: refused."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 3, 4] x) => (float[1, 2, 12] y) {{
    ax = Constant<value = int64[1] {{0}}>()
    u = Unsqueeze(x, ax)
    t = Constant<value = int64[3] {{0, 2, -1}}>()
    y = Reshape(u, t)
}}""")
    assert p.stats["reshape-unsqueeze"] == 0 and ops(model)["Unsqueeze"] == 1
    check_same(proto, model)


def test_value_view_becomes_head_split():
    """v [B,S,N,H] -> Transpose [0,2,3,1] -> Reshape [B*N, -1, S] -> Transpose [0,2,1] is
    Transpose [0,2,1,3] -> Reshape [B*N, S, -1]; K^T's view (Transpose [0,2,1,3] first) stays."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 5, 4, 16] v, float[2, 5, 4, 16] k, float[8, 5, 5] pr, float[8, 5, 16] q)
    => (float[8, 5, 16] o, float[8, 5, 5] s) {{
    vt = Transpose<perm = [0, 2, 3, 1]>(v)
    tv = Constant<value = int64[3] {{8, -1, 5}}>()
    v3 = Reshape(vt, tv)
    vv = Transpose<perm = [0, 2, 1]>(v3)
    o = MatMul(pr, vv)
    kt4 = Transpose<perm = [0, 2, 1, 3]>(k)
    tk = Constant<value = int64[3] {{8, -1, 16}}>()
    k3 = Reshape(kt4, tk)
    kt = Transpose<perm = [0, 2, 1]>(k3)
    s = MatMul(q, kt)
}}""")
    assert modified and p.stats["transpose-batch-merge"] == 1
    assert ops(model)["Transpose"] == 3, ops(model)   # v's one, K's two
    check_same(proto, model)


def test_scale_moves_before_the_scores_view():
    proto, model, modified, p = _run(f"""{HEAD}
g (float[8, 5, 16] a, float[8, 16, 5] b) => (float[2, 4, 5, 5] y, float[2, 4, 5, 5] z) {{
    mm = MatMul(a, b)
    t = Constant<value = int64[4] {{2, 4, 5, 5}}>()
    r = Reshape(mm, t)
    c = Constant<value = float {{0.25}}>()
    y = Mul(r, c)
    mm2 = MatMul(a, b)
    r2 = Reshape(mm2, t)
    w = Constant<value = float[5] {{1, 2, 3, 4, 5}}>()
    z = Mul(r2, w)
}}""")
    assert p.stats["scale-before-view"] == 1   # the per-key weights [5] stay after the view
    check_same(proto, model)


def test_shape_of_view_reads_its_target():
    proto, model, modified, p = _run(f"""{HEAD}
g (float[B, 4, 5] a, float[B, 5, 5] w, float[B, 3] m) => (float[B, 20] y, int64[2] s, int64[2] s2, int64[2] s3) {{
    x = MatMul(a, w)
    b = Shape<start = 0, end = 1>(m)
    c = Constant<value = int64[1] {{20}}>()
    t = Concat<axis = 0>(b, c)
    y = Reshape(x, t)
    s = Shape(y)
    t2 = Constant<value = int64[2] {{-1, 20}}>()
    y2 = Reshape(x, t2)
    s2 = Shape(y2)
    y3 = Reshape(a, t)
    s3 = Shape(y3)
}}""")
    # the view with -1 keeps its Shape, and so does a view of a value that is no product
    assert p.stats["shape-of-view"] == 1
    assert ops(model)["Shape"] == 3, ops(model)
    check_same(proto, model)


def test_max_of_one_value():
    proto, model, modified, p = _run(f"""{HEAD}
g (int64[2] a) => (int64[2] y) {{
    m = Max(a, a)
    y = Neg(m)
}}""")
    assert p.stats["max-same"] == 1 and ops(model) == {"Neg": 1}


def _readers_outside(model) -> list[str]:
    """Values of the graph read by a node that is not in it: a node made and then dropped by a
    refused rewrite still counts as a reader (dead-code elimination then keeps its producers)."""
    return [f"{v.name} <- {u.op_type}" for n in model.graph for v in n.outputs
            for u, _ in v.uses() if u.graph is not model.graph]


def test_key_view_of_a_concat_refused_leaves_no_reader():
    """GPT-2's sdpa K^T: the cache Concat(past, new) [B,2,T,8] -> Reshape(Concat(-1, Shape(k)[2:3], 8))
    -> Transpose [0,2,1]. Its source is no Transpose: refused, and the target's Shape slice gains no
    reader (the refusal made its new Concat first, which kept Shape(present.N.key) alive at -O4 trt
    and GPT-2's static decode lost its paging)."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[B, 2, 3, 8] pk, float[B, 2, 1, 8] k) => (float[N, 8, 4] y) {{
    key = Concat<axis = -2>(pk, k)
    s = Shape(key)
    st = Constant<value = int64[1] {{2}}>()
    en = Constant<value = int64[1] {{3}}>()
    t2 = Slice(s, st, en)
    m1 = Constant<value = int64[1] {{-1}}>()
    d = Constant<value = int64[1] {{8}}>()
    tgt = Concat<axis = 0>(m1, t2, d)
    r = Reshape(key, tgt)
    y = Transpose<perm = [0, 2, 1]>(r)
}}""")
    assert not modified and p.stats["transpose-batch-merge"] == 0
    assert _readers_outside(model) == []
    assert len(model.graph.initializers) == 0


def test_squeeze_refused_on_a_later_piece_adds_no_constant():
    """Squeeze(Reshape(a, Concat([2, 1], Shape(x)[1:2]))) of axes 1 and 2: the first piece's 1 could go,
    the second is computed, so the Squeeze stays and no target constant is left behind."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 1] x, float[2] a) => (float[2] y) {{
    s = Shape<start = 1, end = 2>(x)
    c = Constant<value = int64[2] {{2, 1}}>()
    t = Concat<axis = 0>(c, s)
    r = Reshape(a, t)
    ax = Constant<value = int64[2] {{1, 2}}>()
    y = Squeeze(r, ax)
}}""")
    assert not modified and p.stats["squeeze-reshape"] == 0
    assert len(model.graph.initializers) == 0 and _readers_outside(model) == []


_ONE_HEAD = f"""{HEAD}
g (float[B, 3, 8] x) => (float[B, 3, 8] y) {{
    wq = Constant<value = float[8, 4] {{{", ".join(str((i * 7 % 11 - 5) / 9) for i in range(32))}}}>()
    wk = Constant<value = float[8, 4] {{{", ".join(str((i * 5 % 13 - 6) / 8) for i in range(32))}}}>()
    wv = Constant<value = float[8, 4] {{{", ".join(str((i * 3 % 7 - 3) / 5) for i in range(32))}}}>()
    wo = Constant<value = float[4, 8] {{{", ".join(str((i * 9 % 17 - 8) / 10) for i in range(32))}}}>()
    ax = Constant<value = int64[1] {{1}}>()
    c = Constant<value = float {{0.5}}>()
    t = Constant<value = int64[3] {{0, -1, 4}}>()
    q3 = MatMul(x, wq)
    k3 = MatMul(x, wk)
    v3 = MatMul(x, wv)
    q = Unsqueeze(q3, ax)
    k = Unsqueeze(k3, ax)
    v = Unsqueeze(v3, ax)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Mul(s, c)
    p = Softmax<axis = -1>(sc)
    o = MatMul(p, v)
    r = Reshape(o, t)
    y = MatMul(r, wo)
}}"""


def test_a_key_transpose_read_by_the_scores_keeps_its_unsqueeze():
    """One-head attention with q / k / v [B, S, D] unsqueezed at the heads axis (fuzz_s43 one_head, oh-4d): K^T =
    Transpose(Unsqueeze(k3)) read by the scores MatMul is no view a Reshape then drops, so the Unsqueeze stays
    before the Transpose (the 4-D K^T the attention rules read; the old code moved it, and no target fused)."""
    proto, model, modified, p = _run(_ONE_HEAD)
    assert not modified and p.stats["transpose-unsqueeze"] == 0
    assert ops(model) == ops(proto)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_one_head_attention_unsqueezed_to_4d_fuses(target, level):
    """The same graph end to end: the Softmax is gone at every target (ort: one MultiHeadAttention) and the
    outputs match the original in ONNX Runtime (the old code left the Softmax at all three)."""
    import onnx_fuse

    result = onnx_fuse.optimize(parse(_ONE_HEAD), target=target, level=level, verify=True)
    assert result.report.passed
    counts = ops(result.model)
    assert "Softmax" not in counts, counts
    if target == "ort":
        assert counts.get("MultiHeadAttention") == 1, counts


@pytest.mark.parametrize("readers", ["reshape-and-matmul", "reshape-copying-a-dim"])
def test_a_transposed_unsqueeze_no_reshape_drops_stays(readers):
    """Transpose(Unsqueeze(q)) read by a Reshape and by a MatMul (the move would save no node: the MatMul still
    reads an Unsqueeze), or only by a Reshape whose target copies a dim (a 0 entry, which reshape-unsqueeze
    refuses): the Transpose stays where it is; the outputs match."""
    other = "z = MatMul(p, w)" if readers == "reshape-and-matmul" else "z = Reshape(p, t0)"
    out = "float[2, 4, 1, 5, 3] z" if readers == "reshape-and-matmul" else "float[2, 20, 16] z"
    y = "y = Reshape(p, t)" if readers == "reshape-and-matmul" else "y = Relu(q)"
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 5, 4, 16] q, float[2, 4, 1, 16, 3] w) => ({"float[8, 5, 16]" if readers == "reshape-and-matmul" else "float[2, 5, 4, 16]"} y, {out}) {{
    ax = Constant<value = int64[1] {{3}}>()
    t = Constant<value = int64[3] {{8, -1, 16}}>()
    t0 = Constant<value = int64[3] {{0, -1, 16}}>()
    u = Unsqueeze(q, ax)
    p = Transpose<perm = [0, 2, 3, 1, 4]>(u)
    {y}
    {other}
}}""")
    assert p.stats["transpose-unsqueeze"] == 0 and "Transpose" in ops(model), ops(model)
    check_same(proto, model)


def test_a_transpose_moving_only_the_size_one_axis_becomes_an_unsqueeze():
    """Range(S) -> Unsqueeze(0) [1, S] -> Transpose [S, 1], both read by a Sub (ModernBERT's pairwise distances):
    the Transpose moves only the size-1 axis, so it is Unsqueeze(x, 1) whatever reads it (one node less than
    the Transpose it replaces, no Transpose left)."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[7] x) => (float[7, 7] y) {{
    ax = Constant<value = int64[1] {{0}}>()
    u = Unsqueeze(x, ax)
    t = Transpose<perm = [1, 0]>(u)
    y = Sub(u, t)
}}""")
    assert modified and p.stats["transpose-unsqueeze"] == 1
    assert ops(model) == {"Constant": 1, "Unsqueeze": 2, "Sub": 1}, ops(model)
    check_same(proto, model)


# K^T written Unsqueeze(Transpose(k3, [0, 2, 1]), [1]) (fuzz_s45 head_unsq hu-unsq-of-transpose, glue50)
_ONE_HEAD_UT = _ONE_HEAD.replace("    k = Unsqueeze(k3, ax)\n", "").replace(
    "    kt = Transpose<perm = [0, 1, 3, 2]>(k)\n", "    k3t = Transpose<perm = [0, 2, 1]>(k3)\n    kt = Unsqueeze(k3t, ax)\n")


def test_an_unsqueezed_key_transpose_read_by_the_scores_becomes_the_4d_transpose():
    """K^T = Unsqueeze(Transpose(k3, [0, 2, 1]), [1]) read by the scores MatMul becomes Transpose(Unsqueeze(k3, [1]),
    [0, 1, 3, 2]): the same node count, the 4-D K^T the attention rules read; the outputs match."""
    assert _ONE_HEAD_UT != _ONE_HEAD
    proto, model, modified, p = _run(_ONE_HEAD_UT)
    assert modified and p.stats["unsqueeze-transpose"] == 1 and p.stats["transpose-unsqueeze"] == 0
    assert ops(model) == ops(proto)
    tr = [n for n in model.graph if n.op_type == "Transpose"]
    assert len(tr) == 1 and list(tr[0].attributes["perm"].value) == [0, 1, 3, 2]
    assert tr[0].inputs[0].producer().op_type == "Unsqueeze"
    check_same(proto, model)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_one_head_attention_with_an_unsqueezed_key_transpose_fuses(target, level):
    """The Unsqueeze(Transpose(k3)) spelling end to end: no Softmax left at any target (ort: one MultiHeadAttention),
    the outputs match the original in ONNX Runtime (the old code left the Softmax at all three)."""
    import onnx_fuse

    result = onnx_fuse.optimize(parse(_ONE_HEAD_UT), target=target, level=level, verify=True)
    assert result.report.passed
    counts = ops(result.model)
    assert "Softmax" not in counts, counts
    if target == "ort":
        assert counts.get("MultiHeadAttention") == 1, counts


@pytest.mark.parametrize("reader", ["relu", "transpose-shared"])
def test_an_unsqueezed_transpose_not_read_by_matmuls_stays(reader):
    """Unsqueeze(Transpose(x)) read by a Relu, or its Transpose also read elsewhere (the move would add a node): no
    rewrite."""
    body = "y = Relu(u)\n    z = Neg(t)" if reader == "relu" else "y = MatMul(a, u)\n    z = Neg(t)"
    proto, model, modified, p = _run(f"""{HEAD}
g (float[2, 5, 4] x, float[2, 1, 3, 4] a) => ({"float[2, 1, 4, 5]" if reader == "relu" else "float[2, 1, 3, 5]"} y, float[2, 4, 5] z) {{
    ax = Constant<value = int64[1] {{1}}>()
    t = Transpose<perm = [0, 2, 1]>(x)
    u = Unsqueeze(t, ax)
    {body}
}}""")
    assert not modified and p.stats["unsqueeze-transpose"] == 0 and ops(model) == ops(proto)


def test_an_unsqueezed_transpose_of_a_transpose_composes_the_pair():
    """K^T = Unsqueeze(Transpose(Transpose(y, [1, 0, 2]), [0, 2, 1])), the inner Transpose also read by a Shape
    (glm5_next_text dyn_mask, hold-out 48): the Unsqueeze reads y and one Transpose of the composed perm follows it,
    so no Transpose pair is left split by the Unsqueeze (6b1b685 left one: Transpose +1 at every target); values
    equal."""
    proto, model, modified, p = _run(f"""{HEAD}
g (float[5, 2, 4] y, float[2, 1, 3, 4] a) => (float[2, 1, 3, 5] z, int64[3] s) {{
    ax = Constant<value = int64[1] {{1}}>()
    t0 = Transpose<perm = [1, 0, 2]>(y)
    s = Shape(t0)
    t = Transpose<perm = [0, 2, 1]>(t0)
    u = Unsqueeze(t, ax)
    z = MatMul(a, u)
}}""")
    assert modified and p.stats["unsqueeze-transpose"] == 1
    uns = [n for n in model.graph if n.op_type == "Unsqueeze"]
    assert len(uns) == 1 and uns[0].inputs[0].name == "y", [n.op_type for n in model.graph]
    tr = [n for n in model.graph if n.op_type == "Transpose" and n.inputs[0] is uns[0].outputs[0]]
    assert len(tr) == 1 and list(tr[0].attributes["perm"].value) == [2, 1, 3, 0], tr
    check_same(proto, model)
