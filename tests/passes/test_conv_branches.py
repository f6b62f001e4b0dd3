"""MergeConvBranchesPass: Conv branches of one input summed with an identity BN (RepVGG blocks) as one Conv."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.conv_branches import MergeConvBranchesPass
from pass_testing import apply, check_same, ops

F = onnx.TensorProto.FLOAT
C = 6


def _block(*, group=C, kernels=(3, 3, 1), bn=True, strides=1, pads=None, dilation=1, extra_reader=False,
           other_input=False, bias=True):
    """x -> sum of Conv_k(x) for k in kernels (+ BN(x)), PP-LCNetV3's LearnableRepLayer after BN folding."""
    rng = np.random.default_rng(0)
    inits, nodes, leaves = [], [], []
    for i, k in enumerate(kernels):
        inits.append(numpy_helper.from_array(rng.standard_normal((C, C // group, k, k)).astype(np.float32), f"w{i}"))
        ins = ["z" if other_input and i == 0 else "x", f"w{i}"]
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), f"b{i}"))
            ins.append(f"b{i}")
        p = pads[i] if pads is not None else [(k - 1) // 2 * dilation] * 4
        nodes.append(oh.make_node("Conv", ins, [f"c{i}"], group=group, strides=[strides] * 2, pads=p,
                                  dilations=[dilation] * 2))
        leaves.append(f"c{i}")
    if bn:
        inits += [numpy_helper.from_array(a.astype(np.float32), f"bn_{n}") for n, a in (
            ("scale", rng.uniform(0.5, 2.0, C)), ("bias", rng.standard_normal(C)),
            ("mean", rng.standard_normal(C)), ("var", rng.uniform(0.2, 3.0, C)))]
        nodes.append(oh.make_node("BatchNormalization", ["x", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["i"],
                                  epsilon=1e-5))
        leaves.append("i")
    acc = leaves[0]
    for j, leaf in enumerate(leaves[1:]):
        nodes.append(oh.make_node("Add", [acc, leaf], [f"a{j}"]))
        acc = f"a{j}"
    nodes.append(oh.make_node("Relu", [acc], ["y"]))
    inputs = [oh.make_tensor_value_info("x", F, ["n", C, "h", "w"])]
    if other_input:
        inputs.append(oh.make_tensor_value_info("z", F, ["n", C, "h", "w"]))
    outputs = [oh.make_tensor_value_info("y", F, ["n", C, "oh", "ow"])]
    if extra_reader:
        outputs.append(oh.make_tensor_value_info(leaves[-1], F, ["n", C, "oh", "ow"]))
    model = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(other_input=False):
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, C, 9, 8)).astype(np.float32)}
    if other_input:
        feeds["z"] = rng.standard_normal((2, C, 9, 8)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("kw,bns", [
    ({}, 1),  # depthwise 3x3 + 3x3 + 1x1 + identity BN (PP-OCRv5)
    ({"group": 1}, 1),  # dense
    ({"group": 2, "bias": False}, 1),
    ({"kernels": (5, 3, 1)}, 1),
    ({"kernels": (1, 1)}, 1),
    ({"strides": 2, "bn": False}, 0),  # no identity at stride 2
])
def test_branches_merge_into_one_conv(kw, bns):
    proto = _block(**kw)
    model, modified, p = apply(MergeConvBranchesPass, proto, shape_inference=True)
    assert modified and ops(model) == {"Conv": 1, "Relu": 1}
    assert p.stats["Conv branches"] == 1 and p.stats["identity BatchNormalization"] == bns
    check_same(proto, model, _feeds())


@pytest.mark.parametrize("kw", [
    {"extra_reader": True},  # the BN's output is read outside the sum too
    {"other_input": True},  # a branch of another input
    {"pads": [[2, 2, 0, 0], [1] * 4, [0] * 4]},  # a 3x3 padded at the start only: its taps sit one step off
    {"pads": [[1, 0, 1, 2], [1] * 4, [0] * 4]},
    {"dilation": 2},
])
def test_near_misses_are_refused(kw):
    proto = _block(**kw)
    model, modified, _ = apply(MergeConvBranchesPass, proto, shape_inference=True)
    assert not modified and ops(model)["Conv"] == 3
    check_same(proto, model, _feeds(kw.get("other_input", False)))


@pytest.mark.parametrize("level,left", [(1, 3), (2, 1), (3, 1)])
def test_levels_merge_from_o2(level, left):
    from onnx_fuse.api import optimize

    proto = _block()
    for target in ("ort", "onnx", "trt"):
        result = optimize(proto, level=level, target=target, verify=True)
        assert result.report.ops_after.get("Conv", 0) == left, target
        assert result.report.ops_after.get("BatchNormalization", 0) == (level < 2), target
        assert result.report.passed
