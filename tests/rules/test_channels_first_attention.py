"""Single-head spatial attention written channels-first (rules/attention/channels_first.yaml).

The AttnBlock of VQGAN / VAE image tokenizers (taming-transformers; Janus, Chameleon, Emu3 after it) over a
feature map [B, C, H, W]: GroupNorm, 1x1-conv q / k / v viewed [B, C, N], w = bmm(q^T, k) * C^-0.5,
softmax over the keys, out = bmm(v, w^T) viewed back and projected (hold-out 45's janus_vqgan: 0/5 attention
fused before the rule). k enters the scores as it is and v @ p^T is (p @ v^T)^T; the rule rewrites it to one
head per batch slice and transposes the output back. The graphs are compared with the original in ONNX Runtime;
near misses (softmax over the queries, the probabilities read twice) stay unfused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from attention_testing import fuse

C, HH, WW = 16, 3, 4
ATTN = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
RULE = "attention-bmm-channels-first"


def _block(h, *, axis=2, probs_out=False, scale="mul", dtype=onnx.TensorProto.FLOAT):
    """x [B, C, H, W] -> x + proj(attention(norm-free q / k / v 1x1 convs)); axis: the softmax's axis; probs_out: p is also a graph output (a second reader);
    scale: the C^-0.5 as a Mul ("mul", as torch writes it) or a Div by sqrt(C) ("div")."""
    n, rng = h.node, np.random.default_rng(45)
    npt = np.float16 if dtype == onnx.TensorProto.FLOAT16 else np.float32
    inits = {f"w{t}": (rng.standard_normal((C, C, 1, 1)) * 0.4).astype(npt) for t in "qkvo"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(npt) for t in "qkvo"}
    inits |= {"flat": np.array([0, C, -1], np.int64), "scale": np.array(C ** -0.5, npt),
              "root": np.array(C ** 0.5, npt)}
    nodes = [n("Shape", ["x"], ["xs"])]
    for t in "qkv":
        nodes += [n("Conv", ["x", f"w{t}", f"b{t}"], [f"{t}c"]), n("Reshape", [f"{t}c", "flat"], [f"{t}r"])]
    nodes += [n("Transpose", ["qr"], ["q3"], perm=[0, 2, 1]), n("MatMul", ["q3", "kr"], ["sc"])]
    nodes += [n("Mul", ["sc", "scale"], ["ss"])] if scale == "mul" else [n("Div", ["sc", "root"], ["ss"])]
    nodes += [n("Softmax", ["ss"], ["p"], axis=axis), n("Transpose", ["p"], ["pt"], perm=[0, 2, 1]),
              n("MatMul", ["vr", "pt"], ["o"]), n("Reshape", ["o", "xs"], ["o4"]),
              n("Conv", ["o4", "wo", "bo"], ["oc"]), n("Add", ["x", "oc"], ["y"])]
    outputs = [h.vi("y", ["b", C, HH, WW], dtype)]
    if probs_out:
        outputs.append(h.vi("p", ["b", HH * WW, HH * WW], dtype))
    return h.make_model(nodes, [h.vi("x", ["b", C, HH, WW], dtype)], outputs, inits, opset=18)


def _feeds(b=2, dtype=np.float32):
    return {"x": np.random.default_rng(3).standard_normal((b, C, HH, WW)).astype(dtype)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale", ["mul", "div"])
def test_channels_first_spatial_attention_is_fused(h, target, scale):
    model = _block(h, scale=scale)
    out, fired = fuse(model, target)
    ops = h.ops(out)
    assert ops[ATTN[target]] == 1 and "Softmax" not in ops, ops
    assert fired.get(RULE, 0) == 1, fired
    h.assert_close(model, out, _feeds())
    h.assert_close(model, out, _feeds(b=3))


def test_float16_block_is_fused(h):
    model = _block(h, dtype=onnx.TensorProto.FLOAT16)
    out, fired = fuse(model, "ort")
    assert h.ops(out)[ATTN["ort"]] == 1 and fired.get(RULE, 0) == 1, (h.ops(out), fired)
    h.assert_close(model, out, _feeds(dtype=np.float16), atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize("form", ["softmax_over_queries", "probs_read_twice"])
def test_near_misses_stay_unfused_and_exact(h, form):
    # softmax over axis 1 normalizes over the queries (no attention); a second reader of p (an output)
    # must keep p, so the rule may not consume it
    model = _block(h, axis=1) if form == "softmax_over_queries" else _block(h, probs_out=True)
    out, fired = fuse(model, "ort")
    assert RULE not in fired, fired
    assert "Softmax" in h.ops(out)
    h.assert_close(model, out, _feeds())


def test_reason_names_the_softmax_axis(h):
    got = h.reasons(_block(h, axis=1), "ort", RULE)
    assert any("softmax must run over the keys" in r for r in got), got
