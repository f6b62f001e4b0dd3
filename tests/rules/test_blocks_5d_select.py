"""attention-blocks-5d-select (rules/attention/blocks_5d.yaml): attention over 5-D blocks [B, H, N, S, D] masked
by a boolean select instead of an additive term, as Reformer's local attention writes it (transformers 5.25,
hold-out 34): N chunks of c queries per head, each over the previous chunk concatenated with its own,
`where(mask, q @ k^T, -1e9)`, exp(s - logsumexp(s)). It is the attention of [B, H*N, S, D] views with the
select's mask viewed alike. Before: no rule took a rank-5 select (Softmax left at every target).
Numbers against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

import onnx_fuse

B, H, N, C, D = 2, 2, 3, 4, 8
ATTENTION = ("com.microsoft::MultiHeadAttention", "Attention", "onnx_fuse::FusedAttention")


def _local(h, *, mask="const", fill=-1e9, form="keep", lse=False, v_blocks=N):
    """q [B, H, N, C, D] (inputs), keys / values: the previous chunk (rolled: chunk 0 reads the last) beside
    the chunk's own on axis 3, [B, H, N, 2C, D]; mask const: Reformer's causal-in-window keep-mask
    [1, 1, N, C, 2C] as a constant; input: a bool input [B, 1, N, C, 2C]."""
    n = h.node
    nodes = []
    for x in "kv":
        nodes += [n("Slice", [x, "m1", "big", "ax2"], [f"{x}last"]), n("Slice", [x, "z", "m1", "ax2"], [f"{x}head"]),
                  n("Concat", [f"{x}last", f"{x}head"], [f"{x}prev"], axis=2),
                  n("Concat", [f"{x}prev", x], [f"{x}w"], axis=3)]
    nodes += [n("Transpose", ["kw"], ["kt"], perm=[0, 1, 2, 4, 3]), n("MatMul", ["q", "kt"], ["sc"])]
    c = "keep"
    if form == "keep":
        nodes.append(n("Where", [c, "sc", "fill"], ["sm"]))
    else:
        nodes += [n("Not", [c], ["drop"]), n("Where", ["drop", "fill", "sc"], ["sm"])]
    if lse:
        nodes += [n("ReduceLogSumExp", ["sm", "ax"], ["l"], keepdims=1), n("Sub", ["sm", "l"], ["d"]),
                  n("Exp", ["d"], ["p"])]
    else:
        nodes.append(n("Softmax", ["sm"], ["p"], axis=-1))
    nodes.append(n("MatMul", ["p", "vw"], ["y"]))
    inits = {"m1": np.array([-1], np.int64), "big": np.array([2 ** 62], np.int64), "ax2": np.array([2], np.int64),
             "z": np.array([0], np.int64), "ax": np.array([-1], np.int64), "fill": np.array(fill, np.float32)}
    inputs = [h.vi("q", [B, H, N, C, D]), h.vi("k", [B, H, N, C, D]), h.vi("v", [B, H, v_blocks, C, D])]
    if mask == "const":
        inits["keep"] = _window_mask()
    else:
        inputs.append(h.vi("keep", [B, 1, N, C, 2 * C], TensorProto.BOOL))
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, N, C, D])], inits)


def _window_mask():
    """Query i of a chunk keeps the previous chunk's keys after it and its own up to itself (a window of C)."""
    i = np.arange(C)[:, None]
    j = np.arange(2 * C)[None, :]
    keep = (j > i) & (j <= i + C)
    m = np.broadcast_to(keep, (1, 1, N, C, 2 * C)).copy()
    m[:, :, 0, :, :C] = False     # chunk 0 has no previous chunk (the roll gave it the last one)
    return m


def _feeds(h, model, keyless=False):
    f = {i.name: h.rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
         for i in model.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    if any(i.name == "keep" for i in model.graph.input):
        keep = np.broadcast_to(_window_mask(), (B, 1, N, C, 2 * C)).copy()
        keep[1, :, 1, :, C:C + 2] = False     # batch 1: the chunk's first 2 keys padded
        if keyless:
            keep[1, :, 0, 0] = False          # and query 0 of chunk 0 keeps no key
        f["keep"] = keep
    return f


def _fused(ops):
    return sum(ops[k] for k in ATTENTION)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("lse", [False, True], ids=["softmax", "logsumexp"])
def test_reformer_local_attention_fuses(h, target, lse):
    model = _local(h, lse=lse)
    result = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True)
    assert result.report.rule_fires.get("attention-blocks-5d-select") == 1, result.report.rule_fires
    out = result.to_proto()
    ops = h.ops(out)
    assert _fused(ops) == 1 and "Softmax" not in ops and "Exp" not in ops, ops
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["keep", "fill"])
@pytest.mark.parametrize("fill", [-1e9, float(np.finfo(np.float32).min), -np.inf], ids=["1e9", "lowest", "inf"])
def test_input_mask_select_over_blocks_fuses(h, target, form, fill):
    """A boolean input mask over the blocks, either select order; rows that keep no key (fill finite:
    uniform in both; -inf: NaN in the original, any value accepted) included."""
    model = _local(h, mask="input", form=form, fill=fill)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert _fused(ops) == 1 and "Softmax" not in ops, ops
    h.assert_close(model, out, _feeds(h, model))
    if np.isfinite(fill):
        h.assert_close(model, out, _feeds(h, model, keyless=True))


def test_near_misses_stay(h):
    """Values broadcast over the blocks (v [B, H, 1, C, D]) are no per-block attention; a fill that is a
    tensor is no select fill: the rule refuses both and the numbers stay."""
    model = _local(h, v_blocks=1)
    got = h.reasons(model, "ort", "attention-blocks-5d-select")
    assert any("the same in q, K^T and V" in r for r in got), got
    out = h.fuse(model, "ort")
    assert _fused(h.ops(out)) == 0, h.ops(out)
    h.assert_close(model, out, _feeds(h, model))

    model = _local(h)
    for i in model.graph.initializer:
        if i.name == "fill":
            i.CopyFrom(numpy_helper.from_array(np.full((2 * C,), -1e9, np.float32), "fill"))
    got = h.reasons(model, "ort", "attention-blocks-5d-select")
    assert any("one number of q's dtype" in r for r in got), got
