"""rules/layout/heads_3d.yaml norm-before-head-transpose through a float32 island (hold-out 40).

A float16 Gemma 3-family model (T5Gemma 2's text encoder) computes its q / k RMSNorm in float32 after the heads
Transpose: Transpose -> Cast(float32) -> norm -> Cast(float16) -> RoPE. The rule took the norm only when it
read the Transpose and fed the rotation directly, so in float16 each q / k kept its Transposes at onnx / trt
(t5gemma2_text float16 static_nomask at onnx-O3: 9 Transposes, 1 in float32). The Casts are elementwise and
move before the Transpose with the norm. Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from attention_testing import rotate_half_nodes, scores_merge_nodes
from head_block_testing import D, F16, H, S, cast_down_merge, head_feeds, head_inits, head_inputs, split_heads


def _block(h, *, norm="RMSNormalization", back=True, cast_read=False):
    """A float16 attention layer whose q / k norms run in float32: Cast up after the heads Transpose, the norm,
    Cast back down (back=False: the rotation runs in float32, the scores cast down); cast_read: q's float32
    copy is also a graph output."""
    n = h.node

    def island(name):
        inputs = [f"{name}up", f"{name}_gamma"] + ([f"{name}_beta"] if norm == "LayerNormalization" else [])
        nodes = [n("Cast", [f"{name}hf"], [f"{name}up"], to=TensorProto.FLOAT),
                 n(norm, inputs, [f"{name}nf" if back else f"{name}4"], axis=-1, epsilon=1e-6)]
        return nodes + ([n("Cast", [f"{name}nf"], [f"{name}4"], to=F16)] if back else [])

    nodes = split_heads(n, island)
    rope = rotate_half_nodes(n)
    if back:  # the tables cast to float16 as a half model's are
        for node in rope:
            if node.op_type in ("Cos", "Sin"):
                node.output[0] += "32"
        rope[6:6] = [n("Cast", ["co32"], ["co"], to=F16), n("Cast", ["si32"], ["si"], to=F16)]
        nodes += rope + scores_merge_nodes(n, "k4rot", "v4")
    else:  # float32 rotation; the scores meet float16 v after a Cast
        nodes += rope + cast_down_merge(n)
    outputs = [h.vi("y", ["b", "s", H * D], elem=F16)] + ([h.vi("qup", ["b", H, "s", D])] if cast_read else [])
    r = np.random.default_rng(7)
    weights = {**{f"{x}_gamma": (1 + 0.1 * r.standard_normal(D)).astype(np.float32) for x in "qk"},
               **{f"{x}_beta": (0.1 * r.standard_normal(D)).astype(np.float32) for x in "qk"}}
    return h.make_model(nodes, head_inputs(h, F16), outputs, head_inits(np.float16, **weights))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("norm", ["RMSNormalization", "LayerNormalization"])
def test_norm_island_moves_before_the_head_transpose(h, target, norm):
    model = _block(h, norm=norm)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and ops[norm] == 2 and "Transpose" not in ops, ops
    assert h.fired(out)["norm-before-head-transpose"] >= 2, h.fired(out)
    for s in (S, 6):
        h.assert_close(model, out, head_feeds(h, s), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_a_cast_up_alone_moves_too(h, target):
    """The rotation in float32 (no Cast down before it): the one Cast moves with the norm."""
    model = _block(h, back=False)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert h.fired(out)["norm-before-head-transpose"] >= 2, h.fired(out)
    for s in (S, 6):
        h.assert_close(model, out, head_feeds(h, s), atol=3e-3, rtol=3e-3)


def test_a_cast_read_elsewhere_stays(h):
    """q's float32 copy is a graph output too: moving the island would compute it twice, so q stays."""
    reasons = h.reasons(_block(h, cast_read=True), "onnx", "norm-before-head-transpose")
    assert any("must be read only by the rotation" in r for r in reasons), reasons
