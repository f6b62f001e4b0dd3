"""rules/norm: the scale-less LayerNorm / RMSNorm rules (layer-norm-no-scale[-cast],
layer-norm-bias-only, rms-norm-no-scale[-cast]), Gemma's scale inside the float32 island
(rms-norm-scale-in-island), the T5 form, and the skip rules on top of scale-less norms.
Graphs are built here; numerics are checked in ONNX Runtime against the original."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

TARGETS = ["ort", "onnx", "trt"]
D = 16
FP16, BF16, F32 = 10, 16, 1
NP = {F32: np.float32, FP16: np.float16}


def _graph(h, *, kind="layer", dtype=F32, cast=False, tail="none", form="reciprocal", axes=(-1,),
           hidden=D, residual=False, back_to=None):
    """x [batch, seq, hidden] -> (residual Add) -> (Cast f32) -> norm core -> (Cast back) -> tail.

    tail: "none" (scale-less), "bias" (+ beta only), "ones" (* a ones gamma, which cleanup drops),
    "gemma" (* (1 + w) in float32, then the Cast back).
    """
    n = h.node
    nodes, src = [], "x"
    if residual:
        nodes.append(n("Add", ["r", "x"], ["s"]))
        src = "s"
    xin = src
    if cast:
        nodes.append(n("Cast", [src], ["xf"], to=F32))
        xin = "xf"
    if kind == "layer":
        nodes += [n("ReduceMean", [xin, "axes"], ["m"], keepdims=1), n("Sub", [xin, "m"], ["d"]),
                  n("Pow", ["d", "two"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["v"], keepdims=1),
                  n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]), n("Div", ["d", "sd"], ["nrm"])]
    else:
        nodes += [n("Pow", [xin, "two"], ["sq"]), n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
                  n("Add", ["ms", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"])]
        if form == "reciprocal":
            nodes += [n("Reciprocal", ["sd"], ["inv"]), n("Mul", [xin, "inv"], ["nrm"])]
        elif form == "div1":
            nodes += [n("Div", ["one", "sd"], ["inv"]), n("Mul", ["inv", xin], ["nrm"])]
        else:
            nodes.append(n("Div", [xin, "sd"], ["nrm"]))
    last = "nrm"
    out_dtype = dtype if back_to is None else back_to
    if tail == "gemma":   # scale in float32, Cast back last
        nodes += [n("Mul", ["nrm", "g1w"], ["nm"]), n("Cast", ["nm"], ["y"], to=out_dtype)]
        last = "y"
    else:
        if cast:
            nodes.append(n("Cast", ["nrm"], ["nc"], to=out_dtype))
            last = "nc"
        if tail == "bias":
            nodes.append(n("Add", [last, "b"], ["y"]))
        elif tail == "ones":
            nodes.append(n("Mul", ["ones_g", last], ["y"]))
        else:
            nodes.append(n("Identity", [last], ["y"]))
    dt = NP.get(dtype, np.float32)
    inits = {"axes": np.array(axes, np.int64), "two": np.array(2.0, np.float32),
             "one": np.array(1.0, np.float32), "eps": np.array(1e-5, np.float32),
             "b": (0.1 * h.rng.standard_normal(D)).astype(dt), "ones_g": np.ones(D, dt),
             "g1w": (1.0 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)}
    if not cast:   # the float constants of a float32 graph; fp16 graphs compute in the island
        inits.update({k: inits[k].astype(dt) for k in ("two", "one", "eps")})
    shape = ["batch", "seq", hidden]
    inputs = [h.vi("x", shape, dtype)] + ([h.vi("r", shape, dtype)] if residual else [])
    outputs = [h.vi("y", shape, out_dtype)]
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, model, dtype=np.float32):
    return {i.name: (h.rng.standard_normal((2, 5, D)) * 2 + 0.5).astype(dtype) for i in model.graph.input}


def _gamma(model, node):
    init = next(i for i in model.graph.initializer if i.name == node.input[1])
    return numpy_helper.to_array(init)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind,tail,rule", [
    ("layer", "none", "layer-norm-no-scale"),
    ("layer", "ones", "layer-norm-no-scale"),          # gamma all ones: cleanup drops the Mul
    ("layer", "bias", "layer-norm-bias-only"),
    ("rms", "none", "rms-norm-no-scale"),
    ("rms", "ones", "rms-norm-no-scale"),
])
def test_scale_less_norms_fuse(h, target, kind, tail, rule):
    model = _graph(h, kind=kind, tail=tail)
    out = h.fuse(model, target, level=2)
    op = "LayerNormalization" if kind == "layer" else "RMSNormalization"
    assert h.ops(out) == {op: 1}, h.ops(out)
    assert h.fired(out) == {rule: 1}, h.fired(out)
    g = _gamma(out, out.graph.node[0])
    assert g.dtype == np.float32 and g.shape == (D,) and np.all(g == 1)
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("form", ["reciprocal", "div1", "div"])
def test_rms_no_scale_every_inverse_form(h, form):
    model = _graph(h, kind="rms", form=form)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("kind,rule", [("layer", "layer-norm-no-scale-cast"), ("rms", "rms-norm-no-scale-cast")])
def test_scale_less_float32_island_fp16(h, kind, rule):
    """T5-style: Cast to float32, normalize, Cast back; no weight. The fused op takes x as is."""
    model = _graph(h, kind=kind, dtype=FP16, cast=True)
    out = h.fuse(model, "onnx", level=2)
    op = "LayerNormalization" if kind == "layer" else "RMSNormalization"
    assert h.ops(out) == {op: 1}, h.ops(out)
    assert h.fired(out) == {rule: 1}
    assert _gamma(out, out.graph.node[0]).dtype == np.float16
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=2e-2, rtol=2e-2)


def test_t5_form_with_weight_fp16(h):
    """T5LayerNorm in fp16: x.float().pow(2).mean -> x * rsqrt(var + eps) -> .to(fp16) -> w * x."""
    model = _graph(h, kind="rms", dtype=FP16, cast=True, tail="ones")
    w = next(i for i in model.graph.initializer if i.name == "ones_g")
    w.CopyFrom(numpy_helper.from_array((1 + 0.1 * h.rng.standard_normal(D)).astype(np.float16), "ones_g"))
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out) == {"rms-norm": 1}
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("target", TARGETS)
def test_gemma_scale_inside_float32_island(h, target):
    """The op runs on the island itself: float32 x (the Cast up kept) and the float32 scale, then
    the Cast back, so the only rounding is the original's last Cast."""
    model = _graph(h, kind="rms", dtype=FP16, cast=True, tail="gemma")
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1, "Cast": 2}, h.ops(out)
    assert h.fired(out) == {"rms-norm-scale-in-island": 3}
    g = _gamma(out, next(n for n in out.graph.node if n.op_type == "RMSNormalization"))
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "g1w"))
    assert g.dtype == np.float32 and np.array_equal(g, w)
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("target", TARGETS)
def test_gemma_island_rounds_where_the_original_does(h, target):
    """Bit for bit but for float32 summation order. A scale rounded to float16 (1 + w within 2^-11
    relative), or a norm run in float16 (ONNX's RMSNormalization rounds x_normalized to X's dtype
    before the scale), is a second rounding: a quarter of the outputs then differ by an ulp, and
    through a decoder that failed verify (gemma3 fp16, layer 1's keys)."""
    model = _graph(h, kind="rms", dtype=FP16, cast=True, tail="gemma")
    out = h.fuse(model, target, level=2)
    x = (h.rng.standard_normal((4, 64, D)) * 2 + 0.5).astype(np.float16)
    (ref,), (got,) = h.run(model, {"x": x}), h.run(out, {"x": x})
    assert got.dtype == np.float16
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    ulp = np.spacing(np.abs(ref)).astype(np.float64)
    assert np.all(diff <= ulp), float((diff / ulp).max())
    assert np.mean(got != ref) < 0.01, float(np.mean(got != ref))


@pytest.mark.parametrize("kind,op", [("layer", "SkipLayerNormalization"),
                                     ("rms", "SkipSimplifiedLayerNormalization")])
def test_skip_forms_of_scale_less_norms(h, kind, op):
    model = _graph(h, kind=kind, residual=True)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {f"com.microsoft::{op}": 1}, h.ops(out)
    h.assert_close(model, out, _feeds(h, model))


def test_scale_less_layer_norm_is_not_read_as_rms_of_centered_x(h):
    """RMSNorm(x - mean(x)) computes the same value; the LayerNorm reading must win."""
    model = _graph(h, kind="layer", tail="none")
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out) == {"LayerNormalization": 1}, h.ops(out)


# --- near-misses ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,rule", [("layer", "layer-norm-no-scale"), ("rms", "rms-norm-no-scale")])
def test_symbolic_hidden_size_does_not_fuse(h, kind, rule):
    model = _graph(h, kind=kind, hidden="hidden")
    out = h.fuse(model, "onnx", level=2)
    assert not {"LayerNormalization", "RMSNormalization"} & set(h.ops(out)), h.ops(out)
    assert any("static size" in r for r in h.reasons(model, "onnx", rule)), h.reasons(model, "onnx", rule)


@pytest.mark.parametrize("kind,rule", [("layer", "layer-norm-no-scale"), ("rms", "rms-norm-no-scale")])
def test_wrong_axis_does_not_fuse(h, kind, rule):
    model = _graph(h, kind=kind, axes=(1,))
    out = h.fuse(model, "onnx", level=2)
    assert not {"LayerNormalization", "RMSNormalization"} & set(h.ops(out)), h.ops(out)
    assert any("last axis" in r for r in h.reasons(model, "onnx", rule))


@pytest.mark.parametrize("kind,rule", [("layer", "layer-norm-no-scale-cast"), ("rms", "rms-norm-no-scale-cast")])
def test_island_cast_to_other_dtype_does_not_fuse_whole(h, kind, rule):
    """float32 x normalized and cast to float16: the op would return float32; only the float32
    core may fuse (the Cast stays after it)."""
    model = _graph(h, kind=kind, dtype=F32, cast=True, back_to=FP16)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["Cast"] == 1, h.ops(out)
    assert any("back to x's dtype" in r for r in h.reasons(model, "onnx", rule))
    h.assert_close(model, out, _feeds(h, model), atol=2e-2, rtol=2e-2)


def test_gemma_scale_not_constant_does_not_fuse(h):
    model = _graph(h, kind="rms", dtype=FP16, cast=True, tail="gemma")
    g = next(i for i in model.graph.initializer if i.name == "g1w")
    model.graph.initializer.remove(g)
    model.graph.input.append(h.vi("g1w", [D]))
    out = h.fuse(model, "onnx", level=2)
    assert "rms-norm-scale-in-island" not in h.fired(out)
    feeds = _feeds(h, model, np.float16)
    feeds["g1w"] = (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)
    h.assert_close(model, out, feeds, atol=2e-2, rtol=2e-2)
