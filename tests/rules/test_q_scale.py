"""rules/attention/q_scale.yaml: a constant scale on q (or k) before or between the head views goes into the
attention's scale (FlauBERT / XLM: q / sqrt(D) on the [B, S, H, D] view, hold-out 26); numbers against
the original in ONNX Runtime."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import onnx_fuse

B, S, H, D = 2, 5, 2, 8
ATTENTION = {"com.microsoft::MultiHeadAttention", "com.microsoft::Attention", "Attention", "onnx_fuse::FusedAttention"}


def _model(h, where="head_view", op="Div", scale=(D ** 0.5), on="q", scale_shape=()):
    """softmax(q k^T) v from three projections of x [B, S, H*D]: each split into heads
    (Reshape [0, 0, H, D], Transpose [0, 2, 1, 3]); q (or k) scaled by one constant where XLM puts it
    (``head_view``: on the [B, S, H, D] view), on the projection (``projection``) or on [B, H, S, D]
    (``heads``), as a Mul or a Div."""
    n = h.node
    r = np.random.default_rng(3)
    inits = {f"w{t}": (r.standard_normal((H * D, H * D)) / 4).astype(np.float32) for t in "qkv"}
    inits.update({f"b{t}": (r.standard_normal(H * D) / 4).astype(np.float32) for t in "qkv"})
    inits["shape"] = np.array([0, 0, H, D], np.int64)
    inits["merge"] = np.array([0, 0, H * D], np.int64)
    inits["c"] = np.full(scale_shape, scale, np.float32)
    nodes = []
    for t in "qkv":
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}m"]), n("Add", [f"{t}m", f"b{t}"], [f"{t}p"])]
        src = f"{t}p"
        for stage, make in (("projection", lambda a, b: n("Reshape", [a, "shape"], [b])),
                            ("head_view", lambda a, b: n("Transpose", [a], [b], perm=[0, 2, 1, 3])),
                            ("heads", None)):
            if t == on and where == stage:
                nodes.append(n(op, [src, "c"], [f"{t}s"]))
                src = f"{t}s"
            if make is not None:
                nodes.append(make(src, f"{t}_{stage}"))
                src = f"{t}_{stage}"
        nodes.append(n("Identity", [src], [f"{t}4"]))
    nodes += [n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
              n("Softmax", ["sc"], ["p"], axis=-1), n("MatMul", ["p", "v4"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["batch", "seq", H * D])], [h.vi("y", ["batch", "seq", H * D])], inits)


def _fuse(model, target):
    """The optimized model and how often each rule fired (the rewrite pass's report: the canonical op a
    rule writes is lowered afterwards, so its metadata does not reach the output)."""
    res = onnx_fuse.optimize(model, level=3, target=target)
    fires = collections.Counter()
    for rec in res.report.passes:
        if rec.name == "rewrite":
            fires.update(rec.stats)
    return res.to_proto(), fires


def _feeds(h):
    return {"x": h.rng.standard_normal((B, S, H * D)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("where,op,on", [("head_view", "Div", "q"), ("projection", "Mul", "q"),
                                         ("heads", "Div", "q"), ("head_view", "Mul", "k")])
def test_scale_goes_into_the_attention(h, target, where, op, on):
    """The scale op and its views leave the graph: no Mul / Div is left and the attention fuses whole
    (at ort the packed Attention, which takes the three projections only when nothing sits between them
    and the op), the numbers unchanged."""
    model = _model(h, where, op, 0.35 if op == "Mul" else D ** 0.5, on)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert counts["Mul"] == 0 and counts["Div"] == 0, counts
    assert _fuse(model, target)[1][f"attention-{on}-scale"] == 1
    if target == "ort":
        assert counts["com.microsoft::Attention"] == 1, counts
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("scale,shape", [(-0.5, ()), (0.5, (1, 1, H, 1))])
def test_scale_kept_near_misses(h, scale, shape):
    """A negative scale, and a per-head one ([1, 1, H, 1] on the [B, S, H, D] view), stay where they are;
    the attention still fuses after them and the numbers are unchanged."""
    model = _model(h, "head_view", "Mul", scale, "q", shape)
    out, fires = _fuse(model, "ort")
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and counts["Mul"] == 1 and not fires["attention-q-scale"], counts
    h.assert_close(model, out, _feeds(h))
