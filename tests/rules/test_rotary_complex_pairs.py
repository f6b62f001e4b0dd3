"""Interleaved rotary as torch.export writes view_as_complex(x.reshape(*x.shape[:-1], -1, 2)) * freqs_ci with a
constant freqs_ci (Llama 4's vision tower, transformers 5.25, hold-out 33): x viewed as pairs [B, S, H, D/2, 2],
the real and imaginary parts the [..., 0:1] / [..., 1:2] Slices of the last axis, tables [1, S, 1, D/2, 1], the
two products concatenated back on that axis and viewed as [B, S, H, D]:

    re = x0 * cos - x1 * sin;  im = x0 * sin + x1 * cos;  y = concat([re, im], -1).view(B, S, H, D)

It is RotaryEmbedding-23 interleaved with cos / sin [1, S, D/2] as caches. Compared with the original in ONNX
Runtime; tables that are no rotation, and a swap of the two parts, are refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, S, H, D = 2, 5, 3, 8


def _pairs(h, *, tables=None, swap=False, flat_in=True, out4=True):
    n = h.node
    ang = np.arange(S)[:, None] * (1.0 / 100 ** (np.arange(D // 2) / (D // 2)))[None, :]
    cos, sin = tables if tables is not None else (np.cos(ang), np.sin(ang))
    shape5 = lambda t: t.astype(np.float32).reshape(1, S, 1, D // 2, 1)  # noqa: E731
    first, second = (["zero", "one"], ["one", "two"])[::-1 if swap else 1]  # x[..., 0:1], x[..., 1:2]
    nodes = [n("Reshape", ["x", "s5"], ["x5"]),
             n("Slice", ["x5", *first, "last"], ["xe"]), n("Slice", ["x5", *second, "last"], ["xo"]),
             n("Mul", ["xe", "cos"], ["a"]), n("Mul", ["xo", "sin"], ["b"]), n("Sub", ["a", "b"], ["re"]),
             n("Mul", ["xe", "sin"], ["d"]), n("Mul", ["cos", "xo"], ["e"]), n("Add", ["d", "e"], ["im"]),
             n("Concat", ["re", "im"], ["st"], axis=-1), n("Reshape", ["st", "s4"], ["y"])]
    inits = {"s5": np.array([B, S, H, D // 2, 2], np.int64), "zero": np.array([0], np.int64),
             "one": np.array([1], np.int64), "two": np.array([2], np.int64), "last": np.array([-1], np.int64),
             "s4": np.array([B, S, H, D] if out4 else [B, S, H * D], np.int64),
             "cos": shape5(cos), "sin": shape5(sin)}
    x_shape = [B, S, H * D] if flat_in else [B, S, H, D]
    return h.make_model(nodes, [h.vi("x", x_shape)], [h.vi("y", [B, S, H, D] if out4 else [B, S, H * D])], inits)


def _feeds(h, model):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"x": h.rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("flat_in,out4", [(True, True), (False, True), (True, False)])
def test_pair_view_rotary_becomes_rotary_embedding(h, target, flat_in, out4):
    model = _pairs(h, flat_in=flat_in, out4=out4)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Sub" not in ops and "Slice" not in ops, ops
    h.assert_close(model, out, _feeds(h, model))


def test_tables_that_are_no_rotation_are_refused(h):
    r = np.random.default_rng(1)
    model = _pairs(h, tables=(r.standard_normal((S, D // 2)), r.standard_normal((S, D // 2))))
    rs = h.reasons(model, "ort", "rotary-interleaved-complex")
    assert rs and not any(r.startswith("matched") for r in rs), rs
    assert any("rotation" in r for r in rs), rs
    out = h.fuse(model, "ort")
    assert "RotaryEmbedding" not in h.ops(out)
    h.assert_close(model, out, _feeds(h, model))


def test_swapped_parts_are_refused(h):
    """x1 taken as the real part is another map (y = conj rotation of the swapped pair): not this rule's."""
    model = _pairs(h, swap=True)
    rs = h.reasons(model, "ort", "rotary-interleaved-complex")
    assert rs and not any(r.startswith("matched") for r in rs), rs
    out = h.fuse(model, "ort")
    assert "RotaryEmbedding" not in h.ops(out)
    h.assert_close(model, out, _feeds(h, model))
