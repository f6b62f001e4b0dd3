"""PrecisionConversionPass: fp16/bf16 conversion with fp32 islands (docs/precision.md).

Numerics: float16 graphs run in ONNX Runtime (CPU) and are compared with the float32 original in
ORT. ORT's CPU provider has almost no bfloat16 kernels (MatMul has none), so bfloat16 graphs are
checked with the full ONNX checker plus strict shape inference and run in the ONNX reference
evaluator. Tolerance: max |got - ref| <= TOL[precision] * max |ref| (error relative to output scale).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from onnx_fuse.demo_model import build_demo_model
from onnx_fuse.passes.precision import (DEFAULT_FP32_OPS, PrecisionConversionPass,
                                        emulate_bf16, precision_pass)
from onnx_fuse.verify import make_inputs, make_session

#: Max abs error relative to the output's max magnitude. Measured (docs/precision.md): fp16 <= 1.1e-3,
#: bf16 <= 1.7e-2 on the demo model and the tiny BERT/GPT-2/LLaMA exports.
TOL = {"fp16": 5e-3, "bf16": 5e-2}
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def convert(proto: onnx.ModelProto, precision: str = "fp16", **kw):
    model = ir.from_proto(proto)
    p = PrecisionConversionPass(precision, **kw)
    result = p(model)
    out = ir.to_proto(model)
    onnx.checker.check_model(out, full_check=True)
    return out, p, result.modified


def run(proto: onnx.ModelProto, feeds: dict, precision: str = "fp16") -> list[np.ndarray]:
    """float16 in ORT (CPU); bfloat16 (or ``"ref"``) in the ONNX reference evaluator."""
    if precision in ("bf16", "ref"):
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(o) for o in ReferenceEvaluator(proto).run(None, feeds)]
    return make_session(proto).run(None, feeds)


def rel_err(ref: np.ndarray, got: np.ndarray) -> float:
    ref64, got64 = ref.astype(np.float64), np.asarray(got).astype(np.float64)
    return float(np.abs(got64 - ref64).max() / max(np.abs(ref64).max(), 1e-12))


def node_dtypes(proto: onnx.ModelProto) -> dict[str, list[tuple[str, int]]]:
    """op name -> [(op_type, elem type of input 0)] after shape inference."""
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    types.update({i.name: i.data_type for i in inferred.graph.initializer})
    return {n.name: (n.op_type, types.get(n.input[0])) for n in inferred.graph.node if n.input}


def model(nodes, inputs, outputs, inits=(), opset=18, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 9
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def w(name, *shape, scale=0.1, seed=0):
    return numpy_helper.from_array(
        (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32), name)


# --- the demo model ----------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_demo_model_numerics_and_islands(precision):
    proto = build_demo_model()
    out, p, modified = convert(proto, precision)
    assert modified and p.stats["nodes-lowered"] > 0 and p.stats["initializers-converted"] > 0
    low = T.FLOAT16 if precision == "fp16" else T.BFLOAT16
    dtypes = node_dtypes(out)
    by_op: dict[str, set[int]] = {}
    for op, dt in dtypes.values():
        by_op.setdefault(op, set()).add(dt)
    assert by_op["MatMul"] == {low}
    for op in ("Softmax", "ReduceMean", "Pow", "Sqrt", "Erf"):
        assert by_op[op] == {T.FLOAT}, op
    # graph I/O keep their dtypes
    assert [i.type.tensor_type.elem_type for i in out.graph.input] == [T.FLOAT, T.INT64]
    assert out.graph.output[0].type.tensor_type.elem_type == T.FLOAT
    assert out.graph.output[0].name == "last_hidden_state"
    feeds = make_inputs(proto, seed=0)
    ref = make_session(proto).run(None, feeds)[0]
    got = run(out, feeds, precision)[0]
    assert got.dtype == np.float32
    assert rel_err(ref, got) <= TOL[precision]


def test_bf16_emulation_agrees_with_reference_evaluator():
    """The ORT emulation used for bf16 graphs with contrib ops tracks the reference evaluator."""
    proto = build_demo_model()
    out, _, _ = convert(proto, "bf16")
    feeds = make_inputs(proto, seed=0)
    ref = make_session(proto).run(None, feeds)[0]
    evaluated = run(out, feeds, "bf16")[0]
    emulated = make_session(emulate_bf16(out)).run(None, feeds)[0]
    assert rel_err(ref, emulated) <= TOL["bf16"]
    assert rel_err(evaluated, emulated) <= TOL["bf16"] / 2
    assert rel_err(ref, emulated) > 1e-4  # the rounding is really applied


def test_bf16_emulation_runs_with_ort_optimizations_where_a_cast_up_would_be_an_identity():
    """emulate_bf16 turned Cast(bf16 -> float32) into an identity Cast on a float32 value, which ORT
    1.32's graph optimizations dropped while a Mul still read its output: fuzz 23005, graph 1332654939
    (gemm, rms_norm, If bodies) at O1 with --precision bf16 was refused with them on, and --verify
    failed ("Node input 'reshape_9__to_fp32' is not a graph input ..."). A bfloat16 round trip now."""
    import sys

    import onnx_fuse

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from fuzz_motifs import make_case

    case = make_case(1332654939)
    r = onnx_fuse.optimize(case.model, level=1, target="ort", precision="bf16", verify=True,
                           verify_inputs=case.feeds)
    v = r.report.verify
    assert v["passed"] and v["ort_optimizations"]["optimized"] == "default", v.get("error")


def test_changed_flag_both_ways_and_idempotent():
    model_ir = ir.from_proto(build_demo_model())
    assert PrecisionConversionPass("fp16")(model_ir).modified
    second = PrecisionConversionPass("fp16")
    assert not second(model_ir).modified  # a converted model is a fixed point
    assert not second.stats
    ints = model([helper.make_node("Add", ["a", "a"], ["b"])], [vi("a", T.INT64, [3])],
                 [vi("b", T.INT64, [3])])
    assert not PrecisionConversionPass("fp16")(ir.from_proto(ints)).modified


def test_deterministic_names():
    a, _, _ = convert(build_demo_model())
    b, _, _ = convert(build_demo_model())
    assert a.SerializeToString() == b.SerializeToString()
    casts = [n for n in a.graph.node if n.name.startswith("precision/cast/")]
    assert casts and all(n.output[0].endswith(("__to_fp16", "__to_fp32")) for n in casts)


def test_keep_io_types_false_converts_io():
    proto = build_demo_model()
    out, p, _ = convert(proto, keep_io_types=False)
    assert out.graph.input[0].type.tensor_type.elem_type == T.FLOAT16
    assert out.graph.input[1].type.tensor_type.elem_type == T.INT64  # integers untouched
    assert out.graph.output[0].type.tensor_type.elem_type == T.FLOAT16
    assert p.stats["io-converted"] == 2  # hidden_states and last_hidden_state
    feeds = make_inputs(proto, seed=1)
    ref = make_session(proto).run(None, feeds)[0]
    feeds16 = dict(feeds, hidden_states=feeds["hidden_states"].astype(np.float16))
    got = make_session(out).run(None, feeds16)[0]
    assert got.dtype == np.float16 and rel_err(ref, got) <= TOL["fp16"]


@pytest.mark.parametrize("keep_io_types", [True, False])
def test_float16_outputs_of_a_float16_model_stay_float16(keep_io_types):
    """A model already in float16 at its outputs with a float32 island inside (a QDQ or upcast section):
    the conversion lowers the island, and only the outputs that were float32 change dtype (back to float32
    with keep_io_types, to float16 without). The float16 output used to come back as float32 (fuzz seed
    2759514164 under --precision fp16: a signature change)."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT, name="up"),
        helper.make_node("MatMul", ["xf", "W"], ["h"], name="mm"),
        helper.make_node("Cast", ["h"], ["h16"], to=T.FLOAT16, name="down"),
        helper.make_node("Relu", ["h16"], ["y"], name="relu"),
    ]
    proto = model(nodes, [vi("x", T.FLOAT16, ["b", 16])],
                  [vi("y", T.FLOAT16, ["b", 8]), vi("h", T.FLOAT, ["b", 8])], [w("W", 16, 8, scale=0.3)])
    out, p, modified = convert(proto, keep_io_types=keep_io_types)
    assert modified and node_dtypes(out)["mm"] == ("MatMul", T.FLOAT16)
    assert [o.type.tensor_type.elem_type for o in out.graph.output] == [
        T.FLOAT16, T.FLOAT if keep_io_types else T.FLOAT16]
    feeds = {"x": np.random.default_rng(4).standard_normal((3, 16)).astype(np.float16)}
    for ref, got in zip(run(proto, feeds), run(out, feeds)):
        assert rel_err(ref, got) <= TOL["fp16"]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_float16_models_float32_island_keeps_its_upcast(precision):
    """A float16 model's Cast(fp16 -> float32) before its float32 LayerNorm island is the exporter's on
    purpose, whichever 16-bit type is asked for: the island sees the float16 values exactly (its
    normalized output equals the original's bit for bit), the MatMul after it is lowered. Under bf16 the
    Cast became Cast(fp16 -> bf16), the island's input rounded to 8 bits (fuzz seed 23002, graph
    2281700563, where ORT's LayerNormFusion then refused the bf16 / fp16 mix)."""
    ax = numpy_helper.from_array(np.array([-1], np.int64), "ax")
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT, name="up"),
        helper.make_node("ReduceMean", ["xf", "ax"], ["mean"], name="mean"),
        helper.make_node("Sub", ["xf", "mean"], ["d"], name="sub"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
        helper.make_node("ReduceMean", ["sq", "ax"], ["var"], name="var"),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
        helper.make_node("Div", ["d", "std"], ["n"], name="div"),
        helper.make_node("Cast", ["n"], ["n16"], to=T.FLOAT16, name="down"),
        helper.make_node("MatMul", ["n", "W"], ["h"], name="mm"),
        helper.make_node("Cast", ["h"], ["y"], to=T.FLOAT16, name="down_y"),
    ]
    inits = [ax, numpy_helper.from_array(np.float32(2.0), "two"),
             numpy_helper.from_array(np.float32(1e-5), "eps"), w("W", 32, 16, scale=0.2)]
    proto = model(nodes, [vi("x", T.FLOAT16, ["b", 32])],
                  [vi("n16", T.FLOAT16, ["b", 32]), vi("y", T.FLOAT16, ["b", 16])], inits)
    out, _, modified = convert(proto, precision)
    up = next(n for n in out.graph.node if n.name == "up")
    assert modified and up.attribute[0].i == T.FLOAT
    assert node_dtypes(out)["mean"] == ("ReduceMean", T.FLOAT) and node_dtypes(out)["mm"][1] != T.FLOAT
    feeds = {"x": np.random.default_rng(5).standard_normal((4, 32)).astype(np.float16) * 3}
    runnable = emulate_bf16(out) if precision == "bf16" else out
    ref, got = make_session(proto).run(None, feeds), make_session(runnable).run(None, feeds)
    np.testing.assert_array_equal(got[0], ref[0])
    assert rel_err(ref[1], got[1]) <= TOL[precision]


# --- islands, shape paths, constants -----------------------------------------------------------

def _decomposed_layer_norm_model():
    """y = LN(x) @ W with LN decomposed; (x - mean)^2 overflows float16 for |x| ~ 500."""
    ax = numpy_helper.from_array(np.array([-1], np.int64), "ax")
    nodes = [
        helper.make_node("ReduceMean", ["x", "ax"], ["mean"], name="mean"),
        helper.make_node("Sub", ["x", "mean"], ["d"], name="sub"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="pow"),
        helper.make_node("ReduceMean", ["sq", "ax"], ["var"], name="var"),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
        helper.make_node("Div", ["d", "std"], ["n"], name="div"),
        helper.make_node("MatMul", ["n", "W"], ["y"], name="mm"),
    ]
    inits = [ax, numpy_helper.from_array(np.float32(2.0), "two"),
             numpy_helper.from_array(np.float32(1e-5), "eps"), w("W", 32, 16, scale=0.2)]
    return model(nodes, [vi("x", T.FLOAT, ["b", 32])], [vi("y", T.FLOAT, ["b", 16])], inits)


def test_decomposed_layernorm_stays_fp32_and_naive_conversion_fails():
    proto = _decomposed_layer_norm_model()
    x = np.random.default_rng(0).integers(-500, 500, (4, 32)).astype(np.float32)  # exact in fp16
    ref = make_session(proto).run(None, {"x": x})[0]
    out, _, _ = convert(proto, keep_io_types=False)
    dtypes = node_dtypes(out)
    assert dtypes["mm"][1] == T.FLOAT16
    for name in ("mean", "sub", "pow", "var", "add_eps", "sqrt", "div"):
        assert dtypes[name][1] == T.FLOAT, name
    # The reference evaluator computes float16 ops in float16 (ORT's CPU kernels widen some
    # internally, which would hide the overflow below).
    for runner in (lambda m, f: make_session(m).run(None, f)[0], lambda m, f: run(m, f, "ref")[0]):
        got = runner(out, {"x": x.astype(np.float16)})
        assert rel_err(ref, got) <= TOL["fp16"]
    # Without the fp32 list every op follows the fp16 input: (x - mean)^2 overflows.
    naive, _, _ = convert(proto, keep_io_types=False, fp32_ops=())
    bad = run(naive, {"x": x.astype(np.float16)}, "ref")[0]
    assert rel_err(ref, bad) > 0.5


def _norm_of_a_projection(square="pow", shared=False):
    """h = x @ W1 (lowered), a decomposed LayerNorm of h with scale and bias, then the norm's output
    both into a MatMul and (a residual) added to x: the norm's input is a 16-bit value."""
    ax = numpy_helper.from_array(np.array([-1], np.int64), "ax")
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="proj"),
        helper.make_node("ReduceMean", ["h", "ax"], ["mean"], name="mean"),
        helper.make_node("Sub", ["h", "mean"], ["d"], name="sub"),
        (helper.make_node("Pow", ["d", "two"], ["sq"], name="pow") if square == "pow"
         else helper.make_node("Mul", ["d", "d"], ["sq"], name="square")),
        helper.make_node("ReduceMean", ["sq", "ax"], ["var"], name="var"),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
        helper.make_node("Div", ["d", "std"], ["n"], name="div"),
        helper.make_node("Mul", ["n", "gamma"], ["ng"], name="scale"),
        helper.make_node("Add", ["ng", "beta"], ["ln"], name="shift"),
        helper.make_node("MatMul", ["ln", "W2"], ["y"], name="mm"),
        helper.make_node("Add", ["x", "ln"], ["r"], name="residual"),
    ]
    rng = np.random.default_rng(3)
    inits = [ax, numpy_helper.from_array(np.float32(2.0), "two"),
             numpy_helper.from_array(np.float32(1e-5), "eps"), w("W1", 32, 32, scale=0.3),
             numpy_helper.from_array((1 + 0.2 * rng.standard_normal(32)).astype(np.float32), "gamma"),
             numpy_helper.from_array((0.1 * rng.standard_normal(32)).astype(np.float32), "beta"),
             w("W2", 32, 16, scale=0.2)]
    outputs = [vi("y", T.FLOAT, ["b", 16]), vi("r", T.FLOAT, ["b", 32])]
    if shared:   # the scale also read by a float32 op: duplicated, not converted away
        nodes.append(helper.make_node("Mul", ["x", "gamma"], ["xg"], name="other"))
        outputs.append(vi("xg", T.FLOAT, ["b", 32]))
    return model(nodes, [vi("x", T.FLOAT, ["b", 32])], outputs, inits)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("square,shared", [("pow", False), ("mul", False), ("pow", True)])
def test_decomposed_layernorm_of_a_16bit_value_loads_with_ort_optimizations(precision, square, shared):
    """A decomposed LayerNorm whose input is 16 bits (here a lowered MatMul's output) reads it through a
    Cast up; ONNX Runtime 1.32's LayerNormFusion takes that Cast's 16-bit input as X and the float32
    scale / bias, and refused the model with its default optimizations ("LayerNormalization bound to
    different types", fuzz 23004-23006 at O1). The scale Mul and bias Add are lowered instead (the
    statistics and the Div stay float32), ORT loads the model and fuses the norm, and what follows the
    norm still votes float32 (the residual Add)."""
    proto = _norm_of_a_projection(square, shared)
    out, _, _ = convert(proto, precision)
    x = np.random.default_rng(7).standard_normal((4, 32)).astype(np.float32)
    runnable = emulate_bf16(out) if precision == "bf16" else out
    sess = make_session(runnable, ort_optimizations=True)   # refused before (the Pow form)
    got, ref = sess.run(None, {"x": x}), make_session(proto).run(None, {"x": x})
    for r, g in zip(ref, got):
        assert rel_err(r, g) <= TOL[precision]
    dtypes = node_dtypes(out)
    low = T.FLOAT16 if precision == "fp16" else T.BFLOAT16
    for name in ("mean", "sub", "var", "add_eps", "sqrt", "div"):
        assert dtypes[name][1] == T.FLOAT, name
    assert dtypes["scale"][1] == low and dtypes["shift"][1] == low
    assert dtypes["residual"][1] == T.FLOAT and dtypes["mm"][1] == low


def test_decomposed_layernorm_of_a_float32_input_keeps_its_affine_fp32():
    """Near miss: the norm reads a float32 graph input (keep_io_types), no 16-bit value: scale and
    bias stay in the float32 island, as before."""
    proto = _norm_of_a_projection()
    nodes = [n for n in proto.graph.node if n.name != "proj"]
    for n in nodes:
        n.input[:] = ["x" if i == "h" else i for i in n.input]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    out, _, _ = convert(proto, "fp16")
    dtypes = node_dtypes(out)
    assert dtypes["scale"][1] == T.FLOAT and dtypes["shift"][1] == T.FLOAT and dtypes["mm"][1] == T.FLOAT16
    make_session(out, ort_optimizations=True)


def test_positions_from_integers_stay_fp32():
    """Rotary angles: Cast(int positions) @ inv_freq -> Cos; 4099 is not a float16 number."""
    inv = numpy_helper.from_array(
        (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32).reshape(1, 4), "inv")
    nodes = [
        helper.make_node("Cast", ["pos"], ["posf"], to=T.FLOAT, name="cast_pos"),
        helper.make_node("Unsqueeze", ["posf", "one"], ["pos2"], name="unsq"),
        helper.make_node("MatMul", ["pos2", "inv"], ["ang"], name="angles"),
        helper.make_node("Cos", ["ang"], ["cos"], name="cos"),
        helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
        helper.make_node("Mul", ["h", "cos"], ["y"], name="rot"),
    ]
    proto = model(nodes, [vi("pos", T.INT64, ["s"]), vi("x", T.FLOAT, ["s", 8])],
                  [vi("y", T.FLOAT, ["s", 4])],
                  [inv, numpy_helper.from_array(np.array([1], np.int64), "one"), w("W", 8, 4)])
    out, _, _ = convert(proto)
    dtypes = node_dtypes(out)
    assert dtypes["angles"][1] == T.FLOAT and dtypes["cos"][1] == T.FLOAT
    assert dtypes["proj"][1] == T.FLOAT16
    feeds = {"pos": np.arange(4090, 4106, dtype=np.int64),
             "x": np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)}
    ref = make_session(proto).run(None, feeds)[0]
    assert rel_err(ref, make_session(out).run(None, feeds)[0]) <= TOL["fp16"]


def test_shape_computation_stays_fp32():
    """A float computation that ends in Cast(to=int64) -> Reshape shape is not lowered."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Mul", ["n", "scale"], ["ns"], name="scale_shape"),
        helper.make_node("Ceil", ["ns"], ["nc"], name="ceil"),
        helper.make_node("Cast", ["nc"], ["ni"], to=T.INT64, name="to_int"),
        helper.make_node("Reshape", ["h", "ni"], ["y"], name="reshape"),
    ]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 8]), vi("n", T.FLOAT, [2])],
                  [vi("y", T.FLOAT, None)],
                  [w("W", 8, 8), numpy_helper.from_array(np.float32(1.0), "scale")])
    out, _, _ = convert(proto, keep_io_types=False)
    dtypes = node_dtypes(out)
    assert dtypes["mm"][1] == T.FLOAT16
    assert dtypes["scale_shape"][1] == T.FLOAT and dtypes["ceil"][1] == T.FLOAT
    scale = next(i for i in out.graph.initializer if i.name == "scale")
    assert scale.data_type == T.FLOAT


def test_constants_clipped_flushed_and_shared():
    big = numpy_helper.from_array(np.array([1e6, -1e6, 1e-9, 0.5], np.float32), "big")
    gamma = numpy_helper.from_array(np.ones(4, np.float32), "gamma")
    nodes = [
        helper.make_node("Add", ["x", "big"], ["a"], name="add_big"),
        helper.make_node("Constant", [], ["c"], value_float=0.25, name="const"),
        helper.make_node("MatMul", ["a", "W"], ["h"], name="mm"),
        helper.make_node("Mul", ["h", "c"], ["hc"], name="mul_c"),
        helper.make_node("MatMul", ["hc", "gamma2d"], ["h2"], name="mm_gamma"),
        helper.make_node("LayerNormalization", ["h2", "gamma"], ["y"], axis=-1, name="ln"),
        helper.make_node("Mul", ["y", "gamma"], ["y2"], name="mul_gamma"),
    ]
    gamma2d = numpy_helper.from_array(np.eye(4, dtype=np.float32), "gamma2d")
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y2", T.FLOAT, [2, 4])],
                  [big, gamma, gamma2d, w("W", 4, 4)])
    out, p, _ = convert(proto, keep_io_types=False)
    inits = {i.name: i for i in out.graph.initializer}
    big16 = numpy_helper.to_array(inits["big"])
    assert big16.dtype == np.float16 and big16[0] == 65504 and big16[1] == -65504 and big16[2] == 0
    assert p.stats["values-clipped"] == 2 and p.stats["values-flushed-to-zero"] == 1
    # gamma feeds the fp32 LayerNormalization and the follow-up Mul (fp32: its input is the fp32
    # LN output), so it stays float32 and nothing duplicates it.
    assert inits["gamma"].data_type == T.FLOAT and "gamma__fp16" not in inits
    const = next(n for n in out.graph.node if n.op_type == "Constant")
    assert const.attribute[0].name == "value" and const.attribute[0].t.data_type == T.FLOAT16
    assert p.stats["constants-converted"] == 1


def test_bf16_keeps_finfo_min_masks_finite():
    """finfo(float32).min rounds to -inf in bfloat16 (its largest value is 3.3895e38): a constant
    mask converted as-is made a fully masked row softmax(-inf, ...) = NaN where the float32 graph
    gives uniform weights. Clipped to bfloat16's lowest value, the row stays uniform."""
    mask = np.zeros((2, 4), np.float32)
    mask[1] = np.finfo(np.float32).min  # row 1: every key masked
    nodes = [helper.make_node("MatMul", ["x", "W"], ["s"], name="mm"),
             helper.make_node("Add", ["s", "mask"], ["sm"], name="add_mask"),
             helper.make_node("Softmax", ["sm"], ["y"], axis=-1, name="softmax")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])],
                  [numpy_helper.from_array(mask, "mask"), w("W", 4, 4, scale=1.0)])
    out, p, _ = convert(proto, "bf16")
    mask_bf16 = numpy_helper.to_array(next(i for i in out.graph.initializer if i.name == "mask"))
    assert np.isfinite(mask_bf16.astype(np.float32)).all() and p.stats["values-clipped"] == 4
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    ref = run(proto, feeds, "ref")[0]
    got = np.asarray(run(out, feeds, "bf16")[0], np.float32)
    np.testing.assert_allclose(ref[1], 0.25)
    assert rel_err(ref, got) <= TOL["bf16"]


MASKED_ATTENTION_DIMS = (2, 2, 4, 8)  # b, h, s, d


def _masked_attention_case(seed):
    """A float32 Attention-23 with a float32 mask [b, 1, s, s], converted (one mask floor), and random
    q / k / v feeds (the mask is the test's)."""
    b, h, s, d = MASKED_ATTENTION_DIMS
    nodes = [helper.make_node("Attention", ["q", "k", "v", "m"], ["o"], name="attn")]
    proto = model(nodes, [vi(x, T.FLOAT, [b, h, s, d]) for x in "qkv"] + [vi("m", T.FLOAT, [b, 1, s, s])],
                  [vi("o", T.FLOAT, [b, h, s, d])], opset=23)
    out, p, _ = convert(proto)
    assert p.stats["mask-floors"] == 1
    rng = np.random.default_rng(seed)
    return proto, out, {x: rng.standard_normal((b, h, s, d)).astype(np.float32) for x in "qkv"}


@pytest.mark.parametrize("fill", [-1e30, -1e10, float(np.finfo(np.float32).min)])
def test_fp16_attention_mask_keeps_fully_masked_rows(fill):
    """A float32 mask floor such as lower.yaml's keep-masked-rows -1e30, cast to float16 for
    Attention-23, overflowed to -inf, and ORT gives 0 for a row whose keys are all masked, where
    the float32 graph gives the mean of V. The pass raises such entries to -60000 before the Cast:
    the row stays uniform. float32's lowest and -inf, which ORT's Attention-23 reads as -inf in
    float32 too (a row of them gives 0), are left alone."""
    b, h, s, d = MASKED_ATTENTION_DIMS
    proto, out, feeds = _masked_attention_case(0)
    feeds["m"] = np.zeros((b, 1, s, s), np.float32)
    feeds["m"][1] = fill            # batch 1: every key masked
    feeds["m"][0, :, :, -1] = -np.inf  # batch 0: -inf stays -inf (the last key gets no weight)
    ref, got = run(proto, feeds)[0], run(out, feeds)[0]
    mean_v = np.broadcast_to(feeds["v"][1].mean(1, keepdims=True), ref[1].shape)
    np.testing.assert_allclose(ref[1], 0.0 if fill == np.finfo(np.float32).min else mean_v, atol=1e-5)
    assert rel_err(ref, got) <= TOL["fp16"]


def test_fp16_attention_mask_keeps_the_order_of_masked_levels():
    """A row with no kept key whose entries take two levels below -60000 (finfo.min / 2 and
    finfo.min / 16, as keep-masked-rows leaves GPT-J's min and min / d): the float32 graph weighs the
    higher level's keys; raised to one floor before the float16 Cast they all weighed alike (0.96 off).
    The map into (-62048, -60000] keeps them apart; a kept entry (0, -1e4) is unchanged."""
    b, h, s, d = MASKED_ATTENTION_DIMS
    proto, out, feeds = _masked_attention_case(1)
    lowest = np.finfo(np.float32).min
    feeds["m"] = np.zeros((b, 1, s, s), np.float32)
    feeds["m"][1] = lowest / 2
    feeds["m"][1, :, :, 2:] = lowest / 16     # batch 1: keys 2 and 3 the higher level
    feeds["m"][0, :, :, -1] = -1e4             # batch 0: a bias far above the floor, kept as is
    ref, got = run(proto, feeds)[0], run(out, feeds)[0]
    np.testing.assert_allclose(ref[1], np.broadcast_to(feeds["v"][1][:, 2:].mean(1, keepdims=True), ref[1].shape),
                               atol=1e-5)
    assert rel_err(ref, got) <= TOL["fp16"]


def test_bf16_attention_bias_at_float32_lowest_stays_finite():
    """HF's finfo(float32).min bias, cast to bfloat16 for MultiHeadAttention at run time, rounded
    to -inf, and a row of -inf biases is NaN where the float32 graph gives the mean of V. The pass
    clips attention masks and biases to bfloat16's lowest before the Cast (-inf stays -inf)."""
    b, s, h, d = 2, 4, 2, 8
    nodes = [helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "m"], ["o"], domain="com.microsoft",
                              num_heads=h, name="mha")]
    proto = model(nodes, [vi(x, T.FLOAT, [b, s, h * d]) for x in "qkv"] + [vi("m", T.FLOAT, [b, 1, s, s])],
                  [vi("o", T.FLOAT, [b, s, h * d])], extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    out, p, _ = convert(proto, "bf16")
    assert p.stats["mask-floors"] == 1
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((b, s, h * d)).astype(np.float32) for x in "qkv"}
    feeds["m"] = np.zeros((b, 1, s, s), np.float32)
    feeds["m"][1] = np.finfo(np.float32).min   # batch 1: every key masked
    feeds["m"][0, :, :, -1] = -np.inf          # -inf stays -inf
    ref = run(proto, feeds)[0]
    got = make_session(emulate_bf16(out)).run(None, feeds)[0]
    np.testing.assert_allclose(ref[1], np.broadcast_to(feeds["v"][1].mean(0), ref[1].shape), atol=1e-5)
    assert rel_err(ref, got) <= TOL["bf16"]


def test_initializer_used_by_both_precisions_is_duplicated():
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Softmax", ["W"], ["sw"], axis=-1, name="sm"),
             helper.make_node("MatMul", ["h", "sw"], ["y"], name="mm2")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])], [w("W", 4, 4)])
    out, _, _ = convert(proto)
    inits = {i.name: i.data_type for i in out.graph.initializer}
    assert inits == {"W": T.FLOAT, "W__fp16": T.FLOAT16}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    ref = make_session(proto).run(None, feeds)[0]
    assert rel_err(ref, make_session(out).run(None, feeds)[0]) <= TOL["fp16"]


def test_one_cast_per_value_and_dtype():
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="mm1"),
             helper.make_node("MatMul", ["x", "W2"], ["b"], name="mm2"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])],
                  [w("W1", 4, 4), w("W2", 4, 4, seed=1)])
    out, p, _ = convert(proto)
    casts = [(n.input[0], n.attribute[0].i) for n in out.graph.node if n.op_type == "Cast"]
    assert sorted(casts) == [("x", T.FLOAT16), ("y__fp16", T.FLOAT)]
    assert p.stats["casts-inserted"] == 2
    assert out.graph.output[0].name == "y"


def test_redundant_cast_pair_removed():
    """x16 -> Cast(fp32) [exporter's] -> MatMul: our fp16 cast would undo it exactly; both go."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT, name="up"),
             helper.make_node("MatMul", ["xf", "W"], ["y"], name="mm")]
    proto = model(nodes, [vi("x", T.FLOAT16, [2, 4])], [vi("y", T.FLOAT, [2, 4])], [w("W", 4, 4)])
    out, p, _ = convert(proto)
    mm = next(n for n in out.graph.node if n.op_type == "MatMul")
    assert mm.input[0] == "x"
    assert [n.op_type for n in out.graph.node] == ["MatMul", "Cast"]
    assert p.stats["casts-removed"] == 2


def test_dtype_attributes_follow_outputs():
    nodes = [
        helper.make_node("ConstantOfShape", ["shp"], ["z"], name="cos",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("RandomNormal", [], ["r"], shape=[2, 4], scale=1e-5, name="rn"),
        helper.make_node("Cast", ["i"], ["f"], to=T.FLOAT, name="cast_f"),
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "z"], ["h2"], name="add_z"),
        helper.make_node("Add", ["h2", "r"], ["y"], name="add_r"),
        helper.make_node("Cast", ["y"], ["y32"], to=T.FLOAT, name="cast_same"),
    ]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4]), vi("i", T.FLOAT16, [2])],
                  [vi("y32", T.FLOAT, [2, 4]), vi("f", T.FLOAT, [2])],
                  [w("W", 4, 4), numpy_helper.from_array(np.array([2, 4], np.int64), "shp")])
    out, _, _ = convert(proto)
    nodes_by = {n.name: n for n in out.graph.node}
    value = helper.get_attribute_value(nodes_by["cos"].attribute[0])
    assert value.data_type == T.FLOAT16
    assert "dtype" not in {a.name for a in nodes_by["rn"].attribute}  # sampled in fp32, then cast
    assert {a.name: a.i for a in nodes_by["cast_f"].attribute}["to"] == T.FLOAT  # fp16 -> fp32 kept
    feeds = {"x": np.ones((2, 4), np.float32), "i": np.ones(2, np.float16)}
    ref = make_session(proto).run(None, feeds)
    got = make_session(out).run(None, feeds)
    assert got[0].dtype == np.float32 and rel_err(ref[0], got[0]) <= TOL["fp16"]
    np.testing.assert_array_equal(got[1], ref[1])


def test_random_dtype_attribute_when_lowered():
    """Random* are fp32 by default (no ORT CPU fp16 kernels); lowered, their dtype follows."""
    nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[2, 4], name="ru"),
             helper.make_node("RandomNormalLike", ["x"], ["rl"], dtype=T.FLOAT, name="rnl"),
             helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Sum", ["h", "r", "rl"], ["y"], name="sum")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])], [w("W", 4, 4)])
    out, _, _ = convert(proto, fp32_ops=DEFAULT_FP32_OPS - {"RandomUniform", "RandomNormalLike"})
    onnx.shape_inference.infer_shapes(out, check_type=True, strict_mode=True)
    attrs = {n.name: {a.name: a.i for a in n.attribute} for n in out.graph.node}
    assert attrs["ru"]["dtype"] == T.FLOAT16 and attrs["rnl"]["dtype"] == T.FLOAT16
    assert [n.op_type for n in out.graph.node].count("Cast") == 2  # x down, y up


def test_resize_scales_stay_fp32():
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Resize", ["h", "", "scales"], ["y"], mode="nearest", name="rs")]
    proto = model(nodes, [vi("x", T.FLOAT, [1, 1, 2, 4])], [vi("y", T.FLOAT, None)],
                  [w("W", 4, 4), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    out, _, _ = convert(proto)
    inits = {i.name: i.data_type for i in out.graph.initializer}
    assert inits["scales"] == T.FLOAT and inits["W"] == T.FLOAT16
    assert node_dtypes(out)["rs"][1] == T.FLOAT16
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 1, 2, 4)).astype(np.float32)}
    ref = make_session(proto).run(None, feeds)[0]
    assert rel_err(ref, make_session(out).run(None, feeds)[0]) <= TOL["fp16"]


def test_contrib_ops_follow_ort_contracts():
    """SkipLayerNormalization stays fp32 (gamma/beta match its input); FastGelu goes fp16."""
    ms = helper.make_opsetid("com.microsoft", 1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("FastGelu", ["h", "bias"], ["g"], domain="com.microsoft", name="gelu"),
             helper.make_node("SkipLayerNormalization", ["g", "x", "gamma", "beta"], ["y"],
                              domain="com.microsoft", epsilon=1e-5, name="sln")]
    inits = [w("W", 8, 8), w("bias", 8, seed=1), numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
             w("beta", 8, seed=2)]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 8])], [vi("y", T.FLOAT, [2, 8])], inits,
                  extra_opsets=[ms])
    out, _, _ = convert(proto)
    inits = {i.name: i.data_type for i in out.graph.initializer}
    assert inits == {"W": T.FLOAT16, "bias": T.FLOAT16, "gamma": T.FLOAT, "beta": T.FLOAT}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    ref = make_session(proto).run(None, feeds)[0]
    assert rel_err(ref, make_session(out).run(None, feeds)[0]) <= TOL["fp16"]


@pytest.mark.parametrize("domain, op", [("acme", "FusedAttention"), ("onnx_fuse", "NoContract")])
def test_unknown_domain_is_kept_fp32(domain, op):
    """Unknown domains, and onnx_fuse ops without a contract, stay float32 (contract ops: see
    tests/passes/test_precision_plugin_ops.py)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node(op, ["h"], ["y"], domain=domain, name="fa")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])], [w("W", 4, 4)],
                  extra_opsets=[helper.make_opsetid(domain, 1)])
    m = ir.from_proto(proto)
    PrecisionConversionPass("fp16")(m)
    fa = next(n for n in m.graph if n.op_type == op)
    assert fa.inputs[0].dtype == ir.DataType.FLOAT and fa.outputs[0].dtype == ir.DataType.FLOAT


def test_subgraph_reads_outer_value_in_fp32():
    then_g = helper.make_graph([helper.make_node("Relu", ["h"], ["t"], name="relu")], "then", [],
                               [vi("t", T.FLOAT, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e"], name="neg")], "else", [],
                               [vi("e", T.FLOAT, [2, 4])])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g, name="if"),
             helper.make_node("MatMul", ["r", "W"], ["y"], name="mm2")]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 4]), vi("cond", T.BOOL, [])],
                  [vi("y", T.FLOAT, [2, 4])], [w("W", 4, 4)])
    out, _, _ = convert(proto)
    if_node = next(n for n in out.graph.node if n.op_type == "If")
    body = helper.get_attribute_value(if_node.attribute[0])
    assert body.node[0].input[0] == "h__fp16__to_fp32" or body.node[0].input[0].endswith("__to_fp32")
    for cond in (True, False):
        feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32),
                 "cond": np.array(cond)}
        ref = make_session(proto).run(None, feeds)[0]
        assert rel_err(ref, make_session(out).run(None, feeds)[0]) <= TOL["fp16"]


def test_precision_pass_factory():
    assert precision_pass(None) == [] and precision_pass("fp32") == []
    (p,) = precision_pass("bf16")
    assert isinstance(p, PrecisionConversionPass) and p.precision == "bf16"
    assert p.fp32_ops == DEFAULT_FP32_OPS
    with pytest.raises(ValueError):
        PrecisionConversionPass("fp8")


# --- exported architectures at O1 and O3 -------------------------------------------------------

def _manifest() -> dict:
    path = MODELS / "manifest.json"
    return json.loads(path.read_text())["models"] if path.is_file() else {}


def _feeds(info: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for name, spec in info["inputs"].items():
        if "mask" in name:
            arr = np.ones(spec["shape"], np.int64)
            arr[-1, spec["shape"][-1] // 2:] = 0
        else:
            arr = rng.integers(0, 100 if name == "input_ids" else 2, spec["shape"])
        feeds[name] = arr.astype(spec["dtype"])
    return feeds


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("level", [1, 3])
@pytest.mark.parametrize("name", sorted(_manifest()) or ["(no exported models)"])
def test_exported_models(name, level, precision):
    info = _manifest().get(name)
    if info is None:
        pytest.skip(f"no exported test models under {MODELS} (tools/export_models.py writes them)")
    import onnx_fuse

    proto = onnx.load(MODELS / info["file"])
    try:
        optimized = onnx_fuse.optimize(proto, level=level).model
    except ImportError as exc:
        pytest.skip(f"O{level} needs the rule engine, not importable here: {exc}")
    base = ir.to_proto(optimized)
    out, p, modified = convert(base, precision)
    assert modified and p.stats["nodes-lowered"] > 0
    onnx.shape_inference.infer_shapes(out, check_type=True, strict_mode=True)
    feeds = _feeds(info)
    ref = make_session(proto).run(None, feeds)
    if precision == "bf16" and any(n.domain not in ("", "ai.onnx") for n in out.graph.node):
        got = make_session(emulate_bf16(out)).run(None, feeds)  # contrib ops: no reference impl
    else:
        got = run(out, feeds, precision)
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        assert rel_err(r, g) <= TOL[precision]


# --- wiring: optimize(precision=...) -----------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("level", [0, 1])
def test_optimize_api_precision(level, precision):
    import onnx_fuse

    result = onnx_fuse.optimize(build_demo_model(), level=level, precision=precision, verify=True)
    assert result.report.passed, result.report.verify
    assert result.report.passes[-1].name == "precision" and result.report.passes[-1].modified
    low = ir.DataType.FLOAT16 if precision == "fp16" else ir.DataType.BFLOAT16
    assert {n.inputs[0].dtype for n in result.model.graph if n.op_type == "MatMul"} == {low}


def test_optimize_api_rejects_unknown_precision():
    import onnx_fuse
    from onnx_fuse.errors import UserError

    with pytest.raises(UserError, match="precision"):
        onnx_fuse.optimize(build_demo_model(), level=1, precision="fp8")


def test_cli_precision_flag(tmp_path):
    from onnx_fuse.cli.main import main

    src, out = tmp_path / "demo.onnx", tmp_path / "demo.fp16.onnx"
    onnx.save(build_demo_model(), src)
    assert main(["optimize", str(src), "-o", str(out), "-O", "1", "--precision", "fp16",
                 "--verify", "-q"]) == 0
    saved = onnx.load(out)
    assert {i.data_type for i in saved.graph.initializer if i.name.startswith("w_")} == {T.FLOAT16}
    assert saved.graph.output[0].type.tensor_type.elem_type == T.FLOAT
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(src), "-o", str(out), "--precision", "fp8"])
    assert exc.value.code == 2


def test_type_inference_skips_data_propagation_with_a_large_1d_weight(monkeypatch):
    """Issue 11: onnx's data propagation turns every 1-D operand into a list of dims (about 50
    bytes an element: a 500 MB weight took 8.9 GB). The pass infers missing dtypes through the
    pipeline's inference, which propagates data only when no 1-D value is long."""
    from onnx_fuse.passes.shape_inference import DATA_PROP_MAX_LEN

    n = 2_000_000  # 8 MB here; the cost grows with the length whatever the size
    assert n > DATA_PROP_MAX_LEN
    w = numpy_helper.from_array(np.linspace(-1, 1, n, dtype=np.float32), "w")
    m = numpy_helper.from_array(np.ones((8, 8), np.float32), "m")
    nodes = [helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node("Mul", ["h", "h"], ["y"]),
             helper.make_node("MatMul", ["a", "m"], ["b"]), helper.make_node("Relu", ["b"], ["z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [n]),
                                       helper.make_tensor_value_info("a", T.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [n]),
                           helper.make_tensor_value_info("z", T.FLOAT, [2, 8])], [w, m])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    calls = []
    real = onnx.shape_inference.infer_shapes

    def spy(*args, **kwargs):   # records how inference is asked, then runs it for real
        calls.append(kwargs.get("data_prop", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    out, _, modified = convert(proto, "fp16")
    assert calls, "the pass did not infer the missing dtypes"
    assert not any(calls), "data propagation ran on a model with a long 1-D weight"
    # the dtypes it found drove the conversion: the MatMul runs in float16
    assert modified and {i.name: i.data_type for i in out.graph.initializer}["m"] == T.FLOAT16


# --- sequences -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["at", "erase", "concat"])
def test_a_sequence_of_lowered_tensors_stays_float32_and_loads_in_ort(reader):
    """SequenceConstruct of two lowered MatMul slices, read by SequenceAt (after a SequenceErase) or
    ConcatFromSequence: the sequence ops' slots are tensor or seq(tensor) typed, and the pass lowered
    their tensor inputs while the sequence kept its float32 type: ORT refused the model ("Type
    (seq(tensor(float))) of output arg ... does not match expected type (seq(tensor(float16)))"; fuzz_s41
    seq_shapes, every seed under --precision fp16). A node reading or writing a sequence stays float32."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Slice", ["h", "s0", "e0", "ax"], ["a"]),
             helper.make_node("Slice", ["h", "e0", "e1", "ax"], ["c"]),
             helper.make_node("SequenceConstruct", ["a", "c"], ["sq"])]
    if reader == "concat":
        nodes.append(helper.make_node("ConcatFromSequence", ["sq"], ["p"], axis=-1))
    else:
        if reader == "erase":
            nodes.append(helper.make_node("SequenceErase", ["sq", "i0"], ["sq2"]))
        nodes.append(helper.make_node("SequenceAt", ["sq2" if reader == "erase" else "sq", "i0"], ["p"]))
    nodes.append(helper.make_node("Mul", ["p", "two"], ["y"]))
    ints = {"s0": [0], "e0": [3], "e1": [8], "ax": [-1]}
    inits = [w("w", 8, 8), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0, np.int64), "i0"),
             *(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items())]
    proto = model(nodes, [vi("x", T.FLOAT, [2, 8])], [vi("y", T.FLOAT, None)], inits)
    out, _, _ = convert(proto)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    ref, got = run(proto, feeds, "ref")[0], run(out, feeds)[0]
    assert got.shape == ref.shape and rel_err(ref, got) < TOL["fp16"]
    inferred = onnx.shape_inference.infer_shapes(out, strict_mode=True).graph
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.value_info if v.type.HasField("tensor_type")}
    matmul = next(n for n in out.graph.node if n.op_type == "MatMul")
    assert types[matmul.output[0]] == T.FLOAT16   # the compute is still lowered



def test_bf16_below_opset_13_leaves_the_model_float32():
    """Cast to bfloat16 is Cast-13's: on an opset-11 model (fuzz_s44 expand_reader seed 75: an int64 Expand read
    by Greater, Cast to float, times 1.5) the old conversion wrote Casts to bfloat16 that ONNX Runtime refuses
    ("Type 'tensor(bfloat16)' of input parameter ... of operator (Cast) in node () is invalid", at every level and
    target). The model now stays float32, valid, with the original's outputs, and the report says why."""
    import sys

    import onnx_fuse
    import onnxruntime as ort

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from fuzz_motifs import make_s44_case

    case = make_s44_case(75, "expand_reader")
    assert case.model.opset_import[0].version == 11
    r = onnx_fuse.optimize(case.model, level=1, target="ort", precision="bf16")
    out = r.to_proto()
    onnx.checker.check_model(out, full_check=True)
    assert not any(n.op_type == "Cast" and n.attribute[0].i == T.BFLOAT16 for n in out.graph.node)

    def run(m):
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, case.feeds)

    for got, want in zip(run(out), run(case.model)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert any("opset >= 13" in w for w in r.report.warnings), r.report.warnings
