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


# ---------------------------------------------------------------- Keras MultiHeadAttention via tf2onnx

S, N, D = 5, 4, 16
LARGE_NEG = -2.3726709583555947e38   # Keras' masked softmax fill in float32


def _keras_mha(h, *, fill=LARGE_NEG):
    """Keras' MultiHeadAttention core as tf2onnx writes it: the einsums "aecd,abcd->acbe" (scores) and
    "acbe,aecd->abcd" (output) as rank-5 Unsqueeze / Transpose views around [B*N, ., .] MatMuls with
    shape-read targets, the scale after the scores' view, ones_like(scores) & mask, and SelectV2 as
    Cast(c) * s + Cast(not c) * fill. q, k, v [B, S, N, D] -> [B, S, N*D]."""
    n = h.node
    inits = {"ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64), "ax3": np.array([3], np.int64),
             "ax4": np.array([4], np.int64), "ax12": np.array([1, 2], np.int64), "i01": np.array([0, 1], np.int64),
             "i4": np.array([4], np.int64), "m1": np.array([-1], np.int64), "c1": np.array([1], np.int64),
             "cD": np.array([D], np.int64), "cS": np.array([S], np.int64), "cND": np.array([N * D], np.int64),
             "scale": np.array(D ** -0.5, np.float32), "true": np.array(True), "fill": np.array(fill, np.float32)}

    def flat(x, dst, last):   # Reshape(x, [prod(shape(x)[0:2]), -1, last]) and that product
        return [n("Shape", [x], [f"{dst}_s"]), n("Gather", [f"{dst}_s", "i01"], [f"{dst}_g"]),
                n("ReduceProd", [f"{dst}_g"], [f"{dst}_p"], keepdims=1),
                n("Concat", [f"{dst}_p", "m1", last], [f"{dst}_t"], axis=0), n("Reshape", [x, f"{dst}_t"], [dst])]

    nodes = [n("Unsqueeze", ["q", "ax3"], ["qu"]), n("Transpose", ["qu"], ["qt"], perm=[0, 2, 1, 3, 4])]
    nodes += flat("qt", "q3", "cD")
    nodes += [n("Unsqueeze", ["k", "ax1"], ["ku"]), n("Transpose", ["ku"], ["kt5"], perm=[0, 3, 1, 2, 4])]
    nodes += flat("kt5", "k3", "cD")
    nodes += [n("Transpose", ["k3"], ["kT"], perm=[0, 2, 1]), n("MatMul", ["q3", "kT"], ["mm"]),
              n("Max", ["q3_g", "k3_g"], ["bs"]), n("Concat", ["bs", "cS", "cS", "c1"], ["ts"], axis=0),
              n("Reshape", ["mm", "ts"], ["s5"]), n("Squeeze", ["s5", "ax4"], ["s4"]),
              n("Mul", ["s4", "scale"], ["sc"]),
              # ones_like(scores) & mask[:, None, None, :]
              n("Shape", ["sc"], ["shp"]), n("Expand", ["true", "shp"], ["ones"]),
              n("Cast", ["attention_mask"], ["mb"], to=9), n("Unsqueeze", ["mb", "ax12"], ["m4"]),
              n("And", ["ones", "m4"], ["c"]),
              n("Cast", ["c"], ["cf"], to=1), n("Mul", ["cf", "sc"], ["a1"]), n("Not", ["c"], ["nc"]),
              n("Cast", ["nc"], ["nf"], to=1), n("Mul", ["fill", "nf"], ["f1"]), n("Add", ["a1", "f1"], ["sel"]),
              n("Softmax", ["sel"], ["p"], axis=-1),
              n("Unsqueeze", ["p", "ax3"], ["pu"]), n("Shape", ["pu"], ["pu_s"]), n("Gather", ["pu_s", "i4"], ["pu_l"])]
    nodes += flat("pu", "p3", "pu_l")
    nodes += [n("Unsqueeze", ["v", "ax2"], ["vu"]), n("Transpose", ["vu"], ["vt5"], perm=[0, 3, 2, 4, 1])]
    nodes += flat("vt5", "v3", "cS")
    nodes += [n("Transpose", ["v3"], ["vT"], perm=[0, 2, 1]), n("MatMul", ["p3", "vT"], ["o3"]),
              n("Max", ["p3_g", "v3_g"], ["bo"]), n("Concat", ["bo", "cS", "cD", "c1"], ["to"], axis=0),
              n("Reshape", ["o3", "to"], ["o5"]), n("Squeeze", ["o5", "ax4"], ["o4"]),
              n("Unsqueeze", ["o4", "ax1"], ["ou"]), n("Transpose", ["ou"], ["ot"], perm=[0, 3, 1, 2, 4]),
              n("Shape", ["q"], ["qs"], start=0, end=2), n("Concat", ["qs", "cND"], ["tout"], axis=0),
              n("Reshape", ["ot", "tout"], ["y"])]
    x4 = ["batch", S, N, D]
    inputs = [h.vi("q", x4), h.vi("k", x4), h.vi("v", x4), h.vi("attention_mask", ["batch", S], 7)]
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", S, N * D])], inits, opset=17)


def _mha_feeds(h):
    x = {k: h.rng.standard_normal((2, S, N, D)).astype(np.float32) for k in "qkv"}
    x["attention_mask"] = np.array([[1] * S, [1, 1, 1, 0, 0]], np.int64)   # the second row padded
    return x


@pytest.mark.parametrize("target,op", [("onnx", "Attention"), ("ort", "com.microsoft::MultiHeadAttention")])
def test_keras_mha_einsum_views_fuse(h, target, op):
    """tools/export_tf.py's bert_mha (Keras 3 MultiHeadAttention, tf2onnx 1.17): attention 0 -> 1 per
    layer once the pass drops the size-1 axes (passes/size_one_axes.py) and select-arith reads the
    select."""
    model = _keras_mha(h)
    out = h.fuse(model, target, level=3)
    assert h.ops(out)[op] == 1, h.ops(out)
    assert "Softmax" not in h.ops(out) and "Squeeze" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _mha_feeds(h), valid=_mha_feeds(h)["attention_mask"])


def test_select_arith_refuses_infinite_fill(h):
    """-inf * 0 is NaN where the condition holds: with an infinite fill the arithmetic is no select."""
    model = _keras_mha(h, fill=-np.inf)
    assert any("one finite number" in r for r in h.reasons(model, "onnx", "select-arith"))


def _keras_hub_rope(h):
    """keras-hub's RotaryEmbedding through tf2onnx (opset 17): angles = positions x inverse frequencies
    [1, S, D/2], table stack([f, f], axis=-2) viewed as [1, S, D] and unsqueezed at the heads axis
    before Cos / Sin; x [B, S, N, D] split in halves (tf.split: no sizes), rotate_half as
    stack([-x2, x1], axis=-2) viewed as x; y = x * cos + rotate_half(x) * sin."""
    n = h.node
    half = D // 2
    inits = {"inv": (10000.0 ** (-np.arange(half) / half)).astype(np.float32).reshape(1, 1, half),
             "ax0": np.array([0], np.int64), "ax2": np.array([2], np.int64), "ax3": np.array([3], np.int64),
             "t3": np.array([1, -1, D], np.int64), "zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32)}
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "ax0"], ["s1"]), n("Squeeze", ["s1"], ["s"]),
             n("Cast", ["s"], ["sf"], to=1), n("Range", ["zero", "sf", "one"], ["pos"]),
             n("Unsqueeze", ["pos", "ax0"], ["p1"]), n("Unsqueeze", ["p1", "ax2"], ["p2"]),
             n("Mul", ["p2", "inv"], ["f"]),
             n("Unsqueeze", ["f", "ax2"], ["fa"]), n("Concat", ["fa", "fa"], ["fs"], axis=2),
             n("Reshape", ["fs", "t3"], ["emb"]), n("Unsqueeze", ["emb", "ax2"], ["e4"]),
             n("Cos", ["e4"], ["cos"]), n("Sin", ["e4"], ["sin"]),
             n("Split", ["x"], ["x1", "x2"], axis=-1), n("Neg", ["x2"], ["nx2"]),
             n("Unsqueeze", ["nx2", "ax3"], ["u2"]), n("Unsqueeze", ["x1", "ax3"], ["u1"]),
             n("Concat", ["u2", "u1"], ["st"], axis=3), n("Reshape", ["st", "xs"], ["rot"]),
             n("Mul", ["x", "cos"], ["xc"]), n("Mul", ["rot", "sin"], ["rs"]), n("Add", ["xc", "rs"], ["y"])]
    # the position count is the sequence axis (x's dim 1): read it there
    nodes[1] = n("Gather", ["xs", "ax1"], ["s1"])
    inits["ax1"] = np.array([1], np.int64)
    x4 = ["batch", "seq", N, D]
    return h.make_model(nodes, [h.vi("x", x4)], [h.vi("y", x4)], inits, opset=17)


@pytest.mark.parametrize("target", TARGETS)
def test_keras_hub_rope(h, target):
    """kh_llama / kh_gemma's RoPE: rope 0 -> 1 (stack-merge, the equal Split, cos/sin of the
    unsqueezed table, then rotary-rotate-half-tables; rotary-rotate-half-bshd until session 37)."""
    model = _keras_hub_rope(h)
    out = h.fuse(model, target, level=2)
    assert h.ops(out)["RotaryEmbedding"] == 1, h.ops(out)
    assert h.fired(out)["rotary-rotate-half-tables"] >= 1, h.fired(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((2, 6, N, D)).astype(np.float32)})
