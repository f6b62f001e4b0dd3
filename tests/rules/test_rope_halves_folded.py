"""rules/rope/rotary.yaml rotary-halves with folded tables: concat(a*cos - b*sin, b*cos + a*sin) where a
static export has folded cos / sin and their head-axis Unsqueeze into [1, 1, S, D/2] constants (DeepSeek-style
even / odd lanes: Bailing-hybrid's MLA exported static_nomask, hold-out 20). The rule needed the Unsqueeze.

Before: rope 0/2 on bailing_hybrid static_nomask at ort-O3 / onnx-O3 / trt-O4."""

from __future__ import annotations

import numpy as np
import pytest

H, D, S = 2, 8, 5
BIG = np.iinfo(np.int64).max


def _tables(per_head=False):
    inv = 1.0 / (10000 ** (np.arange(0, D, 2) / D))
    f = np.arange(S)[:, None] * inv[None, :]                  # [S, D/2]
    cos, sin = np.cos(f)[None, None], np.sin(f)[None, None]   # [1, 1, S, D/2]
    if per_head:   # a different table per head: not one rotation of every head
        cos, sin = np.concatenate([cos, cos * 0.5], axis=1), np.concatenate([sin, sin * 0.5], axis=1)
    return cos.astype(np.float32), sin.astype(np.float32)


def _graph(h, *, per_head=False):
    n = h.node
    cos, sin = _tables(per_head)
    nodes = [n("Slice", ["x", "i0", "iend", "ilast", "two"], ["a"]),   # even lanes
             n("Slice", ["x", "i1", "iend", "ilast", "two"], ["b"]),   # odd lanes
             n("Mul", ["a", "cu"], ["m1"]), n("Mul", ["b", "su"], ["m2"]), n("Sub", ["m1", "m2"], ["lo"]),
             n("Mul", ["b", "cu"], ["m3"]), n("Mul", ["a", "su"], ["m4"]), n("Add", ["m3", "m4"], ["hi"]),
             n("Concat", ["lo", "hi"], ["y"], axis=-1)]
    inits = {"cu": cos, "su": sin, "i0": np.array([0], np.int64), "i1": np.array([1], np.int64),
             "iend": np.array([BIG], np.int64), "ilast": np.array([-1], np.int64), "two": np.array([2], np.int64)}
    return h.make_model(nodes, [h.vi("x", ["b", H, S, D])], [h.vi("y", ["b", H, S, D])], inits)


def _feeds(h, b=2):
    return {"x": h.rng.standard_normal((b, H, S, D)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_folded_tables_rope_in_halves_fuses(h, target):
    model = _graph(h)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] + ops["com.microsoft::RotaryEmbedding"] == 1 and "Sub" not in ops, ops
    assert "rotary-halves" in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h))
    h.assert_close(model, out, _feeds(h, b=3))


def test_per_head_tables_are_not_one_rotation(h):
    model = _graph(h, per_head=True)
    assert any("not varying over the heads" in r for r in h.reasons(model, "onnx", "rotary-halves"))
    out = h.fuse(model, "onnx")
    assert "rotary-halves" not in h.fired(out)
    h.assert_close(model, out, _feeds(h))
