"""Idioms found on hold-out exports (tools/holdout_specs.py: architectures and export styles the rules
were not tuned on), each as a tiny graph that failed to fuse before its fix; numerics against the
original."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8


def _keep_where_block(h, *, fill=np.finfo(np.float32).min, mask=True):
    """Eager causal attention over a bias buffer (GPT-Neo; GPT-2/GPT-J/CodeGen as transformers 4.x
    wrote them): torch.where(causal, q k^T, finfo.min) + attention_mask, no score scale."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Where", ["causal", "sc", "fillv"], ["sw"])]
    scores = "sw"
    inputs = [h.vi("q", [B, H, S, D]), h.vi("k", [B, H, S, D]), h.vi("v", [B, H, S, D])]
    if mask:
        nodes.append(n("Add", ["sw", "mask"], ["sm"]))
        scores = "sm"
        inputs.append(h.vi("mask", [B, 1, S, S]))
    nodes += [n("Softmax", [scores], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inits = {"causal": np.tril(np.ones((S, S), bool))[None, None], "fillv": np.array(fill, np.float32)}
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], inits)


def _feeds(h, mask=True):
    r = h.rng
    f = {k: r.standard_normal((B, H, S, D)).astype(np.float32) for k in ("q", "k", "v")}
    if mask:
        m = np.zeros((B, 1, S, S), np.float32)
        m[1, ..., 0] = np.finfo(np.float32).min  # a left-padded row
        f["mask"] = m
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("mask", [True, False])
def test_where_keeping_the_scores_is_a_causal_bias(h, target, mask):
    """where(causal, scores, finfo.min) before the padding mask's Add: fused, same numbers."""
    model = _keep_where_block(h, mask=mask)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    h.assert_close(model, out, _feeds(h, mask))


def test_where_keeping_the_scores_with_a_finite_fill_is_refused(h):
    """A fill that is not (nearly) -inf is not a mask (replacing a score is not adding a bias)."""
    model = _keep_where_block(h, fill=-10.0)
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out)
    assert any("where(mask, scores, fill)" in r for r in h.reasons(model, "ort", "attention"))


def _native_block(h, mask):
    """Attention-23 as torch.onnx.export(opset_version=23) writes sdpa: [B,H,S,D] q/k/v, an
    explicit scale, a boolean (True: attend) or additive mask."""
    n = h.node
    inputs = [h.vi("q", [B, H, S, D]), h.vi("k", [B, H, S, D]), h.vi("v", [B, H, S, D])]
    args = ["q", "k", "v"]
    if mask:
        # [B,1,S,T]: ONNX Runtime's Attention-23 wants the mask's query dim to be S
        inputs.append(h.vi("mask", [B, 1, S, S], elem=9 if mask == "bool" else h.F32))
        args.append("mask")
    nodes = [n("Attention", args, ["o"], scale=D ** -0.5)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])])


@pytest.mark.parametrize("target,op", [("ort", "com.microsoft::MultiHeadAttention"), ("onnx", "Attention"),
                                       ("trt", "Attention")])
@pytest.mark.parametrize("mask", ["bool", "float", None])
def test_native_attention_23_is_taken_as_the_canonical_op(h, target, op, mask):
    """torch's own Attention-23 is lowered like any recognized attention (ort: the contrib op)."""
    model = _native_block(h, mask)
    out = h.fuse(model, target)
    # the canonical op it made was lowered (ort: the contrib op, not the Attention-23 left as it was)
    assert not any(k.startswith("onnx_fuse.canonical") for k in h.ops(out))
    assert h.ops(out)[op] == 1, h.ops(out)
    feeds = _feeds(h, mask=False)
    if mask == "bool":
        keep = np.ones((B, 1, S, S), bool)
        keep[1, ..., 0] = False  # a left-padded key
        feeds["mask"] = keep
    elif mask == "float":
        m = np.zeros((B, 1, S, S), np.float32)
        m[1, ..., 0] = np.finfo(np.float32).min
        feeds["mask"] = m
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rms_norm_without_epsilon_is_rms_norm_with_zero(h, target):
    """x * 1/sqrt(mean(x^2)) * g: the exporter dropped an epsilon it took for zero (Helium's 1e-8
    under dynamo's cleanup); the norm is RMSNormalization with epsilon 0."""
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             n("Sqrt", ["ms"], ["sd"]), n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["x", "inv"], ["nx"]),
             n("Mul", ["g", "nx"], ["y"])]
    inits = {"two": np.array(2.0, np.float32), "axes": np.array([-1], np.int64),
             "g": (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)}
    model = h.make_model(nodes, [h.vi("x", [B, S, D])], [h.vi("y", [B, S, D])], inits, opset=20)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "ReduceMean" not in ops and "Sqrt" not in ops, ops
    norm = next(x for x in out.graph.node if "Normalization" in x.op_type)
    assert [a.f for a in norm.attribute if a.name == "epsilon"] == [0.0]
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, S, D)).astype(np.float32)})


def _clamped_bmm_block(h, round_trip, clamp=np.finfo(np.float32).min):
    """XGLM / BART-style eager attention on [B*H,S,D] views: bmm, view4 + mask, max(., finfo.min),
    view3, softmax (optionally viewed [B,H,S,T] and back), bmm with v, view4."""
    n = h.node
    nodes = [n("Reshape", ["q", "v3s"], ["q3"]), n("Reshape", ["k", "v3s"], ["k3"]),
             n("Reshape", ["v", "v3s"], ["v3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
             n("MatMul", ["q3", "kt"], ["sc"]), n("Reshape", ["sc", "s4s"], ["s4"]),
             n("Add", ["s4", "mask"], ["sm"]), n("Max", ["sm", "floor"], ["mx"]),
             n("Reshape", ["mx", "s3s"], ["s3"]), n("Softmax", ["s3"], ["p"], axis=-1)]
    probs = "p"
    if round_trip:
        nodes += [n("Reshape", ["p", "s4s"], ["pa"]), n("Reshape", ["pa", "s3s"], ["pb"])]
        probs = "pb"
    nodes += [n("MatMul", [probs, "v3"], ["o3"]), n("Reshape", ["o3", "o4s"], ["o"])]
    inits = {"v3s": np.array([B * H, S, D], np.int64), "s4s": np.array([B, H, S, S], np.int64),
             "s3s": np.array([B * H, S, S], np.int64), "o4s": np.array([B, H, S, D], np.int64),
             "floor": np.array(clamp, np.float32)}
    inputs = [h.vi("q", [B, H, S, D]), h.vi("k", [B, H, S, D]), h.vi("v", [B, H, S, D]),
              h.vi("mask", [B, 1, S, S])]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("round_trip", [True, False])
def test_clamped_batched_heads_softmax_fuses(h, target, round_trip):
    """max(scores + mask, finfo.min) before a 3-D softmax: the clamp moves onto the mask, fused."""
    model = _clamped_bmm_block(h, round_trip)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    feeds = _feeds(h)
    feeds["mask"] += np.triu(np.full((S, S), -np.inf, np.float32), 1)  # -inf: the clamp matters
    h.assert_close(model, out, feeds)


def test_clamp_above_the_lowest_float_is_refused(h):
    model = _clamped_bmm_block(h, True, clamp=-100.0)
    assert "Softmax" in h.ops(h.fuse(model, "ort"))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rope_with_tables_concatenated_after_cos_sin_fuses(h, target):
    """x*concat(c, c) + rotate_half(x)*concat(s, s) for tables the graph computed (Qwen2-VL's M-RoPE
    concatenates per-section cos/sin): RotaryEmbedding-23 with c, s as the caches (the general
    rotary-rotate-half-tables since session 37: c, s are Cos / Sin of one angle, proven a rotation)."""
    n = h.node
    half = D // 2
    nodes = [n("Cos", ["a"], ["c"]), n("Sin", ["a"], ["s"]),
             n("Concat", ["c", "c"], ["cc"], axis=-1), n("Unsqueeze", ["cc", "ax1"], ["cu"]),
             n("Concat", ["s", "s"], ["sc"], axis=-1), n("Unsqueeze", ["sc", "ax1"], ["su"]),
             n("Mul", ["x", "cu"], ["m1"]),
             n("Slice", ["x", "zero", "mid", "last"], ["x1"]), n("Slice", ["x", "mid", "end", "last"], ["x2"]),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
             n("Mul", ["r", "su"], ["m2"]), n("Add", ["m1", "m2"], ["y"])]
    inits = {"ax1": np.array([1], np.int64), "zero": np.array([0], np.int64), "mid": np.array([half], np.int64),
             "end": np.array([2 ** 62], np.int64), "last": np.array([-1], np.int64)}
    inputs = [h.vi("x", [B, H, S, D]), h.vi("a", [B, S, half])]
    model = h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits, opset=20)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "Concat" not in ops, ops
    r = h.rng
    h.assert_close(model, out, {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
                                "a": r.standard_normal((B, S, half)).astype(np.float32)})


@pytest.mark.parametrize("target,op", [("ort", "com.microsoft::FastGelu"), ("onnx", "Gelu"), ("trt", "Gelu")])
def test_bloom_factored_tanh_gelu_fuses(h, target, op):
    """x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x))) (BLOOM's gelu): tanh GELU."""
    n = h.node
    nodes = [n("Mul", ["x", "k"], ["xk"]), n("Mul", ["x", "coef"], ["xc"]), n("Mul", ["xc", "x"], ["q"]),
             n("Add", ["q", "one"], ["a"]), n("Mul", ["xk", "a"], ["s"]), n("Tanh", ["s"], ["t"]),
             n("Add", ["t", "one"], ["a1"]), n("Mul", ["x", "half"], ["hx"]), n("Mul", ["hx", "a1"], ["y"])]
    inits = {"k": np.array(0.79788456, np.float32), "coef": np.array(0.044715, np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    model = h.make_model(nodes, [h.vi("x", [B, S, D])], [h.vi("y", [B, S, D])], inits)
    out = h.fuse(model, target)
    assert h.ops(out)[op] == 1 and "Tanh" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, {"x": 3 * h.rng.standard_normal((B, S, D)).astype(np.float32)})
