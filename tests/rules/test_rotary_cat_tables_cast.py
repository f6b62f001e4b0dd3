"""rules/rope/rotary_cat_tables.yaml: M-RoPE's tables concatenated after cos / sin, in half precision.

Qwen2-VL's text model (hold-out 16's qwen2_vl_text_mrope, --dtype float16) computes cos / sin of its
three position streams in float32, picks each stream's section and concatenates, and casts the
full-width table to the model's dtype: Unsqueeze(Cast(Concat(c, c))). The rule took only
Unsqueeze(Concat(c, c)) with c already in x's dtype, so the float16 export kept its rotation unfused
(rope 0 of 4). Cast(Concat(c, c)) = Concat(Cast(c), Cast(c)) exactly, so RotaryEmbedding takes Cast(c).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 16


def _model(h, x_type, table_type, cast_to=None, computed=False):
    """x [B,H,S,D] rotated by concat(c, c) / concat(s, s), c / s [B,S,D/2] inputs of table_type
    (cast to cast_to after the Concat when given); computed: c / s are Cos / Sin of one input 'a'."""
    n = h.node
    nodes = [n("Cos", ["a"], ["c"]), n("Sin", ["a"], ["s"])] if computed else []
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
    tables = ([h.vi("a", [B, S, D // 2], table_type)] if computed else
              [h.vi("c", [B, S, D // 2], table_type), h.vi("s", [B, S, D // 2], table_type)])
    inputs = [h.vi("x", [B, H, S, D], x_type), *tables]
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D], x_type)], inits)


def _feeds(h, x_np, table_np):
    ang = h.rng.uniform(0, 6, (B, S, D // 2))
    return {"x": h.rng.standard_normal((B, H, S, D)).astype(x_np),
            "c": np.cos(ang).astype(table_np), "s": np.sin(ang).astype(table_np)}


@pytest.mark.parametrize("computed", [False, True], ids=["input_tables", "computed_tables"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_float16_tables_cast_after_the_concat(h, target, computed):
    model = _model(h, TensorProto.FLOAT16, TensorProto.FLOAT, cast_to=TensorProto.FLOAT16, computed=computed)
    fused = h.fuse(model, target, level=3)
    counts = h.ops(fused)
    assert sum(v for k, v in counts.items() if k.endswith("RotaryEmbedding")) == 1, counts
    assert counts["Neg"] == 0
    # this rule's lean caches (Cast(c)), not the general rotate-half rule's Slice(Cast(Concat(c, c))): the
    # Cast between the Concat and the half Slice keeps half-of-doubled-table from thinning the latter
    # (hold-out 39's float16 Qwen-Omni talkers kept 2 Slices + 2 Concats until the priorities said so)
    assert counts.get("Slice", 0) == 0 and counts.get("Concat", 0) == 0, counts
    feeds = _feeds(h, np.float16, np.float32)
    if computed:
        feeds = {"x": feeds["x"], "a": h.rng.uniform(0, 6, (B, S, D // 2)).astype(np.float32)}
    h.assert_close(model, fused, feeds, atol=2e-3, rtol=2e-3)


def test_float32_tables_still_fuse(h):
    model = _model(h, TensorProto.FLOAT, TensorProto.FLOAT)
    fused = h.fuse(model, "ort", level=3)
    assert sum(v for k, v in h.ops(fused).items() if k.endswith("RotaryEmbedding")) == 1
    h.assert_close(model, fused, _feeds(h, np.float32, np.float32))

