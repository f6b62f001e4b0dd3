"""Idioms found on the nineteenth hold-out sweep (whole dense-prediction, detection, matching and dual-encoder
models: tools/holdout_specs.py HOLDOUT19, docs/holdout.md), each as a tiny graph that failed before its fix;
numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, D, S, T = 2, 2, 8, 4, 6
E = H * D
ATTENTION = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention")


def _constant_query_cross_attention(h, padding=True):
    """Table Transformer's first decoder cross-attention in a static export (transformers' DetrAttention-style
    bmm, heads in the batch axis): its query reads the learned object queries only, so q's [B,S,E] ->
    [B,H,S,D] -> [B*H,S,D] views are one constant [B*H, S, D] after folding; k and v the memory's
    projections viewed [B*H, T, D]; the scores viewed [B, H, S, T], the key padding bias of an all-ones pixel
    mask (zeros [B, 1, S, T]) added there, viewed back [B*H, S, T] for the softmax; the output viewed back
    [B, S, E]. padding False: the scores' round trip without the bias."""
    n = h.node
    nodes = [n("MatMul", ["mem", "wk"], ["kp"]), n("MatMul", ["mem", "wv"], ["vp"])]
    for x in ("k", "v"):
        nodes += [n("Reshape", [f"{x}p", "view4"], [f"{x}4"]),
                  n("Transpose", [f"{x}4"], [f"{x}4t"], perm=[0, 2, 1, 3]),
                  n("Reshape", [f"{x}4t", "view3"], [f"{x}3"])]
    nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["qc", "kt"], ["sc"]),
              n("Reshape", ["sc", "sview4"], ["s4"])]
    nodes += [n("Add", ["s4", "pad"], ["sm"])] if padding else [n("Identity", ["s4"], ["sm"])]
    nodes += [n("Reshape", ["sm", "sview3"], ["s3"]), n("Softmax", ["s3"], ["p"], axis=-1),
              n("MatMul", ["p", "v3"], ["o3"]), n("Reshape", ["o3", "oview"], ["o4"]),
              n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["out"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    rng = np.random.default_rng(3)
    w = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    inits = {"wk": w(E, E), "wv": w(E, E), "qc": w(B * H, S, D), "view4": i64(B, T, H, D),
             "view3": i64(B * H, T, D), "sview4": i64(B, H, S, T), "sview3": i64(B * H, S, T),
             "pad": np.zeros((B, 1, S, T), np.float32), "oview": i64(B, H, S, D), "merge": i64(B, S, E)}
    return h.make_model(nodes, [h.vi("mem", [B, T, E])], [h.vi("out", [B, S, E])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("padding", [True, False])
def test_constant_head_folded_query_with_the_scores_viewed_and_back_is_fused(h, target, padding):
    """Table Transformer static_nomask (hold-out 31): attention 4/6 before (one folded constant self-attention,
    this cross-attention left as MatMul / Softmax / MatMul). The constant q leaves batched_heads.yaml no view to
    prove the heads, and attention-bmm-single-head took no view between the scores and the softmax; the simplify
    stage merges the round trip only after the fuse stage. A view of the scores back to their own shape is the
    identity, so the single-head form takes it."""
    model = _constant_query_cross_attention(h, padding)
    out = h.fuse(model, target)
    counts = h.ops(out)
    fused = sum(v for k, v in counts.items() if k.split("::")[-1] in ATTENTION)
    assert fused == 1 and "Softmax" not in counts, counts
    for seed in range(3):
        feeds = {"mem": np.random.default_rng(seed).standard_normal((B, T, E)).astype(np.float32)}
        h.assert_close(model, out, feeds)
