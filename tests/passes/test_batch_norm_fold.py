"""FoldBatchNormPass: inference BatchNormalization becomes the weights of the Conv / ConvTranspose / Gemm / MatMul
before it, or of an unpadded Conv after it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.batch_norm_fold import FoldBatchNormPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.verify import verify
from pass_testing import apply, check_same, ops

F = onnx.TensorProto.FLOAT


def _bn_inits(c: int, rng, prefix="bn", dtype=np.float32):
    return [numpy_helper.from_array(a.astype(dtype), f"{prefix}_{n}") for n, a in (
        ("scale", rng.uniform(0.5, 2.0, c)), ("bias", rng.standard_normal(c)),
        ("mean", rng.standard_normal(c)), ("var", rng.uniform(0.2, 3.0, c)))]


def _bn(x: str, y: str, prefix="bn", **attrs):
    outs = [y, f"{y}_mean", f"{y}_var"] if attrs.get("training_mode") else [y]  # training: running stats
    return oh.make_node("BatchNormalization", [x, *(f"{prefix}_{n}" for n in ("scale", "bias", "mean", "var"))],
                        outs, epsilon=1e-3, **attrs)


def _model(nodes, inits, inputs, outputs, opset=15):
    graph = oh.make_graph(nodes, "g", inputs, outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _conv(*, group=1, bias=True, dims=2, dtype=np.float32):
    rng = np.random.default_rng(0)
    cin, cout = 4, 8
    elem = F if dtype == np.float32 else onnx.TensorProto.FLOAT16
    inits = [numpy_helper.from_array(rng.standard_normal((cout, cin // group, *[3] * dims)).astype(dtype), "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(dtype), "b"))
        conv_in.append("b")
    inits += _bn_inits(cout, rng, dtype=dtype)
    nodes = [oh.make_node("Conv", conv_in, ["c"], group=group, pads=[1] * 2 * dims, dilations=[2] * dims),
             _bn("c", "y")]
    spatial = ["h", "w"][:dims]
    return _model(nodes, inits, [oh.make_tensor_value_info("x", elem, ["n", cin, *spatial])],
                  [oh.make_tensor_value_info("y", elem, ["n", cout, *[f"o{i}" for i in range(dims)]])])


def _run(proto):
    model, modified, p = apply(FoldBatchNormPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _feeds(shape, dtype=np.float32):
    return {"x": np.random.default_rng(1).standard_normal(shape).astype(dtype)}


@pytest.mark.parametrize("group,bias,dims", [(1, True, 2), (2, False, 2), (4, True, 1), (1, False, 1)])
def test_conv_bn_folds(group, bias, dims):
    proto = _conv(group=group, bias=bias, dims=dims)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"Conv": 1}
    assert p.stats["BatchNormalization<-Conv"] == 1
    check_same(proto, model, _feeds((2, 4, 9, 7)[:2 + dims]))


def test_conv_bn_float16_computed_in_float64():
    proto = _conv(dtype=np.float16)
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Conv": 1}
    assert model.graph.node(0).inputs[1].dtype == onnx.TensorProto.FLOAT16
    check_same(proto, model, _feeds((2, 4, 9, 7), np.float16))


def _levit_linear(*, add_bias=False, shared_weight=False, extra_reader=False, training=False,
                  transpose=False, flatten=False, shape_reader=False):
    """Linear on [B, N, C] (MatMul, optional bias Add), flattened to [B * N, C], BatchNorm1d, back."""
    rng = np.random.default_rng(0)
    k, c = 6, 8
    inits = [numpy_helper.from_array(rng.standard_normal((k, c)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1, c], np.int64), "flat"),
             numpy_helper.from_array(np.array([2, 5, c], np.int64), "back")]
    inits += _bn_inits(c, rng)
    nodes = [oh.make_node("MatMul", ["x", "w"], ["m"])]
    y = "m"
    if add_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"))
        nodes.append(oh.make_node("Add", ["b", "m"], ["mb"]))  # bias first: either order
        y = "mb"
    outputs = [oh.make_tensor_value_info("y", F, [2, 5, c])]
    if transpose:  # BatchNorm1d over [B, C, N]
        nodes += [oh.make_node("Transpose", [y], ["t"], perm=[0, 2, 1]),
                  _bn("t", "n", training_mode=1 if training else 0),
                  oh.make_node("Transpose", ["n"], ["y"], perm=[0, 2, 1])]
    else:  # the TorchScript exporter flattens with Flatten(axis=2), dynamo with Reshape
        flat = oh.make_node("Flatten", [y], ["r"], axis=2) if flatten else oh.make_node("Reshape", [y, "flat"], ["r"])
        nodes += [flat,
                  _bn("r", "n", training_mode=1 if training else 0),
                  oh.make_node("Reshape", ["n", "back"], ["y"])]
    if shared_weight:
        nodes.append(oh.make_node("MatMul", ["x", "w"], ["m2"]))
        outputs.append(oh.make_tensor_value_info("m2", F, [2, 5, c]))
    if shape_reader:  # TorchScript's reshape_as: reads only the shape, which folding keeps
        nodes.append(oh.make_node("Shape", ["m"], ["m_shape"]))
        outputs.append(oh.make_tensor_value_info("m_shape", onnx.TensorProto.INT64, [3]))
    if extra_reader:
        nodes.append(oh.make_node("Neg", [y], ["neg"]))
        outputs.append(oh.make_tensor_value_info("neg", F, [2, 5, c]))
    return _model(nodes, inits, [oh.make_tensor_value_info("x", F, [2, 5, k])], outputs)


@pytest.mark.parametrize("transpose,flatten", [(False, False), (True, False), (False, True)])
def test_matmul_bn_over_last_axis_gets_a_shift_add(transpose, flatten):
    proto = _levit_linear(transpose=transpose, flatten=flatten)
    model, modified, p = _run(proto)
    moved = {"Transpose": 2} if transpose else {"Flatten": 1, "Reshape": 1} if flatten else {"Reshape": 2}
    assert modified and ops(model) == {"MatMul": 1, "Add": 1, **moved}
    assert p.stats["BatchNormalization<-MatMul"] == 1
    check_same(proto, model, _feeds((2, 5, 6)))


def test_matmul_add_bn_folds_into_the_bias():
    proto = _levit_linear(add_bias=True)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Add": 1, "Reshape": 2}
    assert p.stats["BatchNormalization<-Add"] == 1
    check_same(proto, model, _feeds((2, 5, 6)))


def test_a_shape_reader_does_not_block_the_fold():
    proto = _levit_linear(flatten=True, shape_reader=True)
    model, modified, _ = _run(proto)
    assert modified and "BatchNormalization" not in ops(model)
    check_same(proto, model, _feeds((2, 5, 6)))


def test_shared_weight_is_folded_into_a_copy():
    proto = _levit_linear(shared_weight=True)
    model, modified, _ = _run(proto)
    assert modified and "BatchNormalization" not in ops(model)
    assert "w" in model.graph.initializers  # the other MatMul still reads the original
    check_same(proto, model, _feeds((2, 5, 6)))


@pytest.mark.parametrize("kw", [{"extra_reader": True}, {"training": True}])
def test_refused(kw):
    proto = _levit_linear(**kw)
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1


def test_bn_on_a_non_channel_axis_is_refused():
    """BN's channel axis 1 of [B, N, C] is N: the MatMul's columns are not BN's channels."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w"),
             *_bn_inits(8, rng)]
    nodes = [oh.make_node("MatMul", ["x", "w"], ["m"]), _bn("m", "y")]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, [2, 8, 6])],
                   [oh.make_tensor_value_info("y", F, [2, 8, 8])])
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1


def test_residual_add_before_bn_is_refused():
    """MatMul -> Add(activation) -> BN: the Add is no constant bias, so s and t cannot go into weights."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"), *_bn_inits(8, rng)]
    nodes = [oh.make_node("MatMul", ["x", "w"], ["m"]), oh.make_node("Add", ["m", "x"], ["a"]), _bn("a", "y")]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, [5, 8])],
                   [oh.make_tensor_value_info("y", F, [5, 8])])
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1


@pytest.mark.parametrize("trans_b,c_shape,beta", [(0, None, 1.0), (1, [8], 0.5), (0, [3, 8], 2.0),
                                                  (1, [3, 1], 1.0), (0, [8], 0.0)])
def test_gemm_bn_folds(trans_b, c_shape, beta):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 6) if trans_b else (6, 8)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), *_bn_inits(8, rng)]
    gemm_in = ["x", "w"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_shape).astype(np.float32), "c"))
        gemm_in.append("c")
    nodes = [oh.make_node("Gemm", gemm_in, ["g"], transB=trans_b, beta=beta, alpha=0.7), _bn("g", "y")]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, [3, 6])],
                   [oh.make_tensor_value_info("y", F, [3, 8])])
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Gemm": 1}
    check_same(proto, model, _feeds((3, 6)))


def test_no_batch_norm_is_a_no_op():
    proto = _levit_linear()
    model, modified, _ = _run(proto)
    again = FoldBatchNormPass()(model)
    assert modified and not again.modified


@pytest.mark.parametrize("level,left", [(1, 1), (2, 0), (3, 0)])
def test_levels_fold_from_o2(level, left):
    """The pass runs at O2 and up for every target; O1 is cleanup only."""
    from onnx_fuse.api import optimize

    proto = _conv(group=2, bias=False)
    for target in ("ort", "onnx", "trt"):
        result = optimize(proto, level=level, target=target, verify=True)
        assert result.report.ops_after.get("BatchNormalization", 0) == left, target
        assert result.report.passed


def _elem(dtype):
    return F if dtype == np.float32 else onnx.TensorProto.FLOAT16


def _bn_conv(*, group=1, bias=True, dims=2, dtype=np.float32, conv_attrs=None, extra=None, y_out=False):
    """x -> BN -> Conv (BN before the Conv): folds forward only when the Conv has no padding."""
    rng = np.random.default_rng(0)
    cin, cout = 4, 8
    inits = [numpy_helper.from_array(rng.standard_normal((cout, cin // group, *[3] * dims)).astype(dtype), "w"),
             *_bn_inits(cin, rng, dtype=dtype)]
    conv_in = ["bn_y", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(dtype), "b"))
        conv_in.append("b")
    nodes = [_bn("x", "bn_y"), oh.make_node("Conv", conv_in, ["y"], group=group,
                                            **(conv_attrs or dict(strides=[2] * dims, dilations=[1] * dims)))]
    x_dims = ["n", cin, *["h", "w"][:dims]]
    outputs = [oh.make_tensor_value_info("y", _elem(dtype), ["n", cout, *[f"o{i}" for i in range(dims)]])]
    if extra:  # a second reader of the BN's output
        nodes.append(oh.make_node(extra, ["bn_y"], ["e"]))
        outputs.append(oh.make_tensor_value_info("e", onnx.TensorProto.INT64, [dims + 2]) if extra == "Shape"
                       else oh.make_tensor_value_info("e", _elem(dtype), x_dims))
    if y_out:
        outputs.append(oh.make_tensor_value_info("bn_y", _elem(dtype), x_dims))
    return _model(nodes, inits, [oh.make_tensor_value_info("x", _elem(dtype), x_dims)], outputs)


@pytest.mark.parametrize("group,bias,dims,attrs", [
    (1, True, 2, None), (2, False, 2, None), (4, True, 1, dict(dilations=[2])), (2, True, 2, dict(auto_pad="VALID")),
    (1, False, 2, dict(pads=[0, 0, 0, 0], strides=[1, 2]))])
def test_bn_then_unpadded_conv_folds_forward(group, bias, dims, attrs):
    proto = _bn_conv(group=group, bias=bias, dims=dims, conv_attrs=attrs)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"Conv": 1}
    assert p.stats["BatchNormalization->Conv"] == 1
    assert model.graph.node(0).inputs[0].name == "x"
    check_same(proto, model, _feeds((2, 4, 9, 7)[:2 + dims]))


def test_bn_then_conv_float16():
    proto = _bn_conv(group=2, dtype=np.float16)
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Conv": 1}
    assert model.graph.node(0).inputs[2].dtype == onnx.TensorProto.FLOAT16
    check_same(proto, model, _feeds((2, 4, 9, 7), np.float16))


@pytest.mark.parametrize("kw", [
    dict(conv_attrs=dict(pads=[1, 1, 1, 1])),          # padded taps read BN's zeros, not BN(0) = t
    dict(conv_attrs=dict(pads=[0, 1, 0, 0])),
    dict(conv_attrs=dict(auto_pad="SAME_UPPER")),
    dict(extra="Relu"),                                # the BN's output has another reader
    dict(y_out=True)])                                 # ... or is a graph output
def test_bn_then_conv_refused(kw):
    proto = _bn_conv(**kw)
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1


def test_padded_conv_fold_would_be_wrong_at_the_border():
    """Why padding is refused: the forward fold's weights and bias on a padded Conv differ at the border."""
    proto = _bn_conv(conv_attrs=dict(pads=[1, 1, 1, 1]))
    unpadded = _bn_conv()
    model, _, _ = _run(unpadded)
    folded = ir.to_proto(model)
    conv = next(n for n in folded.graph.node if n.op_type == "Conv")
    conv.attribute.append(oh.make_attribute("pads", [1, 1, 1, 1]))
    result = verify(proto, folded, inputs=_feeds((2, 4, 9, 7)), seed=0)
    assert not result["passed"]


def test_bn_shape_reader_does_not_block_the_forward_fold():
    proto = _bn_conv(extra="Shape")
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Conv": 1, "Shape": 1}
    check_same(proto, model, _feeds((2, 4, 9, 7)))


def test_conv_bn_conv_folds_backward_first():
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w"),
             *_bn_inits(4, rng)]
    nodes = [oh.make_node("Conv", ["x", "w0"], ["c"]), _bn("c", "bn_y"),
             oh.make_node("Conv", ["bn_y", "w"], ["y"], pads=[1, 1, 1, 1])]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, ["n", 4, "h", "w"])],
                   [oh.make_tensor_value_info("y", F, ["n", 6, "h", "w"])])
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"Conv": 2} and p.stats["BatchNormalization<-Conv"] == 1
    check_same(proto, model, _feeds((2, 4, 9, 7)))


def _conv_transpose_bn(*, group=1, bias=True, dtype=np.float32, dims=2, attrs=None, extra_reader=False):
    rng = np.random.default_rng(0)
    cin, cout = 4, 6
    inits = [numpy_helper.from_array(rng.standard_normal((cin, cout // group, *[3] * dims)).astype(dtype), "w"),
             *_bn_inits(cout, rng, dtype=dtype)]
    ct_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(dtype), "b"))
        ct_in.append("b")
    nodes = [oh.make_node("ConvTranspose", ct_in, ["c"], group=group, **(attrs or {})), _bn("c", "y")]
    y_dims = ["n", cout, *[f"o{i}" for i in range(dims)]]
    outputs = [oh.make_tensor_value_info("y", _elem(dtype), y_dims)]
    if extra_reader:
        nodes.append(oh.make_node("Neg", ["c"], ["neg"]))
        outputs.append(oh.make_tensor_value_info("neg", _elem(dtype), y_dims))
    return _model(nodes, inits, [oh.make_tensor_value_info("x", _elem(dtype), ["n", cin, *["h", "w"][:dims]])],
                  outputs)


@pytest.mark.parametrize("group,bias,dims,attrs", [
    (1, True, 2, None), (2, False, 2, dict(strides=[2, 2], pads=[1, 0, 1, 1], output_padding=[1, 1])),
    (2, True, 1, dict(strides=[3], output_padding=[2], dilations=[2])), (1, False, 1, dict(pads=[1, 1]))])
def test_conv_transpose_bn_folds(group, bias, dims, attrs):
    proto = _conv_transpose_bn(group=group, bias=bias, dims=dims, attrs=attrs)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"ConvTranspose": 1}
    assert p.stats["BatchNormalization<-ConvTranspose"] == 1
    check_same(proto, model, _feeds((2, 4, 5, 4)[:2 + dims]))


def test_conv_transpose_bn_float16():
    proto = _conv_transpose_bn(group=2, dtype=np.float16, attrs=dict(strides=[2, 2], output_padding=[1, 0]))
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"ConvTranspose": 1}
    check_same(proto, model, _feeds((2, 4, 5, 4), np.float16))


def test_conv_transpose_with_another_reader_is_refused():
    proto = _conv_transpose_bn(extra_reader=True)
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1


def test_bn_input_that_is_a_graph_output_keeps_its_name():
    """x -> Relu -> r (a model output too) -> BN -> Conv: the Conv reads r after the fold, r keeps its name."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "w"), *_bn_inits(4, rng)]
    nodes = [oh.make_node("Relu", ["x"], ["r"]), _bn("r", "bn_y"), oh.make_node("Conv", ["bn_y", "w"], ["y"])]
    dims = ["n", 4, "h", "w"]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, dims)],
                   [oh.make_tensor_value_info("y", F, ["n", 8, "h", "w"]), oh.make_tensor_value_info("r", F, dims)])
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Relu": 1, "Conv": 1}
    check_same(proto, model, _feeds((2, 4, 5, 3)))


@pytest.mark.parametrize("build", [lambda: _bn_conv(group=2), lambda: _conv_transpose_bn(group=2)])
def test_forward_and_conv_transpose_folds_run_in_optimize(build):
    from onnx_fuse.api import optimize

    result = optimize(build(), level=2, target="ort", verify=True)
    assert result.report.ops_after.get("BatchNormalization", 0) == 0
    assert result.report.passed


def test_bn_beside_conv_branches_of_a_shared_conv_output_is_refused():
    """PP-OCRv5's RepVGG-style block: the stem Conv's output feeds a 3x3 and a 1x1 Conv branch and an identity BN,
    summed. Folding the BN into the stem Conv would change what the branches read, so it stays (and numerics hold)."""
    rng = np.random.default_rng(0)
    c = 4
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (
        ("w0", (c, 3, 3, 3)), ("b0", (c,)), ("w3", (c, 1, 3, 3)), ("w1", (c, 1, 1, 1)))] + _bn_inits(c, rng)
    nodes = [oh.make_node("Conv", ["x", "w0", "b0"], ["s"], pads=[1] * 4),
             oh.make_node("Conv", ["s", "w3"], ["k3"], group=c, pads=[1] * 4),
             oh.make_node("Conv", ["s", "w1"], ["k1"], group=c), _bn("s", "i"),
             oh.make_node("Add", ["k3", "k1"], ["a"]), oh.make_node("Add", ["a", "i"], ["y"])]
    proto = _model(nodes, inits, [oh.make_tensor_value_info("x", F, ["n", 3, "h", "w"])],
                   [oh.make_tensor_value_info("y", F, ["n", c, "h", "w"])])
    model, modified, _ = _run(proto)
    assert not modified and ops(model)["BatchNormalization"] == 1
    check_same(proto, model, _feeds((2, 3, 7, 6)))
