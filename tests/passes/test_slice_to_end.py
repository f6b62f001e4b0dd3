"""A constant Slice end >= 10**9 is "to the end" (passes/_dim_lengths.py TO_END): tf2onnx writes TF's
strided_slice end_mask as end 1e9, torch INT64_MAX, others INT32_MAX. ONNX clamps an end to the
axis's length, so on a symbolic axis the cut keeps its length; before, only INT64_MAX was read so
and the causal Keras attention's mask (a whole-tensor Slice, ends 1e9) lost the sequence dim."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 17]>'

# exp(x)[:, start:end:step]: the dim of `cut` is what the test reads
CUT = '''
g (float[B, S, 4] x) => (float[B, ?, 4] cut)
{{
    st = Constant<value = int64[1] {{{start}}}>()
    en = Constant<value = int64[1] {{{end}}}>()
    ax = Constant<value = int64[1] {{1}}>()
    sp = Constant<value = int64[1] {{{step}}}>()
    e = Exp(x)
    cut = Slice(e, st, en, ax, sp)
}}'''


def _dims(model, name):
    v = next(o for n in model.graph for o in n.outputs if o.name == name)
    return [d if isinstance(d, int) else str(d.value) for d in v.shape.dims]


@pytest.mark.parametrize("start,end,step,want", [
    (0, 1000000000, 1, "S"),               # tf2onnx's end_mask
    (0, 2147483647, 1, "S"),               # INT32_MAX
    (0, 9223372036854775807, 1, "S"),      # INT64_MAX (read before too)
    (-3, 1000000000, 1, None),             # min(S, 3): not provable
    (0, 999999999, 1, None),               # below the bound: min(S, 999999999)
    (0, 1000000000, 2, "(S+1)//2"),        # every second entry to the end: ceil(S / 2) (_strided)
    (2, 1000000000, 2, None),              # [2::2]: a start past its step is not read
])
def test_big_end_keeps_the_axis(start, end, step, want):
    proto = parse(HEADER + CUT.format(start=start, end=end, step=step))
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    got = _dims(model, "cut")[1]
    if want is None:
        assert got == "None" or invented_name(str(got)), got   # unknown
    else:
        assert got == want
    rng = np.random.default_rng(0)
    for length in (1, 4, 7):
        check_same(proto, model, {"x": rng.standard_normal((2, length, 4)).astype(np.float32)})


# tf2onnx's whole-tensor strided_slice over Keras' causal mask [1, 1, S, S]: every axis [0:1e9]
WHOLE = '''
g (float[B, S, 4] x) => (float[B, 1, S, S] y)
{{
    xt = Transpose<perm = [0, 2, 1]>(x)
    a = MatMul(x, xt)
    ax = Constant<value = int64[1] {{1}}>()
    a4 = Unsqueeze(a, ax)
    m = Sigmoid(a4)
    st = Constant<value = int64[4] {{0, 0, 0, 0}}>()
    en = Constant<value = int64[4] {{{end}, {end}, {end}, {end}}}>()
    axes = Constant<value = int64[4] {{0, 1, 2, 3}}>()
    one = Constant<value = int64[4] {{1, 1, 1, 1}}>()
    s = Slice(m, st, en, axes, one)
    y = Neg(s)
}}'''


@pytest.mark.parametrize("end,dropped", [(1000000000, True), (2147483647, True), (999999999, False)])
def test_whole_tensor_slice_with_big_ends_is_dropped(end, dropped):
    proto = parse(HEADER + WHOLE.format(end=end))
    model, modified, _ = apply(IdentityEliminationPass, proto, shape_inference=True)
    assert ("Slice" not in ops(model)) == dropped, ops(model)
    rng = np.random.default_rng(1)
    for length in (1, 5):
        check_same(proto, model, {"x": rng.standard_normal((2, length, 4)).astype(np.float32)})
