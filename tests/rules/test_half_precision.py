"""Half-precision exports: a model run in float16 makes HF write Casts that an fp32 export lacks
(RoPE tables computed in float32 and cast to x's dtype, RMSNorm's float32 island, softmax in
float32, masks filled with float16's minimum). The fusions must accept those forms: the numbers
they compute stay what the fused op computes (checked in ONNX Runtime against the original)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

F16 = TensorProto.FLOAT16
H, D = 2, 8
BIG = np.iinfo(np.int64).max


def _rope_fp32_tables(h, *, rotate_in_fp32=False, round_trip=False):
    """x float16 [B,H,S,D]; f = positions * inv_freq in float32 (HF's rotary embedding under a
    float16 model); cos/sin of concat(f, f) cast to float16; y = x*cos + rotate_half(x)*sin.
    rotate_in_fp32 (OLMo 2): the tables stay float32, x and rotate_half(x) are cast up, and the
    result is cast back to float16. round_trip (Optimum's Gemma after a float32 residual): x is
    float32, the float16 tables are cast back up to it after their Unsqueeze."""
    n = h.node
    nodes = [
        n("Shape", ["x"], ["xs"], start=2, end=3),
        n("Squeeze", ["xs"], ["s0"]),
        n("Range", ["zero", "s0", "one_i"], ["pos"]),
        n("Unsqueeze", ["pos", "ax02"], ["pos3"]),
        n("Cast", ["pos3"], ["posf"], to=TensorProto.FLOAT),
        n("Mul", ["posf", "inv_freq"], ["f"]),                    # [1,S,D/2] float32
        n("Concat", ["f", "f"], ["cat"], axis=-1),
        n("Cos", ["cat"], ["co"]),
        n("Sin", ["cat"], ["si"]),
        n("Cast", ["co"], ["coc"], to=F16),
        n("Cast", ["si"], ["sic"], to=F16),
        n("Unsqueeze", ["coc", "ax1"], ["cu"]),
        n("Unsqueeze", ["sic", "ax1"], ["su"]),
        n("Mul", ["x", "cu"], ["c"]),
        n("Slice", ["x", "s_0", "s_half", "s_ax"], ["x1"]),
        n("Slice", ["x", "s_half", "s_end", "s_ax"], ["x2"]),
        n("Neg", ["x2"], ["nx2"]),
        n("Concat", ["nx2", "x1"], ["r"], axis=-1),
        n("Mul", ["r", "su"], ["s"]),
        n("Add", ["c", "s"], ["y"]),
    ]
    if rotate_in_fp32:
        f32 = TensorProto.FLOAT
        nodes = [x for x in nodes if x.op_type != "Cast" or x.input[0] not in ("co", "si")]
        for x in nodes:
            x.input[:] = [{"coc": "co", "sic": "si"}.get(i, i) for i in x.input]
        mul_c = next(x for x in nodes if x.output[0] == "c")
        mul_s = next(x for x in nodes if x.output[0] == "s")
        mul_c.input[:] = ["x32", "cu"]
        mul_s.input[:] = ["r32", "su"]
        add = next(x for x in nodes if x.output[0] == "y")
        add.output[:] = ["y32"]
        at_r = next(i for i, x in enumerate(nodes) if x.output[0] == "r") + 1
        nodes[at_r:at_r] = [n("Cast", ["r"], ["r32"], to=f32)]
        nodes = [n("Cast", ["x"], ["x32"], to=f32), *nodes, n("Cast", ["y32"], ["y"], to=F16)]
    x_t = F16
    if round_trip:
        x_t = TensorProto.FLOAT
        for x in nodes:
            if x.output[0] in ("c", "s"):
                x.input[:] = [{"cu": "cu32", "su": "su32"}.get(i, i) for i in x.input]
        at = next(i for i, x in enumerate(nodes) if x.output[0] == "su") + 1
        nodes[at:at] = [n("Cast", ["cu"], ["cu32"], to=TensorProto.FLOAT),
                        n("Cast", ["su"], ["su32"], to=TensorProto.FLOAT)]
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64),
             "ax02": np.array([0, 2], np.int64), "ax1": np.array([1], np.int64), "inv_freq": inv,
             "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64)}
    shape = ["b", H, "s", D]
    return h.make_model(nodes, [h.vi("x", shape, x_t)], [h.vi("y", shape, x_t)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["cast", "rotate_in_fp32", "round_trip"])
def test_rope_tables_in_float32_cast_to_float16_fuse(h, target, form):
    model = _rope_fp32_tables(h, rotate_in_fp32=form == "rotate_in_fp32", round_trip=form == "round_trip")
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops, ops
    rot = next(x for x in out.graph.node if x.op_type == "RotaryEmbedding")
    typed = onnx.shape_inference.infer_shapes(out).graph
    elem = {v.name: v.type.tensor_type.elem_type for v in [*typed.value_info, *typed.input, *typed.output]}
    want = F16 if form == "cast" else TensorProto.FLOAT  # the rotation keeps the graph's precision
    assert elem.get(rot.input[0]) == want and elem.get(rot.input[1]) == want, (elem.get(rot.input[0]),)
    x = h.rng.standard_normal((2, H, 5, D))
    if form == "round_trip":  # float32 x: the replayed float16 rounding of the tables keeps it exact
        h.assert_close(model, out, {"x": x.astype(np.float32)})
    else:
        h.assert_close(model, out, {"x": x.astype(np.float16)}, atol=2e-3, rtol=2e-3)



def _gelu_tanh_fp16(h, coef=0.044715):
    """GPT-2's NewGELU in float16: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + coef*x^3))), constants stored
    in float16 (0.044715 -> 0.04471, 0.7978846 -> 0.798): off by more than the rule's rtol 1e-4."""
    n = h.node
    nodes = [n("Pow", ["x", "three"], ["p"]), n("Mul", ["p", "coef"], ["pc"]), n("Add", ["x", "pc"], ["a"]),
             n("Mul", ["a", "k"], ["ak"]), n("Tanh", ["ak"], ["t"]), n("Add", ["t", "one"], ["t1"]),
             n("Mul", ["x", "half"], ["xh"]), n("Mul", ["xh", "t1"], ["y"])]
    f16 = lambda v: np.array(v, np.float16)  # noqa: E731
    inits = {"three": f16(3.0), "coef": f16(coef), "k": f16(np.sqrt(2 / np.pi)), "one": f16(1.0),
             "half": f16(0.5)}
    return h.make_model(nodes, [h.vi("x", ["b", 16], F16)], [h.vi("y", ["b", 16], F16)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_gelu_tanh_with_float16_constants_fuses(h, target):
    model = _gelu_tanh_fp16(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Tanh" not in ops and "Pow" not in ops, ops
    feeds = {"x": (3 * h.rng.standard_normal((4, 16))).astype(np.float16)}
    h.assert_close(model, out, feeds, atol=4e-3, rtol=4e-3)


def test_float16_constant_must_still_be_the_rules_number(h):
    """Rounding to the constant's dtype is all the slack: 0.05 is not 0.044715 in any precision."""
    model = _gelu_tanh_fp16(h, coef=0.05)
    out = h.fuse(model, "onnx")
    assert "Tanh" in h.ops(out)
    rs = h.reasons(model, "onnx", "gelu-tanh")
    assert any("x^3's coefficient over x's is 0.04998779, not 0.044715" in r for r in rs), rs


def _attention_fp16(h, form):
    """q, k, v float16 [B,H,S,D] (graph inputs). eager: softmax(scores, dtype=float32).to(fp16);
    sdpa-ts (TorchScript's sdpa under a float32 mask): scores cast up, + float32 mask, softmax,
    NaN guard, V cast up, float32 output (a graph output: its name must stay)."""
    n = h.node
    f32 = TensorProto.FLOAT
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"])]
    inits = {}
    if form == "eager":
        nodes += [n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
                  n("Cast", ["sm"], ["s32"], to=f32), n("Softmax", ["s32"], ["p"], axis=-1),
                  n("Cast", ["p"], ["p16"], to=F16), n("MatMul", ["p16", "v"], ["o"])]
        inits["scale"] = np.array(0.25, np.float16)
        mask_t, out_t = F16, F16
    else:
        nodes += [n("Cast", ["sc"], ["s32"], to=f32), n("Mul", ["s32", "scale"], ["ss"]),
                  n("Add", ["ss", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
                  n("IsNaN", ["p"], ["isn"]), n("Where", ["isn", "zero", "p"], ["pz"]),
                  n("Cast", ["v"], ["v32"], to=f32), n("MatMul", ["pz", "v32"], ["o"])]
        inits["scale"] = np.array(0.25, np.float32)
        inits["zero"] = np.array(0.0, np.float32)
        mask_t, out_t = f32, f32
    qkv = [h.vi(x, ["b", H, "s", 16], F16) for x in ("q", "k", "v")]
    model = h.make_model(nodes, [*qkv, h.vi("mask", ["b", 1, "s", "s"], mask_t)],
                         [h.vi("o", ["b", H, "s", 16], out_t)], inits)
    return model, mask_t


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["eager", "sdpa-ts"])
def test_attention_with_float32_softmax_fuses(h, target, form):
    model, mask_t = _attention_fp16(h, form)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    assert [o.name for o in out.graph.output] == ["o"]
    rng = h.rng
    s = 6
    causal = np.triu(np.full((s, s), -np.inf), 1)[None, None].repeat(2, 0)
    feeds = {x: rng.standard_normal((2, H, s, 16)).astype(np.float16) for x in ("q", "k", "v")}
    feeds["mask"] = causal.astype(np.float16 if mask_t == F16 else np.float32)
    h.assert_close(model, out, feeds, atol=4e-3, rtol=4e-3)


def test_attention_scores_cast_down_do_not_fuse(h):
    """Only an up-cast to float32 keeps the numbers: scores cast to float16 from float32 q k^T
    (a lossy step the fused op would skip) are not attention in q's precision."""
    model, _ = _attention_fp16(h, "eager")
    for x in model.graph.node:
        if x.op_type == "Cast" and x.output[0] == "s32":
            x.attribute[0].i = TensorProto.BFLOAT16
    rs = h.reasons(model, "onnx", "attention")
    assert rs and not any(r.startswith("matched") for r in rs), rs
