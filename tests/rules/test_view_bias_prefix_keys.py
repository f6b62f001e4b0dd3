"""Scores whose key length is a sum, with the mask added in another view (rules/attention/view_bias.yaml,
scores-bias-in-view; the dims proof in rewrite/_expr.py expanded_dims): BART-style 3-D attention with
learned prefix keys / values (MVP's prompts, prefix tuning): k = Concat(prefix [B, H, P, D], k [B, H, S, D]),
viewed [B*H, P + S, D]; the [B*H, T, P + S] scores are viewed [B, H, T, P + S], the mask Concat(zeros
[B, 1, T, P], mask [B, 1, T, S]) added there, viewed back to [B*H, T, P + S]. The views' last entry is
computed as S + P (torch's key_states.size(1)), which the target's reading took as unknown, so the rule
could not prove that the second view holds the scores' dims.

With a cache the length is (P + T) + R, which the exporter's value_info spells "t + r + 3" and the dims
reading "r + t + 3": rule checks see sums in one spelling (rewrite/_expr.py dim / shape, rewrite/_dims.py
has_dims).

Before (hold-out 20): mvp_decoder dyn_mask attention 0/4 -> 4/4; kv 0/4 -> 3/4 -> 4/4 (the second layer is
the spelling case)."""

from __future__ import annotations

import numpy as np
import onnx_fuse
import pytest

H, D, P = 2, 8, 3
C = H * D
MHA = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
# The block is BART-style batched heads with the softmax after the view back: attention-batched-heads
# fuses it first with H heads (tests/rules/test_heads_in_batch.py); the "view-bias" path disables it,
# so scores-bias-in-view and attention-bmm-single-head (one head per B*H slice) take it as before.
PATHS = {"batched-heads": ((), "attention-batched-heads"),
         "view-bias": (("attention-batched-heads",), "scores-bias-in-view")}


def _fuse(model, target, path):
    disable, rule = PATHS[path]
    r = onnx_fuse.optimize(model, level=4 if target == "trt" else 3, target=target, float32_plugins=True,
                           disable=list(disable))
    assert r.report.rule_fires.get(rule, 0) >= 1, r.report.rule_fires
    return r.to_proto()


def _prefix_block(h, *, back_sum=True, static=False, past=False):
    """Cross-attention of x [B, T, C] over e [B, S, C] with P prefix keys / values. back_sum: the views'
    key length is S + P (else [-1]: the second view's target cannot hold the scores' dims). past:
    self-attention of x over prefix, past keys [B, H, R, D] and its own, the length (P + T) + R, which
    onnx's inference spells "t + r + 3" and the dims reading "r + t + 3" (MVP's decoder with a cache)."""
    n, rng = h.node, np.random.default_rng(3)
    inits = {f"w{t}": (rng.standard_normal((C, C)) * 0.3).astype(np.float32) for t in "qkvo"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(np.float32) for t in "qkvo"}
    inits |= {f"p{t}": rng.standard_normal((1, H, P, D)).astype(np.float32) for t in "kv"}
    inits |= {"scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
              "dd": np.array([D], np.int64), "cc": np.array([C], np.int64), "m1": np.array([-1], np.int64),
              "one": np.array([1], np.int64), "pp": np.array([P], np.int64), "ps": np.array(P, np.int64),
              "zero": np.array(0.0, np.float32), "ax0": np.array([0], np.int64)}
    nodes = [n("Shape", ["x"], ["bb"], start=0, end=1), n("Shape", ["x"], ["tt"], start=1, end=2),
             n("Shape", ["e"], ["s1"], start=1, end=2), n("Squeeze", ["s1", "ax0"], ["s0"]),
             n("Squeeze", ["tt", "ax0"], ["t0"]), n("Shape", ["pastk"], ["r1"], start=2, end=3),
             n("Squeeze", ["r1", "ax0"], ["r0"]), n("Add", ["ps", "t0"], ["pt0"]),
             n("Add", ["pt0", "r0"] if past else ["s0", "ps"], ["sp0"]), n("Unsqueeze", ["sp0", "ax0"], ["sp"]),
             n("Mul", ["bb", "hh"], ["bh"]),
             n("Concat", ["bb", "m1", "hh", "dd"], ["split4"], axis=0),
             n("Concat", ["bb", "hh", "one", "one"], ["pexp"], axis=0),
             n("Concat", ["bh", "m1", "dd"], ["flat3"], axis=0)]
    for t, src in (("q", "x"), ("k", "x" if past else "e"), ("v", "x" if past else "e")):
        nodes += [n("MatMul", [src, f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}l"])]
    nodes += [n("Mul", ["ql", "scale"], ["qs"])]
    for t, src in (("q", "qs"), ("k", "kl"), ("v", "vl")):
        nodes += [n("Reshape", [src, "split4"], [f"{t}4"]), n("Transpose", [f"{t}4"], [f"{t}h"], perm=[0, 2, 1, 3])]
    for t in "kv":   # the prefix, expanded to the batch, before the keys / values
        nodes += [n("Expand", [f"p{t}", "pexp"], [f"p{t}b"]),
                  n("Concat", [f"p{t}b"] + ([f"past{t}"] if past else []) + [f"{t}h"], [f"{t}c"], axis=2)]
    nodes += [n("Reshape", ["qh", "flat3"], ["q3"]), n("Reshape", ["kc", "flat3"], ["k3"]),
              n("Reshape", ["vc", "flat3"], ["v3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
              n("MatMul", ["q3", "kt"], ["sc"]),
              # the mask: zeros over the prefix, the key padding over the keys
              n("Concat", ["bb", "one", "tt", "pp"], ["zshape"], axis=0), n("Expand", ["zero", "zshape"], ["pz"]),
              n("Concat", ["pz", "mask"], ["mk"], axis=3),
              n("Concat", ["bb", "hh", "tt", "sp" if back_sum else "m1"], ["a4"], axis=0),
              n("Reshape", ["sc", "a4"], ["s4"]), n("Add", ["s4", "mk"], ["sm"]),
              n("Concat", ["bh", "tt", "sp" if back_sum else "m1"], ["c3"], axis=0),
              n("Reshape", ["sm", "c3"], ["s3"]), n("Softmax", ["s3"], ["pr"], axis=-1),
              n("MatMul", ["pr", "v3"], ["o3"]),
              n("Concat", ["bb", "hh", "m1", "dd"], ["o4s"], axis=0), n("Reshape", ["o3", "o4s"], ["o4"]),
              n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              n("Concat", ["bb", "m1", "cc"], ["oc"], axis=0), n("Reshape", ["ot", "oc"], ["om"]),
              n("MatMul", ["om", "wo"], ["y0"]), n("Add", ["y0", "bo"], ["y1"]), n("Add", ["x", "y1"], ["y"])]
    b, t, s = (2, 4, 5) if static else ("b", "t", "s")
    r = 3 if static else "r"
    m = (r + t if static else "m") if past else s
    inputs = [h.vi("x", [b, t, C]), h.vi("e", [b, s, C]), h.vi("mask", [b, 1, t, m]),
              h.vi("pastk", [b, H, r, D]), h.vi("pastv", [b, H, r, D])]
    model = h.make_model(nodes, inputs, [h.vi("y", [b, t, C])], inits, opset=18)
    if past and not static:   # the exporter's value_info (dynamo writes one for every value), its spelling
        kl = "t + r + 3"
        named = {"kc": ["b", H, kl, D], "k3": [f"{H}*b", kl, D], "kt": [f"{H}*b", D, kl], "sc": [f"{H}*b", "t", kl],
                 "s4": ["b", H, "t", kl], "sm": ["b", H, "t", kl], "s3": [f"{H}*b", "t", kl], "pr": [f"{H}*b", "t", kl]}
        keep = [v for v in model.graph.value_info if v.name not in named]
        del model.graph.value_info[:]
        model.graph.value_info.extend(keep + [h.vi(k, d) for k, d in named.items()])
    return model


def _feeds(b=2, t=4, s=5, r=3, past=False):
    rng = np.random.default_rng(7)
    m = r + t if past else s
    mask = np.zeros((b, 1, t, m), np.float32)
    mask[-1, :, :, m - 2:] = np.finfo(np.float32).min   # the last sequence's last two keys are padding
    return {"x": rng.standard_normal((b, t, C)).astype(np.float32),
            "e": rng.standard_normal((b, s, C)).astype(np.float32), "mask": mask,
            "pastk": rng.standard_normal((b, H, r, D)).astype(np.float32),
            "pastv": rng.standard_normal((b, H, r, D)).astype(np.float32)}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_prefix_keys_with_a_mask_in_a_view_are_one_attention(h, target, static, path):
    model = _prefix_block(h, static=static)
    out = _fuse(model, target, path)
    ops = h.ops(out)
    assert ops[MHA[target]] == 1 and "Softmax" not in ops, ops
    h.assert_close(model, out, _feeds())
    if not static:
        h.assert_close(model, out, _feeds(b=3, t=2, s=6))


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_prefix_past_and_new_keys_sum_in_any_order(h, target, path):
    model = _prefix_block(h, past=True)
    out = _fuse(model, target, path)
    ops = h.ops(out)
    assert ops[MHA[target]] == 1 and "Softmax" not in ops, ops
    h.assert_close(model, out, _feeds(past=True))
    h.assert_close(model, out, _feeds(b=3, t=2, r=5, past=True))


def test_a_back_view_of_unknown_length_is_still_refused(h):
    # [B*H, T, -1] over dynamic scores: Expand(0, target) would not be the scores' zeros
    model = _prefix_block(h, back_sum=False)
    assert any("second view's target must hold the scores' dims" in r
               for r in h.reasons(model, "ort", "scores-bias-in-view"))
    out = onnx_fuse.optimize(model, level=3, target="ort", disable=["attention-batched-heads"]).to_proto()
    assert "scores-bias-in-view" not in h.fired(out)
    h.assert_close(model, out, _feeds())
