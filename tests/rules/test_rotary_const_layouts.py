"""rotary-const-table (rules/rope/rotary_const.yaml): rotate-half RoPE with constant tables, the layout read
from the tables' dims (table_layout, rewrite/_rotation_tables.py) instead of one rule per layout. Spellings
none of the three rules it replaced (-, -bshd, -sbhd) took, each fused at every target and compared with
the unfused graph in ONNX Runtime:
- x [B, S, H, D] (RoPE before the head transpose) with rank-3 tables [S, 1, D], head size 64;
- the halves concatenated on axis 3 written as such (not -1), x [B, H, S, D], tables [1, S, D].
Refused: tables that vary over the heads as well as the positions."""

from __future__ import annotations

import numpy as np
import pytest

TARGETS = ["ort", "onnx", "trt"]


def _tables(s, d, shape):
    f = np.outer(np.arange(s), 1.0 / 100 ** (np.arange(d // 2) * 2 / d))
    f = np.concatenate([f, f], -1).reshape(shape)
    return np.cos(f).astype(np.float32), np.sin(f).astype(np.float32)


def _model(h, x_shape, cos, sin, cat_axis=-1):
    n = h.node
    d = x_shape[-1]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"cos": cos, "sin": sin, "i0": i64(0), "ih": i64(d // 2), "big": i64(2 ** 62), "ax": i64(-1)}
    nodes = [n("Mul", ["x", "cos"], ["m1"]), n("Slice", ["x", "i0", "ih", "ax"], ["x1"]),
             n("Slice", ["x", "ih", "big", "ax"], ["x2"]), n("Neg", ["x2"], ["nx"]),
             n("Concat", ["nx", "x1"], ["r"], axis=cat_axis), n("Mul", ["r", "sin"], ["m2"]),
             n("Add", ["m1", "m2"], ["y"])]
    return h.make_model(nodes, [h.vi("x", x_shape)], [h.vi("y", x_shape)], inits)


def _fused(h, model, target, shape):
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1 and "Neg" not in ops, ops
    assert h.fired(out)["rotary-const-table"] >= 1, h.fired(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("target", TARGETS)
def test_rank3_tables_before_the_head_transpose(h, target):
    B, S, H, D = 2, 5, 2, 64
    cos, sin = _tables(S, D, (S, 1, D))
    _fused(h, _model(h, [B, S, H, D], cos, sin), target, (B, S, H, D))


@pytest.mark.parametrize("target", TARGETS)
def test_halves_concatenated_on_axis_3(h, target):
    B, H, S, D = 2, 3, 6, 16
    cos, sin = _tables(S, D, (1, S, D))
    _fused(h, _model(h, [B, H, S, D], cos, sin, cat_axis=3), target, (B, H, S, D))


def test_tables_without_rows_of_positions_are_refused(h):
    """tables varying over x's axis 1 and 2 at once ([1, H, S, D] for x [B, H, S, D]): they differ per
    head, no RotaryEmbedding caches."""
    B, H, S, D = 2, 3, 5, 8
    cos, sin = _tables(H * S, D, (1, H, S, D))
    model = _model(h, [B, H, S, D], cos, sin)
    rs = h.reasons(model, "ort", "rotary-const-table")
    assert rs and not any(r.startswith("matched") for r in rs) and any("rows of positions" in r for r in rs), rs
    out = h.fuse(model, "ort", 3)
    assert not any(k.endswith("RotaryEmbedding") for k in h.ops(out)), h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)})
