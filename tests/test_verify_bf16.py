"""verify on bfloat16 models: ONNX Runtime's CPU provider has no bf16 MatMul / Add / Softmax, so a
model exported in bf16 could not be verified at all ("cannot load the original model"). Both sides
now run through emulate_bf16 (float32 math on bf16-rounded values) at bf16's tolerance; a wrong
rewrite still fails."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse
from onnx_fuse.verify import verify

BF16 = TensorProto.BFLOAT16


def _attention(scale: float = 0.25, elem: int = BF16) -> onnx.ModelProto:
    """softmax(q k^T * scale) v on [batch, 2, seq, 16] inputs, in `elem`."""
    dims = ["batch", 2, "seq", 16]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    scale_t = numpy_helper.from_array(np.array(scale, np.float32), "scale")
    if elem == BF16:
        scale_t = helper.make_tensor("scale", BF16, [], [scale])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, elem, dims) for n in "qkv"],
                              [helper.make_tensor_value_info("y", elem, dims)], [scale_t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(model)


def test_bf16_original_runs_emulated():
    result = verify(_attention(), _attention())
    assert result["passed"], result
    assert any("emulate_bf16" in n for n in result["notes"])


def test_bf16_wrong_rewrite_fails():
    result = verify(_attention(0.25), _attention(0.5))  # a scale off by 2: not bf16 rounding
    assert not result["passed"]
    assert result["outputs"][0]["max_abs"] > 5e-2


def test_float32_model_is_not_emulated():
    result = verify(_attention(elem=TensorProto.FLOAT), _attention(elem=TensorProto.FLOAT))
    assert result["passed"] and not any("emulate_bf16" in n for n in result["notes"])


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_bf16_attention_fuses_and_verifies(target, level):
    result = onnx_fuse.optimize(_attention(), level=level, target=target, verify=True)
    assert result.report.verify["passed"], result.report.verify
    assert "Softmax" not in result.report.ops_after
