"""Idioms found on the eighth hold-out sweep, part C (tools/export_diffusers.py: diffusion models,
docs/holdout.md), each as a tiny graph that failed before its fix; numerics against the original in ORT.
(Flux's RoPE: test_rotary_interleaved_paired.py; GroupNorm: test_group_norm.py.)"""

from __future__ import annotations

import numpy as np
import pytest

B, S, T, H, D = 2, 6, 5, 3, 4


def _i64(*v):
    return np.array(v, np.int64)


# ---- diffusers' AttnProcessor: heads folded into the batch, scores never viewed 4-D --------------

def _eager_attention(h, *, bias="zero", out_view=(B, H, S, D)):
    """head_to_batch_dim(q / k / v) = Reshape [B, L, H, D] -> Transpose -> Reshape [B*H, L, D];
    baddbmm(bias, q3, k3^T, beta, alpha=scale) -> softmax -> bmm(v3) -> batch_to_head_dim.
    bias: 'zero' (no mask: beta * empty, 0 * zeros [B*H, S, T]), 'table' (a 3-D additive term) or None."""
    n = h.node
    nodes, inits = [], {}
    for x, length in (("q", S), ("k", T), ("v", T)):
        nodes += [n("Reshape", [x, f"{x}_split"], [f"{x}4s"]), n("Transpose", [f"{x}4s"], [f"{x}4"], perm=[0, 2, 1, 3]),
                  n("Reshape", [f"{x}4", f"{x}_fold"], [f"{x}3"])]
        inits[f"{x}_split"], inits[f"{x}_fold"] = _i64(B, length, H, D), _i64(B * H, length, D)
    nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"])]
    inits["scale"] = np.array(D ** -0.5, np.float32)
    scores = "ss"
    if bias == "zero":
        nodes += [n("Expand", ["zero", "bshape"], ["empty"]), n("Mul", ["empty", "beta"], ["eb"]),
                  n("Add", ["ss", "eb"], ["sb"])]
        inits.update(zero=np.array(0.0, np.float32), bshape=_i64(B * H, S, T), beta=np.array(0.0, np.float32))
        scores = "sb"
    elif bias == "table":
        nodes += [n("Add", ["ss", "table"], ["sb"])]
        inits["table"] = h.rng.standard_normal((B * H, S, T)).astype(np.float32)
        scores = "sb"
    nodes += [n("Softmax", [scores], ["p"], axis=-1), n("MatMul", ["p", "v3"], ["o3"]),
              n("Reshape", ["o3", "o_split"], ["o4"]), n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              n("Reshape", ["ot", "o_merge"], ["o"])]
    inits.update(o_split=_i64(*out_view), o_merge=_i64(B, S, H * D))
    inputs = [h.vi("q", [B, S, H * D]), h.vi("k", [B, T, H * D]), h.vi("v", [B, T, H * D])]
    return h.make_model(nodes, inputs, [h.vi("o", [B, S, H * D])], inits)


def _feeds(h):
    return {"q": h.rng.standard_normal((B, S, H * D)).astype(np.float32),
            "k": h.rng.standard_normal((B, T, H * D)).astype(np.float32),
            "v": h.rng.standard_normal((B, T, H * D)).astype(np.float32)}


def _attn(h, model):
    return sum(v for k, v in h.ops(model).items() if k.endswith("Attention"))


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
@pytest.mark.parametrize("bias", ["zero", "table", None])
def test_heads_folded_into_the_batch_become_multi_head_attention(h, target, level, bias):
    model = _eager_attention(h, bias=bias)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert _attn(h, out) == 1 and "Softmax" not in ops, ops
    # the head_to_batch_dim / batch_to_head_dim views are gone with the heads proven (one head per
    # B*H slice would keep them), and so is baddbmm's all-zero bias (no [B*H, S, T] zeros read)
    assert ops["Transpose"] == 0 and "Expand" not in ops, ops
    if target == "ort":  # MultiHeadAttention's attention_bias (input 5): only a real bias is kept
        mha = next(n for n in out.graph.node if n.op_type == "MultiHeadAttention")
        has_bias = len(mha.input) > 5 and mha.input[5] != ""
        assert has_bias == (bias == "table"), list(mha.input)
    h.assert_close(model, out, _feeds(h))


def test_an_output_view_that_is_not_the_heads_is_refused(h):
    """o3 [B*H, S, D] viewed as [H, B, S, D] is no batch_to_head_dim: the heads are not proven (the
    single-head rule still takes it, one head per slice, exactly)."""
    model = _eager_attention(h, out_view=(H, B, S, D))
    reasons = h.reasons(model, "ort", "attention-batched-heads-3d")
    assert any("output must be viewed" in r for r in reasons), reasons
    out = h.fuse(model, "ort", 3)
    assert _attn(h, out) == 1 and h.ops(out)["Transpose"] > 0, h.ops(out)
    h.assert_close(model, out, _feeds(h))
