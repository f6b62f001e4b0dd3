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

B, S, H, D = 2, 3, 4, 8
BIG = np.iinfo(np.int64).max
F16 = TensorProto.FLOAT16


def _block(h, *, norm="RMSNormalization", back=True, cast_read=False):
    """A float16 attention layer whose q / k norms run in float32: Cast up after the heads Transpose, the norm,
    Cast back down (back=False: the rotation runs in float32, the scores cast down); cast_read: q's float32
    copy is also a graph output."""
    n = h.node
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [n("Reshape", [f"{name}3", "shp"], [f"{name}sp"]),
                  n("Transpose", [f"{name}sp"], [f"{name}hf" if name != "v" else "v4"], perm=[0, 2, 1, 3])]
        if name != "v":
            nodes.append(n("Cast", [f"{name}hf"], [f"{name}up"], to=TensorProto.FLOAT))
            inputs = [f"{name}up", f"{name}_gamma"] + ([f"{name}_beta"] if norm == "LayerNormalization" else [])
            nodes.append(n(norm, inputs, [f"{name}nf" if back else f"{name}4"], axis=-1, epsilon=1e-6))
            if back:
                nodes.append(n("Cast", [f"{name}nf"], [f"{name}4"], to=F16))
    rope = rotate_half_nodes(n)
    if back:  # the tables cast to float16 as a half model's are
        for node in rope:
            if node.op_type in ("Cos", "Sin"):
                node.output[0] += "32"
        rope[6:6] = [n("Cast", ["co32"], ["co"], to=F16), n("Cast", ["si32"], ["si"], to=F16)]
    else:  # float32 rotation; the scores meet float16 v after a Cast
        rope += [n("Cast", ["q4rot"], ["q4r16"], to=F16), n("Cast", ["k4rot"], ["k4r16"], to=F16)]
    nodes += rope
    merge = scores_merge_nodes(n, "k4rot" if back else "k4r16", "v4")
    if not back:
        merge[1].input[0] = "q4r16"
    nodes += merge
    inputs = [h.vi("pos", ["s"], elem=7), *(h.vi(f"{x}3", ["b", "s", H * D], elem=F16) for x in "qkv"),
              h.vi("mask", ["b", 1, "s", "s"], elem=F16)]
    outputs = [h.vi("y", ["b", "s", H * D], elem=F16)] + ([h.vi("qup", ["b", H, "s", D])] if cast_read else [])
    r = np.random.default_rng(7)
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"shp": np.array([0, 0, H, D], np.int64),
             **{f"{x}_gamma": (1 + 0.1 * r.standard_normal(D)).astype(np.float32) for x in "qk"},
             **{f"{x}_beta": (0.1 * r.standard_normal(D)).astype(np.float32) for x in "qk"},
             "ax02": np.array([0, 2], np.int64), "ax1": np.array([1], np.int64), "inv_freq": inv,
             "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
             "scale": np.array(D ** -0.5, np.float16), "hd": np.array([H * D], np.int64)}
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, s=S):
    r = h.rng
    f = {"pos": np.arange(s), **{x: r.standard_normal((B, s, H * D)).astype(np.float16) for x in ("q3", "k3", "v3")}}
    m = np.triu(np.full((s, s), -1e4), 1) + np.zeros((B, 1, s, s))
    m[1, :, :, -1:] = -1e4  # row 1's last key padded (every query keeps a key: float16 has no exact all-masked row)
    f["mask"] = m.astype(np.float16)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("norm", ["RMSNormalization", "LayerNormalization"])
def test_norm_island_moves_before_the_head_transpose(h, target, norm):
    model = _block(h, norm=norm)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and ops[norm] == 2 and "Transpose" not in ops, ops
    assert h.fired(out)["norm-before-head-transpose"] >= 2, h.fired(out)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s), atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_a_cast_up_alone_moves_too(h, target):
    """The rotation in float32 (no Cast down before it): the one Cast moves with the norm."""
    model = _block(h, back=False)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert h.fired(out)["norm-before-head-transpose"] >= 2, h.fired(out)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s), atol=3e-3, rtol=3e-3)


def test_a_cast_read_elsewhere_stays(h):
    """q's float32 copy is a graph output too: moving the island would compute it twice, so q stays."""
    reasons = h.reasons(_block(h, cast_read=True), "onnx", "norm-before-head-transpose")
    assert any("must be read only by the rotation" in r for r in reasons), reasons
