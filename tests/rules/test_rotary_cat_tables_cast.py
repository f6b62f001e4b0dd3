"""M-RoPE's tables concatenated after cos / sin, in half precision, through the general rotate-half rule.

Qwen2-VL's text model (hold-out 16's qwen2_vl_text_mrope, --dtype float16) computes cos / sin of its
three position streams in float32, picks each stream's section and concatenates, and casts the
full-width table to the model's dtype: Unsqueeze(Cast(Concat(c, c))). rotary-rotate-half-tables reads
the tables by value and writes their first halves as the caches; half-slice-below-cast
(rules/rope/half_slice_sink.yaml) moves that half Slice through the Cast (Slice(Cast(t)) = Cast(Slice(t))),
so it meets Concat(c, c) and the caches are Cast(c), as the retired single-spelling
rotary-rotate-half-cat-tables wrote them (rope39).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 16


def _model(h, x_type, table_type, cast_to=None, computed=False, scatter=None):
    """x [B,H,S,D] rotated by concat(c, c) / concat(s, s), c / s [B,S,D/2] inputs of table_type
    (cast to cast_to after the Concat when given); computed: c / s are Cos / Sin of one input 'a';
    scatter: (cos indices, sin indices) where batch row 1 of c / s is written over by ScatterND with
    Cos / Sin of a second input 'u' (Qwen3's interleaved M-RoPE writes its streams' columns so)."""
    n = h.node
    nodes = [n("Cos", ["a"], ["c"]), n("Sin", ["a"], ["s"])] if computed else []
    if scatter is not None:
        nodes = [n("Cos", ["a"], ["c0"]), n("Sin", ["a"], ["s0"]), n("Cos", ["u"], ["cu0"]), n("Sin", ["u"], ["su0"]),
                 n("ScatterND", ["c0", scatter[0], "cu0"], ["c"]), n("ScatterND", ["s0", scatter[1], "su0"], ["s"])]
    nodes += [n("Concat", ["c", "c"], ["cc"], axis=-1), n("Concat", ["s", "s"], ["sc"], axis=-1)]
    cos, sin = "cc", "sc"
    if cast_to is not None:
        nodes += [n("Cast", ["cc"], ["ccc"], to=cast_to), n("Cast", ["sc"], ["scc"], to=cast_to)]
        cos, sin = "ccc", "scc"
    nodes += [n("Unsqueeze", [cos, "ax1"], ["cu"]), n("Unsqueeze", [sin, "ax1"], ["su"]),
              n("Mul", ["x", "cu"], ["m1"]),
              n("Slice", ["x", "zero", "half", "ax3"], ["x1"]), n("Slice", ["x", "half", "big", "ax3"], ["x2"]),
              n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
              n("Mul", ["r", "su"], ["m2"]), n("Add", ["m1", "m2"], ["y"])]
    inits = {"ax1": np.array([1], np.int64), "zero": np.array([0], np.int64),
             "half": np.array([D // 2], np.int64), "big": np.array([2 ** 62], np.int64),
             "ax3": np.array([3], np.int64)}
    inits.update({"row1": np.array([[1]], np.int64), "row0": np.array([[0]], np.int64)})
    tables = ([h.vi("a", [B, S, D // 2], table_type)] if computed else
              [h.vi("a", [B, S, D // 2], table_type), h.vi("u", [1, S, D // 2], table_type)] if scatter else
              [h.vi("c", [B, S, D // 2], table_type), h.vi("s", [B, S, D // 2], table_type)])
    inputs = [h.vi("x", [B, H, S, D], x_type), *tables]
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D], x_type)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_float16_tables_cast_after_the_concat(h, target):
    model = _model(h, TensorProto.FLOAT16, TensorProto.FLOAT, cast_to=TensorProto.FLOAT16, computed=True)
    fused = h.fuse(model, target, level=3)
    counts = h.ops(fused)
    assert sum(v for k, v in counts.items() if k.endswith("RotaryEmbedding")) == 1, counts
    assert counts["Neg"] == 0
    assert h.fired(fused)["rotary-rotate-half-tables"] >= 1, h.fired(fused)
    # lean caches Cast(Cos(a)) / Cast(Sin(a)): the half Slice went through the Cast and met Concat(c, c)
    # (without half-slice-below-cast, hold-out 39's float16 Qwen-Omni talkers kept 2 Slices + 2 Concats)
    assert counts.get("Slice", 0) == 0 and counts.get("Concat", 0) == 0, counts
    assert counts["Cast"] == 2 and counts["Cos"] == 1 and counts["Sin"] == 1, counts
    feeds = {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float16),
             "a": h.rng.uniform(0, 6, (B, S, D // 2)).astype(np.float32)}
    h.assert_close(model, fused, feeds, atol=2e-3, rtol=2e-3)


def test_half_slice_below_cast_needs_equal_halves(h):
    """The sink moves only the first half of a table whose halves are provably equal: concat(c, s)
    (halves differ) keeps its Slice above the Cast, and the rotation stays plain ops."""
    model = _model(h, TensorProto.FLOAT16, TensorProto.FLOAT, cast_to=TensorProto.FLOAT16, computed=True)
    for n in model.graph.node:
        if n.output[0] == "cc":
            n.input[1] = "s"
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert any("halves are not provably equal" in r for r in reasons), reasons
    fused = h.fuse(model, "ort", level=3)
    assert "RotaryEmbedding" not in h.ops(fused) and "half-slice-below-cast" not in h.fired(fused)
    feeds = {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float16),
             "a": h.rng.uniform(0, 6, (B, S, D // 2)).astype(np.float32)}
    h.assert_close(model, fused, feeds, atol=2e-3, rtol=2e-3)


def test_float32_tables_still_fuse(h):
    model = _model(h, TensorProto.FLOAT, TensorProto.FLOAT, computed=True)
    fused = h.fuse(model, "ort", level=3)
    assert sum(v for k, v in h.ops(fused).items() if k.endswith("RotaryEmbedding")) == 1
    assert "Concat" not in h.ops(fused) and "Slice" not in h.ops(fused), h.ops(fused)
    h.assert_close(model, fused, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32),
                                  "a": h.rng.uniform(0, 6, (B, S, D // 2)).astype(np.float32)})


def test_input_tables_are_not_a_proven_rotation(h):
    """c / s fed as graph inputs: nothing proves them cos and sin of one angle (rotation_pair), so the
    general rule leaves them; the retired rotary-rotate-half-cat-tables took any Concat(c, c). No
    export writes its tables as inputs (hold-outs 16, 34, 35, 39: all computed in the graph)."""
    model = _model(h, TensorProto.FLOAT, TensorProto.FLOAT)
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert any("not a (scaled) rotation" in r for r in reasons), reasons



def _scatter_feeds(h):
    return {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float16),
            "a": h.rng.uniform(0, 6, (B, S, D // 2)).astype(np.float32),
            "u": h.rng.uniform(0, 6, (1, S, D // 2)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_tables_written_by_scatternd_at_one_set_of_indices(h, target):
    """Qwen3-Omni's text model (hold-out 35, TorchScript): cos and sin rows written over by ScatterND
    at the same indices, from Cos / Sin of one other angle: still a rotation (rotation_pair walks
    ScatterND), so the general rule fuses it (rope 0/4 there without the retired cat-tables rule)."""
    model = _model(h, TensorProto.FLOAT16, TensorProto.FLOAT, cast_to=TensorProto.FLOAT16, scatter=("row1", "row1"))
    fused = h.fuse(model, target, level=3)
    counts = h.ops(fused)
    assert sum(v for k, v in counts.items() if k.endswith("RotaryEmbedding")) == 1, counts
    assert counts["Neg"] == 0 and counts.get("Concat", 0) == 0, counts
    h.assert_close(model, fused, _scatter_feeds(h), atol=2e-3, rtol=2e-3)


def test_tables_written_at_different_indices_are_refused(h):
    """cos written at batch row 1, sin at row 0: row 0 pairs Cos(a) with Sin(u), not a rotation."""
    model = _model(h, TensorProto.FLOAT16, TensorProto.FLOAT, cast_to=TensorProto.FLOAT16, scatter=("row1", "row0"))
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert any("not a (scaled) rotation" in r for r in reasons), reasons
    fused = h.fuse(model, "ort", level=3)
    assert "RotaryEmbedding" not in h.ops(fused), h.ops(fused)
    h.assert_close(model, fused, _scatter_feeds(h), atol=2e-3, rtol=2e-3)
