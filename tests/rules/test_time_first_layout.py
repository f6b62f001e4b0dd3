"""A time-first model (fairseq's layout: FSMT, old Marian / M2M / speech exports) optimized with no
layout Transposes left.

The export transposes x [B, S, C] to [T, B, C] once, runs each layer time-first (projections, the
residual adds and norms, the FFN) and transposes back at the end; the fused attention reads
[B, S, C], so after fusion q, k, v and the attention's output each crossed the layout once more
(FSMT's encoder kept 10 Transposes). The input Transpose now sinks through the projections (2-D
weights), the Split, the residual norms (SkipLayerNormalization at ort) and the FFN into the
attention's Transposes and the output's, where they cancel (passes/_transpose_region.py). Compared
with the original in ONNX Runtime at two feed shapes."""

from __future__ import annotations

import numpy as np
import pytest
from attention_testing import fuse

H, D = 2, 8
C = H * D
ATTN = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _time_first_encoder(h, layers=2, packed=True):
    """x [B, S, C] -> [T, B, C]; per layer fairseq self-attention (q, k, v packed in one projection
    and split, or three projections; [T, B*H, D] views, the key padding a -inf fill in the
    [B, H, T, S] view), out-projection, residual + LayerNorm, ReLU FFN, residual + LayerNorm;
    back to [B, S, C]. Trained-like norm scales and biases."""
    n, rng = h.node, np.random.default_rng(17)
    inits = {"scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
             "dd": np.array([D], np.int64), "cc": np.array([C], np.int64),
             "fill": np.array(float("-inf"), np.float32), "ax12": np.array([1, 2], np.int64),
             "sizes": np.array([C, C, C], np.int64)}
    nodes = [n("Transpose", ["x"], ["h0"], perm=[1, 0, 2]),
             n("Shape", ["h0"], ["tt"], start=0, end=1), n("Shape", ["h0"], ["bb"], start=1, end=2),
             n("Mul", ["bb", "hh"], ["bh"]), n("Concat", ["tt", "bh", "dd"], ["t3"], axis=0),
             n("Concat", ["bb", "hh", "tt", "tt"], ["a4"], axis=0), n("Concat", ["bh", "tt", "tt"], ["c3"], axis=0),
             n("Concat", ["tt", "bb", "cc"], ["tc"], axis=0), n("Unsqueeze", ["pad", "ax12"], ["pm"])]
    for i in range(layers):
        p, x = f"l{i}_", f"h{i}"
        w = lambda name, shape, s=0.3: inits.__setitem__(p + name, (rng.standard_normal(shape) * s).astype(np.float32))
        w("wqkv", (C, 3 * C)), w("bqkv", 3 * C, 0.1), w("wo", (C, C)), w("bo", C, 0.1)
        w("w1", (C, 2 * C)), w("b1", 2 * C, 0.1), w("w2", (2 * C, C)), w("b2", C, 0.1)
        for k in ("g1", "g2"):
            inits[p + k] = (1 + rng.standard_normal(C) * 0.1).astype(np.float32)
        for k in ("n1", "n2"):
            inits[p + k] = (rng.standard_normal(C) * 0.1).astype(np.float32)
        if packed:
            nodes += [n("MatMul", [x, p + "wqkv"], [p + "qkvm"]), n("Add", [p + "qkvm", p + "bqkv"], [p + "qkv"]),
                      n("Split", [p + "qkv", "sizes"], [p + "ql", p + "kl", p + "vl"], axis=2)]
        else:
            for j, t in enumerate("qkv"):
                inits[p + f"w{t}"] = inits[p + "wqkv"][:, j * C:(j + 1) * C].copy()
                inits[p + f"b{t}"] = inits[p + "bqkv"][j * C:(j + 1) * C].copy()
                nodes += [n("MatMul", [x, p + f"w{t}"], [p + f"{t}m"]), n("Add", [p + f"{t}m", p + f"b{t}"], [p + f"{t}l"])]
        nodes += [n("Mul", [p + "ql", "scale"], [p + "qs"])]
        for t, src in (("q", p + "qs"), ("k", p + "kl"), ("v", p + "vl")):
            nodes += [n("Reshape", [src, "t3"], [p + f"{t}v"]), n("Transpose", [p + f"{t}v"], [p + f"{t}3"], perm=[1, 0, 2])]
        nodes += [n("Transpose", [p + "k3"], [p + "kt"], perm=[0, 2, 1]), n("MatMul", [p + "q3", p + "kt"], [p + "sc"]),
                  n("Reshape", [p + "sc", "a4"], [p + "s4"]), n("Where", ["pm", "fill", p + "s4"], [p + "sf"]),
                  n("Reshape", [p + "sf", "c3"], [p + "s3"]), n("Softmax", [p + "s3"], [p + "pr"], axis=-1),
                  n("MatMul", [p + "pr", p + "v3"], [p + "o3"]), n("Transpose", [p + "o3"], [p + "ot"], perm=[1, 0, 2]),
                  n("Reshape", [p + "ot", "tc"], [p + "om"]),
                  n("MatMul", [p + "om", p + "wo"], [p + "y0"]), n("Add", [p + "y0", p + "bo"], [p + "y1"]),
                  n("Add", [x, p + "y1"], [p + "r1"]),
                  n("LayerNormalization", [p + "r1", p + "g1", p + "n1"], [p + "a1"], axis=-1, epsilon=1e-5),
                  n("MatMul", [p + "a1", p + "w1"], [p + "f0"]), n("Add", [p + "f0", p + "b1"], [p + "f1"]),
                  n("Relu", [p + "f1"], [p + "f2"]), n("MatMul", [p + "f2", p + "w2"], [p + "f3"]),
                  n("Add", [p + "f3", p + "b2"], [p + "f4"]), n("Add", [p + "a1", p + "f4"], [p + "r2"]),
                  n("LayerNormalization", [p + "r2", p + "g2", p + "n2"], [f"h{i + 1}"], axis=-1, epsilon=1e-5)]
    nodes += [n("Transpose", [f"h{layers}"], ["y"], perm=[1, 0, 2])]
    inputs = [h.vi("x", ["b", "s", C]), h.vi("pad", ["b", "s"], 9)]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", "s", C])], inits, opset=18)


def _feeds(b=2, s=5):
    rng = np.random.default_rng(4)
    pad = np.zeros((b, s), bool)
    pad[-1, s - 2:] = True
    return {"x": rng.standard_normal((b, s, C)).astype(np.float32), "pad": pad}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "three"])
def test_time_first_layers_keep_no_transpose(h, target, packed):
    model = _time_first_encoder(h, packed=packed)
    out, fired = fuse(model, target)
    ops = h.ops(out)
    assert ops[ATTN[target]] == 2 and "Softmax" not in ops, ops
    # 2 + 4 per layer before (the input, the output, and q / k / v / the attention's output)
    assert "Transpose" not in ops and "Reshape" not in ops, ops
    if target == "ort":
        assert ops["com.microsoft::SkipLayerNormalization"] == 4, ops   # the residual norms, in the region
    h.assert_close(model, out, _feeds())
    h.assert_close(model, out, _feeds(b=3, s=4))
