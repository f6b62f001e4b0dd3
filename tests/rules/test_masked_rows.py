"""Fully masked query rows through the Attention-23 lowerings (keep-masked-rows, rules/attention/
lower.yaml). GPT-J's where(causal, s, finfo.min) / d followed by a padding Add: a left-padded
query whose causally allowed keys are all padded has three levels in its row, min / d on the
causally masked keys, min on the padded ones, -inf where both meet. The original weighs the
highest level (uniform over the future, unpadded keys); Attention-23 reads finfo.min as -inf, so
keep-masked-rows raises the masked entries into a finite band, keeping their order."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 8
LOWEST = float(np.finfo(np.float32).min)
OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _gptj(h):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Where", ["causal", "sc", "fill"], ["w"]), n("Div", ["w", "scale"], ["sd"]),
             n("Add", ["sd", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["y"])]
    inits = {"fill": np.array(LOWEST, np.float32), "scale": np.array(np.sqrt(D), np.float32)}
    inputs = [h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")]
    inputs += [h.vi("causal", [1, 1, "s", "s"], 9), h.vi("mask", ["b", 1, 1, "s"])]
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=23)


def _left_padded(h, pad=2):
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., :pad] = LOWEST   # batch 1 left-padded: its first `pad` queries keep no key
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    return {**feeds, "causal": np.tril(np.ones((S, S), bool))[None, None], "mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_left_padded_rows_keep_the_causal_level(h, target):
    model = _gptj(h)
    out = h.fuse(model, target)
    assert h.ops(out)[OP[target]] == 1 and "Softmax" not in h.ops(out), h.ops(out)
    feeds = _left_padded(h)
    h.assert_close(model, out, feeds)
    # the fully masked rows are the mean of V over the future, unpadded keys (not over every key)
    y = h.run(out, feeds)[0]
    v = feeds["v"][1].astype(np.float64)
    np.testing.assert_allclose(y[1, :, 0], v[:, 2:].mean(1), atol=1e-5)
    np.testing.assert_allclose(y[1, :, 1], v[:, 2:].mean(1), atol=1e-5)


def _masked_attention(h, elem):
    """softmax(q k^T * scale + mask) @ v with the mask a [B,1,S,S] graph input."""
    n = h.node
    np_t = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
             n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [h.vi("mask", [B, 1, S, S], elem)]
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D], elem)], {"scale": np.array(D ** -0.5, np_t)})


@pytest.mark.parametrize("target", ["onnx", "trt"])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["float32", "float16"])
def test_two_masked_levels_below_the_floor_keep_their_order(h, target, elem):
    """Rows with no kept key whose masked entries take two levels below F (float32: finfo.min and
    finfo.min / 8, -1e31; float16: -65504 and -62000, 3504 apart): the original weighs the higher
    level, as the order-keeping map does; the plain floor (max(m, F)) weighed every key alike
    (1.6 off in float32, 1.35 in float16). Rows with a kept key, one with -inf entries too, stay exact."""
    np_t = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    lo, hi = (-65504.0, -62000.0) if elem == TensorProto.FLOAT16 else (LOWEST, LOWEST / 8)
    model = _masked_attention(h, elem)
    out = h.fuse(model, target)
    assert h.ops(out)["Attention"] == 1 and "Softmax" not in h.ops(out), h.ops(out)
    mask = np.zeros((B, 1, S, S), np.float32)
    mask[1] = lo
    mask[1, :, 0, 3:] = hi                  # row 0: the last two keys higher
    mask[1, :, 1, ::2] = hi                 # row 1: every other key
    if elem == TensorProto.FLOAT:
        mask[1, :, 2, 1] = -1e31            # row 2: three levels, -1e31 the highest
    mask[1, :, 3, :2] = -np.inf             # row 3: -inf and finfo.min, uniform over the rest
    mask[0, :, :, -1] = lo                  # batch 0: a kept key in every row
    mask[0, :, 0, 1] = -np.inf
    r = np.random.default_rng(3)
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np_t) for x in ("q", "k", "v")}
    feeds["mask"] = mask.astype(np_t)
    if elem == TensorProto.FLOAT16:
        # ORT adds the original's float16 scores and mask in float32 (softmax(s + m) over the higher
        # level), its float16 Attention-23 absorbs s at |m| >= 32768 (docs/precision.md): scores of 0
        # leave only the order of the levels to compare
        feeds["q"][1] = 0
    tol = 2e-3 if elem == TensorProto.FLOAT16 else 1e-5
    h.assert_close(model, out, feeds, atol=tol, rtol=tol)
    v = feeds["v"][1].astype(np.float64)
    y = h.run(out, feeds)[0].astype(np.float64)
    np.testing.assert_allclose(y[1, :, 0], v[:, 3:].mean(1), atol=tol)
    np.testing.assert_allclose(y[1, :, 1], v[:, ::2].mean(1), atol=tol)
    np.testing.assert_allclose(y[1, :, 3], v[:, 2:].mean(1), atol=tol)
    if elem == TensorProto.FLOAT:
        np.testing.assert_allclose(y[1, :, 2], v[:, 1], atol=tol)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_random_masked_levels_keep_their_order(h, target):
    """Rows with no kept key whose entries take 2-4 random levels between finfo.min and -1e30
    (log-uniform, at least 0.1% apart), -inf on some keys: the original weighs the highest level's
    keys alike, and so does the fused op."""
    model = _masked_attention(h, TensorProto.FLOAT)
    out = h.fuse(model, target)
    assert h.ops(out)["Attention"] == 1, h.ops(out)
    r = np.random.default_rng(11)
    for _ in range(4):
        mask = np.zeros((B, 1, S, S), np.float32)
        for b in range(B):
            for i in range(S):
                levels = -np.exp(r.uniform(np.log(1e30), np.log(-LOWEST), r.integers(2, 5)))
                levels = levels[np.argsort(levels)]
                while len(levels) > 1 and np.any(levels[1:] / levels[:-1] > 0.999):
                    levels = levels[1:]
                mask[b, 0, i] = r.choice(levels.astype(np.float32), S)
                mask[b, 0, i, r.integers(0, S)] = levels.max()   # the top level on one key at least
                if r.random() < 0.5:
                    mask[b, 0, i, r.integers(0, S)] = -np.inf
                if not np.isfinite(mask[b, 0, i]).any():
                    mask[b, 0, i, 0] = levels.max()
        feeds = {x: r.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
        feeds["mask"] = mask
        h.assert_close(model, out, feeds)
