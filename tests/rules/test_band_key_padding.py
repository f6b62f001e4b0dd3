"""Key padding over a fixed pattern of keys (Moonshine Streaming's windows that look ahead), rebuilt.

Moonshine Streaming's encoder masks keys with a frame mask computed from its conv stem And-ed with a
per-layer window (left, right): query i sees keys i - left + 1 .. i + right - 1, through
transformers 5's index grids (GatherND, Max, Expand, Concat, And, Where). Key padding over a causal
band was the only form proven; with the query length static, the proof now takes any fixed
pattern (rewrite/_band_padding.py, decided on the values) and the lowerings rebuild the bias as
Where(pattern & km[:, None, None, :], 0, fill) from a constant: the glue dies at ort / onnx / trt.
Rows of different lengths, length 0 included (a fully padded row averages every key, as the export).
A near miss keeps the bias: two fills (window and padding).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_key_padding_computed import GLUE, HID, LENGTHS, MIN, S, _feeds, _scores_core, _vmap

H, D = 2, 8


def _band(left: int, right: int) -> np.ndarray:
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    return ((j <= i) & (j > i - left)) | ((j > i) & (j < i + right))


def _model(h, left: int = 3, right: int = 3, two_fills: bool = False):
    """x [B, S, HID], km = frames whose features are not all zero,
    the mask km[b, j] And the window (left, right) as Where(keep, 0, finfo.min); ``two_fills``: keys
    outside the window at -1e4 instead."""
    n = h.node
    nodes = [n("Abs", ["x"], ["xa"]), n("ReduceMax", ["xa", "axm1"], ["xm"], keepdims=0),
             n("Greater", ["xm", "zero"], ["km"])]
    nodes += _vmap(n, "km")
    if two_fills:
        nodes[-1] = n("Where", ["alltrue", "fmin", "fwin"], ["outside"])
        nodes.append(n("Where", ["keep2", "zero", "outside"], ["mask"]))
    for c in "qkv":
        nodes += [n("MatMul", ["x", f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"]),
                  n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]), n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    nodes += _scores_core(n)
    rng = np.random.default_rng(1)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
             "axm1": np.array([-1], np.int64), "alltrue": _band(left, right)[None, None],
             "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
             "fwin": np.array(-1e4, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    for c in "qkv":
        inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
        inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
    return h.make_model(nodes, [h.vi("x", ["batch", S, HID])], [h.vi("y", ["batch", S, HID])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("window", [(3, 3), (4, 1), (2, 5)])
def test_windowed_key_padding_is_rebuilt(h, target, window):
    """A window looking ahead (3, 3) / (2, 5), or causal (4, 1) of 4 keys: the index grids and the
    GatherND die; one Where builds the bias from km and the pattern (a constant)."""
    model = _model(h, *window)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    attn = {"ort": "com.microsoft::Attention", "onnx": "Attention", "trt": "Attention"}[target]   # ort: packed
    assert ops[attn] == 1 and ops["Softmax"] == 0, ops
    assert not GLUE - {"And"} & set(ops) and ops["GatherND"] == 0 and ops["Range"] == 0, ops
    assert ops["Where"] == 1 and ops["And"] == 1, ops
    h.assert_close(model, fused, _feeds(model))


def test_two_fills_keep_the_bias(h):
    """Keys outside the window at -1e4, padded keys at finfo.min: no one fill, the bias stays."""
    model = _model(h, two_fills=True)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 1 and ops["GatherND"] == 1, ops
    h.assert_close(model, fused, _feeds(model))


def test_a_padded_row_averages_every_key(h):
    """LENGTHS holds a row of length 0 (every key padded): the rebuilt fill keeps the export's
    uniform average over every key, not over the window."""
    assert 0 in LENGTHS
    model = _model(h, 2, 2)
    fused = h.fuse(model, "onnx")
    assert h.ops(fused)["GatherND"] == 0
    h.assert_close(model, fused, _feeds(model))
