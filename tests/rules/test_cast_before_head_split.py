"""rules/layout/cast_heads.yaml cast-before-head-split (hold-out 49).

A float16 model that rotates q / k in float32 (ModernBERT in float16: the heads Transpose, Cast up, RoPE, Cast
down, attention) kept a Reshape and a Transpose per q / k / v / output at onnx: rotary-heads-3d and
attention-heads-3d take RoPE / Attention-23 on a head split itself, and a Cast sat between (modernbert float16
dyn_mask at onnx-O3: 113 nodes with 8 Reshapes and 8 Transposes, its float32 twin none). A Cast commutes with the
split's Reshape / Transpose exactly, so it moves before them. Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from attention_testing import rotate_half_nodes, scores_merge_nodes

B, S, H, D = 2, 3, 4, 8
BIG = np.iinfo(np.int64).max
F16 = TensorProto.FLOAT16


def _block(h, *, split_read=False):
    """q3 / k3 / v3 float16 [B,S,H*D] split into heads; q / k cast to float32, rotated with float32 tables,
    cast back to float16; softmax(q k^T * scale + mask) v merged back to y. split_read: q's float16 head split
    is a graph output too."""
    n = h.node
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [n("Reshape", [f"{name}3", "shp"], [f"{name}sp"]),
                  n("Transpose", [f"{name}sp"], [f"{name}hf" if name != "v" else "v4"], perm=[0, 2, 1, 3])]
        if name != "v":
            nodes.append(n("Cast", [f"{name}hf"], [f"{name}4"], to=TensorProto.FLOAT))
    nodes += rotate_half_nodes(n)
    nodes += [n("Cast", ["q4rot"], ["q4r16"], to=F16), n("Cast", ["k4rot"], ["k4r16"], to=F16)]
    merge = scores_merge_nodes(n, "k4r16", "v4")
    merge[1].input[0] = "q4r16"
    nodes += merge
    inputs = [h.vi("pos", ["s"], elem=7), *(h.vi(f"{x}3", ["b", "s", H * D], elem=F16) for x in "qkv"),
              h.vi("mask", ["b", 1, "s", "s"], elem=F16)]
    outputs = [h.vi("y", ["b", "s", H * D], elem=F16)] + ([h.vi("qhf", ["b", H, "s", D], elem=F16)] if split_read else [])
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"shp": np.array([0, 0, H, D], np.int64),
             "ax02": np.array([0, 2], np.int64), "ax1": np.array([1], np.int64), "inv_freq": inv,
             "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
             "scale": np.array(D ** -0.5, np.float16), "hd": np.array([H * D], np.int64)}
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=S):
    r = h.rng
    f = {"pos": np.arange(s), **{x: r.standard_normal((B, s, H * D)).astype(np.float16) for x in ("q3", "k3", "v3")}}
    m = np.triu(np.full((s, s), -1e4), 1) + np.zeros((B, 1, s, s))
    m[1, :, :, -1:] = -1e4  # row 1's last key padded (every query keeps its first key)
    f["mask"] = m.astype(np.float16)
    return f


@pytest.mark.parametrize("target", ["onnx", "ort"])
def test_float32_rotation_in_a_half_model_takes_3d_heads(h, target):
    """At opset 23 (onnx; ort's Attention-23 fallback) the rotation and the attention run on [B,S,H*D]: no
    Transpose left (the old rules left 4: q / k / v splits and the output merge)."""
    model = _block(h)
    out = h.fuse(model, target, level=3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    assert h.fired(out)["cast-before-head-split"] >= 2, h.fired(out)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s), atol=3e-3, rtol=3e-3)


def test_a_split_read_elsewhere_keeps_its_cast(h):
    """q's float16 head split is a graph output too: moving the Cast would leave the split and add a second one,
    so q's Cast stays after it; values equal."""
    model = _block(h, split_read=True)
    reasons = h.reasons(model, "onnx", "cast-before-head-split")
    assert any("must be read only by the Cast" in r for r in reasons), reasons
    out = h.fuse(model, "onnx", level=3)
    h.assert_close(model, out, _feeds(h), atol=3e-3, rtol=3e-3)
