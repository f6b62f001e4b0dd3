"""Dims named after the value that has them (passes/_dim_source.py ``_unsolved``): a view's -1 the
element count does not solve symbolically, and a broadcasting op's output whose operands' dims are
two different sizes. The name is one size per run, the same in every inference run, so every dim
proven equal to it and every size read from it (Shape -> Div) spells alike; onnx's own invention
(``unk__N``) proves nothing. Reduce ops keep the dims they do not reduce."""

from __future__ import annotations

import onnx
import onnx.parser
import onnx_ir as ir

PRODUCER_DIM_PREFIX = "dim__"   # passes/_dim_source.py (spelled here: the test must fail on code without it)
from onnx_fuse.passes.shape_inference import ShapeInferencePass

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# Hiera's unroll in small: [B, T, 16] viewed [-1, 2, 16] (B*T/2 rows: T/2 is not a symbolic size),
# then back to [-1, T, 16] with T read from x: that -1 is B, unprovable; two views of it (q, k)
# read their window count as Shape(.)[1] // 4.
UNROLL = '''
g (float[B, T, 16] x) => (float[?, ?, ?, ?] q, float[?, ?, ?, ?] k, float[?, ?, ?] r)
{
    c0 = Constant<value = int64[1] {0}>()
    c1 = Constant<value = int64[1] {1}>()
    c2 = Constant<value = int64[1] {2}>()
    four = Constant<value = int64[1] {4}>()
    m1 = Constant<value = int64[1] {-1}>()
    pair = Constant<value = int64[3] {-1, 2, 16}>()
    y = Reshape(x, pair)
    sx = Shape(x)
    t = Slice(sx, c1, c2, c0)
    d = Constant<value = int64[1] {16}>()
    back = Concat<axis = 0>(m1, t, d)
    z = Reshape(y, back)
    sz = Shape(z)
    zb = Slice(sz, c0, c1, c0)
    zt = Slice(sz, c1, c2, c0)
    n = Div(zt, four)
    qs = Concat<axis = 0>(zb, n, m1, d)
    q = Reshape(z, qs)
    k = Reshape(z, qs)
    w = ReduceMax<keepdims = 0>(q, c2)
    r = Add(w, w)
}'''

# a residual Add of [B, S, 8] and [B, U, 8] (S and U equal at run time, not provably) read twice
RESIDUAL = '''
g (float[B, S, 8] a, float[B, U, 8] b) => (float[?, ?, ?, ?] p, float[?, ?, ?, ?] p2)
{
    c0 = Constant<value = int64[1] {0}>()
    c1 = Constant<value = int64[1] {1}>()
    c2 = Constant<value = int64[1] {2}>()
    four = Constant<value = int64[1] {4}>()
    m1 = Constant<value = int64[1] {-1}>()
    d = Constant<value = int64[1] {8}>()
    s = Add(a, b)
    ln = Relu(s)
    sh = Shape(ln)
    bb = Slice(sh, c0, c1, c0)
    tt = Slice(sh, c1, c2, c0)
    n = Div(tt, four)
    t4 = Concat<axis = 0>(bb, n, m1, d)
    p = Reshape(ln, t4)
    p2 = Reshape(s, t4)
}'''


def _infer(text: str) -> dict[str, list]:
    model = ir.serde.deserialize_model(onnx.parser.parse_model(HEADER + text))
    ShapeInferencePass()(model)
    out = {}
    for node in model.graph:
        for v in node.outputs:
            if v.shape is not None:
                out[v.name] = [d if isinstance(d, int) else str(d.value) for d in v.shape]
    return out


def test_an_unsolved_view_is_named_after_it():
    dims = _infer(UNROLL)
    batch = dims["z"][0]
    assert batch.startswith(PRODUCER_DIM_PREFIX) and "z_0" in batch, dims["z"]
    assert dims["y"][0].startswith(PRODUCER_DIM_PREFIX)   # B*T/2 has a name of its own
    assert dims["y"][0] != batch
    # q and k read their window count from z's shape: one spelling, and z's batch passes on
    assert dims["q"][:2] == dims["k"][:2] == [batch, "(T)//4"], (dims["q"], dims["k"])
    # a -1 solved from named dims is no new name: q's and k's last view gives T / ((T)//4) its own
    assert dims["q"][2].startswith(PRODUCER_DIM_PREFIX) and dims["k"][2].startswith(PRODUCER_DIM_PREFIX)
    # ReduceMax over axis 2, keepdims 0, keeps the batch and the window count
    assert dims["w"] == [batch, "(T)//4", 16] and dims["r"] == dims["w"]


def test_the_names_are_the_same_in_every_run():
    assert _infer(UNROLL) == _infer(UNROLL)


def test_a_broadcast_of_two_sizes_is_named_after_its_output():
    dims = _infer(RESIDUAL)
    tokens = dims["s"][1]
    assert dims["s"][0] == "B" and tokens.startswith(PRODUCER_DIM_PREFIX), dims["s"]
    assert dims["ln"] == dims["s"]
    # both views read the window count from one Shape: the same spelling
    assert dims["p"][:2] == dims["p2"][:2] == ["B", f"({tokens})//4"], (dims["p"], dims["p2"])


def test_equal_operands_keep_their_symbol():
    """Where the operands agree the broadcast keeps the exporter's symbol: no producer name."""
    text = RESIDUAL.replace("float[B, U, 8] b", "float[B, S, 8] b")
    dims = _infer(text)
    assert dims["s"] == dims["ln"] == ["B", "S", 8]
    assert dims["p"][:2] == ["B", "(S)//4"], dims["p"]
