"""The opset upgrade accepts an output whose named dim the converter's inference sizes (hold-out 40).

torch.export declares the output of a boolean index by its data-dependent symbol (u0) even where it
folded the mask into constant indices (Gemma 4's vision pooler over a constant position grid): the
converter's shape inference computes the real size, which the interface check refused, so the model
stayed at opset 20 and lost every opset-23 fusion (RMSNormalization, Attention-23 at onnx / trt)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto
from onnx import helper as oh

from onnx_fuse import optimize
from onnx_fuse.targets import onnx as onnx_target
from onnx_fuse.verify import make_session

D = 8


def _pooled_rms_model(out_dims) -> onnx.ModelProto:
    """x [2, 4, D] -> x * pow(mean(x^2) + eps, -0.5) * g (Gemma 4's RMSNorm) -> rows picked by constant
    [6, 2] indices (GatherND): the output is [6, D] whatever the declaration says."""
    nodes = [oh.make_node("Pow", ["x", "two"], ["sq"]),
             oh.make_node("ReduceMean", ["sq", "ax"], ["ms"], keepdims=1),
             oh.make_node("Add", ["ms", "eps"], ["mse"]),
             oh.make_node("Pow", ["mse", "mhalf"], ["inv"]),
             oh.make_node("Mul", ["x", "inv"], ["n"]),
             oh.make_node("Mul", ["n", "g"], ["y"]),
             oh.make_node("GatherND", ["y", "idx"], ["out"])]
    rng = np.random.default_rng(0)
    idx = np.array([[0, 0], [0, 2], [0, 3], [1, 1], [1, 2], [1, 3]], np.int64)
    inits = [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "ax"),
             onnx.numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             onnx.numpy_helper.from_array(np.array(-0.5, np.float32), "mhalf"),
             onnx.numpy_helper.from_array((1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "g"),
             onnx.numpy_helper.from_array(idx, "idx")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, D])],
                      [oh.make_tensor_value_info("out", TensorProto.FLOAT, out_dims)], inits)
    # the exporter's value_info, as dynamo writes it: the converter reads weights as placeholders (no
    # values, so no shapes behind ReduceMean's axes input) and sizes the output from these
    model = onnx.shape_inference.infer_shapes(oh.make_model(g, opset_imports=[oh.make_opsetid("", 20)]))
    model.graph.output[0].CopyFrom(oh.make_tensor_value_info("out", TensorProto.FLOAT, out_dims))  # as declared
    # and the folded indices' value_info as the exporter left it: the row count unknown
    model.graph.value_info.append(oh.make_tensor_value_info("idx", TensorProto.INT64, [None, 2]))
    return model


def test_output_named_dim_the_converter_sizes_is_upgraded():
    proto = _pooled_rms_model(["u0", D])
    model = ir.serde.deserialize_model(proto)
    p = onnx_target.UpgradeOpsetPass()
    assert p(model).modified is True, p.stats_reason
    assert model.opset_imports[""] == 23
    out = ir.to_proto(model).graph.output[0].type
    assert out.SerializeToString() == proto.graph.output[0].type.SerializeToString()  # as declared
    x = np.random.default_rng(1).standard_normal((2, 4, D)).astype(np.float32)
    np.testing.assert_array_equal(make_session(proto).run(None, {"x": x})[0],
                                  make_session(ir.to_proto(model)).run(None, {"x": x})[0])


def test_sized_outputs_fuse_the_opset_23_norm_and_verify():
    """End to end: before the fix the norm stayed as Pow / ReduceMean / Pow / Mul at every target."""
    for target in ("ort", "onnx", "trt"):
        res = optimize(_pooled_rms_model(["u0", D]), target=target, verify=True)
        ops = res.report.ops_after
        assert ops.get("RMSNormalization") == 1 and "ReduceMean" not in ops, (target, ops)
        assert res.report.verify["passed"] is True, (target, res.report.verify)


def test_only_outputs_may_come_back_sized():
    named, sized = (oh.make_tensor_type_proto(TensorProto.FLOAT, d) for d in (["b", 3], [8, 3]))
    assert onnx_target._same_type(named, sized, sized_ok=True)
    assert not onnx_target._same_type(named, sized)  # an input's named dim: refused as before
    other = oh.make_tensor_type_proto(TensorProto.FLOAT, ["c", 3])
    assert not onnx_target._same_type(named, other, sized_ok=True)  # renamed: still a change
    assert not onnx_target._same_type(sized, named, sized_ok=True)  # a size never becomes a name
    assert not onnx_target._same_type(named, oh.make_tensor_type_proto(TensorProto.FLOAT, [8, 3, 1]), sized_ok=True)
