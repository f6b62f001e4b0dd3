"""rules/attention/clamp_mask.yaml scores-clamp-onto-mask: max(s + m, lowest) on attention scores is s + max(m, lowest),
the additive mask every recognizer takes. It replaces batched-heads-clamped-softmax (XGLM's clamp on [B*H,S,T] views
only): the same clamp on plain 4-D eager attention (OPT / BART-style code, torch.max(scores + mask, finfo.min) with
the softmax on [B,H,S,T]) fuses too, where no rule took it before."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 8
F16 = TensorProto.FLOAT16


def _eager_4d(h, *, clamp=None, elem=TensorProto.FLOAT, scores=True):
    """softmax(max(q k^T * scale + mask, clamp)) @ v on [B,H,S,D] (``scores=False``: q k^T replaced by a graph input,
    not attention scores)."""
    n = h.node
    np_t = np.float16 if elem == F16 else np.float32
    clamp = np.finfo(np_t).min if clamp is None else clamp
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"])] if scores else [n("Identity", ["s_in"], ["ss"])]
    nodes += [n("Add", ["ss", "mask"], ["sm"]), n("Max", ["sm", "floor"], ["mx"]),
              n("Softmax", ["mx"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [h.vi("mask", [B, 1, S, S], elem)]
    if not scores:
        inputs.append(h.vi("s_in", [B, H, S, S], elem))
    inits = {"scale": np.array(D ** -0.5, np_t), "floor": np.array(clamp, np_t)}
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], elem)], inits)


def _feeds(h, elem=np.float32, *, all_masked=False):
    r = np.random.default_rng(11)
    f = {x: (2 * r.standard_normal((B, H, S, D))).astype(elem) for x in ("q", "k", "v")}
    mask = np.triu(np.full((S, S), -np.inf, np.float32), 1)[None, None].repeat(B, 0)  # -inf: the clamp matters
    if all_masked:
        mask[1] = -np.inf  # every key of batch 1 masked: the clamp makes its rows uniform
    f["mask"] = mask.astype(elem)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_clamped_4d_eager_attention_fuses(h, target):
    model = _eager_4d(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    h.assert_close(model, out, _feeds(h))


def test_a_fully_masked_row_keeps_the_clamps_uniform_weights(h):
    """A row whose every key is -inf: the clamp makes it uniform (not NaN); the rewrite keeps that."""
    model = _eager_4d(h)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Attention"] == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h, all_masked=True))


def test_float16_clamp_stays(h):
    """float16's lowest float absorbs only scores under 16 in size: refused by name, the clamp stays."""
    model = _eager_4d(h, elem=F16)
    h.stays(model, "scores-clamp-onto-mask", "float16 keeps the clamp", _feeds(h, np.float16), op="Attention",
            target="onnx", level=3)


def test_clamp_above_the_lowest_float_stays(h):
    model = _eager_4d(h, clamp=-100.0)
    h.stays(model, "scores-clamp-onto-mask", "lowest float", _feeds(h), op="Attention", target="onnx", level=3)


def test_a_clamp_of_no_scores_stays(h):
    """max(x + m, lowest) of a value no MatMul made is not an attention mask's clamp."""
    model = _eager_4d(h, scores=False)
    feeds = _feeds(h)
    feeds["s_in"] = np.random.default_rng(3).standard_normal((B, H, S, S)).astype(np.float32)
    h.stays(model, "scores-clamp-onto-mask", "attention scores", feeds, op="Attention", target="onnx", level=3)
