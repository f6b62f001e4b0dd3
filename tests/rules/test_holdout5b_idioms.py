"""Idioms found on the fifth hold-out sweep, part B (encoders, vision, audio: tools/holdout_specs.py
HOLDOUT5B, docs/holdout.md), each as a tiny graph that failed before its fix; numbers against the
original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8
ATTENTION = {"com.microsoft::MultiHeadAttention", "Attention", "onnx_fuse::FusedAttention"}


def _head_scaled_attention(h, scale_shape, kperm=(0, 1, 3, 2), commuted=False):
    """Swin v2's cosine attention after the L2 norms: softmax((q @ k^T) * c + bias) @ v with c one
    logit scale per head ([H, 1, 1]); k is [B, H, S, D] (or [B, S, H, D] with kperm [0, 2, 3, 1])."""
    n = h.node
    mul = ["c", "sc"] if commuted else ["sc", "c"]
    nodes = [n("Transpose", ["k"], ["kt"], perm=list(kperm)), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", mul, ["ss"]), n("Add", ["ss", "bias"], ["sb"]), n("Softmax", ["sb"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["y"])]
    r = np.random.default_rng(1)
    inits = {"c": np.exp(r.uniform(0.5, 2.5, scale_shape)).astype(np.float32),
             "bias": (16 / (1 + np.exp(-r.standard_normal((H, S, S))))).astype(np.float32)}
    kshape = ["batch", H, S, D] if list(kperm) == [0, 1, 3, 2] else ["batch", S, H, D]
    return h.make_model(nodes, [h.vi("q", ["batch", H, S, D]), h.vi("k", kshape), h.vi("v", ["batch", H, S, D])],
                        [h.vi("y", ["batch", H, S, D])], inits)


def _feeds(h, model):
    shapes = {i.name: [d.dim_value or B for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    feeds = {k: h.rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    for name in ("q", "k"):  # unit vectors, as after the cosine attention's L2 norms
        feeds[name] /= np.linalg.norm(feeds[name], axis=-1, keepdims=True)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["heads", "heads4d", "bthd", "commuted"])
def test_per_head_score_scale_is_fused(h, target, form):
    """Swin v2 (hold-out 5B): the scores times a per-head logit scale [H, 1, 1] (attention 0/4 on
    swinv2 before: the attention rules take one number as the scale); the factor moves onto q and the
    attention fuses, the numbers unchanged."""
    model = _head_scaled_attention(h, [1, H, 1, 1] if form == "heads4d" else [H, 1, 1],
                                   kperm=(0, 2, 3, 1) if form == "bthd" else (0, 1, 3, 2), commuted=form == "commuted")
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert h.fired(out)["scores-head-scale"] >= 1
    h.assert_close(model, out, _feeds(h, model))


def test_per_head_score_scale_near_misses(h):
    """A scale that varies along the keys ([1, 1, S]: not one number per matrix) is refused with the
    reason and the attention stays unfused; a single number is the attention rules' own scale."""
    model = _head_scaled_attention(h, [1, 1, S])
    reasons = h.reasons(model, "ort", "scores-head-scale")
    assert any("one number per matrix" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out) and not h.fired(out)["scores-head-scale"]
    h.assert_close(model, out, _feeds(h, model))
    single = _head_scaled_attention(h, [1, 1, 1])
    out = h.fuse(single, "ort")
    assert h.ops(out)["com.microsoft::MultiHeadAttention"] == 1 and not h.fired(out)["scores-head-scale"]
    h.assert_close(single, out, _feeds(h, single))
