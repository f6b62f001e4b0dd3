"""Lengths shape inference proves through cuts and writes (passes/_dim_source.py), each of which lost
the sequence of a hold-out 30 export (Optimum) so that its attention glue stayed:
- XLM's positions ``pos[:, :S][:, -S:]`` (a [1, 128] buffer): ``[-m:]`` holds at most m entries,
  so broadcasting it against the word embeddings' S gives S;
- Speech2Text's padding mask flipped, summed and flipped back (``mask.flip(-1).cumsum(-1).flip(-1)``):
  a Slice that reverses a whole axis keeps its length;
- the mask written by ScatterND into zeros of [B, S]: ScatterND's output has its data's shape."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort

from onnx_fuse.passes.shape_inference import ShapeInferencePass

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

POSITIONS = '''
g (int64[B, S] ids, float[128, 8] table, float[1, 128] pos) => (float[?, ?, ?] y)
{
    c0 = Constant<value = int64[1] {0}>()
    c1 = Constant<value = int64[1] {1}>()
    big = Constant<value = int64[1] {9223372036854775807}>()
    si = Shape(ids)
    s = Slice(si, c1, big, c0)
    sc = Squeeze(s, c0)
    ns = Neg(sc)
    n1 = Unsqueeze(ns, c0)
    p1 = Slice(pos, c0, s, c1, c1)
    p2 = Slice(p1, n1, big, c1, c1)
    pi = Cast<to = 7>(p2)
    word = Gather(table, ids)
    pe = Gather(table, pi)
    sw = Shape(word)
    pex = Expand(pe, sw)
    y = Add(word, pex)
}'''

# the mask's length is a conv stem's output length, (S+1)//2, which only the shape facts name (onnx
# leaves it unknown), so the ScatterND's and the flips' outputs are named within one sweep
FLIP = '''
g (float[B, 4, S] x, float[4, 4, 3] w3) => (int64[?, ?] y)
{
    m1 = Constant<value = int64[1] {-1}>()
    lo = Constant<value = int64[1] {-9223372036854775807}>()
    ax = Constant<value = int64 {1}>()
    zero = Constant<value = int64 {0}>()
    c0 = Constant<value = int64[1] {0}>()
    c1 = Constant<value = int64[1] {1}>()
    c2 = Constant<value = int64[1] {2}>()
    c3 = Constant<value = int64[1] {3}>()
    h = Conv<pads = [1, 1], strides = [2]>(x, w3)
    sx = Shape(x)
    bb = Slice(sx, c0, c1, c0)
    sh = Shape(h)
    ll = Slice(sh, c2, c3, c0)
    sm = Concat<axis = 0>(bb, ll)
    z = ConstantOfShape<value = int64[1] {0}>(sm)
    b = Gather<axis = 0>(sx, zero)
    r = Range(zero, b, ax)
    r1 = Unsqueeze(r, m1)
    rr = Concat<axis = 1>(r1, r1)
    ones = Expand(ax, bb)
    w = ScatterND(z, rr, ones)
    f = Slice(w, m1, lo, m1, m1)
    c = CumSum(f, ax)
    y = Slice(c, m1, lo, m1, m1)
}'''


def _dims(text: str) -> dict[str, list]:
    model = ir.serde.deserialize_model(onnx.parser.parse_model(HEADER + text))
    ShapeInferencePass()(model)
    return {v.name: [d if isinstance(d, int) else str(d.value) for d in v.shape]
            for n in model.graph for v in n.outputs if v.shape is not None}


def test_last_m_positions_broadcast_to_the_sequence():
    dims = _dims(POSITIONS)
    assert dims["pex"] == ["B", "S", 8] and dims["y"] == ["B", "S", 8], (dims["pex"], dims["y"])


def test_a_reversed_axis_keeps_its_length():
    dims = _dims(FLIP)
    n = "(S+1)//2"
    assert dims["w"] == ["B", n], dims["w"]   # ScatterND: the data's shape
    assert dims["f"] == dims["c"] == dims["y"] == ["B", n], (dims["f"], dims["y"])
    # the graph computes what the dims say (ORT: the flip, the cumsum and the flip back)
    sess = ort.InferenceSession(onnx.parser.parse_model(HEADER + FLIP).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": np.ones((3, 4, 5), np.float32), "w3": np.ones((4, 4, 3), np.float32)})[0]
    assert out.shape == (3, 3)


def test_a_partial_reversal_is_not_the_axis():
    """[-2::-1] drops the last entry: no length proven (onnx leaves it unknown)."""
    text = FLIP.replace("f = Slice(w, m1, lo, m1, m1)",
                        "m2 = Constant<value = int64[1] {-2}>()\n    f = Slice(w, m2, lo, m1, m1)")
    dims = _dims(text)
    assert dims["f"][1] != "(S+1)//2", dims["f"]


# GPT-OSS's MoE router (hold-out 30, Optimum): the tokens [B*S, H] through a Gemm, the top-k
# weights scattered into zeros of the Gemm output's shape, turned expert-major and viewed as
# [E, B, -1] (the -1 is S). onnx leaves the Gemm's rows unknown; without a Gemm step the view's
# -1 could not be solved in the sweep, and session 27's names hid the S a later run found.
MOE = '''
g (float[B, S, 8] x, float[3, 8] wr, float[3] br) => (float[?, ?, ?] y)
{
    zero = Constant<value = int64 {0}>()
    zero1 = Constant<value = int64[1] {0}>()
    m1 = Constant<value = int64[1] {-1}>()
    e1 = Constant<value = int64[1] {3}>()
    k = Constant<value = int64[1] {2}>()
    flat = Constant<value = int64[2] {-1, 8}>()
    t = Reshape(x, flat)
    logits = Gemm<transB = 1>(t, wr, br)
    top, idx = TopK(logits, k)
    p = Softmax(top)
    sl = Shape(logits)
    z = ConstantOfShape(sl)
    sc = ScatterElements<axis = 1>(z, idx, p)
    tr = Transpose<perm = [1, 0]>(sc)
    sx = Shape(x)
    b = Gather<axis = 0>(sx, zero)
    b1 = Unsqueeze(b, zero1)
    tgt = Concat<axis = 0>(e1, b1, m1)
    w = Reshape(tr, tgt)
    w4 = Unsqueeze(w, e1)
    xs = Unsqueeze(x, zero1)
    ex = Mul(xs, w4)
    r = ReduceSum<keepdims = 0>(ex, zero1)
    y = Add(x, r)
}'''


def test_a_gemm_keeps_the_token_count():
    dims = _dims(MOE)
    assert dims["logits"] == ["B*S", 3] and dims["tr"] == [3, "B*S"], (dims["logits"], dims["tr"])
    assert dims["w"] == [3, "B", "S"], dims["w"]   # the view's -1 solved: S, not a name of its own
    assert dims["r"] == dims["y"] == ["B", "S", 8], (dims["r"], dims["y"])
    rng = np.random.default_rng(0)
    sess = ort.InferenceSession(onnx.parser.parse_model(HEADER + MOE).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    out = sess.run(None, {"x": rng.standard_normal((2, 5, 8), dtype=np.float32),
                          "wr": rng.standard_normal((3, 8), dtype=np.float32),
                          "br": np.zeros(3, np.float32)})[0]
    assert out.shape == (2, 5, 8)


def test_gemm_transposed_operands():
    """transA reads the rows from A's second dim, transB (off) the columns from B's second."""
    text = MOE.replace("t = Reshape(x, flat)", "t0 = Reshape(x, flat)\n    t = Transpose<perm = [1, 0]>(t0)").replace(
        "Gemm<transB = 1>(t, wr, br)", "Gemm<transA = 1>(t, wrt, br)").replace(
        "float[3, 8] wr", "float[8, 3] wrt")
    dims = _dims(text)
    assert dims["logits"] == ["B*S", 3] and dims["w"] == [3, "B", "S"], (dims["logits"], dims["w"])


# DINOv2's position table (hold-out 30, Optimum) interpolated to the patch grid: Resize with sizes
# read from the pixels' height and width (// 8), then viewed [1, -1, C]. Without a Resize step the
# grid was unknown, so the view's -1 too, and the residual Add with the patch tokens lost its length.
RESIZE = '''
g (float[B, 3, h, w] px, float[1, 4, 4, 8] tab) => (float[?, ?, ?] y)
{
    zero1 = Constant<value = int64[1] {0}>()
    two1 = Constant<value = int64[1] {2}>()
    two = Constant<value = int64 {2}>()
    three = Constant<value = int64 {3}>()
    eight = Constant<value = int64 {8}>()
    tgt = Constant<value = int64[3] {1, -1, 8}>()
    sx = Shape(px)
    hh = Gather<axis = 0>(sx, two)
    ww = Gather<axis = 0>(sx, three)
    hd = Div(hh, eight)
    wd = Div(ww, eight)
    hu = Unsqueeze(hd, zero1)
    wu = Unsqueeze(wd, zero1)
    hw = Concat<axis = 0>(hu, wu)
    t = Transpose<perm = [0, 3, 1, 2]>(tab)
    st = Shape(t)
    lead = Slice(st, zero1, two1, zero1)
    sizes = Concat<axis = 0>(lead, hw)
    r = Resize<mode = "linear">(t, , , sizes)
    rt = Transpose<perm = [0, 2, 3, 1]>(r)
    y = Reshape(rt, tgt)
}'''


def test_resize_to_sizes_keeps_them():
    dims = _dims(RESIZE)
    assert dims["r"] == [1, 8, "(h)//8", "(w)//8"], dims["r"]
    assert dims["y"] == [1, "(h)//8*(w)//8", 8], dims["y"]   # the view's -1 solved
    sess = ort.InferenceSession(onnx.parser.parse_model(HEADER + RESIZE).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    out = sess.run(None, {"px": np.zeros((2, 3, 40, 24), np.float32), "tab": np.ones((1, 4, 4, 8), np.float32)})[0]
    assert out.shape == (1, 15, 8)

