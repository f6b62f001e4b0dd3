"""Shape facts through Pad with computed pads (LongT5's block padding, TorchScript's F.pad): the pads
vector read in part (shape_vector: a Concat of zeros and one computed entry, reversed pairwise by
Reshape [-1, 2] / Slice step -1 / Transpose / Reshape [-1]), and Pad keeping the dims of the axes
whose pads are provably 0 (passes/_dim_source.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from pass_testing import check_same, parse

from onnx_fuse.passes._dim_products import shape_vector
from onnx_fuse.passes.einsum_matmul import EinsumToMatMulPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass

_HEAD = '<ir_version: 9, opset_import: ["" : 17]>\n'

def _fpad(x: str, y: str, p: str = "", extra: str = "") -> str:
    """F.pad(x, (0, 0, 0, 0, 0, (-S) % 3)) on x [B, S, H, D] as TorchScript writes it: pads for the
    last axis first, pairwise, reversed and transposed into ONNX's [begins..., ends...]; names
    prefixed by ``p``; ``extra``: one more Concat part ahead of the last zero (an unread entry)."""
    return f"""
            {p}sh = Shape ({x})
            {p}i1 = Constant <value = int64[1] {{1}}> ()
            {p}s1 = Gather <axis = 0> ({p}sh, {p}i1)
            {p}s0 = Squeeze ({p}s1)
            {p}ng = Neg ({p}s0)
            {p}three = Constant <value = int64 {{3}}> ()
            {p}md = Mod ({p}ng, {p}three)
            {p}zero = Constant <value = int64[1] {{0}}> ()
            {p}u = Unsqueeze ({p}md, {p}zero)
            {p}c = Concat <axis = 0> ({p}zero, {p}zero, {p}zero, {p}zero, {p}zero, {p}u, {extra or p + "zero"}, {p}zero)
            {p}pairs = Constant <value = int64[2] {{-1, 2}}> ()
            {p}r = Reshape ({p}c, {p}pairs)
            {p}st = Constant <value = int64[1] {{-1}}> ()
            {p}en = Constant <value = int64[1] {{-9223372036854775807}}> ()
            {p}sp = Constant <value = int64[1] {{-1}}> ()
            {p}rev = Slice ({p}r, {p}st, {p}en, {p}zero, {p}sp)
            {p}t = Transpose <perm = [1, 0]> ({p}rev)
            {p}flat = Constant <value = int64[1] {{-1}}> ()
            {p}pads = Reshape ({p}t, {p}flat)
            {y} = Pad ({x}, {p}pads)"""


def _infer(proto: onnx.ModelProto) -> dict[str, ir.Value]:
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    return {v.name: v for n in model.graph for v in n.outputs}


def test_fpad_pads_read_in_part_keep_the_unpadded_dims():
    proto = parse(_HEAD + """
        g (float[B, S, 2, 16] x) => (float[B] y) {""" + _fpad("x", "xp") + """
            ax = Constant <value = int64[3] {1, 2, 3}> ()
            y = ReduceSum <keepdims = 0> (xp, ax)
        }""")
    values = _infer(proto)
    entries, scalar = shape_vector(values["pads"], {})
    # the computed entry is (-S) % 3 (the pad to a multiple of 3: tests/passes/test_block_dims.py)
    assert not scalar and entries == [(0, ())] * 5 + [(1, ("(-S)%3",))] + [(0, ())] * 2
    assert shape_vector(values["t"], {}) is None   # two axes: read only inside a chain of moves
    dims = list(values["xp"].shape)
    assert dims[0].value == "B" and dims[2:] == [2, 16] and dims[1].value == "3*(S+2)//3"


def test_longt5_block_scores_einsum_becomes_a_matmul():
    """LongT5's local attention: q and k [B, S, H, D] padded to whole blocks of 3 with F.pad, viewed
    [B, N, 3, H, D] by a target read from the padded tensor's shape (_split_into_blocks), scores
    einsum('...qhd,...khd->...hqk'). The Pad lost every dim before, so the shared h could not be
    proven equal and the Einsum stayed; now it is a MatMul, same numbers."""
    views = "".join(f"""
            {x}_psh = Shape ({x}p)
            {x}_lead = Slice ({x}_psh, c0, c1)
            {x}_tail = Slice ({x}_psh, c2, c4)
            {x}_blocks = Concat <axis = 0> ({x}_lead, nb, {x}_tail)
            {x}b = Reshape ({x}p, {x}_blocks)""" for x in "qk")
    proto = parse(_HEAD.replace('"" : 17', '"" : 18') + """
        g (float[B, S, 2, 16] q, float[B, S, 2, 16] k) => (float[B, N, 2, 3, 3] y) {""" +
                  _fpad("q", "qp", "q_") + _fpad("k", "kp", "k_") + """
            nb = Constant <value = int64[2] {-1, 3}> ()
            c0 = Constant <value = int64[1] {0}> ()
            c1 = Constant <value = int64[1] {1}> ()
            c2 = Constant <value = int64[1] {2}> ()
            c4 = Constant <value = int64[1] {4}> ()""" + views + """
            y = Einsum <equation = "...qhd,...khd->...hqk"> (qb, kb)
        }""")
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    p = EinsumToMatMulPass()
    assert p(model).modified and p.stats["Einsum"] == 1
    assert "Einsum" not in {n.op_type for n in model.graph}
    rng = np.random.default_rng(0)
    for s in (3, 5, 7):
        check_same(proto, model, {x: rng.standard_normal((2, s, 2, 16)).astype(np.float32) for x in "qk"})


def test_a_pad_entry_not_read_leaves_its_axis():
    # the computed entry pads axis 1 at its end; an input entry the begin pad of axis 0: 2, 3 kept
    proto = parse(_HEAD + """
        g (float[B, S, 2, 16] x, int64[1] n) => (float y) {""" + _fpad("x", "xp", extra="n") + """
            y = ReduceSum <keepdims = 0> (xp)
        }""")
    values = _infer(proto)
    dims = list(values["xp"].shape)
    assert dims[2:] == [2, 16] and not any(getattr(d, "value", None) in ("B", "S") for d in dims[:2])


@pytest.mark.parametrize("seed", range(40))
def test_moved_entries_follow_onnx_slice_semantics(seed):
    """Random Reshape / Transpose / Slice (negative steps, bounds past either end) chains on a shape
    vector of six named dims: each entry read must be what ONNX Runtime computes for those dims."""
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(2, 9, 6)]
    names = [f"d{i}" for i in range(6)]
    shape2 = [[2, 3], [3, 2], [6, 1], [1, 6]][int(rng.integers(4))]
    axis = int(rng.integers(2))
    step = int(rng.choice([-2, -1, 1, 2]))
    start, end = (int(x) for x in rng.integers(-9, 9, 2))
    if rng.random() < 0.3:
        end = -9223372036854775807 if step < 0 else 9223372036854775807
    lines = f"""
            sh = Shape (x)
            two = Constant <value = int64[2] {{{shape2[0]}, {shape2[1]}}}> ()
            r = Reshape (sh, two)
            t = Transpose <perm = [1, 0]> (r)
            st = Constant <value = int64[1] {{{start}}}> ()
            en = Constant <value = int64[1] {{{end}}}> ()
            ax = Constant <value = int64[1] {{{axis}}}> ()
            sp = Constant <value = int64[1] {{{step}}}> ()
            sl = Slice (t, st, en, ax, sp)
            flat = Constant <value = int64[1] {{-1}}> ()
            y = Reshape (sl, flat)"""
    proto = parse(_HEAD + f"g (float[{', '.join(names)}] x) => (int64[N] y) {{{lines}\n}}")
    values = _infer(proto)
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros(dims, np.float32)})[0].tolist()
    got = shape_vector(values["y"], {})
    assert got is not None
    assert [dims[names.index(e[1][0])] for e in got[0]] == expected
