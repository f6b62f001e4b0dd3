"""rules/rope/rotary_interleaved_paired.yaml over a table viewed as rows: EfficientLoFTR (hold-out 40) rotates q / k
viewed [B, S, 1, hidden] pairwise (rotate_every_two) across the whole hidden width by a constant 2-D grid table
[1, h, w, hidden] (repeat_interleave'd cos / sin), expanded to the batch and viewed as [B, h*w, hidden] rows, then
Unsqueeze'd over the one head. A Reshape that keeps the last dim keeps each row's columns, so the pairs stay
provable (paired_columns; before, only the repeat's own Reshape was read and RoPE stayed 0). Numerics against the
original in ONNX Runtime at every target."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

B, GH, GW, D = 2, 2, 3, 16  # 2 images of a 2 x 3 grid, hidden 16 rotated whole (one head)
S = GH * GW
BIG = np.iinfo(np.int64).max


def _tables(paired=True):
    """[1, GH, GW, D]: cos / sin of f [GH, GW, D/2] = (row * inv, column * inv), each column repeated twice."""
    inv = 1.0 / 100 ** (np.arange(0, D // 2, 2, dtype=np.float64) / (D // 2))
    rows, cols = np.meshgrid(np.arange(GH), np.arange(GW), indexing="ij")
    f = np.concatenate([rows[..., None] * inv, cols[..., None] * inv], -1)  # [GH, GW, D/2]
    emb = np.repeat(f, 2, -1) if paired else np.concatenate([f, f * 1.5], -1)
    return np.cos(emb)[None].astype(np.float32), np.sin(emb)[None].astype(np.float32)


def _model(h, cos, sin):
    """Tables Unsqueeze(Reshape(Expand(t, [B, GH, GW, D]), [0, S, D]), 2); y = x * cos + rotate_every_two(x) * sin."""
    n = h.node
    nodes = [n("Shape", ["q"], ["bdim"], start=0, end=1), n("Concat", ["bdim", "grid"], ["tgt"], axis=0)]
    for t in ("cos", "sin"):
        nodes += [n("Expand", [f"{t}_t", "tgt"], [f"{t}_e"]), n("Reshape", [f"{t}_e", "rows"], [f"{t}_r"]),
                  n("Unsqueeze", [f"{t}_r", "head"], [t])]
    for x in ("q", "k"):
        nodes += [n("Mul", [x, "cos"], [f"{x}c"]),
                  n("Slice", [x, "s_0", "s_end", "s_ax", "s_2"], [f"{x}e"]),
                  n("Slice", [x, "s_1", "s_end", "s_ax", "s_2"], [f"{x}o"]),
                  n("Neg", [f"{x}o"], [f"{x}n"]),
                  n("Unsqueeze", [f"{x}n", "s_ax"], [f"{x}nu"]), n("Unsqueeze", [f"{x}e", "s_ax"], [f"{x}eu"]),
                  n("Concat", [f"{x}nu", f"{x}eu"], [f"{x}st"], axis=-1),
                  n("Reshape", [f"{x}st", "shape"], [f"{x}r"]),
                  n("Mul", [f"{x}r", "sin"], [f"{x}s"]), n("Add", [f"{x}c", f"{x}s"], [f"{x}_rot"])]
    shape = ["B", S, 1, D]
    inits = {"cos_t": cos, "sin_t": sin, "grid": np.array([GH, GW, D], np.int64),
             "rows": np.array([0, S, D], np.int64), "head": np.array([2], np.int64),
             "s_0": np.array([0], np.int64), "s_1": np.array([1], np.int64), "s_2": np.array([2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([-1], np.int64),
             "shape": np.array([0, S, 1, D], np.int64)}
    return h.make_model(nodes, [h.vi("q", shape), h.vi("k", shape)],
                        [h.vi("q_rot", shape), h.vi("k_rot", shape)], inits)


def _feeds(h):
    return {x: h.rng.standard_normal((B, S, 1, D)).astype(np.float32) for x in ("q", "k")}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_grid_rows_table_fuses(h, target):
    model = _model(h, *_tables())
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and not {"Neg", "Mul"} & set(ops), ops
    assert h.fired(out)["rotary-interleaved-paired-tables"], h.fired(out)
    rot = [nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding"]
    assert all(onnx.helper.get_attribute_value(a) == 1 for nd in rot for a in nd.attribute if a.name == "interleaved")
    h.assert_close(model, out, _feeds(h))


def test_grid_rows_unpaired_stay(h):
    """The same view of a table whose columns are not repeated in pairs: not an interleaved rotation's table."""
    model = _model(h, *_tables(paired=False))
    h.stays(model, "rotary-interleaved-paired-tables", "not provably equal", _feeds(h), op="RotaryEmbedding")
