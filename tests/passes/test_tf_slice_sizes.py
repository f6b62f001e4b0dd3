"""tf2onnx's size reads that hid the sequence length of keras-hub's GPT-2 (hold-out 8B, docs/holdout.md):
- tf.slice(table, begin, size) as Slice(table, begin, begin + size + INT32_MAX * (size == -1)): a size
  is never negative, so ``size == -1`` reads as 0 (shape_vector's Equal), and the position table cut to
  [0:S] of its 64 rows, broadcast to the tokens' [B, S, H], is S long (_expand_step's at-most);
- keras.ops.arange over a float: Range(0.0, Cast(S, float), 1.0) has S entries (_range_size)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import check_same, parse

HEADER = '<ir_version: 9, opset_import: ["" : 17]>'

POSITIONS = '''
g (float[B, S, 4] x) => (float[B, S, 4] y, float[?] r)
{
    table = Constant<value = float[8, 4] {0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.,
        16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27., 28., 29., 30., 31.}>()
    shp = Shape(x)
    i1 = Constant<value = int64[1] {1}>()
    i2 = Constant<value = int64[1] {2}>()
    z = Constant<value = int64[1] {0}>()
    s1 = Slice(shp, i1, i2, z)
    four = Constant<value = int64[1] {4}>()
    size = Concat<axis = 0>(s1, four)
    m1 = Constant<value = int64 {-1}>()
    eq = Equal(size, m1)
    eqi = Cast<to = 7>(eq)
    big = Constant<value = int64 {2147483647}>()
    pad = Mul(big, eqi)
    end0 = Add(size, pad)
    begin = Constant<value = int64[2] {0, 0}>()
    end = Add(begin, end0)
    pos = Slice(table, begin, end)
    posb = Expand(pos, shp)
    e = Exp(x)
    y = Add(e, posb)
    sq = Squeeze(s1, z)
    sf = Cast<to = 1>(sq)
    f0 = Constant<value = float {0.}>()
    f1 = Constant<value = float {1.}>()
    r = Range(f0, sf, f1)
}'''


def _dims(model, name):
    v = next(o for n in model.graph for o in n.outputs if o.name == name)
    return [d if isinstance(d, int) else str(d.value) for d in v.shape.dims]


def _inferred():
    proto = parse(HEADER + POSITIONS)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    return proto, model


def test_float_range_has_the_sequence_length():
    assert _dims(_inferred()[1], "r") == ["S"]


def test_tf_slice_size_keeps_the_sequence():
    proto, model = _inferred()
    assert _dims(model, "pos")[1] == 4            # the -1 test read: the feature size stays
    assert _dims(model, "posb") == ["B", "S", 4]   # [0:S] of 8 rows broadcast to S
    assert _dims(model, "y") == ["B", "S", 4]
    rng = np.random.default_rng(0)
    for length in (1, 3, 8):
        check_same(proto, model, {"x": rng.standard_normal((2, length, 4)).astype(np.float32)})
