"""PackSiblingMatMulsPass: projections of one activation become one MatMul (+ bias) and a Split."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.pack_matmul import PackSiblingMatMulsPass
from pass_testing import apply, check_same, ops

K = 16


def _model(widths, *, bias=False, extra_reader=False, other_k=False, out_is_output=False):
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for i, n in enumerate(widths):
        k = K + 1 if other_k and i == 0 else K
        x = "x17" if other_k and i == 0 else "x"
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), f"w{i}"))
        nodes.append(oh.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]))
        y = f"m{i}"
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"b{i}"))
            nodes.append(oh.make_node("Add", [f"b{i}", y], [f"a{i}"]))  # bias first: either order
            y = f"a{i}"
        if out_is_output and i == 0:
            outputs.append(oh.make_tensor_value_info(y, onnx.TensorProto.FLOAT, ["b", "s", n]))
            continue
        nodes.append(oh.make_node("Relu", [y], [f"y{i}"]))
        outputs.append(oh.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, ["b", "s", n]))
    if extra_reader:
        nodes.append(oh.make_node("Neg", ["m0"], ["neg"]))
        outputs.append(oh.make_tensor_value_info("neg", onnx.TensorProto.FLOAT, ["b", "s", widths[0]]))
    inputs = [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", "s", K])]
    if other_k:
        inputs.append(oh.make_tensor_value_info("x17", onnx.TensorProto.FLOAT, ["b", "s", K + 1]))
    graph = oh.make_graph(nodes, "g", inputs, outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(proto):
    model, modified, p = apply(PackSiblingMatMulsPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _feeds(other_k=False):
    rng = np.random.default_rng(1)
    f = {"x": rng.standard_normal((2, 3, K)).astype(np.float32)}
    if other_k:
        f["x17"] = rng.standard_normal((2, 3, K + 1)).astype(np.float32)
    return f


def test_qkv_become_one_matmul_and_a_split():
    proto = _model([32, 8, 8])
    model, modified, p = _run(proto)
    assert modified and p.stats["MatMul"] == 3
    assert ops(model) == {"MatMul": 1, "Split": 1, "Relu": 3}
    mm = next(n for n in model.graph if n.op_type == "MatMul")
    assert list(mm.inputs[1].shape) == [K, 48]
    check_same(proto, model, inputs=_feeds())


def test_biases_are_packed_with_the_weights():
    proto = _model([32, 8, 8], bias=True)
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Add": 1, "Split": 1, "Relu": 3}
    check_same(proto, model, inputs=_feeds())


def test_a_bias_add_with_another_reader_packs_the_matmuls_only():
    proto = _model([32, 8], bias=True, extra_reader=True)
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Split": 1, "Add": 2, "Relu": 2, "Neg": 1}
    check_same(proto, model, inputs=_feeds())


def test_not_packed_different_inputs_or_graph_outputs():
    proto = _model([32, 8], other_k=True)  # the two MatMuls read different activations
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["MatMul"] == 2
    proto = _model([32, 8], out_is_output=True)  # m0 is a graph output: its name must stay
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["MatMul"] == 2
    check_same(proto, model, inputs=_feeds())


def test_runs_in_the_ort_and_onnx_pipelines_not_trt():
    import onnx_fuse

    proto = _model([32, 8, 8], bias=True)
    for target, packed in (("ort", True), ("onnx", True), ("trt", False)):
        out = onnx_fuse.optimize(proto, level=2, target=target, verify=True)
        assert out.report.passed, (target, out.report.verify)
        counts = ops(out.model)
        assert (counts["MatMul"] == 1 and counts["Split"] == 1) == packed, (target, counts)
