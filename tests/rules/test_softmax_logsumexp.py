"""Softmax written as exp(s - logsumexp(s)) (Reformer's local / LSH attention, transformers 5.25, hold-out 34):

    probs = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))

is Softmax(scores) (rules/attention/softmax_shift.yaml softmax-logsumexp), which the attention recognizers read:
a 4-D attention so written fuses; a log-sum over another axis, or a kept-dims-off log-sum, is left alone."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8


def _attn(h, *, lse_axis=-1, keepdims=1, mask=False):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["s0"])]
    s = "s0"
    if mask:  # Reformer: Where(keep, scores, -1e9)
        nodes.append(n("Where", ["keep", "s0", "fill"], ["sm"]))
        s = "sm"
    nodes += [n("ReduceLogSumExp", [s, "ax"], ["lse"], keepdims=keepdims),
              n("Sub", [s, "lse"], ["d"]), n("Exp", ["d"], ["p"]), n("MatMul", ["p", "v"], ["y"])]
    inits = {"scale": np.array(D ** -0.5, np.float32), "ax": np.array([lse_axis], np.int64),
             "fill": np.array(-1e9, np.float32)}
    inputs = [h.vi("q", [B, H, S, D]), h.vi("k", [B, H, S, D]), h.vi("v", [B, H, S, D])]
    if mask:
        from onnx import TensorProto
        inputs.append(h.vi("keep", [1, 1, S, S], TensorProto.BOOL))
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits)


def _feeds(h, mask=False):
    r = h.rng
    f = {x: r.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    if mask:
        f["keep"] = np.tril(np.ones((S, S), bool))[None, None]
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("mask", [False, True])
def test_logsumexp_softmax_attention_fuses(h, target, mask):
    model = _attn(h, mask=mask)
    out = h.fuse(model, target)
    ops = h.ops(out)
    if mask:
        # an input mask with a -1e9 fill may leave a row of -1e9 throughout, where the original weighs
        # every key 1 (logsumexp rounds to the fill): left (tests/rules/test_select_finite_fill.py)
        assert ops["ReduceLogSumExp"] == 1 and not any("Attention" in op for op in ops), ops
    else:
        assert "ReduceLogSumExp" not in ops and "Exp" not in ops, ops
        assert any("Attention" in op for op in ops), ops
    h.assert_close(model, out, _feeds(h, mask))


def test_logsumexp_over_another_axis_is_refused(h):
    model = _attn(h, lse_axis=2)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert "ReduceLogSumExp" in ops and "Softmax" not in ops, ops
    h.assert_close(model, out, _feeds(h))
