"""rules/norm/layer_norm.yaml with the variance as torch's ``var`` decomposition writes it (xLSTM's per-head
LayerNorm, ``x - x.mean(-1, keepdim=True)`` times ``rsqrt(x.var(-1, keepdim=True, unbiased=False) + eps)``):
the variance's own mean reduces axis 3 where the centering mean says -1, and the variance comes with
keepdims=0 and a Reshape back. cse (axes compared by rank) and reduce-keepdims make it the rule's form; the
rule takes a variance over the last axis however spelled. Numerics checked in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

TARGETS = ["ort", "onnx", "trt"]
H, DH = 2, 16


def _graph(h, *, var_axis=3, dynamic=True):
    """x [batch, seq, H, DH] -> per-head LayerNorm (no affine) -> [batch, seq, H * DH] * w."""
    n = h.node
    nodes = [n("ReduceMean", ["x", "last"], ["m1"], keepdims=1), n("Sub", ["x", "m1"], ["d1"]),
             n("ReduceMean", ["x", "vax"], ["m2"], keepdims=1), n("Sub", ["x", "m2"], ["d2"]),
             n("Mul", ["d2", "d2"], ["sq"]), n("ReduceMean", ["sq", "vax"], ["v0"], keepdims=0)]
    if dynamic:   # the kept-axes target from x's shape, as a dynamic-shape export computes it
        nodes += [n("Shape", ["x"], ["s3"], end=3), n("Concat", ["s3", "one"], ["t"], axis=0)]
    nodes += [n("Reshape", ["v0", "t"], ["v"]), n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
              n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["d1", "inv"], ["nrm"]),
              n("Shape", ["x"], ["s2"], end=2), n("Concat", ["s2", "minus1"], ["t2"], axis=0),
              n("Reshape", ["nrm", "t2"], ["flat"]), n("Mul", ["flat", "w"], ["y"])]
    inits = {"last": np.array([-1], np.int64), "vax": np.array([var_axis], np.int64),
             "one": np.array([1], np.int64), "minus1": np.array([-1], np.int64),
             "eps": np.array(1e-6, np.float32), "w": (1 + 0.1 * h.rng.standard_normal(H * DH)).astype(np.float32)}
    shape = ["batch", "seq", H, DH] if dynamic else [2, 5, H, DH]
    if not dynamic:
        inits["t"] = np.array([2, 5, H, 1], np.int64)
    out = ["batch", "seq", H * DH] if dynamic else [2, 5, H * DH]
    return h.make_model(nodes, [h.vi("x", shape)], [h.vi("y", out)], inits)


def _feeds(h):
    return {"x": (h.rng.standard_normal((2, 5, H, DH)) * 2 + 0.5).astype(np.float32)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dynamic", [True, False])
def test_var_decomposition_fuses(h, target, dynamic):
    model = _graph(h, dynamic=dynamic)
    out = h.fuse(model, target, level=2)
    assert h.ops(out)["LayerNormalization"] == 1, h.ops(out)
    assert not {"ReduceMean", "Sqrt", "Reciprocal"} & set(h.ops(out)), h.ops(out)
    assert h.fired(out)["layer-norm-no-scale"] == 1, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_variance_over_another_axis_stays(h):
    """One mean over the last axis, the variance of its deviations over axis 2: not a LayerNorm (the check
    accepts the variance's axes spelled -1 or 3 only)."""
    n = h.node
    nodes = [n("ReduceMean", ["x", "last"], ["m"], keepdims=1), n("Sub", ["x", "m"], ["d"]),
             n("Mul", ["d", "d"], ["sq"]), n("ReduceMean", ["sq", "two"], ["v"], keepdims=1),
             n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Reciprocal", ["sd"], ["inv"]),
             n("Mul", ["d", "inv"], ["y"])]
    inits = {"last": np.array([-1], np.int64), "two": np.array([2], np.int64), "eps": np.array(1e-6, np.float32)}
    shape = ["batch", "seq", H, DH]
    model = h.make_model(nodes, [h.vi("x", shape)], [h.vi("y", shape)], inits)
    h.stays(model, "layer-norm-no-scale", "mean and variance must reduce the same axes", _feeds(h),
            op="LayerNormalization")
