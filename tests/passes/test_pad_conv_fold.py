"""FoldPadIntoConvPass: a constant zero Pad of the spatial axes becomes the pads of the Conv reading it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.pad_conv_fold import FoldPadIntoConvPass
from pass_testing import apply, check_same, ops

F = onnx.TensorProto.FLOAT


def _model(*, pads=(0, 0, 0, 0, 0, 0, 1, 1), value=0.0, mode=None, axes=None, opset=17, dims=2,
           conv_attrs=None, extra_reader=False, pad_out=False, group=1):
    """x -> Pad -> Conv (3x3, stride 2 unless conv_attrs say otherwise), TorchScript's F.pad form."""
    rng = np.random.default_rng(0)
    cin, cout = 4, 6
    wide = cin + (pads[1] + pads[len(pads) // 2 + 1] if axes is None else 0)  # a channel pad widens the Conv
    inits = [numpy_helper.from_array(rng.standard_normal((cout, wide // group, *[3] * dims)).astype(np.float32),
                                     "w"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")]
    attrs = {"mode": mode} if mode else {}
    if opset >= 11:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        pad_in = ["x", "pads"]
        if value is not None:
            inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
            pad_in.append("value")
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            pad_in += [""] * (3 - len(pad_in)) + ["axes"]
        pad = oh.make_node("Pad", pad_in, ["p"], **attrs)
    else:
        pad = oh.make_node("Pad", ["x"], ["p"], pads=list(pads), value=value or 0.0, **attrs)
    conv = oh.make_node("Conv", ["p", "w", "b"], ["y"], group=group,
                        **(conv_attrs if conv_attrs is not None else {"strides": [2] * dims}))
    nodes, outputs = [pad, conv], [oh.make_tensor_value_info("y", F, ["n", cout, *[f"o{i}" for i in range(dims)]])]
    padded = ["n", cin, *[f"p{i}" for i in range(dims)]]
    if extra_reader:
        nodes.append(oh.make_node("Relu", ["p"], ["r"]))
        outputs.append(oh.make_tensor_value_info("r", F, padded))
    if pad_out:
        outputs.append(oh.make_tensor_value_info("p", F, padded))
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, ["n", cin, *["h", "w"][:dims]])],
                          outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(dims=2):
    return {"x": np.random.default_rng(1).standard_normal((2, 4, 9, 8)[:2 + dims]).astype(np.float32)}


def _conv_pads(model: ir.Model) -> list[int]:
    conv = next(n for n in model.graph if n.op_type == "Conv")
    return list(conv.attributes.get_ints("pads", []) or [])


@pytest.mark.parametrize("kw,want", [
    ({}, [0, 0, 1, 1]),  # MobileNetV2's stride-2 "same": bottom / right only
    ({"pads": (0, 0, 1, 2, 0, 0, 1, 1), "conv_attrs": {"pads": [1, 0, 0, 1]}}, [2, 2, 1, 2]),
    ({"value": None}, [0, 0, 1, 1]),  # no value input: 0
    ({"mode": "constant", "group": 2}, [0, 0, 1, 1]),
    ({"opset": 10}, [0, 0, 1, 1]),  # pads / value as attributes
    ({"opset": 18, "pads": (1, 1, 1, 1), "axes": [2, -1]}, [1, 1, 1, 1]),  # opset 18's axes input
    ({"opset": 18, "pads": (0, 2, 0, 1), "axes": [1, 2], "dims": 1}, [2, 1]),  # axes includes the zero channel pad
    ({"dims": 1, "pads": (0, 0, 2, 0, 0, 1)}, [2, 1]),
    ({"conv_attrs": {"auto_pad": "VALID", "dilations": [2, 1]}}, [0, 0, 1, 1]),
])
def test_zero_pad_folds_into_conv(kw, want):
    proto = _model(**kw)
    model, modified, p = apply(FoldPadIntoConvPass, proto, shape_inference=True)
    assert modified and ops(model) == {"Conv": 1}
    assert p.stats["Pad->Conv"] == 1 and _conv_pads(model) == want
    check_same(proto, model, _feeds(kw.get("dims", 2)))


def test_pad_with_another_reader_stays_for_it():
    """The Conv takes the padding; the Relu still reads the Pad's output."""
    for kw in ({"extra_reader": True}, {"pad_out": True}):
        proto = _model(**kw)
        model, modified, _ = apply(FoldPadIntoConvPass, proto, shape_inference=True)
        assert modified and ops(model).get("Pad") == 1
        conv = next(n for n in model.graph if n.op_type == "Conv")
        assert conv.inputs[0].name == "x"
        check_same(proto, model, _feeds())


@pytest.mark.parametrize("kw", [
    {"value": 0.5},  # the Conv's own padding is zeros
    {"mode": "reflect"},
    {"mode": "edge"},
    {"pads": (0, 1, 0, 0, 0, 0, 0, 0)},  # channel axis
    {"pads": (1, 0, 0, 0, 0, 0, 0, 0)},  # batch axis
    {"pads": (0, 0, -1, 0, 0, 0, 1, 1)},  # a crop
    {"conv_attrs": {"auto_pad": "SAME_UPPER"}},  # pads computed from the input's (padded) size
    {"opset": 10, "value": 1.0},
])
def test_near_misses_are_refused(kw):
    proto = _model(**kw)
    model, modified, p = apply(FoldPadIntoConvPass, proto, shape_inference=True)
    assert not modified and ops(model).get("Pad") == 1 and not p.stats
    check_same(proto, model, _feeds())


def test_pad_as_conv_weight_is_refused():
    """Only a Pad read as the Conv's X folds."""
    proto = _model()
    graph = proto.graph
    graph.node[1].input[:] = ["x", "p_w"]
    graph.node.insert(0, oh.make_node("Pad", ["w", "pads"], ["p_w"]))
    graph.node[2].input[0] = "x"
    graph.node.pop(1)
    graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones((6, 4, 3, 3), np.float32), "w"))
    graph.initializer[2].CopyFrom(numpy_helper.from_array(np.zeros(8, np.int64), "pads"))
    model, modified, _ = apply(FoldPadIntoConvPass, proto, shape_inference=True)
    assert not modified


@pytest.mark.parametrize("level,left", [(1, 1), (2, 0), (3, 0)])
def test_levels_fold_from_o2(level, left):
    """The pass runs at O2 and up for every target, verified against the original."""
    from onnx_fuse.api import optimize

    proto = _model()
    for target in ("ort", "onnx", "trt"):
        result = optimize(proto, level=level, target=target, verify=True)
        assert result.report.ops_after.get("Pad", 0) == left, target
        assert result.report.passed
