"""cast-of-select (passes/cast_of_select.py): Cast(Where(cond, c1, c2)) of constants c1, c2 is
Where(cond, Cast(c1), Cast(c2)), the casts computed by the pass.

A float16 TorchScript decoder's additive mask Where(keep, 0, finfo(float32).min) stays float32 until the
attention rewrite casts it to q's dtype; the Cast left one node per model (Voxtral Realtime, hold-out 40).
Where picks elements unchanged and Cast converts each alone, so the rewrite is exact: outputs are compared
bit for bit in ONNX Runtime, on constants that round to nearest even, overflow to inf, underflow to 0 or a
subnormal, and on inf / NaN / -0. Near misses: a branch that is not a true constant, the Where read
elsewhere or a graph output, integer / bool / bfloat16 targets, a narrowing from double."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from pass_testing import apply, ops

from onnx_fuse import optimize
from onnx_fuse.passes.cast_of_select import CastOfSelectPass
from onnx_fuse.passes.constant_folding import constant_tensor
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

import onnx_ir as ir

F32, F16, F64, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16
NP = {F32: np.float32, F16: np.float16, F64: np.float64}
MIN32 = np.finfo(np.float32).min
# float16 edges: the largest finite, just below / at the tie that overflows, a round-to-even tie (2049 -> 2048,
# 2051 -> 2052), below the smallest subnormal, a subnormal, -0, inf, NaN
EDGES = np.array([0.0, MIN32, 65504.0, 65519.99, 65520.0, -65520.0, 2049.0, 2051.0, 1e-8, 3e-6, -0.0,
                  np.inf, -np.inf, np.nan], np.float32)


def _model(c1, c2, *, to=F16, cond_shape=(2, 3, len(EDGES)), extra_reader=False, where_out=False,
           c2_input=False):
    src = helper.np_dtype_to_tensor_dtype(np.asarray(c1).dtype)
    nodes = [helper.make_node("Where", ["cond", "c1", "c2"], ["m"], name="sel"),
             helper.make_node("Cast", ["m"], ["y"], to=to, name="cast")]
    outputs = [helper.make_tensor_value_info("y", to, list(cond_shape))]
    if extra_reader:   # the Where read by a second op: it stays, the rewrite would add a node
        nodes.append(helper.make_node("Neg", ["m"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", src, list(cond_shape)))
    if where_out:
        outputs.append(helper.make_tensor_value_info("m", src, list(cond_shape)))
    inputs = [helper.make_tensor_value_info("cond", TensorProto.BOOL, list(cond_shape))]
    inits = [numpy_helper.from_array(np.asarray(c1), "c1"), numpy_helper.from_array(np.asarray(c2), "c2")]
    if c2_input:   # an initializer that is also a graph input: a feed may override it
        inputs.append(helper.make_tensor_value_info("c2", src, list(np.shape(c2))))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _run(proto: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _apply(proto):
    model, modified, p = apply(CastOfSelectPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _bit_equal(proto: onnx.ModelProto, model: ir.Model, feeds: dict) -> None:
    new = ir.to_proto(model)
    onnx.checker.check_model(new, full_check=True)
    assert [o.name for o in new.graph.output] == [o.name for o in proto.graph.output]
    for a, b in zip(_run(proto, feeds), _run(new, feeds), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (a, b)


def _cond(shape, seed=0):
    return {"cond": np.random.default_rng(seed).random(shape) < 0.5}


@pytest.mark.parametrize("c1,c2", [
    (np.float32(0.0), MIN32),                       # the TorchScript mask: keep -> 0, masked -> finfo.min (-inf)
    (EDGES, EDGES[::-1].copy()),                    # element-wise constants, every float16 edge
    (EDGES.reshape(1, 1, -1), np.float32(-1e4)),    # broadcast against a scalar
])
def test_float32_select_cast_to_float16(c1, c2):
    proto = _model(c1, c2)
    model, modified, p = _apply(proto)
    assert modified and p.stats["Cast"] == 1
    assert ops(model) == {"Where": 1}
    assert ir.to_proto(model).graph.output[0].type.tensor_type.elem_type == F16
    for seed in range(3):
        _bit_equal(proto, model, _cond((2, 3, len(EDGES)), seed))


@pytest.mark.parametrize("src,to", [(F16, F32), (F16, F64), (F32, F64)])
def test_exact_widenings(src, to):
    with np.errstate(over="ignore"):
        c = EDGES.astype(NP[src])
    proto = _model(c, -c, to=to)
    model, modified, p = _apply(proto)
    assert modified and ops(model) == {"Where": 1}
    _bit_equal(proto, model, _cond((2, 3, len(EDGES))))


@pytest.mark.parametrize("case", ["extra_reader", "where_out", "c2_input", "to_int32", "to_bool", "to_bf16",
                                  "from_double"])
def test_near_misses_keep_the_cast(case):
    c1, c2, to, kw = np.float32(0.0), MIN32, F16, {}
    if case in ("extra_reader", "where_out", "c2_input"):
        kw[case] = True
    to = {"to_int32": TensorProto.INT32, "to_bool": TensorProto.BOOL, "to_bf16": BF16}.get(case, to)
    if case == "from_double":   # double -> float16: ORT may round twice (via float32); not claimed
        c1, c2 = np.float64(0.0), np.float64(1 + 2 ** -11 + 2 ** -40)
    if case == "to_int32":
        c2 = np.float32(-7.5)
    model, modified, p = _apply(_model(c1, c2, to=to, **kw))
    assert not modified and not p.stats
    assert ops(model)["Cast"] == 1 and ops(model)["Where"] == 1


def test_no_select_no_change():
    """A Cast of a graph input and of a Where with a run-time branch: the change flag stays false."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["a"], to=F16),
         helper.make_node("Where", ["cond", "x", "c"], ["w"]), helper.make_node("Cast", ["w"], ["b"], to=F16)],
        "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [4]),
              helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("a", F16, [4]), helper.make_tensor_value_info("b", F16, [4])],
        [numpy_helper.from_array(np.float32(1.0), "c")])
    model, modified, p = _apply(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert not modified and ops(model) == {"Cast": 2, "Where": 1}


def test_runs_only_after_the_rules():
    """Not a cleanup pass: the mask rules read the export's own mask Casts before fusion (levels.py)."""
    from onnx_fuse.levels import build_stages, cleanup_passes

    assert "cast-of-select" not in {p.display_name for p in cleanup_passes()}
    for level, target in ((1, "ort"), (3, "ort"), (3, "onnx"), (4, "trt")):
        stages = build_stages(level, target)
        where = [i for i, s in enumerate(stages) if "cast-of-select" in {p.display_name for p in s.passes}]
        if level < 2:
            assert where == []
            continue
        fusion = [i for i, s in enumerate(stages) if s.name == "fusion"]
        assert len(where) == 1 and stages[where[0]].name == "cleanup" and where[0] > fusion[0]


CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


@pytest.mark.parametrize("name,target,level,moved", [("llama__torchscript__trained16.onnx", "ort", 3, 1),
                                                     ("llama__optimum__trained16.onnx", "trt", 4, 0)])
def test_float16_decoder_mask_cast_goes(name, target, level, moved):
    """The attention rewrite's Cast of the export's float32 mask Where(keep, 0, finfo.min / -inf) to q's
    float16: one Cast per model gone, the model verified against the original in ORT. Optimum's trt-O4
    has none left to move since the operand-twin merge (04c2268): its layers' mask glue is one value
    and attention-trt rebuilds the causal + key padding bias in q's dtype (118 -> 105 nodes)."""
    result = optimize(str(CORPUS / name), level=level, target=target, verify=True)
    assert result.report.passed
    fires = sum(r.stats.get("Cast", 0) for r in result.report.passes if r.name == "cast-of-select")
    assert fires == moved
    selects = [n.inputs[0].producer() for n in result.model.graph if n.op_type == "Cast"]
    assert not [w for w in selects if w is not None and w.op_type == "Where"
                and all(constant_tensor(v) is not None for v in w.inputs[1:])]
