"""bias_sum.yaml attention-scores-bias-sum with a sink column joined after the two additive terms:
softmax(concat(scale q k^T + bias + mask, sink))[..., :-1] v (Inkling 2: a relative-position bias
computed from the hidden states, then the mask, and per-query sinks from a projection; hold-out 19).
Before, the bias sum ended at a Softmax only, the sinks recognizer takes one additive term, and
nothing fused; now the terms are summed in front of the Concat and attention-sinks takes the rest."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse

B, H, S, D = 2, 2, 5, 8


def _graph(h, *, cat_axis=-1):
    n = h.node
    nodes = [
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["qk"]), n("Mul", ["qk", "scale"], ["sc"]),
        n("Add", ["sc", "bias"], ["sb"]),            # the position bias first
        n("Add", ["sb", "mask"], ["sm"]),            # then the padding / causal mask
        n("Concat", ["sm", "sinks"], ["cat"], axis=cat_axis),
        n("Softmax", ["cat"], ["p"], axis=-1),
        n("Slice", ["p", "zero", "last", "last" if cat_axis == -1 else "two"], ["ps"]),
        n("MatMul", ["ps", "v"], ["o"]),
    ]
    inits = {"zero": np.array([0], np.int64), "last": np.array([-1], np.int64), "two": np.array([2], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    inputs = ([h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")]
              + [h.vi("bias", ["b", H, "s", "s"]), h.vi("mask", ["b", 1, "s", "s"]),
                 h.vi("sinks", ["b", H, "s", 1] if cat_axis == -1 else ["b", H, 1, "s"])])  # one per query
    return h.make_model(nodes, inputs, [h.vi("o", ["b", H, "s", D])], inits)


def _feeds(h, sinks=(B, H, S, 1)):
    f = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    f["bias"] = h.rng.standard_normal((B, H, S, S)).astype(np.float32)
    mask = np.triu(np.full((S, S), -3.4e38, np.float32), k=1)[None, None].repeat(B, 0)
    mask[1, :, :, :2] = -3.4e38   # left padding on the second row
    f["mask"] = mask
    f["sinks"] = h.rng.standard_normal(sinks).astype(np.float32)
    return f


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_bias_and_mask_before_a_sink_column_fuse(h, target, level):
    model = _graph(h)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops, ops
    assert (ops["Attention"] + ops["com.microsoft::MultiHeadAttention"] + ops["com.microsoft::GroupQueryAttention"]
            + ops["trt::FusedAttention"]) == 1, ops
    h.assert_close(model, out, _feeds(h))
    fires = onnx_fuse.optimize(model, level=level, target=target).report.rule_fires
    assert fires.get("attention-scores-bias-sum") == 1 and fires.get("attention-sinks") == 1, fires


def test_a_column_joined_on_another_axis_is_not_a_sink(h):
    """Near miss: the Concat joins one more query row (axis 2, the last row dropped after the softmax), not
    one more key: the sum is not moved."""
    model = _graph(h, cat_axis=2)
    out = h.fuse(model, "onnx")
    assert "Softmax" in h.ops(out), h.ops(out)
    assert "attention-scores-bias-sum" not in onnx_fuse.optimize(model, level=3, target="onnx").report.rule_fires
    h.assert_close(model, out, _feeds(h, sinks=(B, H, 1, S)))
