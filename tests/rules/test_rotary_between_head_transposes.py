"""rules/layout/heads_3d.yaml rotary-between-head-transposes: a qk-norm between the head split and the
rotation (Cohere's use_qk_norm, Qwen 3: a norm over D of q / k viewed [B,S,H,D], then the heads-first
Transpose and RoPE) left the rotation between the exporter's Transpose and the one a 3-D attention
lowering adds after it; RoPE's 3-D form (num_heads) on the normed value viewed [B,S,H*D] leaves none.
At onnx the attention itself stayed 4-D (q / k not head splits): attention-rotated-heads-3d and
attention-kv-rotated-heads-3d take RoPE(Transpose(x4)) as the 3-D rotation of x4's view.

The block is a layer's attention as the dynamo export writes it, without a cache: q / k / v [B,S,H*D]
viewed into heads, a LayerNorm over D with a per-head gamma [H, D] on q and k, the heads-first
Transpose, rotate-half RoPE with cos / sin computed from positions, softmax attention, the merge back.
Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attention_testing import rotate_half_nodes, scores_merge_nodes
from head_block_testing import B, D, H, S, head_inits

P = 5


def _block(h, *, rotated_out=False, cache=False):
    """rotated_out: q's rotation is also a graph output (read besides the attention); cache: past keys /
    values joined before the new ones, the joins graph outputs (present_k / present_v)."""
    n = h.node
    nodes = []
    for name in ("q", "k", "v"):
        nodes.append(n("Reshape", [f"{name}3", "shp"], [f"{name}sp"]))
        src = f"{name}sp"
        if name != "v":  # qk-norm over D, per-head gamma
            nodes += [n("LayerNormalization", [src, "ones"], [f"{name}ln"], axis=-1, epsilon=1e-5),
                      n("Mul", [f"{name}ln", f"{name}_gamma"], [f"{name}nm"])]
            src = f"{name}nm"
        nodes.append(n("Transpose", [src], [f"{name}4"], perm=[0, 2, 1, 3]))
    nodes += rotate_half_nodes(n)
    k, v = "k4rot", "v4"
    if cache:
        nodes += [n("Concat", ["past_k", "k4rot"], ["present_k"], axis=2),
                  n("Concat", ["past_v", "v4"], ["present_v"], axis=2)]
        k, v = "present_k", "present_v"
    nodes += scores_merge_nodes(n, k, v)
    inputs = [h.vi("pos", ["s"], elem=7), h.vi("q3", ["b", "s", H * D]), h.vi("k3", ["b", "s", H * D]),
              h.vi("v3", ["b", "s", H * D]), h.vi("mask", ["b", 1, "s", "t" if cache else "s"])]
    outputs = [h.vi("y", ["b", "s", H * D])] + ([h.vi("q4rot", ["b", H, "s", D])] if rotated_out else [])
    if cache:
        inputs += [h.vi("past_k", ["b", H, "p", D]), h.vi("past_v", ["b", H, "p", D])]
        outputs += [h.vi("present_k", ["b", H, "t", D]), h.vi("present_v", ["b", H, "t", D])]
    r = np.random.default_rng(7)
    inits = head_inits(ones=np.ones(D, np.float32),
                       q_gamma=(1 + 0.1 * r.standard_normal((H, D))).astype(np.float32),
                       k_gamma=(1 + 0.1 * r.standard_normal((H, D))).astype(np.float32))
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, cache=False):
    r = h.rng
    past = P if cache else 0
    f = {"pos": np.arange(past, past + S),
         **{x: r.standard_normal((B, S, H * D)).astype(np.float32) for x in ("q3", "k3", "v3")}}
    m = np.triu(np.full((S, past + S), -1e9), 1 + past) + np.zeros((B, 1, S, past + S))
    m[1, :, :, :1] = -1e9  # left padding on row 1
    f["mask"] = m.astype(np.float32)
    if cache:
        f["past_k"], f["past_v"] = (r.standard_normal((B, H, P, D)).astype(np.float32) for _ in range(2))
    return f


def test_qk_norm_rotation_runs_on_the_3d_view(h):
    model = _block(h)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    # the rotation between the exporter's Transpose and the lowering's: no Transpose is left
    assert ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    # per q / k: the view and the rotation (the view back merged into the attention's)
    assert h.fired(out)["rotary-between-head-transposes"] == 4, h.fired(out)
    rope = [x for x in out.graph.node if x.op_type == "RotaryEmbedding"]
    assert all(next(a.i for a in x.attribute if a.name == "num_heads") == H for x in rope)
    h.assert_close(model, out, _feeds(h))


def test_a_rotation_read_elsewhere_keeps_its_transposes(h):
    """q's rotation is a graph output as well: viewing it [B,S,H*D] would compute it twice."""
    model = _block(h, rotated_out=True)
    reasons = h.reasons(model, "ort", "rotary-between-head-transposes")
    assert any(re.search("must be read only through the Transpose back", r) for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    assert [o.name for o in out.graph.output] == ["y", "q4rot"]
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("cache", [False, True])
def test_qk_norm_attention_runs_on_the_3d_rotations_at_onnx(h, cache):
    model = _block(h, cache=cache)
    out = h.fuse(model, "onnx")
    ops = h.ops(out)
    assert ops["Attention"] == 1 and ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    att = next(x for x in out.graph.node if x.op_type == "Attention")
    assert next(a.i for a in att.attribute if a.name == "q_num_heads") == H
    rule = "attention-kv-rotated-heads-3d" if cache else "attention-rotated-heads-3d"
    assert h.fired(out)[rule], h.fired(out)
    if cache:
        assert [o.name for o in out.graph.output] == ["y", "present_k", "present_v"]
    h.assert_close(model, out, _feeds(h, cache=cache))
