"""Heads in the batch axis fused as multi-head attention, not one head per [B*H] slice.

1. BART-style eager attention (MVP with prompts, PLBart's / BART's old code, prefix tuning): q, k, v
   [B, T, C] split to [B, H, T, D] (k / v with learned prefix keys / values joined over T in that
   layout), viewed [B*H, T, D]; the bmm scores viewed [B, H, T, S], the mask added there, viewed BACK
   to [B*H, T, S] and the softmax taken on that view. batched-heads-scores took the softmax on the 4-D
   view only, so attention-bmm-single-head fused it with one head per slice (MVP's decoder at ort-O3:
   184 nodes, 37 Reshapes). A softmax over the keys is the same on either view: the view back before
   it is optional now (rules/attention/batched_heads.yaml).
2. fairseq's time-first attention (FSMT, old Marian / M2M / speech exports): x [T, B, C] viewed
   [T, B*H, D] and transposed to [B*H, T, D]; the output transposed back and viewed [T, B, C].
   heads-split-time-first / heads-merge-time-first (rules/attention/time_first_heads.yaml) spell the
   same values heads-first ([T, B, H, D] moved to [B, H, T, D] and merged), the view the batched-heads
   rules read; H is read from the values (the view's middle dim proven B * C / D).

Every fused graph is compared with the original in ONNX Runtime at two feed shapes."""

from __future__ import annotations

import numpy as np
import pytest
from attention_testing import attention_heads, fuse

H, D, P = 2, 8, 3
C = H * D
ATTN = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _bart_block(h, *, prefix=True, static=False, softmax_axis=-1):
    """Self-attention of x [B, T, C], prefix keys / values [1, H, P, D] expanded and joined before the
    keys in the heads-first layout, the mask Concat(zeros [B, 1, T, P], mask) added in the [B, H, T, S]
    view of the scores, viewed back, softmax on [B*H, T, S]."""
    n, rng = h.node, np.random.default_rng(13)
    inits = {f"w{t}": (rng.standard_normal((C, C)) * 0.3).astype(np.float32) for t in "qkvo"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(np.float32) for t in "qkvo"}
    inits |= {f"p{t}": rng.standard_normal((1, H, P, D)).astype(np.float32) for t in "kv"}
    inits |= {"scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
              "dd": np.array([D], np.int64), "cc": np.array([C], np.int64), "m1": np.array([-1], np.int64),
              "one": np.array([1], np.int64), "pp": np.array([P], np.int64), "zero": np.array(0.0, np.float32)}
    nodes = [n("Shape", ["x"], ["bb"], start=0, end=1), n("Shape", ["x"], ["tt"], start=1, end=2),
             n("Mul", ["bb", "hh"], ["bh"]), n("Concat", ["bb", "m1", "hh", "dd"], ["split4"], axis=0),
             n("Concat", ["bb", "hh", "one", "one"], ["pexp"], axis=0),
             n("Concat", ["bh", "m1", "dd"], ["flat3"], axis=0)]
    for t in "qkv":
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}l"])]
    nodes += [n("Mul", ["ql", "scale"], ["qs"])]
    for t, src in (("q", "qs"), ("k", "kl"), ("v", "vl")):
        nodes += [n("Reshape", [src, "split4"], [f"{t}4"]), n("Transpose", [f"{t}4"], [f"{t}h"], perm=[0, 2, 1, 3])]
    if prefix:
        for t in "kv":
            nodes += [n("Expand", [f"p{t}", "pexp"], [f"p{t}b"]),
                      n("Concat", [f"p{t}b", f"{t}h"], [f"{t}c"], axis=2)]
        nodes += [n("Concat", ["bb", "one", "tt", "pp"], ["zshape"], axis=0),
                  n("Expand", ["zero", "zshape"], ["pz"]), n("Concat", ["pz", "mask"], ["mk"], axis=3)]
    kc, vc, mk = ("kc", "vc", "mk") if prefix else ("kh", "vh", "mask")
    nodes += [n("Reshape", ["qh", "flat3"], ["q3"]), n("Reshape", [kc, "flat3"], ["k3"]),
              n("Reshape", [vc, "flat3"], ["v3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
              n("MatMul", ["q3", "kt"], ["sc"]),
              n("Concat", ["bb", "hh", "tt", "m1"], ["a4"], axis=0), n("Reshape", ["sc", "a4"], ["s4"]),
              n("Add", ["s4", mk], ["sm"]),
              n("Concat", ["bh", "tt", "m1"], ["c3"], axis=0), n("Reshape", ["sm", "c3"], ["s3"]),
              n("Softmax", ["s3"], ["pr"], axis=softmax_axis), n("MatMul", ["pr", "v3"], ["o3"]),
              n("Concat", ["bb", "hh", "m1", "dd"], ["o4s"], axis=0), n("Reshape", ["o3", "o4s"], ["o4"]),
              n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              n("Concat", ["bb", "m1", "cc"], ["oc"], axis=0), n("Reshape", ["ot", "oc"], ["om"]),
              n("MatMul", ["om", "wo"], ["y0"]), n("Add", ["y0", "bo"], ["y1"]), n("Add", ["x", "y1"], ["y"])]
    b, t = (2, 4) if static else ("b", "t")
    inputs = [h.vi("x", [b, t, C]), h.vi("mask", [b, 1, t, t])]
    return h.make_model(nodes, inputs, [h.vi("y", [b, t, C])], inits, opset=18)


def _bart_feeds(b=2, t=4):
    rng = np.random.default_rng(7)
    mask = np.zeros((b, 1, t, t), np.float32)
    mask[-1, :, :, t - 2:] = np.finfo(np.float32).min   # the last sequence's last two keys are padding
    return {"x": rng.standard_normal((b, t, C)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("prefix", [True, False], ids=["prefix", "plain"])
def test_softmax_after_the_view_back_is_multi_head(h, target, static, prefix):
    model = _bart_block(h, prefix=prefix, static=static)
    out, fired = fuse(model, target)
    ops = h.ops(out)
    # without prefix keys the biased q / k / v projections of x pack at ort once attention-q-scale
    # has taken BART's q scaling into the attention's scale
    op = "com.microsoft::Attention" if target == "ort" and not prefix else ATTN[target]
    assert ops[op] == 1 and "Softmax" not in ops, ops
    assert "attention-bmm-single-head" not in fired and fired.get("attention-batched-heads", 0) >= 1, fired
    assert attention_heads(out) == [H]
    assert ops["Reshape"] <= (4 if prefix else 0), ops   # one head per slice left 11 / 9
    h.assert_close(model, out, _bart_feeds())
    if not static:
        h.assert_close(model, out, _bart_feeds(b=3, t=2))


def test_a_softmax_on_another_axis_of_the_view_is_not_attention(h):
    model = _bart_block(h, softmax_axis=1)   # over the queries: not the keys
    out, fired = fuse(model, "ort")
    assert "Softmax" in h.ops(out) and "attention-batched-heads" not in fired
    h.assert_close(model, out, _bart_feeds())


def _fairseq_block(h, *, static=False, mask=True, middle="bh", keys_once=False):
    """fairseq's time-first self-attention over x [T, B, C]: the [T, B*H, D] views' middle entry is
    B * H computed from x's shape (middle="bh"), or -1 (solved), or an input's dim ("other": not
    provably B*H); the key padding a masked_fill(pad [B, 1, 1, S], -inf) in the [B, H, T, S] view
    (mask=False: no view, softmax on the bmm's scores). keys_once: k^T is one Transpose [1, 2, 0] of
    the keys' [T, B*H, D] view (torch's multi_head_attention_forward)."""
    n, rng = h.node, np.random.default_rng(11)
    inits = {f"w{t}": (rng.standard_normal((C, C)) * 0.3).astype(np.float32) for t in "qkvo"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(np.float32) for t in "qkvo"}
    inits |= {"scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
              "dd": np.array([D], np.int64), "cc": np.array([C], np.int64), "m1": np.array([-1], np.int64),
              "fill": np.array(float("-inf"), np.float32), "ax12": np.array([1, 2], np.int64)}
    nodes = [n("Shape", ["x"], ["tt"], start=0, end=1), n("Shape", ["x"], ["bb"], start=1, end=2),
             n("Mul", ["bb", "hh"], ["bh"]), n("Shape", ["other"], ["on"], start=0, end=1)]
    mid = {"bh": "bh", "minus1": "m1", "other": "on"}[middle]
    nodes += [n("Concat", ["tt", mid, "dd"], ["t3"], axis=0)]
    for t in "qkv":
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}l"])]
    nodes += [n("Mul", ["ql", "scale"], ["qs"])]
    for t, src in (("q", "qs"), ("k", "kl"), ("v", "vl")):
        nodes += [n("Reshape", [src, "t3"], [f"{t}v"]), n("Transpose", [f"{t}v"], [f"{t}3"], perm=[1, 0, 2])]
    if keys_once:
        nodes += [n("Transpose", ["kv"], ["kt"], perm=[1, 2, 0]), n("MatMul", ["q3", "kt"], ["sc"])]
    else:
        nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"])]
    if mask:
        nodes += [n("Concat", ["bb", "hh", "tt", "tt"], ["a4"], axis=0), n("Reshape", ["sc", "a4"], ["s4"]),
                  n("Unsqueeze", ["pad", "ax12"], ["pm"]), n("Where", ["pm", "fill", "s4"], ["sf"]),
                  n("Concat", ["bh", "tt", "tt"], ["c3"], axis=0), n("Reshape", ["sf", "c3"], ["s3"])]
    nodes += [n("Softmax", ["s3" if mask else "sc"], ["p"], axis=-1),
              n("MatMul", ["p", "v3"], ["o3"]), n("Transpose", ["o3"], ["ot"], perm=[1, 0, 2]),
              n("Concat", ["tt", "bb", "cc"], ["tc"], axis=0), n("Reshape", ["ot", "tc"], ["om"]),
              n("MatMul", ["om", "wo"], ["y0"]), n("Add", ["y0", "bo"], ["y1"]), n("Add", ["x", "y1"], ["y"])]
    tdim, bdim = (5, 2) if static else ("t", "b")
    inputs = [h.vi("x", [tdim, bdim, C]), h.vi("pad", [bdim, tdim], 9), h.vi("other", ["n"])]
    return h.make_model(nodes, inputs, [h.vi("y", [tdim, bdim, C])], inits, opset=18)


def _fairseq_feeds(t=5, b=2):
    rng = np.random.default_rng(5)
    pad = np.zeros((b, t), bool)
    pad[-1, t - 2:] = True
    return {"x": rng.standard_normal((t, b, C)).astype(np.float32), "pad": pad,
            "other": np.zeros(b * H, np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["mask", "minus1", "no_mask", "static", "keys_once"])
def test_time_first_heads_are_multi_head(h, target, form):
    model = _fairseq_block(h, static=form == "static", mask=form not in ("no_mask", "keys_once"),
                           middle="minus1" if form == "minus1" else "bh", keys_once=form == "keys_once")
    out, fired = fuse(model, target)
    ops = h.ops(out)
    assert ops[ATTN[target]] == 1 and "Softmax" not in ops, ops
    assert "attention-bmm-single-head" not in fired, fired
    assert fired.get("heads-split-time-first", 0) >= 1 and fired.get("heads-merge-time-first", 0) >= 1, fired
    assert attention_heads(out) == [H]
    # time-first in and out: one Transpose each for q, k, v and the output, no view left (at ort the
    # keys / values stay [B, T, C] where that folds to one Transpose: passes/mha_kv_heads.py)
    assert ops["Reshape"] == 0 and ops["Transpose"] == 4, ops
    h.assert_close(model, out, _fairseq_feeds())
    if form != "static":
        h.assert_close(model, out, _fairseq_feeds(t=3, b=3))


def test_a_middle_dim_not_proven_b_times_h_keeps_one_head_per_slice(h):
    # the view's middle entry is another input's length: equal to B*H at run time, not provably so
    model = _fairseq_block(h, middle="other")
    assert any("the view must be x [T,B,H*D] as [T,B*H,D]" in r
               for r in h.reasons(model, "ort", "heads-split-time-first"))
    out, fired = fuse(model, "ort")
    assert "heads-split-time-first" not in fired
    h.assert_close(model, out, _fairseq_feeds())
