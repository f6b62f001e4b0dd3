"""torch.nn.MultiheadAttention with need_weights (its default) fused as one multi-head attention.

torch's multi_head_attention_forward, weights path (SigLIP's pooling head, CLIP-like probes, DETR,
Perceiver-style resamplers): q, k, v [T, B, C] (time first; batch_first transposes in and out) viewed
[T, B*H, D] and transposed (k once, [1, 2, 0]), scaled q @ k^T (+ the key padding as a [B*H, 1, S]
baddbmm term), softmax, @ v; the output [B*H, T, D] transposed to [T, B*H, D] and viewed 2-D,
[T*B, C], for the out-projection (Gemm), then viewed [T, B, C]. heads-merge-time-first took the 3-D
view only, so this fused one head per [B*H] slice (attention-bmm-single-head).
heads-merge-time-first-rows (rules/attention/time_first_heads.yaml) respells the 2-D view heads-first;
N = B*H is proven by N being a symbolic multiple of H (dim_quotient). The graphs are written as the
dynamo exporter writes them (the rows view a constant [-1, C]) and as TorchScript does (computed
T*B from the input's shape); every fused graph is compared with the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_fuse
import pytest
from attention_testing import attention_heads, fuse

H, D = 4, 8
C = H * D
ATTN = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _torch_mha(h, *, batch_first=True, probe=False, pad=False, rows="const", static=False, middle="bh"):
    """torch MHA's weights path over x ([B, S, C] if batch_first else [S, B, C]); probe: the query is
    a learned [1, 1, C] expanded over the batch (T = 1, a pooling head), else x (T = S); pad: a
    key_padding_mask [B, S] (bool) as the baddbmm term; rows: the 2-D view's target, "const"
    [-1, C] (dynamo) or "computed" Concat(T*B, C) from shapes (TorchScript); middle: the head views'
    middle entry, B*H computed from shapes ("bh") or another input's length ("other": not provably B*H)."""
    n, rng = h.node, np.random.default_rng(21)
    inits = {f"w{t}": (rng.standard_normal((C, C)) * 0.3).astype(np.float32) for t in "qkv"}
    inits |= {f"b{t}": (rng.standard_normal(C) * 0.1).astype(np.float32) for t in "qkv"}
    inits |= {"wo": (rng.standard_normal((C, C)) * 0.3).astype(np.float32),
              "bo": (rng.standard_normal(C) * 0.1).astype(np.float32),
              "probe": rng.standard_normal((1, 1, C)).astype(np.float32),
              "scale": np.array(D ** -0.5, np.float32), "hh": np.array([H], np.int64),
              "hs": np.array(H, np.int64), "dd": np.array([D], np.int64), "cc": np.array([C], np.int64),
              "m1": np.array([-1], np.int64), "one": np.array([1], np.int64), "rows": np.array([-1, C], np.int64),
              "heads": np.array([1, H, 1, 1], np.int64), "ax0": np.array([0], np.int64),
              "fill": np.array(float("-inf"), np.float32), "zero": np.array(0.0, np.float32)}
    # time-first x [S, B, C] and its dims
    nodes = [n("Transpose", ["x"], ["xt"], perm=[1, 0, 2])] if batch_first else [n("Identity", ["x"], ["xt"])]
    nodes += [n("Shape", ["xt"], ["ss"], start=0, end=1), n("Shape", ["xt"], ["bb"], start=1, end=2),
              n("Squeeze", ["bb"], ["b0"]), n("Mul", ["b0", "hs"], ["bh0"]), n("Reshape", ["bh0", "m1"], ["bh"]),
              n("Shape", ["other"], ["on"], start=0, end=1)]
    if probe:   # the probe expanded over the batch, time-first: T = 1
        nodes += [n("Concat", ["bb", "one", "one"], ["pe"], axis=0), n("Expand", ["probe", "pe"], ["pb"]),
                  n("Transpose", ["pb"], ["qin"], perm=[1, 0, 2]), n("Identity", ["one"], ["tt"])]
    else:
        nodes += [n("Identity", ["xt"], ["qin"]), n("Identity", ["ss"], ["tt"])]
    mid = {"bh": "bh", "other": "on"}[middle]
    nodes += [n("Concat", ["tt", mid, "dd"], ["tq"], axis=0), n("Concat", ["ss", mid, "dd"], ["tk"], axis=0)]
    for t, src, tgt in (("q", "qin", "tq"), ("k", "xt", "tk"), ("v", "xt", "tk")):
        nodes += [n("MatMul", [src, f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}l"]),
                  n("Reshape", [f"{t}l", tgt], [f"{t}v"])]
    nodes += [n("Transpose", ["qv"], ["q3"], perm=[1, 0, 2]), n("Transpose", ["vv"], ["v3"], perm=[1, 0, 2]),
              n("Mul", ["q3", "scale"], ["qs"]), n("Transpose", ["kv"], ["kt"], perm=[1, 2, 0]),
              n("MatMul", ["qs", "kt"], ["sc"])]
    if pad:   # F._canonical_mask + merge_masks: -inf where padded, [B, 1, 1, S] over the heads, [B*H, 1, S]
        nodes += [n("Where", ["pad", "fill", "zero"], ["pf"]),
                  n("Concat", ["bb", "one", "one", "ss"], ["p4s"], axis=0), n("Reshape", ["pf", "p4s"], ["p4"]),
                  n("Expand", ["p4", "heads"], ["pe4"]), n("Concat", ["bh", "one", "ss"], ["p3s"], axis=0),
                  n("Reshape", ["pe4", "p3s"], ["p3"]), n("Add", ["sc", "p3"], ["sb"])]
    nodes += [n("Softmax", ["sb" if pad else "sc"], ["p"], axis=-1), n("MatMul", ["p", "v3"], ["o3"]),
              n("Transpose", ["o3"], ["ot"], perm=[1, 0, 2])]
    if rows == "const":
        nodes += [n("Reshape", ["ot", "rows"], ["o2"])]
    else:
        nodes += [n("Squeeze", ["tt"], ["t0"]), n("Mul", ["t0", "b0"], ["tb0"]),
                  n("Unsqueeze", ["tb0", "ax0"], ["tb"]), n("Concat", ["tb", "cc"], ["r2"], axis=0),
                  n("Reshape", ["ot", "r2"], ["o2"])]
    nodes += [n("Gemm", ["o2", "wo", "bo"], ["y2"], transB=1), n("Concat", ["tt", "bb", "cc"], ["y3s"], axis=0),
              n("Reshape", ["y2", "y3s"], ["y3"])]
    nodes += [n("Transpose", ["y3"], ["y"], perm=[1, 0, 2])] if batch_first else [n("Identity", ["y3"], ["y"])]
    b, s = (2, 5) if static else ("b", "s")
    t = 1 if probe else s
    inputs = [h.vi("x", [b, s, C] if batch_first else [s, b, C]), h.vi("other", ["n"])]
    if pad:
        inputs.append(h.vi("pad", [b, s], onnx.TensorProto.BOOL))
    return h.make_model(nodes, inputs, [h.vi("y", [b, t, C] if batch_first else [t, b, C])], inits, opset=18)


def _feeds(*, batch_first=True, pad=False, b=2, s=5):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((b, s, C) if batch_first else (s, b, C)).astype(np.float32)
    feeds = {"x": x, "other": np.zeros(b * H, np.float32)}
    if pad:
        m = np.zeros((b, s), bool)
        m[-1, s - 2:] = True   # the last sequence's last two keys are padding
        feeds["pad"] = m
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "time_first"])
@pytest.mark.parametrize("form", ["self", "probe", "self_pad", "probe_pad", "computed_rows", "static"])
def test_torch_mha_weights_path_is_multi_head(h, target, batch_first, form):
    kw = dict(batch_first=batch_first, probe="probe" in form, pad="pad" in form,
              rows="computed" if form == "computed_rows" else "const", static=form == "static")
    model = _torch_mha(h, **kw)
    out, fired = fuse(model, target)
    ops = h.ops(out)
    assert ops[ATTN[target]] == 1 and "Softmax" not in ops, ops
    assert "attention-bmm-single-head" not in fired, fired
    assert fired.get("heads-merge-time-first-rows", 0) == 1, fired
    assert attention_heads(out) == [H]
    # one head per slice kept each view with Unsqueeze / Squeeze glue around the op; the padding's
    # [B*H, 1, S] term viewed back [B, H, 1, S] (attention-batched-heads-3d's Unsqueeze + Reshape)
    # reads the expanded mask itself (fold-layout-chains' view-chain)
    assert "Squeeze" not in ops and "Unsqueeze" not in ops, ops
    feeds = dict(batch_first=batch_first, pad=kw["pad"])
    h.assert_close(model, out, _feeds(**feeds))
    if form != "static":
        h.assert_close(model, out, _feeds(**feeds, b=3, s=4))


def test_heads_not_proven_keep_one_head_per_slice(h):
    # the head views' middle entry is another input's length: B*H at run time, not provably so;
    # the output's [N, T, D] then has no symbolic factor H, and the rows view is left as it is
    model = _torch_mha(h, middle="other")
    assert any("B*H a multiple of H" in r for r in h.reasons(model, "ort", "heads-merge-time-first-rows"))
    out, fired = fuse(model, "ort")
    assert "heads-merge-time-first-rows" not in fired
    h.assert_close(model, out, _feeds())


def test_dim_quotient():
    from onnx_fuse.rewrite._expr import EvalFailure, UNKNOWN_DIM, _dim_quotient

    assert _dim_quotient(None, "4*batch", 4) == "batch"
    assert _dim_quotient(None, "4*batch*seq", "seq") == "4*batch"
    assert _dim_quotient(None, 12, 4) == 3
    for a, b in (("batch", 4), ("6*b", 4), (10, 4), ("4*b", "s"), (UNKNOWN_DIM, 4)):
        with pytest.raises(EvalFailure):
            _dim_quotient(None, a, b)
