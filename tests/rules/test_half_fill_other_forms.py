"""The float32 masked_fill of up-cast half scores (dd42ea4: recognize.yaml's attention-scores takes it and
saturates the fill at q's lowest float, since float32's lowest cast to float16 is -inf and a row with no
kept key would turn NaN) in the two other score forms that take a masked_fill: BLOOM's batched heads
(baddbmm on [B*H, S, D] views, scores viewed [B, H, S, T], cast up, filled, softmax in float32, cast back)
and the grouped 5-D form ([B, K, G, S, D] q over [B, K, 1, D, T] K^T). Neither form reads a Cast of the
scores (session 28: not fused at any target), so whatever a later rule does with them, the optimized
model must keep every row the original keeps finite, the fully padded ones included, and the others
equal."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
B, H, S, D = 2, 4, 6, 8
K, G = 2, 2
FILLS = [-65504.0, float(np.finfo(np.float32).min)]


def _bloom(h, fill):
    n = h.node
    nodes = [n("Reshape", ["q", "s3"], ["q3"]), n("Reshape", ["k", "s3"], ["k3"]), n("Reshape", ["v", "s3"], ["v3"]),
             n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "alibi"], ["sb"]), n("Reshape", ["sb", "s4"], ["s4v"]),
             n("Cast", ["s4v"], ["s32"], to=F32), n("Where", ["m", "fill", "s32"], ["sw"]),
             n("Softmax", ["sw"], ["p"], axis=-1), n("Cast", ["p"], ["p16"], to=F16),
             n("Reshape", ["p16", "s3s"], ["p3"]), n("MatMul", ["p3", "v3"], ["o3"]), n("Reshape", ["o3", "s4o"], ["o"])]
    slopes = 2.0 ** (-np.arange(1, H + 1))
    alibi = np.tile((slopes[:, None] * np.arange(S)[None, :]).reshape(H, 1, S), (B, 1, 1)).astype(np.float16)
    inits = {"s3": np.array([B * H, S, D]), "s4": np.array([B, H, S, S]), "s3s": np.array([B * H, S, S]),
             "s4o": np.array([B, H, S, D]), "scale": np.array(D ** -0.5, np.float16), "alibi": alibi,
             "fill": np.array(fill, np.float32)}
    inputs = [h.vi(x, [B, H, S, D], F16) for x in "qkv"] + [h.vi("m", [B, 1, S, S], TensorProto.BOOL)]
    shapes = {"q": (B, H, S, D), "k": (B, H, S, D), "v": (B, H, S, D)}
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], F16)], inits), shapes, (B, 1, S, S)


def _grouped_5d(h, fill):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 2, 4, 3]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Cast", ["ss"], ["s32"], to=F32),
             n("Where", ["m", "fill", "s32"], ["sw"]), n("Softmax", ["sw"], ["p"], axis=-1),
             n("Cast", ["p"], ["p16"], to=F16), n("MatMul", ["p16", "v"], ["o"])]
    inits = {"scale": np.array(D ** -0.5, np.float16), "fill": np.array(fill, np.float32)}
    shapes = {"q": (B, K, G, S, D), "k": (B, K, 1, S, D), "v": (B, K, 1, S, D)}
    inputs = [h.vi(x, list(shapes[x]), F16) for x in "qkv"] + [h.vi("m", [B, 1, 1, S, S], TensorProto.BOOL)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, K, G, S, D], F16)], inits), shapes, (B, 1, 1, S, S)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize("form", [_bloom, _grouped_5d], ids=["batched_heads", "grouped_5d"])
def test_float32_fill_of_half_scores_keeps_padded_rows_finite(h, form, fill, target):
    model, shapes, mshape = form(h, fill)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    feeds = {x: (2 * h.rng.standard_normal(shapes[x])).astype(np.float16) for x in "qkv"}
    keep = np.ones((B, S), bool)
    keep[1, :2] = False   # left padding: batch 1's query rows 0 and 1 keep no key
    feeds["m"] = (~(np.tril(np.ones((S, S), bool))[None] & keep[:, None, :])).reshape(mshape)
    want = h.run(model, feeds)[0].astype(np.float32)
    got = h.run(out, feeds)[0].astype(np.float32)
    assert np.isfinite(want).all()
    assert np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:4]
    rows = (slice(None),) * (want.ndim - 2) + (slice(2, None),)   # query rows with a kept key
    np.testing.assert_allclose(got[rows], want[rows], atol=1e-2, rtol=1e-2)
