"""FoldPadIntoConvPass on MaxPool readers: a constant zero Pad of a non-negative activation becomes the MaxPool's
pads where every window keeps a real cell (HGNetV2's stem: Conv + ReLU, F.pad, MaxPool(2, stride 1, ceil_mode))."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.pad_conv_fold import FoldPadIntoConvPass
from pass_testing import apply, check_same, ops

F = onnx.TensorProto.FLOAT


def _model(*, act="Relu", pads=(0, 0, 0, 0, 0, 0, 1, 1), value=0.0, pool=None, indices=False, clip_min=0.0):
    """x -> act -> Pad -> MaxPool (kernel 2, stride 1, ceil_mode 1 unless pool says otherwise)."""
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"),
             numpy_helper.from_array(np.array(value, np.float32), "value")]
    if act == "Clip":
        inits.append(numpy_helper.from_array(np.array(clip_min, np.float32), "lo"))
        first = oh.make_node("Clip", ["x", "lo"], ["a"])
    elif act is None:
        first = oh.make_node("Identity", ["x"], ["a"])
    else:
        first = oh.make_node(act, ["x"], ["a"])
    attrs = pool if pool is not None else {"kernel_shape": [2, 2], "strides": [1, 1], "ceil_mode": 1}
    outs = ["y", "i"] if indices else ["y"]
    nodes = [first, oh.make_node("Pad", ["a", "pads", "value"], ["p"]), oh.make_node("MaxPool", ["p"], outs, **attrs)]
    outputs = [oh.make_tensor_value_info("y", F, ["n", 3, "oh", "ow"])]
    if indices:
        outputs.append(oh.make_tensor_value_info("i", onnx.TensorProto.INT64, ["n", 3, "oh", "ow"]))
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, ["n", 3, "h", "w"])], outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(proto, x):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def _feeds(shape=(2, 3, 9, 8), seed=1):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("kw,want", [
    ({}, [0, 0, 1, 1]),  # HGNetV2's stem
    ({"act": "Sigmoid"}, [0, 0, 1, 1]),
    ({"act": "HardSigmoid"}, [0, 0, 1, 1]),
    ({"act": "Clip", "clip_min": 0.0}, [0, 0, 1, 1]),
    ({"pads": (0, 0, 1, 1, 0, 0, 1, 1), "pool": {"kernel_shape": [3, 3], "strides": [2, 2]}}, [1, 1, 1, 1]),
    ({"pads": (0, 0, 1, 0, 0, 0, 0, 0), "pool": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1,
                                                  "pads": [0, 1, 1, 1]}}, [1, 1, 1, 1]),
    ({"pool": {"kernel_shape": [2, 2], "auto_pad": "VALID"}}, [0, 0, 1, 1]),
])
def test_zero_pad_of_non_negative_folds_into_max_pool(kw, want):
    proto = _model(**kw)
    model, modified, p = apply(FoldPadIntoConvPass, proto, shape_inference=True)
    assert modified and "Pad" not in ops(model) and p.stats["Pad->MaxPool"] == 1
    pool = next(n for n in model.graph if n.op_type == "MaxPool")
    assert list(pool.attributes.get_ints("pads")) == want
    assert pool.attributes.get_string("auto_pad", "NOTSET") == "NOTSET"
    out = check_same(proto, model, _feeds())
    for shape in ((2, 3, 9, 8), (1, 3, 4, 5), (1, 3, 2, 2), (1, 3, 1, 1)):  # bit-equal, odd / even / tiny sizes
        x = _feeds(shape, seed=sum(shape))["x"]
        a, b = _run(proto, x)[0], _run(out, x)[0]
        assert a.shape == b.shape and np.array_equal(a, b), shape


@pytest.mark.parametrize("kw", [
    {"act": None},  # x may be negative: a zero cell would win the max
    {"act": "Tanh"},
    {"act": "Clip", "clip_min": -1.0},
    {"value": 0.5},
    {"pads": (0, 0, 0, 0, 0, 0, 2, 2)},  # a window of padding alone at the end
    {"pads": (0, 0, 2, 2, 0, 0, 0, 0)},  # ... at the start
    {"pads": (0, 0, 0, 0, 0, 0, 2, 2), "pool": {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}},
    {"pool": {"kernel_shape": [2, 2], "dilations": [2, 2]}},
    {"indices": True},  # the indices count the padded tensor's cells
    {"pool": {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}},
])
def test_near_misses_are_refused(kw):
    proto = _model(**kw)
    model, modified, p = apply(FoldPadIntoConvPass, proto, shape_inference=True)
    assert not modified and ops(model).get("Pad") == 1 and not p.stats
    check_same(proto, model, _feeds())


def test_refusals_matter():
    """What the refusals guard against: folding them anyway changes the outputs (or the output size)."""
    x = _feeds()["x"]
    for kw in ({"act": None}, {"pads": (0, 0, 0, 0, 0, 0, 2, 2), "pool": {"kernel_shape": [3, 3], "strides": [2, 2],
                                                                         "ceil_mode": 1}}):
        proto = _model(**kw)
        folded = onnx.ModelProto()
        folded.CopyFrom(proto)
        pool = folded.graph.node[2]
        pool.input[0] = "a"
        pads = list(numpy_helper.to_array(folded.graph.initializer[0]))
        pool.attribute.append(oh.make_attribute("pads", [int(p) for p in pads[2:4] + pads[6:8]]))
        a, b = _run(proto, x)[0], _run(folded, x)[0]
        assert a.shape != b.shape or not np.array_equal(a, b), kw


def test_optimize_folds_and_verifies():
    from onnx_fuse.api import optimize

    proto = _model()
    for target in ("ort", "onnx", "trt"):
        result = optimize(proto, level=3, target=target, verify=True)
        assert result.report.ops_after.get("Pad", 0) == 0, target
        assert result.report.passed
