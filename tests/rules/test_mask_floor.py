"""keep-masked-rows (rules/attention/lower.yaml) maps mask entries below F = ``mask_floor(dtype)`` to
m / 2 + F / 2 before ORT's Attention-23 reads them: the float16 F is precision.FP16_MASK_FLOOR, one constant
shared with the precision pass's mask Casts, and every row matches the original, fully masked ones
included (their mean of V, not Attention-23's zeros)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from onnx_fuse.passes import precision

F16 = TensorProto.FLOAT16
B, H, S, D = 2, 2, 4, 8


def _attention(h, elem):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
             n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    np_t = np.float16 if elem == F16 else np.float32
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [h.vi("mask", [B, 1, S, S], elem)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], elem)], {"scale": np.array(D ** -0.5, np_t)})


def _floor_constants(model: onnx.ModelProto) -> list[float]:
    """F of every m / 2 + F / 2 keep-masked-rows emitted (twice its Add's constant)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [2 * float(inits[i].reshape(-1)[0]) for nd in model.graph.node if nd.op_type == "Add"
            for i in nd.input if i in inits]


def _feeds(np_t):
    r = np.random.default_rng(5)
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np_t) for x in ("q", "k", "v")}
    mask = np.zeros((B, 1, S, S), np_t)
    mask[1] = np.finfo(np_t).min            # batch 1: every key masked (the mean of V)
    mask[0, :, :, -1] = np.finfo(np_t).min   # batch 0: the last key masked
    return {**feeds, "mask": mask}


@pytest.mark.parametrize("elem,np_t,want", [(F16, np.float16, precision.FP16_MASK_FLOOR),
                                            (TensorProto.FLOAT, np.float32, -1e30)])
def test_keep_masked_rows_floor_is_the_shared_constant(h, elem, np_t, want):
    model = _attention(h, elem)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["Attention"] == 1, h.ops(out)
    assert _floor_constants(out) == [float(np_t(want))]
    feeds = _feeds(np_t)
    ref, got = h.run(model, feeds)[0].astype(np.float64), h.run(out, feeds)[0].astype(np.float64)
    tol = 2e-3 if elem == F16 else 1e-5
    np.testing.assert_allclose(got[0], ref[0], atol=tol, rtol=tol)
    # batch 1: s + finfo.min is finfo.min for every key in the model's own arithmetic (float16's
    # ulp there is 32; ORT's CPU provider widens the original's float16 Add and Softmax to float32,
    # so it is not the oracle here): uniform weights, the mean of V
    mean_v = np.broadcast_to(feeds["v"][1].astype(np.float64).mean(1, keepdims=True), got[1].shape)
    np.testing.assert_allclose(got[1], mean_v, atol=tol, rtol=tol)


def test_float16_floor_follows_precision_constant(h, monkeypatch):
    """The rule reads the constant, it does not repeat it: moving the floor moves the rule's."""
    monkeypatch.setattr(precision, "FP16_MASK_FLOOR", -50016.0)   # a float16 value
    out = h.fuse(_attention(h, F16), "onnx")
    assert _floor_constants(out) == [-50016.0]
