"""-O4 --target trt: softcapped attention without a mask (a bidirectional encoder: VideoPrism's factorized
space / time layers, hold-out 28) becomes onnx_fuse::FusedAttention(causal=0, softcap) without seq_lens
(fused-attention-trt-softcap-nomask, fused_attention_trt.yaml). Before, attention-trt-softcap lowered it to
the plain MatMul / Tanh / Softmax ops (TensorRT's attention has no softcap). Numerics through the plugin's
NumPy reference in ORT (float32_plugins)."""

from __future__ import annotations

import re

import numpy as np
import pytest

B, S, CAP = 2, 5, 0.5


def _model(h, heads=2, kv_heads=2, d=64, cap=CAP, mask=False, tk=S):
    """softmax(cap * tanh(q k^T / sqrt(d) / cap) [+ mask]) v, q [B, heads, S, d], k / v [B, kv_heads, tk, d]
    (kv heads repeated to q's by Expand + Reshape, as transformers' repeat_kv does)."""
    n = h.node
    nodes, inits = [], {"scale": np.array(1 / np.sqrt(d), np.float32), "cap": np.array(cap, np.float32)}
    kk, vv = "k", "v"
    if kv_heads != heads:
        g = heads // kv_heads
        inits.update(rep=np.array([B, kv_heads, g, tk, d], np.int64), flat=np.array([B, heads, tk, d], np.int64),
                     ax=np.array([2], np.int64))
        for x in ("k", "v"):
            nodes += [n("Unsqueeze", [x, "ax"], [f"{x}u"]), n("Expand", [f"{x}u", "rep"], [f"{x}e"]),
                      n("Reshape", [f"{x}e", "flat"], [f"{x}r"])]
        kk, vv = "kr", "vr"
    nodes += [n("Transpose", [kk], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
              n("Mul", ["qk", "scale"], ["sc"]), n("Div", ["sc", "cap"], ["d"]), n("Tanh", ["d"], ["t"]),
              n("Mul", ["t", "cap"], ["capped"])]
    inputs = [h.vi("q", [B, heads, S, d]), h.vi("k", [B, kv_heads, tk, d]), h.vi("v", [B, kv_heads, tk, d])]
    last = "capped"
    if mask:  # an additive float mask input: not "no mask"
        inputs.append(h.vi("bias", [B, 1, S, tk]))
        nodes.append(n("Add", ["capped", "bias"], ["masked"]))
        last = "masked"
    nodes += [n("Softmax", [last], ["p"], axis=-1), n("MatMul", ["p", vv], ["y"])]
    return h.make_model(nodes, inputs, [h.vi("y", [B, heads, S, d])], inits)


def _feeds(h, heads=2, kv_heads=2, d=64, mask=False, tk=S):
    r = h.rng
    f = {"q": r.standard_normal((B, heads, S, d)).astype(np.float32) * 2,
         "k": r.standard_normal((B, kv_heads, tk, d)).astype(np.float32) * 2,
         "v": r.standard_normal((B, kv_heads, tk, d)).astype(np.float32)}
    if mask:
        f["bias"] = np.where(r.random((B, 1, S, tk)) < 0.3, -1e4, 0).astype(np.float32)
    return f


@pytest.mark.parametrize("heads,kv_heads,d", [(2, 2, 64), (4, 2, 128)])
def test_softcap_without_mask_becomes_fused_attention(h, heads, kv_heads, d):
    model = _model(h, heads, kv_heads, d)
    fused = h.fuse(model, "trt", level=4)
    ops = h.ops(fused)
    assert ops["onnx_fuse::FusedAttention"] == 1 and not {"Softmax", "Tanh", "Attention"} & set(ops), dict(ops)
    assert h.fired(fused)["fused-attention-trt-softcap-nomask"], h.fired(fused)
    node = next(x for x in fused.graph.node if x.op_type == "FusedAttention")
    attrs = {a.name: a for a in node.attribute}
    assert len(node.input) == 3 and attrs["causal"].i == 0 and attrs["softcap"].f == pytest.approx(CAP)
    assert (attrs["num_heads"].i, attrs["kv_num_heads"].i) == (heads, kv_heads)
    h.assert_close(model, fused, _feeds(h, heads, kv_heads, d), atol=1e-4, rtol=1e-3)


def test_the_softcap_matters(h):
    """The check can fail: without its softcap the same attention is far from the capped one."""
    feeds = _feeds(h)
    capped, plain = h.run(_model(h), feeds)[0], h.run(_model(h, cap=1e4), feeds)[0]
    assert np.abs(capped - plain).max() > 0.05


def test_head_size_the_kernels_lack_stays_plain(h):
    """Head size 16 (hold-out 28's VideoPrism): refused with the kernels' reason, plain ops."""
    model = _model(h, d=16)
    why = h.reasons(model, "trt", "fused-attention-trt-softcap-nomask")
    assert why and all(re.search("head sizes 64, 80, 96, 128 and 256", r) for r in why), why
    fused = h.fuse(model, "trt", level=4)
    assert "onnx_fuse::FusedAttention" not in h.ops(fused) and h.ops(fused)["Tanh"] == 1, h.ops(fused)
    h.assert_close(model, fused, _feeds(h, d=16), atol=1e-4, rtol=1e-3)


def test_a_mask_is_not_no_mask(h):
    """An additive mask input: the rule takes only attention with no mask at all."""
    model = _model(h, mask=True)
    fused = h.fuse(model, "trt", level=4)
    assert h.fired(fused)["fused-attention-trt-softcap-nomask"] == 0, h.fired(fused)
    assert "onnx_fuse::FusedAttention" not in h.ops(fused), h.ops(fused)
    h.assert_close(model, fused, _feeds(h, mask=True), atol=1e-4, rtol=1e-3)


def test_cross_attention_stays(h):
    """Keys of another length (cross-attention): FusedAttention's keys have the queries' length."""
    model = _model(h, tk=7)
    fused = h.fuse(model, "trt", level=4)
    assert "onnx_fuse::FusedAttention" not in h.ops(fused), h.ops(fused)
    h.assert_close(model, fused, _feeds(h, tk=7), atol=1e-4, rtol=1e-3)
