"""The sdpa NaN guard Where(IsNaN(p), 0, p) on an attention whose mask is gone.

torch's sdpa decomposition guards the probabilities whenever it was given a mask; when that mask is
a constant that keeps every key (DETR's all-ones pixel mask, folded in a static export) the
recognizer drops it and the canonical Attention has no mask. Without a mask no query row can lose
all its keys, so the guard has nothing to zero: the ORT lowerings (MultiHeadAttention,
GroupQueryAttention) leave it out, as Attention-23 does. With a mask the guard stays.
"""

from __future__ import annotations

import numpy as np
import pytest

B, S, H, D = 2, 5, 2, 8
HID = H * D


def _block(h, *, kv_heads=H, mask=None):
    """q3 / k3 / v3 [B,S,.] -> heads -> softmax(q k^T / sqrt(D) (+ mask)) guarded -> @ v -> [B,S,HID].
    mask: None (none in the graph), "keep_all" (a constant zero bias, what a folded all-ones mask
    leaves) or "input" (an additive mask fed at run time)."""
    n = h.node
    nodes = [n("Reshape", ["q3", "qshape"], ["qr"]), n("Transpose", ["qr"], ["q4"], perm=[0, 2, 1, 3]),
             n("Reshape", ["k3", "kvshape"], ["kr"]), n("Transpose", ["kr"], ["k4"], perm=[0, 2, 1, 3]),
             n("Reshape", ["v3", "kvshape"], ["vr"]), n("Transpose", ["vr"], ["v4"], perm=[0, 2, 1, 3])]
    k, v = "k4", "v4"
    if kv_heads != H:  # repeat_kv: [B,Hkv,S,D] -> [B,Hkv,g,S,D] -> [B,H,S,D]
        nodes += [n("Unsqueeze", ["k4", "ax2"], ["ku"]), n("Expand", ["ku", "exp"], ["kx"]),
                  n("Reshape", ["kx", "full"], ["kxr"]),
                  n("Unsqueeze", ["v4", "ax2"], ["vu"]), n("Expand", ["vu", "exp"], ["vx"]),
                  n("Reshape", ["vx", "full"], ["vxr"])]
        k, v = "kxr", "vxr"
    nodes += [n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"])]
    scores = "ss"
    if mask is not None:
        nodes.append(n("Add", ["ss", "mask"], ["sm"]))
        scores = "sm"
    nodes += [n("Softmax", [scores], ["p"], axis=-1), n("IsNaN", ["p"], ["isn"]),
              n("Where", ["isn", "zero", "p"], ["pz"]), n("MatMul", ["pz", v], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]
    g = H // kv_heads
    inits = {"qshape": np.array([0, 0, H, D], np.int64), "kvshape": np.array([0, 0, kv_heads, D], np.int64),
             "merge": np.array([0, 0, HID], np.int64), "scale": np.array(D ** -0.5, np.float32),
             "zero": np.array(0.0, np.float32), "ax2": np.array([2], np.int64),
             "exp": np.array([B, kv_heads, g, S, D], np.int64), "full": np.array([B, H, S, D], np.int64)}
    inputs = [h.vi("q3", [B, S, HID]), h.vi("k3", [B, S, kv_heads * D]), h.vi("v3", [B, S, kv_heads * D])]
    if mask == "keep_all":
        inits["mask"] = np.zeros((1, 1, S, S), np.float32)
    elif mask == "input":
        inputs.append(h.vi("mask", [B, 1, S, S]))
    return h.make_model(nodes, inputs, [h.vi("y", [B, S, HID])], inits)


def _feeds(h, kv_heads=H, mask=False):
    f = {"q3": h.rng.standard_normal((B, S, HID)).astype(np.float32),
         "k3": h.rng.standard_normal((B, S, kv_heads * D)).astype(np.float32),
         "v3": h.rng.standard_normal((B, S, kv_heads * D)).astype(np.float32)}
    if mask:
        m = np.zeros((B, 1, S, S), np.float32)
        m[1, :, 2, :] = -np.inf  # a query row with no kept key: the guard's case
        f["mask"] = m
    return f


@pytest.mark.parametrize("mask", [None, "keep_all"])
@pytest.mark.parametrize("kv_heads, op", [(H, "com.microsoft::MultiHeadAttention"),
                                          (1, "com.microsoft::GroupQueryAttention")])
def test_no_mask_no_guard(h, mask, kv_heads, op):
    model = _block(h, kv_heads=kv_heads, mask=mask)
    fused = h.fuse(model, "ort")
    counts = h.ops(fused)
    assert counts[op] == 1 and counts["Softmax"] == 0
    assert counts["IsNaN"] == 0 and counts["Where"] == 0, counts
    h.assert_close(model, fused, _feeds(h, kv_heads))


def test_mask_keeps_guard(h):
    """A fed mask may leave a row without keys: the guard stays and that row is 0, as in the export."""
    model = _block(h, mask="input")
    fused = h.fuse(model, "ort")
    counts = h.ops(fused)
    assert counts["com.microsoft::MultiHeadAttention"] == 1 and counts["IsNaN"] == 1
    feeds = _feeds(h, mask=True)
    h.assert_close(model, fused, feeds)
    assert np.all(h.run(fused, feeds)[0][1, 2] == 0)
