"""rules/rope/rotary_interleaved_paired.yaml with rank-3 tables: SAM 3's ViT rotates q / k [B, H, S, D] of each
window pairwise (rotate_every_two) by 2-D tables folded to constants [1, S, D] (repeat_interleave'd cos / sin
of the window's row and column frequencies), which broadcast as [1, 1, S, D] (hold-out 28 sam3_vit: RoPE 0/4
before: the rule asked for rank-4 tables). Numerics against the original in ORT at every target."""

from __future__ import annotations


import numpy as np
import pytest

B, H, W, D = 3, 2, 2, 16  # 3 windows of 2 x 2 tokens, 2 heads of 16
S = W * W
BIG = np.iinfo(np.int64).max


def _tables(lead=1, paired=True):
    """[lead, S, D]: cos / sin of f [S, D/2] = (row * inv, column * inv), each column repeated twice."""
    inv = 1.0 / 100 ** (np.arange(0, D // 2, 2, dtype=np.float64) / (D // 2))
    rows, cols = np.divmod(np.arange(S), W)
    f = np.concatenate([np.outer(rows, inv), np.outer(cols, inv)], -1)  # [S, D/2]
    emb = np.repeat(f, 2, -1) if paired else np.concatenate([f, f * 1.5], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    scale = np.linspace(1.0, 0.5, lead)[:, None, None]  # lead 2: another table per head
    return (cos[None] * scale).astype(np.float32), (sin[None] * scale).astype(np.float32)


def _model(h, cos, sin):
    """y = x * cos + flatten(stack(-x[..., 1::2], x[..., ::2], -1)) * sin for q and k [B, H, S, D]."""
    n = h.node
    nodes = []
    for x in ("q", "k"):
        nodes += [n("Mul", [x, "cos"], [f"{x}c"]),
                  n("Slice", [x, "s_0", "s_end", "s_ax", "s_2"], [f"{x}e"]),
                  n("Slice", [x, "s_1", "s_end", "s_ax", "s_2"], [f"{x}o"]),
                  n("Neg", [f"{x}o"], [f"{x}n"]),
                  n("Unsqueeze", [f"{x}n", "s_ax"], [f"{x}nu"]), n("Unsqueeze", [f"{x}e", "s_ax"], [f"{x}eu"]),
                  n("Concat", [f"{x}nu", f"{x}eu"], [f"{x}st"], axis=-1),
                  n("Reshape", [f"{x}st", "shape"], [f"{x}r"]),
                  n("Mul", [f"{x}r", "sin"], [f"{x}s"]), n("Add", [f"{x}c", f"{x}s"], [f"{x}_rot"])]
    shape = [B, H, S, D]
    inits = {"cos": cos, "sin": sin, "s_0": np.array([0], np.int64), "s_1": np.array([1], np.int64),
             "s_2": np.array([2], np.int64), "s_end": np.array([BIG], np.int64), "s_ax": np.array([-1], np.int64),
             "shape": np.array(shape, np.int64)}
    return h.make_model(nodes, [h.vi("q", shape), h.vi("k", shape)],
                        [h.vi("q_rot", shape), h.vi("k_rot", shape)], inits)


def _feeds(h):
    return {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k")}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rank3_tables_fuse(h, target):
    model = _model(h, *_tables())
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and not {"Neg", "Concat", "Slice", "Mul"} & set(ops), ops
    assert h.fired(out)["rotary-interleaved-paired-tables"], h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_rank4_tables_still_fuse(h):
    """The [1, 1, S, D] form the rule took before: unchanged."""
    cos, sin = _tables()
    model = _model(h, cos[None], sin[None])
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_tables_per_head_stay(h):
    """[H, S, D] tables broadcast over the heads axis with another rotation per head: not rows of positions."""
    model = _model(h, *_tables(lead=H))
    h.stays(model, "rotary-interleaved-paired-tables", "rows of positions", _feeds(h), op="RotaryEmbedding")


def test_unpaired_columns_stay(h):
    """Columns not repeated in pairs: not the tables of an interleaved rotation."""
    model = _model(h, *_tables(paired=False))
    h.stays(model, "rotary-interleaved-paired-tables", "not provably equal|not one constant", _feeds(h), op="RotaryEmbedding")
