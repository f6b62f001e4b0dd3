"""attention-gemm-packed-ort (rules/attention/packed_ort.yaml) on GPT-2's Conv1D form.

GPT-2's c_attn is a Conv1D: `addmm(b, x.view(-1, C), W)` viewed back [B, S, 3C] and split in three
over the channels, `split(split_size, dim=2)`. The dynamo and TorchScript exporters write it as
Reshape -> Gemm -> Reshape -> Split(axis=2) (axis -1 in other writers). The rule's pattern named no
Split axis, and the matcher reads an unnamed attribute as its default (0): it never matched a real
export (docs/rule_usage.md: no corpus file), and GPT-2 lowered to MultiHeadAttention with the packed
projection split apart. Now the axis is named and checked, so the packed com.microsoft::Attention
takes the Gemm's weight and bias as they are. Compared with the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx_fuse
import pytest

H, D = 2, 8
C = H * D


def _gpt2_block(h, *, axis=2, mask=True, static=False, seq=5):
    """x [B, S, C] -> Conv1D c_attn (Reshape [-1, C], Gemm, Reshape [B, S, 3C]) -> Split over ``axis``
    -> heads [B, H, S, D] -> softmax(q k^T / sqrt(D) + mask) v -> merged -> Conv1D c_proj -> + x."""
    n, rng = h.node, np.random.default_rng(23)
    inits = {"w": (rng.standard_normal((C, 3 * C)) * 0.3).astype(np.float32),
             "b": (rng.standard_normal(3 * C) * 0.1).astype(np.float32),
             "wo": (rng.standard_normal((C, C)) * 0.3).astype(np.float32),
             "bo": (rng.standard_normal(C) * 0.1).astype(np.float32),
             "flat": np.array([-1, C], np.int64), "c3": np.array([3 * C], np.int64),
             "hd": np.array([H, D], np.int64), "cc": np.array([C], np.int64),
             "sizes": np.array([C, C, C] if axis in (2, -1) else [1, 1, 1], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    nodes = [n("Shape", ["x"], ["bs"], start=0, end=2),
             n("Concat", ["bs", "c3"], ["s3"], axis=0), n("Concat", ["bs", "hd"], ["s4"], axis=0),
             n("Concat", ["bs", "cc"], ["so"], axis=0),
             n("Reshape", ["x", "flat"], ["x2"]), n("Gemm", ["x2", "w", "b"], ["g"]),
             n("Reshape", ["g", "s3"], ["g3"]), n("Split", ["g3", "sizes"], ["q3", "k3", "v3"], axis=axis)]
    for t in "qkv":
        nodes += [n("Reshape", [f"{t}3", "s4"], [f"{t}r"]),
                  n("Transpose", [f"{t}r"], [f"{t}4"], perm=[0, 2, 1, 3])]
    nodes += [n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"])]
    nodes += [n("Add", ["ss", "mask"], ["sm"])] if mask else []
    nodes += [n("Softmax", ["sm" if mask else "ss"], ["p"], axis=-1), n("MatMul", ["p", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "so"], ["om"]),
              n("Reshape", ["om", "flat"], ["o2"]), n("Gemm", ["o2", "wo", "bo"], ["y2"]),
              n("Reshape", ["y2", "so"], ["y3"]), n("Add", ["x", "y3"], ["y"])]
    b, s = (2, seq) if static else ("b", "s")
    inputs = [h.vi("x", [b, s, C])] + ([h.vi("mask", [b, 1, s, s])] if mask else [])
    return h.make_model(nodes, inputs, [h.vi("y", [b, s, C])], inits, opset=18)


def _feeds(mask=True, b=2, s=5):
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((b, s, C)).astype(np.float32)}
    if mask:   # causal, the last sequence's first key padded
        m = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1)[None, None].repeat(b, 0)
        m[-1, :, 1:, 0] = np.finfo(np.float32).min
        feeds["mask"] = m
    return feeds


@pytest.mark.parametrize("form", ["mask", "no_mask", "static", "axis_minus1"])
def test_conv1d_packed_projection_lowers_to_packed_attention(h, form):
    mask = form != "no_mask"
    model = _gpt2_block(h, axis=-1 if form == "axis_minus1" else 2, mask=mask, static=form == "static")
    out = onnx_fuse.optimize(model, level=3, target="ort")
    fired, ops = dict(out.report.rule_fires), h.ops(out.to_proto())
    assert fired.get("attention-gemm-packed-ort") == 1, fired
    assert ops["com.microsoft::Attention"] == 1 and "com.microsoft::MultiHeadAttention" not in ops, ops
    # the packed op takes the Gemm's weight and bias: no Split, no head views of q, k, v left
    assert "Split" not in ops and "Transpose" not in ops, ops
    h.assert_close(model, out.to_proto(), _feeds(mask))
    if form != "static":
        h.assert_close(model, out.to_proto(), _feeds(mask, b=3, s=4))


def test_split_over_another_axis_is_not_the_packed_projection(h):
    # three [B, 1, 3C] rows of a [B, 3, 3C] tensor are not q, k, v: the rule's check refuses the axis
    # (the block is built at S = 3 so that the split is valid; it is then not attention over q, k, v)
    model = _gpt2_block(h, axis=1, mask=False, static=True, seq=3)
    reasons = h.reasons(model, "ort", "attention-gemm-packed-ort")
    out = onnx_fuse.optimize(model, level=3, target="ort")
    assert "attention-gemm-packed-ort" not in dict(out.report.rule_fires)
    assert not any(r.startswith("matched") for r in reasons), reasons
    h.assert_close(model, out.to_proto(), _feeds(False, s=3))
