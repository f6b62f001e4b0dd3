"""identity-elimination: Concat's inputs of static length 0 on its axis are dropped.

TorchScript keeps `torch.cat([x_rot, x[..., rotary_dim:]], -1)` when the rotary dim is the whole head (GPT-J
rotary_dim = head size, GPT-NeoX rotary_pct 1.0): the pass-through is an empty Slice and the Concat copies the
rotated head. The dynamo exporter folds it; before this, the Concat stayed between RoPE and attention and kept
the 3-D RotaryEmbedding's Reshapes from cancelling (hold-out 23's gptj_rfull torchscript_kv: 90 nodes at ort-O3
against its dynamo kv export's 63)."""

from __future__ import annotations

import numpy as np
import onnx_fuse

from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from pass_testing import apply, check_same, normal_feeds, ops, parse

BIG = 9223372036854775807


def _cat(cut: int, between: bool = False, dim: int = 16):
    """x [b, s, 2, dim] -> Concat(x * 2, x[..., cut:]) on the last axis (between: a third input, x[..., :4],
    after the cut one), viewed [b, s, 2 * (width)]."""
    tail = ", q" if between else ""
    extra = "q = Slice(x, zero, four, axis)\n" if between else ""
    width = 2 * dim + (4 if between else 0) - min(cut, dim)
    return parse(f"""<ir_version: 10, opset_import: ["" : 17]>
        g (float[b, s, 2, {dim}] x) => (float[b, s, {2 * width}] y) <int64[1] cut = {{{cut}}}, int64[1] big = {{{BIG}}},
                                          int64[1] axis = {{3}}, int64[1] zero = {{0}}, int64[1] four = {{4}},
                                          int64[3] flat = {{0, 0, {2 * width}}}, float two = {{2.0}}> {{
            r = Mul(x, two)
            p = Slice(x, cut, big, axis)
            {extra}c = Concat(r, p{tail}) <axis = -1>
            y = Reshape(c, flat)
        }}""")


def test_an_empty_pass_through_leaves_the_rotated_head():
    proto = _cat(16)
    model, modified, p = apply(IdentityEliminationPass, proto, shape_inference=True)
    assert modified and p.stats["Concat-empty-input"] == 1 and "Concat" not in ops(model), ops(model)
    check_same(proto, model, normal_feeds(0, x=(2, 5, 2, 16)))


def test_an_empty_input_between_others_is_dropped():
    proto = _cat(16, between=True)
    model, modified, p = apply(IdentityEliminationPass, proto, shape_inference=True)
    concat = next(n for n in model.graph if n.op_type == "Concat")
    assert modified and [v.name for v in concat.inputs] == ["r", "q"], [v.name for v in concat.inputs]
    check_same(proto, model, normal_feeds(1, x=(1, 3, 2, 16)))


def test_inputs_of_other_lengths_stay():
    """A non-empty pass-through (rotary over 12 of 16) and a head of unknown width keep every input."""
    for proto in (_cat(12), parse(f"""<ir_version: 10, opset_import: ["" : 17]>
            g (float[b, s, 2, d] x) => (float[b, s, 2, e] y) <int64[1] cut = {{16}}, int64[1] big = {{{BIG}}},
                                                                int64[1] axis = {{3}}, float two = {{2.0}}> {{
                r = Mul(x, two)
                p = Slice(x, cut, big, axis)
                y = Concat(r, p) <axis = -1>
            }}""")):
        model, modified, _ = apply(IdentityEliminationPass, proto, shape_inference=True)
        assert not modified and ops(model)["Concat"] == 1


def _rope_with_empty_pass():
    """Rotate-half RoPE over x[..., :16] of a 16-wide head x [b, 2, s, 16], computed tables cos/sin(concat(f, f))
    [1, s, 8] unsqueezed at the head axis, concatenated with x[..., 16:] (empty), as TorchScript writes
    GPT-NeoX with rotary_pct 1.0."""
    return parse(f"""<ir_version: 10, opset_import: ["" : 20]>
        g (float[b, 2, s, 16] x, float[1, s, 8] f) => (float[b, 2, s, 16] y)
            <int64[1] zero = {{0}}, int64[1] rd = {{16}}, int64[1] half = {{8}}, int64[1] big = {{{BIG}}},
             int64[1] axis = {{3}}, int64[1] one = {{1}}> {{
            cat = Concat(f, f) <axis = -1>
            co = Cos(cat)
            si = Sin(cat)
            cu = Unsqueeze(co, one)
            su = Unsqueeze(si, one)
            xr = Slice(x, zero, rd, axis)
            xp = Slice(x, rd, big, axis)
            x1 = Slice(xr, zero, half, axis)
            x2 = Slice(xr, half, big, axis)
            n = Neg(x2)
            r = Concat(n, x1) <axis = -1>
            c = Mul(xr, cu)
            s2 = Mul(r, su)
            ro = Add(c, s2)
            y = Concat(ro, xp) <axis = -1>
        }}""")


def test_rope_over_the_whole_head_is_one_rotary_op():
    proto = _rope_with_empty_pass()
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 2, 5, 16)).astype(np.float32),
             "f": (np.arange(5)[None, :, None] * 10000.0 ** (-np.arange(8) / 8)).astype(np.float32)}
    for target in ("onnx", "ort", "trt"):
        model = onnx_fuse.optimize(proto, level=2, target=target).model
        got = ops(model)
        last = model.graph.outputs[0].producer()
        # the one Concat left builds the caches' Expand target [B, 1, 1]
        assert got.get("RotaryEmbedding") == 1 and last.op_type == "RotaryEmbedding" and "Slice" not in got, \
            (target, got)
        check_same(proto, model, feeds)
