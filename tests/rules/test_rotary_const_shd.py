"""rules/rope/rotary_const.yaml rotary-const-table, its shd reading (table_layout reads a rank-3 x as
[1, S, H, D]; rotary-const-table-shd until session 38): rotate-half RoPE on packed patches x [S, H, D] (no batch axis) with
constant tables [S, 1, D], as the Qwen2-VL / Qwen3-VL / GLM-4V / EXAONE 4.5 / VideoLLaMA 3 vision towers
write it for a fixed grid (apply_rotary_pos_emb_vision; hold-out 28: RoPE 0 before). The tables are 2-D
rotary: each patch's row and column frequencies concatenated, so their rows are no arithmetic progression.
Numerics against the original in ORT at every target."""

from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto

GRID, H, D = 4, 2, 16  # a 4 x 4 grid of patches, 2 heads of 16
S = GRID * GRID
BIG = np.iinfo(np.int64).max


def _tables(scale=1.0, halves_equal=True):
    """cos / sin [S, 1, D] of concat(f, f), f [S, D/2] = (row * inv, column * inv) per patch."""
    inv = 1.0 / 10000 ** (np.arange(0, D // 2, 2, dtype=np.float64) / (D // 2))  # D/4 frequencies
    rows, cols = np.divmod(np.arange(S), GRID)
    f = np.concatenate([np.outer(rows, inv), np.outer(cols, inv)], -1)  # [S, D/2]
    emb = np.concatenate([f, f if halves_equal else f * 1.5], -1)[:, None, :]
    return (np.cos(emb) * scale).astype(np.float32), (np.sin(emb) * scale).astype(np.float32)


def _model(h, cos, sin, heads=H, elem=None):
    """q and k [S, heads, D] rotated by the same tables: y = x * cos + rotate_half(x) * sin."""
    n = h.node
    nodes = []
    for x in ("q", "k"):
        nodes += [n("Mul", [x, "cos"], [f"{x}c"]),
                  n("Slice", [x, "s_0", "s_half", "s_ax"], [f"{x}1"]),
                  n("Slice", [x, "s_half", "s_end", "s_ax"], [f"{x}2"]),
                  n("Neg", [f"{x}2"], [f"{x}n"]), n("Concat", [f"{x}n", f"{x}1"], [f"{x}r"], axis=-1),
                  n("Mul", [f"{x}r", "sin"], [f"{x}s"]), n("Add", [f"{x}c", f"{x}s"], [f"{x}_rot"])]
    shape = [S, heads, D]
    inits = {"cos": cos, "sin": sin, "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([-1], np.int64)}
    vi = (lambda name: h.vi(name, shape)) if elem is None else (lambda name: h.vi(name, shape, elem))
    return h.make_model(nodes, [vi("q"), vi("k")], [vi("q_rot"), vi("k_rot")], inits)


def _feeds(h, heads=H):
    r = h.rng
    return {x: r.standard_normal((S, heads, D)).astype(np.float32) for x in ("q", "k")}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale", [1.0, 0.8])  # a scaled rotation (attention_scaling folded into the tables)
def test_packed_patches_rotation_fuses(h, target, scale):
    model = _model(h, *_tables(scale))
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and not {"Neg", "Concat", "Slice", "Mul"} & set(ops), ops
    assert h.fired(out)["rotary-const-table"], h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_one_head(h):
    model = _model(h, *_tables(), heads=1)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h, heads=1))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_float16(h, target):
    """A half-precision export: float16 x and tables."""
    cos, sin = _tables()
    model = _model(h, cos.astype(np.float16), sin.astype(np.float16), elem=TensorProto.FLOAT16)
    out = h.fuse(model, target, level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2 and "Neg" not in h.ops(out), h.ops(out)
    feeds = {x: h.rng.standard_normal((S, H, D)).astype(np.float16) for x in ("q", "k")}
    for r, g in zip(h.run(model, feeds), h.run(out, feeds)):
        np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), atol=2e-3, rtol=2e-3)


def test_unequal_halves_stay(h):
    """cos / sin of concat(f, 1.5 f): not the tables RotaryEmbedding's half caches stand for."""
    model = _model(h, *_tables(halves_equal=False))
    h.stays(model, "rotary-const-table", "halves differ", _feeds(h), op="RotaryEmbedding")


def test_tables_per_head_stay(h):
    """Tables [S, H, D] (another rotation per head): not rows of positions broadcast over the heads."""
    cos, sin = _tables()
    model = _model(h, np.repeat(cos, H, 1) * np.array([1, 0.5], np.float32)[None, :, None],
                   np.repeat(sin, H, 1) * np.array([1, 0.5], np.float32)[None, :, None])
    h.stays(model, "rotary-const-table", "not varying over the heads|rows of positions", _feeds(h), op="RotaryEmbedding")


def test_not_a_rotation_stays(h):
    """cos^2 + sin^2 varying by position: equal halves, but no rotation."""
    cos, sin = _tables()
    model = _model(h, cos, sin * np.linspace(0.2, 1.0, S, dtype=np.float32)[:, None, None])
    h.stays(model, "rotary-const-table", r"not a \(scaled\) rotation", _feeds(h), op="RotaryEmbedding")
