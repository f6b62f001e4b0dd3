"""rules/norm/norm_island.yaml: a float16 RMSNorm's float32 island (Cast up -> RMSNormalization ->
Cast back) taken into RMSNormalization(x16, scale16) at ort where the scale is exact in float16
(rms-norm-island-half), and the residual Add before it then taken by skip-rms-norm. Graphs are built
here; numerics are checked in ONNX Runtime against the original, bit for bit where the rule claims it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

F32, FP16 = 1, 10
D = 64


def _island(h, *, scale="exact", residual=False, weight_cast=False, escape=False, back_to=FP16, sum_out=False):
    """x [batch, seq, D] float16 -> (+ r) -> Cast f32 -> x * 1/sqrt(mean(x^2) + eps) -> * w -> Cast back.

    scale: "exact" (float16 values held in float32: Olmo2's weight cast up), "gemma" (1 + w in float32,
    not exact in float16). weight_cast: the weight is a float16 initializer cast up in the graph.
    escape: the float32 input is also a graph output. sum_out: the residual sum is a graph output."""
    n = h.node
    nodes, src = [], "x"
    if residual:
        nodes.append(n("Add", ["r", "x"], ["s"]))
        src = "s"
    nodes += [n("Cast", [src], ["xf"], to=F32), n("Pow", ["xf", "two"], ["sq"]),
              n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1), n("Add", ["ms", "eps"], ["ve"]),
              n("Sqrt", ["ve"], ["sd"]), n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["xf", "inv"], ["nrm"])]
    w = 1.0 + 0.3 * h.rng.standard_normal(D)
    inits = {"axes": np.array([-1], np.int64), "two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32)}
    if weight_cast:
        nodes.append(n("Cast", ["w16"], ["w"], to=F32))
        inits["w16"] = w.astype(np.float16)
    else:
        inits["w"] = (w.astype(np.float16) if scale == "exact" else w).astype(np.float32)
    nodes += [n("Mul", ["w", "nrm"], ["nm"]), n("Cast", ["nm"], ["y"], to=back_to)]
    shape = ["batch", "seq", D]
    inputs = [h.vi("x", shape, FP16)] + ([h.vi("r", shape, FP16)] if residual else [])
    outputs = [h.vi("y", shape, back_to)] + ([h.vi("xf", shape, F32)] if escape else []) \
        + ([h.vi("s", shape, FP16)] if sum_out else [])
    return h.make_model(nodes, inputs, outputs, inits)


def _fused_island(h, w):
    """The island as rms_norm.yaml writes it: Cast up -> RMSNormalization(float32 scale) -> Cast back."""
    n = h.node
    nodes = [n("Cast", ["x"], ["xf"], to=F32),
             n("RMSNormalization", ["xf", "w"], ["nm"], axis=-1, epsilon=1e-6, stash_type=1),
             n("Cast", ["nm"], ["y"], to=FP16)]
    shape = ["batch", "seq", D]
    return h.make_model(nodes, [h.vi("x", shape, FP16)], [h.vi("y", shape, FP16)], {"w": w.astype(np.float32)})


def _feeds(h, model, scale=3.0):
    return {i.name: (h.rng.standard_normal((4, 32, D)) * scale).astype(np.float16) for i in model.graph.input}


@pytest.mark.parametrize("weight_cast", [False, True])
@pytest.mark.parametrize("scale", [0.01, 3.0, 300.0])
def test_exact_scale_island_is_one_float16_norm_bit_for_bit(h, weight_cast, scale):
    """Olmo2's island: the float16 weight times the float32 normalized value, cast back. ORT's
    float16 RMSNormalization computes in float32 and rounds once: the same bits as the island."""
    model = _island(h, weight_cast=weight_cast)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out) == {"rms-norm-island-half": 1}, h.fired(out)
    node = next(n for n in out.graph.node if n.op_type == "RMSNormalization")
    g = numpy_helper.to_array(next(i for i in out.graph.initializer if i.name == node.input[1]))
    assert g.dtype == np.float16 and node.input[0] == "x"
    feeds = _feeds(h, model, scale)
    (ref,), (got,) = h.run(model, feeds), h.run(out, feeds)
    assert got.dtype == np.float16 and np.array_equal(got, ref), int((got != ref).sum())


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_exact_scale_island_keeps_its_casts_off_ort(h, target):
    """RMSNormalization-23's function body rounds the normalized value to X's dtype before the
    scale: a second rounding there, so the island stays float32 with its Casts."""
    model = _island(h)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1, "Cast": 2}, h.ops(out)
    assert "rms-norm-island-half" not in h.fired(out)


@pytest.mark.parametrize("sum_out", [False, True])
def test_residual_add_before_exact_island_is_a_skip_norm(h, sum_out):
    """Add(f16) -> island: the float16 norm then meets skip-rms-norm. Its norm reads the float32 sum
    before rounding; ORT runs the original so too (the Add's Cast to float16 and the island's Cast up
    are a pair its RemoveDuplicateCast drops), and the sum output keeps the float16 sum."""
    model = _island(h, residual=True, sum_out=sum_out)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"com.microsoft::SkipSimplifiedLayerNormalization": 1}, h.ops(out)
    feeds = _feeds(h, model)
    ref, got = h.run(model, feeds), h.run(out, feeds)
    y, yr = got[0].astype(np.float64), ref[0].astype(np.float64)
    assert np.all(np.abs(y - yr) <= np.spacing(np.abs(ref[0])).astype(np.float64)), "more than an ulp"
    assert np.mean(got[0] != ref[0]) < 0.01, float(np.mean(got[0] != ref[0]))
    if sum_out:
        assert np.array_equal(got[1], ref[1]) and np.array_equal(got[1], feeds["r"] + feeds["x"])
    # against the graph run in float32 (no rounding before the last): no worse than the island
    x32 = {k: v.astype(np.float32) for k, v in feeds.items()}
    s = x32["r"].astype(np.float64) + x32["x"]
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w")).astype(np.float64)
    f32 = s / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6) * w
    assert np.abs(y - f32).mean() <= np.abs(yr - f32).mean() * 1.001


def test_already_fused_island_is_taken(h):
    """The island given as RMSNormalization-23 on the Cast (an opset-23 export, or rms_norm.yaml's
    output): the same rewrite, the same bits."""
    model = _fused_island(h, (1.0 + 0.3 * h.rng.standard_normal(D)).astype(np.float16))
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    feeds = _feeds(h, model)
    (ref,), (got,) = h.run(model, feeds), h.run(out, feeds)
    assert np.array_equal(got, ref)


# --- near misses ---------------------------------------------------------------------------------

def test_gemma_scale_not_exact_in_float16_keeps_the_island(h):
    """1 + w in float32: a float16 scale would round it (a second rounding); the island stays."""
    fused = _fused_island(h, 1.0 + 0.3 * h.rng.standard_normal(D))
    assert any("exact in x's dtype" in r for r in h.reasons(fused, "ort", "rms-norm-island-half")), \
        h.reasons(fused, "ort", "rms-norm-island-half")
    model = _island(h, scale="gemma")
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"RMSNormalization": 1, "Cast": 2}, h.ops(out)
    feeds = _feeds(h, model)
    (ref,), (got,) = h.run(model, feeds), h.run(out, feeds)
    assert np.array_equal(got, ref)


def test_float32_input_read_elsewhere_keeps_the_island(h):
    """The Cast up is also a graph output: it stays, and so does the float32 norm on it."""
    model = _island(h, escape=True)
    out = h.fuse(model, "ort", level=2)
    assert "rms-norm-island-half" not in h.fired(out)
    assert h.ops(out)["Cast"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h, model), atol=0, rtol=0)


def test_island_cast_to_float32_output_is_not_taken(h):
    """float16 x normalized and handed on in float32 (no Cast back to float16): the output would
    lose its float32 precision in a float16 op."""
    model = _island(h, back_to=F32)
    out = h.fuse(model, "ort", level=2)
    assert "rms-norm-island-half" not in h.fired(out)
    h.assert_close(model, out, _feeds(h, model), atol=1e-5, rtol=1e-5)


# --- LayerNorm islands ---------------------------------------------------------------------------

def _layer_island(h, *, bias=True, exact_bias=True, residual=False):
    """x float16 -> (+ r) -> Cast f32 -> (x - mean) / sqrt(var + eps) * w (+ b) -> Cast back."""
    n = h.node
    nodes, src = [], "x"
    if residual:
        nodes.append(n("Add", ["r", "x"], ["s"]))
        src = "s"
    nodes += [n("Cast", [src], ["xf"], to=F32), n("ReduceMean", ["xf", "axes"], ["m"], keepdims=1),
              n("Sub", ["xf", "m"], ["d"]), n("Pow", ["d", "two"], ["sq"]),
              n("ReduceMean", ["sq", "axes"], ["v"], keepdims=1), n("Add", ["v", "eps"], ["ve"]),
              n("Sqrt", ["ve"], ["sd"]), n("Div", ["d", "sd"], ["nrm"]), n("Mul", ["nrm", "w"], ["nw"])]
    b = 0.3 * h.rng.standard_normal(D)
    inits = {"axes": np.array([-1], np.int64), "two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
             "w": (1.0 + 0.3 * h.rng.standard_normal(D)).astype(np.float16).astype(np.float32),
             "b": (b.astype(np.float16) if exact_bias else b).astype(np.float32)}
    if bias:
        nodes.append(n("Add", ["nw", "b"], ["nb"]))
    nodes.append(n("Cast", ["nb" if bias else "nw"], ["y"], to=FP16))
    if not bias:
        del inits["b"]
    shape = ["batch", "seq", D]
    inputs = [h.vi("x", shape, FP16)] + ([h.vi("r", shape, FP16)] if residual else [])
    return h.make_model(nodes, inputs, [h.vi("y", shape, FP16)], inits)


@pytest.mark.parametrize("bias", [True, False])
def test_exact_layer_norm_island_is_one_float16_norm_bit_for_bit(h, bias):
    model = _layer_island(h, bias=bias)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)
    rule = "layer-norm-island-half" if bias else "layer-norm-island-half-no-bias"
    assert h.fired(out) == {rule: 1}, h.fired(out)
    feeds = _feeds(h, model, 5.0)
    feeds["x"] += np.float16(4)   # off-centre rows
    # bit for bit against the island fused in float32 (the onnx target keeps it: LayerNormalization
    # on the Cast up); the decomposed original sums in another order, so within an ulp of it
    island = h.fuse(model, "onnx", level=2)
    assert h.ops(island) == {"LayerNormalization": 1, "Cast": 2}, h.ops(island)
    (ref,), (isl,), (got,) = h.run(model, feeds), h.run(island, feeds), h.run(out, feeds)
    assert got.dtype == np.float16 and np.array_equal(got, isl), int((got != isl).sum())
    assert np.all(np.abs(got.astype(np.float64) - ref) <= np.spacing(np.abs(ref)).astype(np.float64))


def test_residual_add_before_exact_layer_norm_island_is_a_skip_norm(h):
    model = _layer_island(h, residual=True)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"com.microsoft::SkipLayerNormalization": 1}, h.ops(out)
    feeds = _feeds(h, model)
    (ref,), (got,) = h.run(model, feeds), h.run(out, feeds)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= np.spacing(np.abs(ref)).astype(np.float64))


def test_layer_norm_island_with_inexact_bias_stays(h):
    model = _layer_island(h, exact_bias=False)
    out = h.fuse(model, "ort", level=2)
    assert "layer-norm-island-half" not in h.fired(out)
    assert h.ops(out) == {"LayerNormalization": 1, "Cast": 2}, h.ops(out)
    feeds = _feeds(h, model)
    (ref,), (got,) = h.run(model, feeds), h.run(out, feeds)
    assert np.array_equal(got, ref)
