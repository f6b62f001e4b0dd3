"""Attention with unmerged LoRA / DoRA adapters on q, k, v and the output projection (PEFT's PeftModel
exported without merge_and_unload): passes/linear_branches.py merges each branch into its projection,
so the layer fuses as the plain one (ORT's packed Attention over one Q/K/V weight), same numbers.
Before it, each q / k / v was a sum of three MatMuls: MultiHeadAttention, and the branches' GEMMs kept."""

from __future__ import annotations

import numpy as np
import pytest

B, S, HID, D, H, R = 2, 5, 32, 8, 4, 4


def _layer(h, form: str):
    """x -> q / k / v (biased, each with an adapter) -> [B, S, H, D] -> softmax(q k^T / sqrt(D) + mask) v ->
    [B, S, HID] -> output projection (with its adapter) + x. form: lora ((x A) B s beside x W + b) or dora
    (m * (x W + (x A) B s) + b, m a per-column constant: PEFT's DoRA with the bias taken off and put back)."""
    n, r = h.node, h.rng
    inits = {"split": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32), "s": np.array(2.0, np.float32)}
    nodes = []

    def proj(src, p):
        inits[f"w{p}"] = (0.2 * r.standard_normal((HID, HID))).astype(np.float32)
        inits[f"b{p}"] = (0.1 * r.standard_normal(HID)).astype(np.float32)
        inits[f"a{p}"] = (0.2 * r.standard_normal((HID, R))).astype(np.float32)
        inits[f"l{p}"] = (0.2 * r.standard_normal((R, HID))).astype(np.float32)
        nodes.extend([n("MatMul", [src, f"w{p}"], [f"m{p}"]), n("MatMul", [src, f"a{p}"], [f"xa{p}"]),
                      n("MatMul", [f"xa{p}", f"l{p}"], [f"xab{p}"]), n("Mul", [f"xab{p}", "s"], [f"lora{p}"])])
        if form == "lora":
            nodes.extend([n("Add", [f"m{p}", f"b{p}"], [f"base{p}"]), n("Add", [f"base{p}", f"lora{p}"], [f"{p}3"])])
        else:
            inits[f"g{p}"] = (1 + 0.1 * r.standard_normal((1, HID))).astype(np.float32)
            nodes.extend([n("Add", [f"m{p}", f"lora{p}"], [f"sum{p}"]), n("Mul", [f"g{p}", f"sum{p}"], [f"dora{p}"]),
                          n("Add", [f"dora{p}", f"b{p}"], [f"{p}3"])])
        return f"{p}3"

    for p in "qkv":
        nodes.append(n("Reshape", [proj("x", p), "split"], [f"{p}r"]))
    nodes += [n("Transpose", ["qr"], ["q4"], perm=[0, 2, 1, 3]), n("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["vr"], ["v4"], perm=[0, 2, 1, 3]),
              n("MatMul", ["q4", "kt"], ["sc"]), n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["a"])]
    nodes.append(n("Add", [proj("a", "o"), "x"], ["y"]))
    return h.make_model(nodes, [h.vi("x", ["b", "s", HID]), h.vi("mask", ["b", 1, 1, "s"])],
                        [h.vi("y", ["b", "s", HID])], inits)


def _feeds(h):
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., S - 2:] = -10000.0  # a padded row
    return {"x": h.rng.standard_normal((B, S, HID)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("form", ["lora", "dora"])
def test_adapters_fuse_as_the_plain_layer(h, form):
    """ORT: one packed Attention over the merged q / k / v weights; the output projection one MatMul."""
    model = _layer(h, form)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["com.microsoft::Attention"] == 1 and "Softmax" not in ops, ops
    assert "com.microsoft::MultiHeadAttention" not in ops and ops["MatMul"] == 1, ops
    h.assert_close(model, out, _feeds(h), atol=1e-4)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_adapters_at_the_other_targets(h, target):
    """onnx / trt: fused, the adapters merged (q / k / v and the output projection: four MatMuls or one packed)."""
    model = _layer(h, "lora")
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and ops["MatMul"] <= 4, ops
    h.assert_close(model, out, _feeds(h), atol=1e-4)
