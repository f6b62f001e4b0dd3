"""rules/layout/heads_3d.yaml norm-before-head-transpose: Phi's qk_layernorm normalizes q / k after the
head Transpose (LayerNormalization over D of [B,H,S,D], trained gamma and beta), so RoPE read
LayerNorm(Transpose(view)) and neither rotary-between-head-transposes nor attention-rotated-heads-3d
took it: each q / k kept its Transpose pair. The norm over the last axis moves before the Transpose
(which keeps that axis), leaving RoPE(Transpose(x)): no Transpose is left at ort / onnx / trt.

The block is a layer's attention as the dynamo export writes it, without a cache: q / k / v [B,S,H*D]
viewed into heads and transposed, LayerNorm on q and k, rotate-half RoPE from positions, softmax
attention, the merge back. Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attention_testing import rotate_half_nodes, scores_merge_nodes

B, S, H, D = 2, 3, 4, 8
BIG = np.iinfo(np.int64).max


def _block(h, *, axis=-1, normed_out=False):
    """axis: the LayerNorm's axis (-1: over D); normed_out: q's norm is also a graph output."""
    n = h.node
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [n("Reshape", [f"{name}3", "shp"], [f"{name}sp"]),
                  n("Transpose", [f"{name}sp"], [f"{name}hf" if name != "v" else "v4"], perm=[0, 2, 1, 3])]
        if name != "v":
            nodes.append(n("LayerNormalization", [f"{name}hf", f"{name}_gamma", f"{name}_beta"], [f"{name}4"],
                           axis=axis, epsilon=1e-5))
    nodes += rotate_half_nodes(n)
    nodes += scores_merge_nodes(n, "k4rot", "v4")
    inputs = [h.vi("pos", ["s"], elem=7), h.vi("q3", ["b", "s", H * D]), h.vi("k3", ["b", "s", H * D]),
              h.vi("v3", ["b", "s", H * D]), h.vi("mask", ["b", 1, "s", "s"])]
    outputs = [h.vi("y", ["b", "s", H * D])] + ([h.vi("q4", ["b", H, "s", D])] if normed_out else [])
    r = np.random.default_rng(7)
    gshape = (D,) if axis == -1 else (S, D)
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"shp": np.array([0, 0, H, D], np.int64),
             **{f"{x}_gamma": (1 + 0.1 * r.standard_normal(gshape)).astype(np.float32) for x in "qk"},
             **{f"{x}_beta": (0.1 * r.standard_normal(gshape)).astype(np.float32) for x in "qk"},
             "ax02": np.array([0, 2], np.int64), "ax1": np.array([1], np.int64), "inv_freq": inv,
             "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
             "scale": np.array(D ** -0.5, np.float32), "hd": np.array([H * D], np.int64)}
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=S):
    r = h.rng
    f = {"pos": np.arange(s), **{x: r.standard_normal((B, s, H * D)).astype(np.float32) for x in ("q3", "k3", "v3")}}
    m = np.triu(np.full((s, s), -1e9), 1) + np.zeros((B, 1, s, s))
    m[1, :, :, :1] = -1e9  # left padding on row 1
    f["mask"] = m.astype(np.float32)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_normed_heads_rotate_on_the_3d_view(h, target):
    model = _block(h)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and ops["LayerNormalization"] == 2 and "Transpose" not in ops, ops
    assert h.fired(out)["norm-before-head-transpose"] == 2, h.fired(out)
    # the norms run on the [B,S,H,D] views, the rotations on [B,S,H*D]
    rope = [x for x in out.graph.node if x.op_type == "RotaryEmbedding"]
    assert all(next(a.i for a in x.attribute if a.name == "num_heads") == H for x in rope)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s))


def test_a_norm_read_elsewhere_stays(h):
    """q's norm is a graph output too: moving it would compute it twice, so q keeps its Transposes."""
    model = _block(h, normed_out=True)
    reasons = h.reasons(model, "ort", "norm-before-head-transpose")
    assert any(re.search("must be read only by the rotation", r) for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert h.fired(out)["norm-before-head-transpose"] == 1, h.fired(out)   # k only
    assert [o.name for o in out.graph.output] == ["y", "q4"]
    h.assert_close(model, out, _feeds(h))


def test_a_norm_over_rows_and_head_size_stays(h):
    """LayerNorm over the last two axes ([S, D] of [B,H,S,D]) mixes the positions the Transpose moves."""
    model = _block(h, axis=-2)
    out = h.fuse(model, "ort")
    assert not h.fired(out)["norm-before-head-transpose"], h.fired(out)
    h.assert_close(model, out, _feeds(h))
