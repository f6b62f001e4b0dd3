"""rules/layout/heads_3d.yaml: RotaryEmbedding-23 and Attention-23 in their [B,S,H*D] forms, so an
exporter's head split (Reshape + Transpose) before RoPE/attention and merge after it cancel.

The block is a decoder layer's attention as the dynamo export writes it: q/k/v [B,S,H*D] split
into heads, rotate-half RoPE with cos/sin computed from positions, GQA by repeat_kv, a KV cache
(Concat of past and new K/V, present as graph outputs), an additive mask, the merge back to
[B,S,H*D]. Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attention_testing import rotate_half_nodes, scores_merge_nodes

B, S, P, H, KV, D = 2, 3, 5, 4, 2, 8
T = P + S
BIG = np.iinfo(np.int64).max


def _block(h, *, cache=True, split=(0, 0, H, D)):
    """Without a cache, K/V have all H heads (no repeat_kv)."""
    n = h.node
    kvh = KV if cache else H
    nodes = []
    for name in ("q", "k", "v"):
        shp = "q_shp" if name == "q" else "kv_shp"
        nodes += [n("Reshape", [f"{name}3", shp], [f"{name}sp"]),
                  n("Transpose", [f"{name}sp"], [f"{name}4"], perm=[0, 2, 1, 3])]
    # rotate-half RoPE on q and k, cos/sin of concat(f, f), f = positions * inv_freq
    nodes += rotate_half_nodes(n)
    k, v, tk, outputs = "k4rot", "v4", S, []
    if cache:
        nodes += [n("Concat", ["past_k", "k4rot"], ["present_k"], axis=2),
                  n("Concat", ["past_v", "v4"], ["present_v"], axis=2),
                  n("Unsqueeze", ["present_k", "ax2"], ["ku"]), n("Expand", ["ku", "rep5"], ["kx"]),
                  n("Reshape", ["kx", "rep4"], ["kr"]),
                  n("Unsqueeze", ["present_v", "ax2"], ["vu"]), n("Expand", ["vu", "rep5"], ["vx"]),
                  n("Reshape", ["vx", "rep4"], ["vr"])]
        k, v, tk = "kr", "vr", T
        outputs += [h.vi("present_k", [B, KV, T, D]), h.vi("present_v", [B, KV, T, D])]
    nodes += scores_merge_nodes(n, k, v)
    inputs = [h.vi("pos", ["s"], elem=7), h.vi("q3", ["b", "s", H * D]), h.vi("k3", ["b", "s", kvh * D]), h.vi("v3", ["b", "s", kvh * D]),
              h.vi("mask", ["b", 1, "s", T if cache else "s"])]
    if cache:
        inputs += [h.vi("past_k", ["b", KV, P, D]), h.vi("past_v", ["b", KV, P, D])]
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"q_shp": np.array(split, np.int64), "kv_shp": np.array([0, 0, kvh, D], np.int64),
             "ax02": np.array([0, 2], np.int64),
             "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64), "inv_freq": inv,
             "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
             "rep5": np.array([B, KV, H // KV, tk, D], np.int64), "rep4": np.array([B, H, tk, D], np.int64),
             "scale": np.array(D ** -0.5, np.float32), "hd": np.array([H * D], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("y", ["b", "s", H * D])] + outputs, inits)


def _feeds(h, cache=True):
    r = h.rng
    kvh = KV if cache else H
    f = {"pos": np.arange(P if cache else 0, T if cache else S), "q3": r.standard_normal((B, S, H * D)), "k3": r.standard_normal((B, S, kvh * D)),
         "v3": r.standard_normal((B, S, kvh * D))}
    tk = T if cache else S
    m = np.triu(np.full((S, tk), -1e9), 1 + tk - S) + np.zeros((B, 1, S, tk))
    m[1, :, :, :2] = -1e9  # left padding on row 1
    f["mask"] = m
    if cache:
        f["past_k"] = r.standard_normal((B, KV, P, D))
        f["past_v"] = r.standard_normal((B, KV, P, D))
    return {k: v if k == "pos" else v.astype(np.float32) for k, v in f.items()}


def _attr(node, name):
    return next((a.i for a in node.attribute if a.name == name), None)


@pytest.mark.parametrize("target,cache", [("ort", True), ("onnx", True), ("onnx", False)])
def test_attention_and_rope_run_on_the_3d_tensors(h, target, cache):
    model = _block(h, cache=cache)
    out = h.fuse(model, target)
    ops = h.ops(out)
    # nothing between the projections and attention: the splits and the merge cancelled
    assert ops["Attention"] == 1 and ops["RotaryEmbedding"] == 2, ops
    assert "Transpose" not in ops and "Reshape" not in ops, ops
    att = next(x for x in out.graph.node if x.op_type == "Attention")
    kvh = KV if cache else H
    assert (_attr(att, "q_num_heads"), _attr(att, "kv_num_heads")) == (H, kvh)
    assert list(att.input[:3]) == [x.output[0] for x in out.graph.node if x.op_type == "RotaryEmbedding"] + ["v3"]
    assert all(_attr(x, "num_heads") == h_ for x, h_ in
               zip((x for x in out.graph.node if x.op_type == "RotaryEmbedding"), (H, kvh)))
    fired = h.fired(out)
    assert "rotary-heads-3d" in fired and ("attention-kv-heads-3d" if cache else "attention-heads-3d") in fired
    if cache:
        assert [o.name for o in out.graph.output] == ["y", "present_k", "present_v"]
    h.assert_close(model, out, _feeds(h, cache=cache))


def test_trt_rope_runs_on_the_3d_tensor(h):
    """trt lowers attention on [B,S,H*D] already; with RoPE there too, no split is left."""
    model = _block(h, cache=False)
    out = h.fuse(model, "trt")
    ops = h.ops(out)
    assert ops["Attention"] == 1 and ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    h.assert_close(model, out, _feeds(h, cache=False))


def test_a_split_that_is_not_of_the_last_axis_stays_4d(h):
    """q split as [B, S/.., ..]: the Reshape moves the sequence axis, so the 3-D forms do not apply."""
    model = _block(h, cache=False, split=(B, -1, H, D))  # B*S*H*D elements, S read as -1: fine at run
    reasons = h.reasons(model, "onnx", "rotary-heads-3d")
    assert any(re.search("the Reshape must keep batch and sequence", r) for r in reasons), reasons
    out = h.fuse(model, "onnx")
    assert "attention-heads-3d" not in h.fired(out)
    h.assert_close(model, out, _feeds(h, cache=False))


def test_reshape_of_reshape(h):
    n = h.node
    model = h.make_model(
        [n("Reshape", ["x", "s1"], ["r"]), n("Reshape", ["r", "s2"], ["y"], allowzero=1),
         n("Reshape", ["x2", "s1"], ["r2"]), n("Reshape", ["r2", "s3"], ["z"])],
        [h.vi("x", [2, 3, 4]), h.vi("x2", [2, 3, 4])], [h.vi("y", [6, 4]), h.vi("z", [2, 3, 4])],
        {"s1": np.array([2, 12], np.int64), "s2": np.array([6, 4], np.int64), "s3": np.array([0, 3, 4], np.int64)})
    out = h.fuse(model, "onnx", level=2)
    fired = h.fired(out)
    # y reads x directly (allowzero=1 copies nothing); z keeps its chain (0 copies r2's dim 0)
    y_node = next(x for x in out.graph.node if x.output[0] == "y")
    assert y_node.input[0] == "x" and fired["reshape-of-reshape"] == 1, fired
    feeds = {x: h.rng.standard_normal((2, 3, 4)).astype(np.float32) for x in ("x", "x2")}
    h.assert_close(model, out, feeds)
