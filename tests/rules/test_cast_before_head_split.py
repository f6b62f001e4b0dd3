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

from attention_testing import rotate_half_nodes
from head_block_testing import D, F16, H, S, cast_down_merge, head_feeds, head_inits, head_inputs, split_heads


def _block(h, *, split_read=False):
    """q3 / k3 / v3 float16 [B,S,H*D] split into heads; q / k cast to float32, rotated with float32 tables,
    cast back to float16; softmax(q k^T * scale + mask) v merged back to y. split_read: q's float16 head split
    is a graph output too."""
    n = h.node
    nodes = split_heads(n, lambda x: [n("Cast", [f"{x}hf"], [f"{x}4"], to=TensorProto.FLOAT)])
    nodes += rotate_half_nodes(n) + cast_down_merge(n)
    outputs = [h.vi("y", ["b", "s", H * D], elem=F16)] + ([h.vi("qhf", ["b", H, "s", D], elem=F16)] if split_read else [])
    return h.make_model(nodes, head_inputs(h, F16), outputs, head_inits(np.float16))


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
        h.assert_close(model, out, head_feeds(h, s), atol=3e-3, rtol=3e-3)


def test_a_split_read_elsewhere_keeps_its_cast(h):
    """q's float16 head split is a graph output too: moving the Cast would leave the split and add a second one,
    so q's Cast stays after it; values equal."""
    model = _block(h, split_read=True)
    reasons = h.reasons(model, "onnx", "cast-before-head-split")
    assert any("must be read only by the Cast" in r for r in reasons), reasons
    out = h.fuse(model, "onnx", level=3)
    h.assert_close(model, out, head_feeds(h), atol=3e-3, rtol=3e-3)
