"""A scale on a permuted K^T (rules/attention/key_perm.yaml, scores-key-permuted).

scores-key-permuted splits K^T written as one Transpose of another layout, q @ Transpose(x, p), into
Transpose(Transpose(x, p'), [0, 1, 3, 2]), the form the attention fragment takes. Florence-2's DaViT channel
attention (hold-out 46's florence2_vision, TorchScript) scales q and K^T before their product, SDPA's scale split
in two: (q * s) @ (Transpose(k, p) * s), and attends over the channels of a group,
`qkv.reshape(B, N, 3, G, C / G).permute(2, 0, 3, 4, 1)`, so once the layout passes have merged its permutes,
K^T is Transpose(k [B, N, G, C/G], perm=[0, 2, 1, 3]) (the N tokens the "head size"). The rule wanted the
Transpose right at the MatMul: 0 of 2 channel attentions fused at ort / onnx / trt. The K^T scale now stays on
the new K^T (the same values for any s that broadcasts). Each fused graph is compared with the original in ONNX
Runtime; a per-channel K^T scale (no single number) stays unfused and exact."""

from __future__ import annotations

import numpy as np
import pytest
from attention_testing import fuse

B, H, S, T, D = 2, 2, 5, 6, 4
AXES = {"B": B, "H": H, "T": T, "D": D}
ATTN = {"ort": ("com.microsoft::MultiHeadAttention", "com.microsoft::Attention"), "onnx": ("Attention",),
        "trt": ("Attention",)}


def _scores_model(h, layout: str, scale: str = "qk"):
    """q [b, H, S, D], k in ``layout`` (a permutation of "BHTD"), v [b, H, T, D] as graph inputs;
    o = softmax(s(q k^T)) v with k^T = Transpose(k, perm) to [B, H, D, T]. scale: "qk" D^-0.25 on q and on K^T
    (Florence-2's TorchScript form), "scores" D^-0.5 on the product, "channel" a per-row K^T scale [1, 1, D, 1]."""
    perm = [layout.index(a) for a in "BHDT"]
    kshape = ["b" if a == "B" else AXES[a] for a in layout]
    n = h.node
    inits = {"s": np.array(D ** -0.25, np.float32), "s2": np.array(D ** -0.5, np.float32),
             "sc4": np.linspace(0.3, 0.7, D, dtype=np.float32).reshape(1, 1, D, 1)}
    nodes = [n("Transpose", ["k"], ["kt"], perm=perm)]
    if scale == "scores":
        nodes += [n("MatMul", ["q", "kt"], ["sc"]), n("Mul", ["sc", "s2"], ["ss"])]
    else:
        nodes += [n("Mul", ["q", "s"], ["qs"]), n("Mul", ["kt", "s" if scale == "qk" else "sc4"], ["ks"]),
                  n("MatMul", ["qs", "ks"], ["ss"])]
    nodes += [n("Softmax", ["ss"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi("q", ["b", H, S, D]), h.vi("k", kshape), h.vi("v", ["b", H, T, D])]
    return h.make_model(nodes, inputs, [h.vi("o", ["b", H, S, D])], inits, opset=18), kshape


def _feeds(kshape, b=B):
    rng = np.random.default_rng(46)
    shape = [b if x == "b" else x for x in kshape]
    return {"q": rng.standard_normal((b, H, S, D)).astype(np.float32),
            "k": rng.standard_normal(shape).astype(np.float32),
            "v": rng.standard_normal((b, H, T, D)).astype(np.float32)}


def _fused_count(h, model) -> int:
    return sum(c for op, c in h.ops(model).items() if "Attention" in op)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("layout", ["BDHT", "BTDH", "HBTD", "BHTD"])
@pytest.mark.parametrize("scale", ["qk", "scores"])
def test_permuted_keys_fuse_with_either_scale(h, target, layout, scale):
    # BDHT: Florence-2's channel attention; BTDH / HBTD: other orders; BHTD: the plain layout (no split needed)
    model, kshape = _scores_model(h, layout, scale)
    out, fired = fuse(model, target)
    assert _fused_count(h, out) == 1 and "Softmax" not in h.ops(out), (h.ops(out), fired)
    assert fired.get("attention", 0) == 1, fired
    h.assert_close(model, out, _feeds(kshape))
    h.assert_close(model, out, _feeds(kshape, b=3))


def test_per_channel_key_scale_stays_unfused_and_exact(h):
    # a K^T scale per row of K^T (per head-size channel) is no single number: the split is still an identity,
    # the attention fragment refuses, and the graph computes the same
    model, kshape = _scores_model(h, "BDHT", "channel")
    out, fired = fuse(model, "ort")
    assert "attention" not in fired and "Softmax" in h.ops(out), (h.ops(out), fired)
    h.assert_close(model, out, _feeds(kshape))


def _channel_attention_block(h):
    """Florence-2's channel attention as the TorchScript exporter writes it: x [b, N, C] -> qkv Linear ->
    Reshape [b, N, 3, G, C/G] -> Transpose [2, 0, 3, 4, 1] -> Split -> Squeeze -> q, k, v [b, G, C/G, N];
    softmax((q * s) (k * s)^T) v over the C/G channels of a group, scale N^-0.5 (as two q / k factors N^-0.25),
    -> Transpose [0, 3, 2, 1] -> Reshape [b, N, C] -> proj."""
    N, C, G = 8, 16, 2
    n, rng = h.node, np.random.default_rng(7)
    inits = {"wqkv": (rng.standard_normal((C, 3 * C)) * 0.3).astype(np.float32),
             "bqkv": (rng.standard_normal(3 * C) * 0.1).astype(np.float32),
             "wo": (rng.standard_normal((C, C)) * 0.3).astype(np.float32),
             "shape5": np.array([0, N, 3, G, C // G], np.int64), "shape3": np.array([0, N, C], np.int64),
             "ax0": np.array([0], np.int64), "s": np.array(N ** -0.25, np.float32)}
    nodes = [n("MatMul", ["x", "wqkv"], ["l"]), n("Add", ["l", "bqkv"], ["lb"]),
             n("Reshape", ["lb", "shape5"], ["r5"]), n("Transpose", ["r5"], ["t5"], perm=[2, 0, 3, 4, 1]),
             n("Split", ["t5"], ["q5", "k5", "v5"], axis=0, num_outputs=3)]
    for t in "qkv":
        nodes.append(n("Squeeze", [f"{t}5", "ax0"], [t]))
    nodes += [n("Mul", ["q", "s"], ["qs"]), n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
              n("Mul", ["kt", "s"], ["ks"]), n("MatMul", ["qs", "ks"], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1),
              n("MatMul", ["p", "v"], ["o"]), n("Transpose", ["o"], ["ot"], perm=[0, 3, 2, 1]),
              n("Reshape", ["ot", "shape3"], ["o3"]), n("MatMul", ["o3", "wo"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", ["b", N, C])], [h.vi("y", ["b", N, C])], inits, opset=18)
    return model, lambda b: {"x": np.random.default_rng(b).standard_normal((b, N, C)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_florence2_channel_attention_block_is_fused(h, target):
    model, feeds = _channel_attention_block(h)
    out, fired = fuse(model, target)
    assert _fused_count(h, out) == 1 and "Softmax" not in h.ops(out), (h.ops(out), fired)
    h.assert_close(model, out, feeds(2))
    h.assert_close(model, out, feeds(3))
