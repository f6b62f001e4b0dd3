"""rules/attention/packed_ort.yaml: com.microsoft::Attention when the heads' width H*D is not the input's.

A model with pruned heads (BERT's prune_heads: layer 0 keeps 2 of 4 heads, layer 1 keeps 3) or a head
size set apart from hidden / heads projects x [B, S, 32] to q, k, v [B, S, H*D] with H*D != 32; the
head split views them with -1 heads. The packed op's output is [B, S, H*D] (the value projection's
shape), not x's: typed like x, ONNX Runtime's inference met the output projection's MatMul
[H*D, 32] with a [.., 32] input and refused the model (hold-out 21's pruned BERT / RoBERTa files)."""

from __future__ import annotations

import numpy as np
import pytest

B, S, HID, D = 2, 5, 32, 8


def _layer(h, heads: int, *, shared_input: bool = True):
    """x -> biased q / k / v of width heads*D -> [B, S, -1, D] views -> softmax(q k^T / sqrt(D)) (NaN rows
    zeroed) v -> [B, S, -1] -> output projection back to HID, plus x (the residual); a key-padding mask
    [B, 1, 1, S]."""
    n, w = h.node, heads * D
    nodes = [n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "c0", "c2"], ["bs"]),
             n("Concat", ["bs", "m1", "dd"], ["split"], axis=0)]
    for p in "qkv":
        src = "x" if shared_input or p != "v" else "x2"
        nodes += [n("MatMul", [src, f"w{p}"], [f"m{p}"]), n("Add", [f"m{p}", f"b{p}"], [f"{p}3"]),
                  n("Reshape", [f"{p}3", "split"], [f"{p}r"])]
    nodes += [n("Transpose", ["qr"], ["q4"], perm=[0, 2, 1, 3]), n("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["vr"], ["v4"], perm=[0, 2, 1, 3]),
              n("MatMul", ["q4", "kt"], ["sc"]), n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p0"], axis=-1),
              # SDPA's guard: rows without keys give zeros (the rewrite keeps it after the fused op)
              n("IsNaN", ["p0"], ["isn"]), n("Where", ["isn", "zero", "p0"], ["p"]), n("MatMul", ["p", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["a"]),
              n("MatMul", ["a", "wo"], ["ao"]), n("Add", ["ao", "x"], ["y"])]
    r = h.rng
    inits = {"c0": np.array([0], np.int64), "c2": np.array([2], np.int64), "m1": np.array([-1], np.int64),
             "merge": np.array([0, 0, -1], np.int64),
             "dd": np.array([D], np.int64), "scale": np.array(D ** -0.5, np.float32),
             "zero": np.array(0.0, np.float32),
             "wo": (0.2 * r.standard_normal((w, HID))).astype(np.float32)}
    for p in "qkv":
        inits[f"w{p}"] = (0.2 * r.standard_normal((HID, w))).astype(np.float32)
        inits[f"b{p}"] = (0.1 * r.standard_normal(w)).astype(np.float32)
    inputs = [h.vi("x", ["b", "s", HID]), h.vi("mask", ["b", 1, 1, "s"])]
    if not shared_input:
        inputs.append(h.vi("x2", ["b", "s", HID]))
    return h.make_model(nodes, inputs, [h.vi("y", ["b", "s", HID])], inits)


def _feeds(h, shared_input=True):
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., S - 2:] = np.finfo(np.float32).min  # a padded row
    feeds = {"x": h.rng.standard_normal((B, S, HID)).astype(np.float32), "mask": mask}
    if not shared_input:
        feeds["x2"] = h.rng.standard_normal((B, S, HID)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("heads", [2, 3])
def test_packed_attention_narrower_than_its_input(h, heads):
    """2 or 3 heads of 8 over a 32-wide input: packed Attention, ORT loads it, same numbers."""
    model = _layer(h, heads)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["com.microsoft::Attention"] == 1 and "Softmax" not in ops, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_narrow_heads_at_the_other_targets(h, target):
    """The same layer at the targets without the packed op: fused, same numbers."""
    model = _layer(h, 3)
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_narrow_heads_cross_input_not_packed(h):
    """Near miss: v from another input cannot be packed (MultiHeadAttention), still the right numbers."""
    model = _layer(h, 3, shared_input=False)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert "com.microsoft::Attention" not in ops and ops["com.microsoft::MultiHeadAttention"] == 1, ops
    h.assert_close(model, out, _feeds(h, shared_input=False))
