"""verify on half-precision models: the padded mask row never puts a query row's whole sliding
window in the padding (that row's output depends on the precision a runtime adds the float16
mask minimum in, not on the graph), and corpus exports made in float16 verify after optimizing."""

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.verify import make_inputs

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


def _windowed(elem: int, window: int = 4):
    """y = float(mask) * (positions > positions - window): a comparison fed by position - W, the
    shape window_constant() reads as a sliding window."""
    nodes = [
        helper.make_node("Shape", ["attention_mask"], ["t"], start=1, end=2),
        helper.make_node("Squeeze", ["t"], ["t0"]),
        helper.make_node("Range", ["zero", "t0", "one"], ["pos"]),
        helper.make_node("Sub", ["pos", "w"], ["lo"]),
        helper.make_node("Greater", ["pos", "lo"], ["band"]),
        helper.make_node("Cast", ["band"], ["bandf"], to=elem),
        helper.make_node("Cast", ["attention_mask"], ["mf"], to=elem),
        helper.make_node("Mul", ["mf", "bandf"], ["y"]),
    ]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("one", TensorProto.INT64, [], [1]),
             helper.make_tensor("w", TensorProto.INT64, [], [window])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                                         ["batch", "sequence"])],
                              [helper.make_tensor_value_info("y", elem, ["batch", "sequence"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("elem,padded", [(TensorProto.FLOAT16, 3), (TensorProto.BFLOAT16, 3),
                                         (TensorProto.FLOAT, None), ("keep_io", 3)])
def test_half_precision_window_pads_fewer_than_the_window(elem, padded):
    model = _windowed(TensorProto.FLOAT16 if elem == "keep_io" else elem)
    if elem == "keep_io":  # converted to fp16 after export with keep_io_types: a float16 weight, float32 out
        g = model.graph
        g.initializer.append(helper.make_tensor("half_one", TensorProto.FLOAT16, [], [1.0]))
        g.node.extend([helper.make_node("Mul", ["y", "half_one"], ["y16"]),
                       helper.make_node("Cast", ["y16"], ["y32"], to=TensorProto.FLOAT)])
        g.output[0].CopyFrom(helper.make_tensor_value_info("y32", TensorProto.FLOAT, ["batch", "sequence"]))
    mask = make_inputs(model, shapes={"attention_mask": (2, 10)})["attention_mask"]
    assert mask[0].all()
    want = 10 - 10 // 2 if padded is None else padded  # fp32 keeps the second half padded
    assert int((mask[-1] == 0).sum()) == want and mask[-1, -want:].sum() == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mistral__kv__trained16.onnx"])
@pytest.mark.parametrize("target,level", [("ort", 3), ("trt", 4)])
def test_float16_sliding_window_export_verifies(name, target, level):
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"{name} not exported (tools/export_corpus.py --dtype float16)")
    res = onnx_fuse.optimize(str(path), level=level, target=target, verify=True)
    assert res.report.verify["passed"], res.report.verify["outputs"]
    ops = {n.op_type for n in res.to_proto().graph.node}
    assert "Softmax" not in ops, ops  # attention was fused, so the padded rows went through it


def _upcast(elem: int, factor: float | None):
    """y (float32) = float(x) [* factor]: a float32 output of an x of dtype elem."""
    nodes = [helper.make_node("Cast", ["x"], ["xf" if factor else "y"], to=TensorProto.FLOAT)]
    inits = []
    if factor:
        nodes.append(helper.make_node("Mul", ["xf", "f"], ["y"]))
        inits.append(helper.make_tensor("f", TensorProto.FLOAT, [], [factor]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, ["b", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("elem,factor,passes", [
    (TensorProto.FLOAT16, 1.003, True),    # float16-sized difference on a float32 output: fine
    (TensorProto.FLOAT, 1.003, False),     # the same in a float32 model is a real difference
    (TensorProto.FLOAT16, 1.05, False),    # and float16's tolerance still catches a wrong rewrite
])
def test_float32_outputs_of_a_half_precision_model_use_float16_tolerance(elem, factor, passes):
    from onnx_fuse.verify import verify

    result = verify(_upcast(elem, None), _upcast(elem, factor))
    assert bool(result["passed"]) is passes, result["outputs"]
    assert any("half-precision" in n for n in result["notes"]) is (elem == TensorProto.FLOAT16)
