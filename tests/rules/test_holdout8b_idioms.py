"""Hold-out sweep 8B (TensorFlow / Keras via tf2onnx, JAX via jax2onnx; tools/export_tf.py): the
exporters' LayerNorm idioms (rules/norm/layer_norm_moments.yaml). Graphs are built here with
onnx.helper as the exporters write them (no TensorFlow needed); numerics checked in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

TARGETS = ["ort", "onnx", "trt"]
H = 16


def _tf_layer_norm(h, *, shift="neg", pool=True, opset=17, gamma_shape=(1, 1, H), bias=True,
                   mean_out=False, axis=-1, xshape=("batch", "seq", H)):
    """Keras 3 LayerNormalization through tf2onnx: mean / variance as GlobalAveragePool (or
    ReduceMean), s = rsqrt(var + eps) * g, y = x * s + shift. shift "neg": Neg(mean) * s + b
    (tf2onnx's optimizer), "sub": b - mean * s (tf.nn.batch_normalization)."""
    n = h.node
    inits = {"eps": np.array(1e-6, np.float32),
             "g": (1 + 0.2 * h.rng.standard_normal(gamma_shape)).astype(np.float32),
             "b": (0.1 * h.rng.standard_normal((1, 1, H))).astype(np.float32)}

    def mean(src, dst):
        if pool:
            return [n("GlobalAveragePool", [src], [dst])]
        if opset >= 18:
            inits["axes"] = np.array([axis], np.int64)
            return [n("ReduceMean", [src, "axes"], [dst], keepdims=1)]
        return [n("ReduceMean", [src], [dst], axes=[axis], keepdims=1)]

    nodes = mean("x", "m") + [n("Sub", ["x", "m"], ["d"]), n("Mul", ["d", "d"], ["sq"])] + mean("sq", "v") + [
        n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Reciprocal", ["sd"], ["inv"]),
        n("Mul", ["inv", "g"], ["s"]), n("Mul", ["x", "s"], ["xs"])]
    if shift == "neg":
        nodes += [n("Neg", ["m"], ["nm"]), n("Mul", ["nm", "s"], ["ms"])]
        nodes += [n("Add", ["ms", "b"], ["c"]), n("Add", ["xs", "c"], ["y"])] if bias else [
            n("Add", ["xs", "ms"], ["y"])]
    else:
        nodes += [n("Mul", ["m", "s"], ["ms"])]
        nodes += [n("Sub", ["b", "ms"], ["c"]), n("Add", ["xs", "c"], ["y"])] if bias else [
            n("Sub", ["xs", "ms"], ["y"])]
    outputs = [h.vi("y", list(xshape))] + ([h.vi("m", None)] if mean_out else [])
    return h.make_model(nodes, [h.vi("x", list(xshape))], outputs, inits, opset=opset)


def _feeds(h, shape=(2, 5, H)):
    return {"x": (h.rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift,pool,opset,rule", [
    ("neg", True, 17, "layer-norm-tf-neg-shift"),    # bert / gpt / vit exports (tf2onnx 1.17, opset 17)
    ("neg", False, 18, "layer-norm-tf-neg-shift"),   # ReduceMean's axes as an input
    ("sub", False, 17, "layer-norm-tf-sub-shift"),
    ("sub", True, 23, "layer-norm-tf-sub-shift"),
])
def test_tf_moments_layer_norm(h, target, shift, pool, opset, rule):
    model = _tf_layer_norm(h, shift=shift, pool=pool, opset=opset)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    assert h.fired(out) == {rule: 1}, h.fired(out)
    # LayerNormalization is opset 17: the model keeps its own opset (no upgrade for the pool)
    assert next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx")) == opset
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("shift,rule", [("neg", "layer-norm-tf-no-bias-neg"), ("sub", "layer-norm-tf-no-bias")])
def test_tf_moments_layer_norm_without_beta(h, shift, rule):
    """Keras LayerNormalization(center=False): the shift is -mean * s alone."""
    model = _tf_layer_norm(h, shift=shift, bias=False)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    assert h.fired(out) == {rule: 1}, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_tf_layer_norm_mean_read_elsewhere_stays(h):
    """The mean is also a graph output: the moments chain cannot go, nothing is fused, values hold."""
    model = _tf_layer_norm(h, mean_out=True)
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_tf_layer_norm_refuses_per_row_gamma(h):
    """A gamma [2, 1, H] (one per batch row) broadcasts over the batch: not LayerNorm's [H]."""
    model = _tf_layer_norm(h, gamma_shape=(2, 1, H), pool=False)
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    assert any("gamma must be [.., 1, H]" in r for r in h.reasons(model, "onnx", "layer-norm-tf-neg-shift"))
    h.assert_close(model, out, _feeds(h))


def test_tf_layer_norm_refuses_other_axis(h):
    """Moments over the sequence axis (ReduceMean axes=[1]) normalize another axis."""
    model = _tf_layer_norm(h, pool=False, axis=1)
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_tf_layer_norm_refuses_rank4_pool(h):
    """On a rank-4 x the pool averages the last two axes: that chain is no LayerNorm over H."""
    model = _tf_layer_norm(h, xshape=(2, 3, 4, H), gamma_shape=(1, 1, 1, H))
    out = h.fuse(model, "onnx", level=2)
    assert "LayerNormalization" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, (2, 3, 4, H)))


def _jax_layer_norm(h, *, clamp=True):
    """jax2onnx's LayerNorm: var = max(E[x^2] - mean^2, 0); (x - mean) / sqrt(var + eps) * g + b."""
    n = h.node
    nodes = [n("ReduceMean", ["x"], ["m"], axes=[2], keepdims=1), n("Sub", ["x", "m"], ["d"]),
             n("Mul", ["x", "x"], ["x2"]), n("ReduceMean", ["x2"], ["e2"], axes=[2], keepdims=1),
             n("Mul", ["m", "m"], ["m2"]), n("Sub", ["e2", "m2"], ["vr"])]
    nodes += [n("Max", ["vr", "zero"], ["v"])] if clamp else [n("Identity", ["vr"], ["v"])]
    nodes += [n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["d", "sd"], ["nrm"]),
              n("Mul", ["nrm", "g"], ["gy"]), n("Add", ["gy", "b"], ["y"])]
    inits = {"zero": np.array(0.0, np.float32), "eps": np.array(1e-6, np.float32),
             "g": (1 + 0.2 * h.rng.standard_normal(H)).astype(np.float32),
             "b": (0.1 * h.rng.standard_normal(H)).astype(np.float32)}
    return h.make_model(nodes, [h.vi("x", ["batch", "seq", H])], [h.vi("y", ["batch", "seq", H])], inits,
                        opset=17)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("clamp", [True, False])
def test_jax_second_moment_layer_norm(h, target, clamp):
    model = _jax_layer_norm(h, clamp=clamp)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    assert h.fired(out) == {"layer-norm-second-moment": 1}, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def _tf_rms_norm(h, *, gamma_shape=(H,), opset=17, inv_read_elsewhere=False):
    """keras-hub's RMSNorm through tf2onnx: mean(x^2) as GlobalAveragePool, the scale (Gemma's 1 + w,
    one constant) folded into the inverse: y = x * (1 / sqrt(mean + eps) * g)."""
    n = h.node
    nodes = [n("Mul", ["x", "x"], ["sq"]), n("GlobalAveragePool", ["sq"], ["ms"]), n("Add", ["ms", "eps"], ["ve"]),
             n("Sqrt", ["ve"], ["sd"]), n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["inv", "g"], ["s"]),
             n("Mul", ["x", "s"], ["y"])]
    inits = {"eps": np.array(1e-6, np.float32), "g": (1 + 0.2 * h.rng.standard_normal(gamma_shape)).astype(np.float32)}
    outputs = [h.vi("y", ["batch", "seq", H])] + ([h.vi("inv", None)] if inv_read_elsewhere else [])
    return h.make_model(nodes, [h.vi("x", ["batch", "seq", H])], outputs, inits, opset=opset)


@pytest.mark.parametrize("target", TARGETS)
def test_tf_rms_norm_scaled_inverse(h, target):
    model = _tf_rms_norm(h)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out) == {"rms-norm-tf-scaled-inverse": 1}, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_tf_rms_norm_inverse_read_elsewhere_stays(h):
    model = _tf_rms_norm(h, inv_read_elsewhere=True)
    out = h.fuse(model, "onnx", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_tf_rms_norm_refuses_gamma_over_sequence(h):
    """A scale [1, 5, 1] varies along the sequence: not a per-channel RMSNorm weight."""
    model = _tf_rms_norm(h, gamma_shape=(1, 5, 1))
    out = h.fuse(model, "onnx", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))
