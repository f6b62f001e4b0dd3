"""Dims only computed (a strided conv's or pool's output length, a length halved in shape arithmetic)
named by their formula from the input's symbols (passes/_dim_products.py floor_div, _dim_source.py),
so that two computations of one size meet: SEW-D's frames out of an AveragePool and its attention
mask sized by Shape(features)[1] // squeeze_factor (hold-out 4, docs/holdout.md)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes._dim_products import floor_div, floor_plus, to_dim
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import check_same, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'

# audio frames: Conv(k 4, s 2, pads 1 1) over the samples, AveragePool(k 2, s 2) over those frames,
# and a mask of ones sized Shape(frames)[2] // 2, added to the pooled frames (the Add's dims agree
# only if the two sizes are proven equal)
FRAMES = '''
g (float[B, 1, L] x) => (float[B, 4, ?] y, float[B, ?] ones)
{
    w = Constant<value = float[4, 1, 4] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.}>()
    c = Conv<kernel_shape = [4], strides = [2], pads = [1, 1]>(x, w)
    p = AveragePool<kernel_shape = [2], strides = [2]>(c)
    s = Shape(c)
    i0 = Constant<value = int64[1] {0}>()
    i2 = Constant<value = int64 {2}>()
    two = Constant<value = int64 {2}>()
    b = Gather<axis = 0>(s, i0)
    n = Gather<axis = 0>(s, i2)
    half = Div(n, two)
    ax = Constant<value = int64[1] {0}>()
    half1 = Unsqueeze(half, ax)
    target = Concat<axis = 0>(b, half1)
    ones = ConstantOfShape<value = float[1] {1.}>(target)
    ax1 = Constant<value = int64[1] {1}>()
    m = Unsqueeze(ones, ax1)
    y = Add(p, m)
}'''


def _dims(model, name):
    v = next(o for n in model.graph for o in n.outputs if o.name == name)
    return [d if isinstance(d, int) else str(d.value) for d in v.shape.dims]


def test_conv_and_pool_lengths_are_named_from_the_input():
    proto = parse(HEADER + FRAMES)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    # conv: floor((L + 2 - 4) / 2) + 1 = floor(L / 2); pool: floor((L // 2 - 2) / 2) + 1 = (L // 2) // 2
    assert _dims(model, "c") == ["B", 4, "(L)//2"]
    assert _dims(model, "p") == ["B", 4, "((L)//2)//2"]
    # the mask's length, computed as Shape(c)[2] // 2, is the same name: the Add's dims are proven
    assert _dims(model, "ones") == ["B", "((L)//2)//2"]
    assert _dims(model, "y") == ["B", 4, "((L)//2)//2"]
    assert not any(invented_name(str(d.value)) for n in model.graph for o in n.outputs
                   if o.shape is not None for d in o.shape.dims if not isinstance(d, int))
    rng = np.random.default_rng(0)
    for length in (16, 19, 22, 37):   # every remainder mod 4: the names hold at each
        check_same(proto, model, {"x": rng.standard_normal((2, 1, length)).astype(np.float32)})


# SEW-D's positional conv: padded by kernel // 2 on each side with an even kernel, so one frame too
# many, cut by a same-pad Slice [:-1]; the result is the pool's length again, which the Add needs
POSITIONS = FRAMES.replace("y = Add(p, m)", """wp = Constant<value = float[4, 4, 2] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.,
        1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.}>()
    pc = Conv<kernel_shape = [2], strides = [2], pads = [1, 1]>(c, wp)
    z = Constant<value = int64[1] {0}>()
    e = Constant<value = int64[1] {-1}>()
    a2 = Constant<value = int64[1] {2}>()
    pcut = Slice(pc, z, e, a2)
    pm = Add(p, m)
    y = Add(pm, pcut)""")


def test_same_pad_cut_of_a_computed_length_meets_the_pool():
    proto = parse(HEADER + POSITIONS)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert _dims(model, "pc") == ["B", 4, "((L)//2+2)//2"]   # floor((n + 2 - 2) / 2) + 1
    assert _dims(model, "pcut") == ["B", 4, "((L)//2)//2"]   # one fewer: the pool's length
    assert _dims(model, "y") == ["B", 4, "((L)//2)//2"]
    rng = np.random.default_rng(0)
    for length in (16, 19, 22, 37):
        check_same(proto, model, {"x": rng.standard_normal((2, 1, length)).astype(np.float32)})


def test_ceil_mode_pool_has_its_own_name():
    # ceil(n / 2), not the mask's floor(n / 2): the two meet only where n is even, so no name is shared
    # (test_window_lengths.py checks ceil_mode lengths against ONNX Runtime)
    ceil = FRAMES.replace("AveragePool<kernel_shape", "AveragePool<ceil_mode = 1, kernel_shape")
    proto = parse(HEADER + ceil)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert _dims(model, "c") == ["B", 4, "(L)//2"]
    assert _dims(model, "p") == ["B", 4, "((L)//2+1)//2"]
    assert _dims(model, "ones") == ["B", "((L)//2)//2"]


@pytest.mark.parametrize("text,dim", [
    ("(L)//2", (1, ("(L)//2",))),
    ("2*(L-1)//2", (2, ("(L-1)//2",))),
    ("batch*((L)//2+3)//4", (1, ("((L)//2+3)//4", "batch"))),
    ("past + sequence", (1, ("past + sequence",))),      # a sum stays one atom, as before
    ("2*past + sequence", (1, ("2*past + sequence",))),  # not 2 * (past + sequence)
    ("(a)//2 + (b)//2", (1, ("(a)//2 + (b)//2",))),      # no single floor atom
])
def test_floor_atoms_read_back(text, dim):
    assert to_dim(text) == dim


def test_floor_div():
    assert floor_div((1, ("L",)), 2) == (1, ("(L)//2",))
    assert floor_div((4, ("L",)), 2) == (2, ("L",))            # exact
    assert floor_div((1, ("L",)), 2, -1) == (1, ("(L-1)//2",))
    assert floor_div((1, ("past + sequence",)), 2) is None     # a sum's " + " would read as a sum
    assert floor_plus("(L+2)//2", -1) == "(L)//2"               # floor((L + 2) / 2) - 1
    assert floor_plus("((L-5)//5-1)//2", 3) == "((L-5)//5+5)//2"
    assert floor_plus("(a)//2*(b)//2", 1) is None              # a product, not one floor
    assert floor_div((7, ()), 2, 1) == (4, ())
    assert floor_div((1, ("unk__r1_3",)), 2) is None            # an invented name proves nothing
    assert floor_div(None, 2) is None


# a short causal conv (Inkling's k / v): depthwise, padded by kernel - 1 on both sides, so L + 3
# frames, cut back to the input's length by [:, :, :Shape(x)[2]]; the heads view after it
# (view(B, S, -1, 2)) is only proven when the cut's length is S, not a name invented for it
CAUSAL = '''
g (float[B, 4, S] x) => (float[B, S, ?, 2] heads)
{
    w = Constant<value = float[4, 1, 4] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15., 16.}>()
    c = Conv<group = 4, kernel_shape = [4], pads = [3, 3]>(x, w)
    s = Shape(x)
    i0 = Constant<value = int64 {0}>()
    i2 = Constant<value = int64 {2}>()
    ax = Constant<value = int64[1] {0}>()
    n = Gather<axis = 0>(s, i2)
    n1 = Unsqueeze(n, ax)
    z = Constant<value = int64[1] {0}>()
    a2 = Constant<value = int64[1] {2}>()
    one = Constant<value = int64[1] {1}>()
    cut = Slice(z, z, n1, a2, one)
    t = Transpose<perm = [0, 2, 1]>(cut)
    b = Gather<axis = 0>(s, i0)
    b1 = Unsqueeze(b, ax)
    rest = Constant<value = int64[2] {-1, 2}>()
    target = Concat<axis = 0>(b1, n1, rest)
    heads = Reshape(t, target)
}'''.replace("Slice(z, z,", "Slice(c, z,")


def test_causal_conv_cut_to_the_input_length_is_that_length():
    proto = parse(HEADER + CAUSAL)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert _dims(model, "c") == ["B", 4, "(S+3)//1"]   # L + pads - kernel + 1
    assert _dims(model, "cut") == ["B", 4, "S"]          # min(S + 3, S)
    assert _dims(model, "heads") == ["B", "S", 2, 2]     # the -1 solved: 2 heads
    rng = np.random.default_rng(0)
    for length in (1, 2, 5, 9):
        check_same(proto, model, {"x": rng.standard_normal((2, 4, length)).astype(np.float32)})


@pytest.mark.parametrize("pads,end,want", [
    ("[3, 3]", "n1", "S"),     # (S+3)//1 cut to S
    ("[2, 2]", "n1", "S"),     # (S+1)//1 cut to S
    ("[3, 3]", "k3", 3),       # cut to 3: S + 3 >= 3
    ("[3, 3]", "k4", None),    # cut to 4: S + 3 may be less (S = 0), min(S + 3, 4)
    ("[1, 1]", "n1", None),    # (S-1)//1 may be shorter than S: min(S - 1, S)
])
def test_cut_to_a_length_needs_the_length_provably_longer(pads, end, want):
    text = CAUSAL.replace("pads = [3, 3]", f"pads = {pads}").replace(
        "cut = Slice(c, z, n1,", "k3 = Constant<value = int64[1] {3}>()\n    "
        f"k4 = Constant<value = int64[1] {{4}}>()\n    cut = Slice(c, z, {end},")
    proto = parse(HEADER + text)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    got = _dims(model, "cut")[2]
    if want is None:
        assert invented_name(str(got))
    else:
        assert got == want


# the padding mask the short conv multiplies by: attention_mask[:, -S:] with S = Shape(hidden)[1]
# (TorchScript: Slice(mask, -S, INT64_MAX, axis 1)); it holds min(len(mask), S) entries
TAIL = '''
g (float[B, S, 4] x, float[B, {mask_len}] mask) => (float[B, S, 4] y)
{{
    s = Shape(x)
    i1 = Constant<value = int64 {{1}}>()
    n = Gather<axis = 0>(s, i1)
    neg = Neg(n)
    ax = Constant<value = int64[1] {{0}}>()
    start = Unsqueeze(neg, ax)
    big = Constant<value = int64[1] {{9223372036854775807}}>()
    a1 = Constant<value = int64[1] {{1}}>()
    one = Constant<value = int64[1] {{1}}>()
    {cat}
    tail = Slice(m, start, big, a1, one)
    a2 = Constant<value = int64[1] {{2}}>()
    col = Unsqueeze(tail, a2)
    y = Mul(x, col)
}}'''


@pytest.mark.parametrize("mask_len,cat,want", [
    ("S", "m = Identity(mask)", "S"),                     # the whole mask
    ("S", "m = Concat<axis = 1>(mask, mask)", "S"),       # S + S entries, the last S
    ("T", "m = Identity(mask)", None),                    # min(T, S): unknown
])
def test_tail_of_a_longer_mask_has_the_cut_length(mask_len, cat, want):
    proto = parse(HEADER + TAIL.format(mask_len=mask_len, cat=cat))
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    got = _dims(model, "tail")[1]
    if want is None:
        assert invented_name(str(got))
    else:
        assert got == want
        rng = np.random.default_rng(0)
        for length in (1, 3):
            check_same(proto, model, {"x": rng.standard_normal((2, length, 4)).astype(np.float32),
                                      "mask": rng.standard_normal((2, length)).astype(np.float32)})
