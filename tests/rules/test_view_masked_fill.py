"""A masked fill applied in another view of the scores (rules/attention/view_bias.yaml,
scores-bias-in-view): fairseq's time-first attention (FSMT's encoder). q, k, v [T, B, C] are viewed
[T, B*H, D] and transposed to [B*H, T, D]; the [B*H, T, S] scores are viewed [B, H, T, S], the key
padding applied as masked_fill(mask [B, 1, 1, S], -inf), viewed back; softmax in 3-D. The views'
targets are computed from x's shape, so the scores are dynamic in every dim: the zeros of the bias
take the second view's target, which provably holds the scores' dims.

Before: attention 0/1 (the rule took Adds only, and needed static scores but for the leading dim)."""

from __future__ import annotations

import numpy as np
import onnx_fuse
import pytest

H, D = 2, 8
C = H * D
MHA = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
# heads-split-time-first & co. (rules/attention/time_first_heads.yaml) spell this block's views
# heads-first, and attention-batched-heads then fuses it with H heads (tests/rules/test_heads_in_batch.py);
# disabled here, the mask in a view is scores-bias-in-view's, as before
TIME_FIRST = ["heads-split-time-first", "heads-split-time-first-keys", "heads-merge-time-first"]


def _fuse(model, target):
    level = 4 if target == "trt" else 3
    return onnx_fuse.optimize(model, level=level, target=target, float32_plugins=True, disable=TIME_FIRST).to_proto()


def _fairseq_block(h, *, fill=float("-inf"), keep_form=False, back_minus_one=False, static=False):
    """keep_form: Where(keep, scores, fill) with keep = not pad; back_minus_one: the second view's
    target is [-1, T, S] (not readable as the scores' dims)."""
    n, rng = h.node, np.random.default_rng(11)
    inits = {f"w{t}": (rng.standard_normal((C, C)) * 0.3).astype(np.float32) for t in "qkvo"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(np.float32) for t in "qkvo"}
    inits |= {"scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
              "dd": np.array([D], np.int64), "cc": np.array([C], np.int64), "m1": np.array([-1], np.int64),
              "fill": np.array(fill, np.float32), "ax12": np.array([1, 2], np.int64)}
    nodes = [n("Shape", ["x"], ["tt"], start=0, end=1), n("Shape", ["x"], ["bb"], start=1, end=2),
             n("Mul", ["bb", "hh"], ["bh"]), n("Concat", ["tt", "bh", "dd"], ["t3"], axis=0)]
    for t in "qkv":
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}l"])]
    nodes += [n("Mul", ["ql", "scale"], ["qs"])]
    for t, src in (("q", "qs"), ("k", "kl"), ("v", "vl")):
        nodes += [n("Reshape", [src, "t3"], [f"{t}v"]), n("Transpose", [f"{t}v"], [f"{t}3"], perm=[1, 0, 2])]
    nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"]),
              n("Concat", ["bb", "hh", "tt", "tt"], ["a4"], axis=0), n("Reshape", ["sc", "a4"], ["s4"]),
              n("Unsqueeze", ["pad", "ax12"], ["pm"])]
    if keep_form:
        nodes += [n("Not", ["pm"], ["keep"]), n("Where", ["keep", "s4", "fill"], ["sf"])]
    else:
        nodes += [n("Where", ["pm", "fill", "s4"], ["sf"])]
    nodes += [n("Concat", ["m1" if back_minus_one else "bh", "tt", "tt"], ["c3"], axis=0),
              n("Reshape", ["sf", "c3"], ["s3"]), n("Softmax", ["s3"], ["p"], axis=-1),
              n("MatMul", ["p", "v3"], ["o3"]), n("Transpose", ["o3"], ["ot"], perm=[1, 0, 2]),
              n("Concat", ["tt", "bb", "cc"], ["tc"], axis=0), n("Reshape", ["ot", "tc"], ["om"]),
              n("MatMul", ["om", "wo"], ["y0"]), n("Add", ["y0", "bo"], ["y1"]), n("Add", ["x", "y1"], ["y"])]
    tdim, bdim = (5, 2) if static else ("t", "b")
    inputs = [h.vi("x", [tdim, bdim, C]), h.vi("pad", [bdim, tdim], 9)]
    return h.make_model(nodes, inputs, [h.vi("y", [tdim, bdim, C])], inits, opset=18)


def _feeds(t=5, b=2):
    rng = np.random.default_rng(5)
    pad = np.zeros((b, t), bool)
    pad[-1, t - 2:] = True   # the last sequence's last two keys are padding (no row fully masked)
    return {"x": rng.standard_normal((t, b, C)).astype(np.float32), "pad": pad}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["fill", "keep", "finfo_min", "static"])
def test_masked_fill_in_a_view_is_an_attention_mask(h, target, form):
    fill = float(np.finfo(np.float32).min) if form == "finfo_min" else float("-inf")
    model = _fairseq_block(h, fill=fill, keep_form=form == "keep", static=form == "static")
    out = _fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA[target]] == 1 and "Softmax" not in ops, ops
    assert h.fired(out)["scores-bias-in-view"] >= 1
    h.assert_close(model, out, _feeds())
    if form != "static":
        h.assert_close(model, out, _feeds(t=3, b=3))


def test_a_finite_fill_is_not_a_mask(h):
    model = _fairseq_block(h, fill=-1.0)   # -1 is a score the softmax still weighs
    assert "Softmax" in h.ops(_fuse(model, "ort"))
    assert any("must fill with (nearly) -inf" in r for r in h.reasons(model, "ort", "scores-bias-in-view"))


def test_a_back_view_that_does_not_hold_the_dynamic_scores_dims_is_refused(h):
    # [-1, T, S]: Expand(0, target) would not be the scores' zeros, and the scores are not static
    model = _fairseq_block(h, back_minus_one=True)
    assert any("second view's target must hold the scores' dims" in r
               for r in h.reasons(model, "ort", "scores-bias-in-view"))
    out = _fuse(model, "ort")
    assert "scores-bias-in-view" not in h.fired(out)
    h.assert_close(model, out, _feeds())
