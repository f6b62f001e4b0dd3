"""Idioms found on the fifth hold-out sweep, part A (tools/holdout_specs.py HOLDOUT5A: transformers 5.24
decoders, docs/holdout.md), each as a tiny graph that failed before its fix; numerics against the
original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8
ATTN = ("Attention", "com.microsoft::MultiHeadAttention")


def _i64(*v):
    return np.array(v, np.int64)


def _scores(n):
    """s = q k^T * D^-0.5 + mask, q/k/v [B, H, S, D], mask [B, 1, S, S]."""
    return [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
            n("Mul", ["qk", "scale"], ["sc"]), n("Add", ["sc", "mask"], ["s"])]


def _model(h, nodes, inits, out_shape=(None, H, None, D)):
    inputs = [h.vi(x, [None, H, None, D]) for x in ("q", "k", "v")] + [h.vi("mask", [None, 1, None, None])]
    inits = dict(inits, scale=np.array(D ** -0.5, np.float32))
    return h.make_model(_scores(h.node) + nodes, inputs, [h.vi("o", list(out_shape))], inits)


def _feeds(h):
    f = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    f["mask"] = np.triu(np.full((S, S), -3.4e38, np.float32), k=1)[None, None].repeat(B, 0)
    return f


def _attn_count(model, h):
    ops = h.ops(model)
    return sum(ops[k] for k in ATTN) + ops["com.microsoft::GroupQueryAttention"]


# ---- softmax(s - max(s)): MiMo-V2-Flash's full layers (1/2 attention before) -----------------------

def _max_shift(h, axis=-1):
    n = h.node
    nodes = [n("ReduceMax", ["s", "ax"], ["mx"], keepdims=1), n("Sub", ["s", "mx"], ["d"]),
             n("Softmax", ["d"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    return _model(h, nodes, {"ax": _i64(axis)})


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_softmax_with_the_max_subtracted_is_fused(h, target, level):
    model = _max_shift(h)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn_count(out, h) == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_max_over_another_axis_is_not_a_shift(h):
    """max over the queries (axis 2) is not softmax's own stabilisation: refused with the reason."""
    model = _max_shift(h, axis=2)
    reasons = h.reasons(model, "ort", "softmax-max-shift")
    assert any("same (last) axis" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out)
    h.assert_close(model, out, _feeds(h))


# ---- sinks without the max subtraction: Flint (0/2 before) -------------------------------------------

def test_sinks_without_the_max_subtraction_are_fused(h):
    """softmax(concat(s, sink))[..., :-1] v with the sink expanded to Shape(s)[0:3] + [1] and no
    ReduceMax / Sub (attention-sinks required GPT-OSS's subtraction)."""
    n = h.node
    nodes = [n("Shape", ["s"], ["bhs"], start=0, end=3), n("Concat", ["bhs", "one"], ["shc"], axis=0),
             n("Expand", ["sinks", "shc"], ["sink"]), n("Concat", ["s", "sink"], ["cat"], axis=-1),
             n("Softmax", ["cat"], ["p"], axis=-1), n("Slice", ["p", "zero", "last", "last"], ["ps"]),
             n("MatMul", ["ps", "v"], ["o"])]
    inits = {"one": _i64(1), "zero": _i64(0), "last": _i64(-1),
             "sinks": np.array([0.7, -0.3], np.float32).reshape(1, H, 1, 1)}
    model = _model(h, nodes, inits)
    for target, level in (("ort", 3), ("onnx", 3), ("trt", 4)):
        out = h.fuse(model, target, level)
        assert "Softmax" not in h.ops(out) and _attn_count(out, h) == 1, (target, h.ops(out))
        h.assert_close(model, out, _feeds(h))


# ---- sinks as a gate after the attention: Granite SWA (0/2 before) ------------------------------------

def _sink_gate(h, lse_axis=-1, sink_shape=(1, H, 1)):
    n = h.node
    nodes = [n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
             n("ReduceLogSumExp", ["s", "lax"], ["lse"], keepdims=0), n("Sub", ["lse", "sinks"], ["dd"]),
             n("Sigmoid", ["dd"], ["g"]), n("Unsqueeze", ["g", "last"], ["gu"]), n("Mul", ["o0", "gu"], ["o"])]
    inits = {"lax": _i64(lse_axis), "last": _i64(-1),
             "sinks": h.rng.standard_normal(sink_shape).astype(np.float32)}
    return _model(h, nodes, inits)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 3), ("trt", 4)])
def test_sink_gate_is_fused(h, target, level):
    """(softmax(s) v) * sigmoid(logsumexp(s) - sink) is attention with a sink column."""
    model = _sink_gate(h)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and "Sigmoid" not in ops and _attn_count(out, h) == 1, ops
    h.assert_close(model, out, _feeds(h))


def test_sink_gate_near_misses(h):
    """logsumexp over the queries (axis 2) is no softmax denominator (refused, original numbers kept);
    a sink of 7 logits per head does not broadcast as one per [B, H, S] row: refused too."""
    model = _sink_gate(h, lse_axis=2)
    reasons = h.reasons(model, "ort", "attention-sink-gate")
    assert any("must be the keys" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Sigmoid" in h.ops(out)
    h.assert_close(model, out, _feeds(h))
    model = _sink_gate(h, sink_shape=(1, H, 7))
    reasons = h.reasons(model, "ort", "attention-sink-gate")
    assert any("must broadcast" in r for r in reasons), reasons


# ---- RMSNorm with pow(v, -0.5): Gemma 3n / Gemma 4 text (0 norms before) ------------------------------

def _pow_rms(h, exponent=-0.5):
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq", "last"], ["ms"], keepdims=1),
             n("Add", ["ms", "eps"], ["ve"]), n("Pow", ["ve", "mhalf"], ["inv"]), n("Mul", ["x", "inv"], ["nn"]),
             n("Mul", ["nn", "g"], ["y"])]
    inits = {"two": np.array(2.0, np.float32), "last": _i64(-1), "eps": np.array(1e-6, np.float32),
             "mhalf": np.array(exponent, np.float32), "g": (1 + 0.1 * h.rng.standard_normal(32)).astype(np.float32)}
    return h.make_model(nodes, [h.vi("x", ["b", "s", 32])], [h.vi("y", ["b", "s", 32])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rms_norm_with_a_power_is_fused(h, target):
    model = _pow_rms(h)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((2, 3, 32)).astype(np.float32)})


def test_other_powers_stay(h):
    """pow(v, -0.25) is no inverse square root: the Pow stays and nothing fuses."""
    model = _pow_rms(h, exponent=-0.25)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out)["Pow"] == 2 and not h.fired(out)["rsqrt-pow"], h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((2, 3, 32)).astype(np.float32)})


# ---- s * b + (1 - b) * c: GPT-1's causal mask as a 0/1 multiplier (0/2 attention before) --------------

MAXPOS = 16


def _binary_mask(h, *, const=False, buffer=None, fill=-1e4):
    """scores * b + (1 - b) * fill, b the [1, 1, MAXPOS, MAXPOS] buffer sliced to [1, 1, S, S] at run
    time (const: b and (1 - b) * fill as folded [1, 1, S, S] constants, S = 5 static)."""
    n = h.node
    buf = np.tril(np.ones((MAXPOS, MAXPOS), np.float32)) if buffer is None else buffer
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Div", ["qk", "four"], ["s"]), n("Mul", ["s", "b"], ["sb"])]
    inits = {"four": np.array(4.0, np.float32)}
    if const:
        inits.update(b=buf[None, None, :S, :S], m=((1 - buf) * fill)[None, None, :S, :S].astype(np.float32))
    else:
        nodes = [n("Shape", ["q"], ["sl"], start=2, end=3), n("Slice", ["buf", "zero", "sl", "two"], ["b2"]),
                 n("Slice", ["b2", "zero", "sl", "three"], ["b"]), *nodes,
                 n("Sub", ["one", "b"], ["nb"]), n("Mul", ["nb", "fill"], ["m"])]
        inits.update(buf=buf[None, None], zero=_i64(0), two=_i64(2), three=_i64(3), one=np.array(1.0, np.float32),
                     fill=np.array(fill, np.float32))
    nodes += [n("Add", ["sb", "m"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    dims = ["batch", H, S if const else "seq", D]  # named: the mask probe binds them
    return h.make_model(nodes, [h.vi(x, dims) for x in ("q", "k", "v")], [h.vi("o", dims)], inits)


@pytest.mark.parametrize("const", [False, True], ids=["sliced", "folded"])
@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_binary_causal_mask_is_fused(h, const, target, level):
    model = _binary_mask(h, const=const)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn_count(out, h) == 1, h.ops(out)
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("const", [False, True], ids=["sliced", "folded"])
def test_binary_mask_that_is_not_causal_stays(h, const):
    """An upper-triangular buffer (a query sees later keys) proves no causal mask: refused with the
    probe's reason, the multiplier stays, numbers kept."""
    rule = "scores-binary-mask-const" if const else "scores-binary-mask"
    model = _binary_mask(h, const=const, buffer=np.triu(np.ones((MAXPOS, MAXPOS), np.float32)))
    reasons = h.reasons(model, "ort", rule)
    assert any("causal" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out)
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    h.assert_close(model, out, feeds)


def test_folded_mask_must_pair_with_the_multiplier(h):
    """A folded fill of -1 (no mask: the original weighs those keys) is refused by the values check."""
    model = _binary_mask(h, const=True, fill=-1.0)
    reasons = h.reasons(model, "ort", "scores-binary-mask-const")
    assert any("0 where m masks" in r for r in reasons), reasons


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_float16_sink_gate_with_a_float32_sigmoid_is_fused(h, target, level):
    """Granite SWA in float16: the gate is Cast(Unsqueeze(Sigmoid(Cast(lse - sink, float32))), float16),
    the Cast back after the Unsqueeze (0/2 before at every target)."""
    n, f16 = h.node, 10
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["sc"]), n("Add", ["sc", "mask"], ["s"]),
             n("Softmax", ["s"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o0"]),
             n("ReduceLogSumExp", ["s", "last"], ["lse"], keepdims=0), n("Sub", ["lse", "sinks"], ["dd"]),
             n("Cast", ["dd"], ["d32"], to=1), n("Sigmoid", ["d32"], ["g"]), n("Unsqueeze", ["g", "last"], ["gu"]),
             n("Cast", ["gu"], ["g16"], to=f16), n("Mul", ["o0", "g16"], ["o"])]
    inits = {"last": _i64(-1), "scale": np.array(D ** -0.5, np.float16),
             "sinks": h.rng.standard_normal((1, H, 1)).astype(np.float16)}
    dims = ["batch", H, "seq", D]
    inputs = [h.vi(x, dims, f16) for x in ("q", "k", "v")] + [h.vi("mask", ["batch", 1, "seq", "seq"], f16)]
    model = h.make_model(nodes, inputs, [h.vi("o", dims, f16)], inits)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and "Sigmoid" not in ops and _attn_count(out, h) == 1, ops
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float16) for x in ("q", "k", "v")}
    feeds["mask"] = np.triu(np.full((S, S), -65504, np.float16), k=1)[None, None].repeat(B, 0)
    h.assert_close(model, out, feeds, atol=2e-3, rtol=1e-2)


# ---- sinks in a float32 island of a float16 model: Flint exported in float16 (0/2 before) ---------------

def _float16_island_sinks(h, *, cast_probs=True):
    """q, k (float16) cast up, q k^T * scale + Cast(mask), Concat with Cast(sink), Softmax, Slice, then
    the probabilities cast back to float16 for V (cast_probs=False: V cast up instead, a float32 output)."""
    n, f16 = h.node, 10
    nodes = [n("Cast", ["q"], ["q32"], to=1), n("Cast", ["k"], ["k32"], to=1),
             n("Transpose", ["k32"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q32", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["sc"]), n("Cast", ["mask"], ["m32"], to=1), n("Add", ["sc", "m32"], ["s"]),
             n("Shape", ["q"], ["b1"], start=0, end=1), n("Shape", ["q"], ["s1"], start=2, end=3),
             n("Concat", ["b1", "heads", "s1", "one"], ["shc"], axis=0), n("Expand", ["sinks", "shc"], ["sink"]),
             n("Cast", ["sink"], ["sink32"], to=1), n("Concat", ["s", "sink32"], ["cat"], axis=-1),
             n("Softmax", ["cat"], ["p"], axis=-1), n("Slice", ["p", "zero", "last", "last"], ["ps"])]
    if cast_probs:
        nodes += [n("Cast", ["ps"], ["p16"], to=f16), n("MatMul", ["p16", "v"], ["o"])]
    else:
        nodes += [n("Cast", ["v"], ["v32"], to=1), n("MatMul", ["ps", "v32"], ["o"])]
    inits = {"scale": np.array(D ** -0.5, np.float32), "one": _i64(1), "zero": _i64(0), "last": _i64(-1),
             "heads": _i64(H), "sinks": h.rng.standard_normal((1, H, 1, 1)).astype(np.float16)}
    dims = ["batch", H, "seq", D]
    inputs = [h.vi(x, dims, f16) for x in ("q", "k", "v")] + [h.vi("mask", ["batch", 1, "seq", "seq"], f16)]
    return h.make_model(nodes, inputs, [h.vi("o", dims, f16 if cast_probs else h.F32)], inits)


def _feeds16(h):
    f = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float16) for x in ("q", "k", "v")}
    f["mask"] = np.triu(np.full((S, S), -65504, np.float16), k=1)[None, None].repeat(B, 0)
    return f


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_float16_sinks_in_a_float32_island_are_fused(h, target, level):
    model = _float16_island_sinks(h)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn_count(out, h) == 1, h.ops(out)
    h.assert_close(model, out, _feeds16(h), atol=2e-3, rtol=1e-2)


def test_float16_island_with_v_cast_up_runs_in_float32(h):
    """q, k and V all cast up (the probabilities stay float32, a float32 output): no island to give back
    to float16; the Casts stay in front of a float32 attention, numbers kept."""
    model = _float16_island_sinks(h, cast_probs=False)
    out = h.fuse(model, "ort")
    assert "Softmax" not in h.ops(out) and _attn_count(out, h) == 1, h.ops(out)
    assert h.ops(out)["Cast"] >= 3
    h.assert_close(model, out, _feeds16(h), atol=1e-4, rtol=1e-3)
