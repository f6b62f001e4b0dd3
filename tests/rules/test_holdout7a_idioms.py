"""Idioms found on the seventh hold-out sweep, part A (tools/holdout_specs.py HOLDOUT7A: encoders, seq2seq
parts, speech and vision towers of transformers 5.24, docs/holdout.md), each as a tiny graph that failed
before its fix; numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, DH = 2, 2, 5, 8


def _i64(*v):
    return np.array(v, np.int64)


# ---- K^T as a view that splits the merged heads: SAM's static windowed attention (0/2 before) --------

def _split_heads_key(h, *, dims=(B, H), bias=True, split_scale=False):
    """softmax(view(q3) * s @ view(Transpose(k3, [0, 2, 1])) + bias) @ view(v3) with q3 / k3 / v3 heads
    merged [B*H, S, DH] and each view splitting the leading axis into [B, H] (SAM's static export);
    split_scale: q and K^T each scaled by sqrt(s), as the dynamo export decomposes SDPA."""
    n = h.node
    b, hh = dims
    nodes = [n("Reshape", ["q3", "s4"], ["q4"]), n("Mul", ["q4", "scale"], ["qs"]),
             n("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]), n("Reshape", ["kt3", "st4"], ["kt4"])]
    nodes += [n("Mul", ["kt4", "scale"], ["kts"]), n("MatMul", ["qs", "kts"], ["sc"])] if split_scale else \
        [n("MatMul", ["qs", "kt4"], ["sc"])]
    nodes += [n("Add", ["sc", "bias"], ["sb"])] if bias else []
    nodes += [n("Softmax", ["sb" if bias else "sc"], ["p"], axis=-1), n("Reshape", ["v3", "s4"], ["v4"]),
              n("MatMul", ["p", "v4"], ["o"])]
    scale = DH ** -0.25 if split_scale else DH ** -0.5
    inits = {"s4": _i64(b, hh, S, DH), "st4": _i64(b, hh, DH, S), "scale": np.array(scale, np.float32)}
    if bias:
        inits["bias"] = h.rng.standard_normal((b, hh, S, S)).astype(np.float32)
    inputs = [h.vi(v, [B * H, S, DH]) for v in ("q3", "k3", "v3")]
    return h.make_model(nodes, inputs, [h.vi("o", [b, hh, S, DH])], inits)


def _feeds(h):
    return {v: h.rng.standard_normal((B * H, S, DH)).astype(np.float32) for v in ("q3", "k3", "v3")}


def _attn(h, model):
    return sum(v for k, v in h.ops(model).items() if k.endswith("Attention"))


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
@pytest.mark.parametrize("bias,split_scale", [(True, False), (False, False), (True, True)])
def test_key_view_splitting_merged_heads_is_fused(h, target, level, bias, split_scale):
    model = _split_heads_key(h, bias=bias, split_scale=split_scale)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    # (no node keeps scores-key-view's name: fold-layout-chains folds the Transpose pair it writes)
    h.assert_close(model, out, _feeds(h))


def test_a_view_that_does_not_split_the_merged_axis_is_refused(h):
    """[B*H, D, T] viewed as [H, B, D, T] still splits the leading axis (the product is the same), but
    [B*H*D, T] cut another way is no K^T view: a view to [B, H*D/2, 2, T] is refused with its reason."""
    n = h.node
    nodes = [n("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]), n("Reshape", ["kt3", "st4"], ["kt4"]),
             n("MatMul", ["q", "kt4"], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["o"])]
    inits = {"st4": _i64(B, H * DH // 2, 2, S)}
    model = h.make_model(nodes, [h.vi("q", [B, H * DH // 2, S, 2]), h.vi("k3", [B * H, S, DH]),
                                 h.vi("v", [B, H * DH // 2, S, 2])], [h.vi("o", [B, H * DH // 2, S, 2])], inits)
    assert any("leading axis" in r for r in h.reasons(model, "ort", "scores-key-view")), \
        h.reasons(model, "ort", "scores-key-view")


def test_a_key_scale_of_more_than_one_number_is_refused(h):
    """K^T times a per-key-position vector is no score scale: refused with its reason."""
    model = _split_heads_key(h, split_scale=True)
    scale = next(i for i in model.graph.initializer if i.name == "scale")
    scale.CopyFrom(__import__("onnx").numpy_helper.from_array(np.full((S,), DH ** -0.25, np.float32), "scale"))
    reasons = h.reasons(model, "ort", "scores-key-view")
    assert any("single number" in r for r in reasons), reasons


def test_probabilities_times_a_value_view_is_refused(h):
    """P @ view(v3) has the K^T view's shape too (P's last axis is V's length): the rule wrote an
    identity Transpose pair there that transpose-pair removed again; the Softmax guard refuses it."""
    reasons = h.reasons(_split_heads_key(h), "ort", "scores-key-view")
    assert any("not probabilities" in r for r in reasons), reasons
    assert sum(r.startswith("matched") for r in reasons) == 1, reasons  # the scores' K^T view still
