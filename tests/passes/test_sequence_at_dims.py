"""SequenceAt outputs keep no invented dim name (passes/shape_inference.py's docstring): onnx infers one
element shape per sequence, so two pieces of different widths came out as [2, 3, unk] both, and ORT,
equating them, failed its buffer reuse on the optimized model (fuzz seed 33243 bf16, session 39)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_fuse


def _split_model(readers):
    """x [2, 3, 6] split on its last axis by sizes fed at run time, pieces read by SequenceAt at
    ``readers`` (index, op after it), each piece then scaled, and the pieces concatenated again."""
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], axis=2),
             helper.make_node("ConcatFromSequence", ["seq"], ["whole"], axis=2),
             helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [], [1.5]))]
    outputs = [helper.make_tensor_value_info("whole", TensorProto.FLOAT, [2, 3, 6])]
    for k, (index, op) in enumerate(readers):
        nodes.append(helper.make_node("Constant", [], [f"i{k}"],
                                      value=helper.make_tensor(f"i{k}v", TensorProto.INT64, [], [index])))
        nodes.append(helper.make_node("SequenceAt", ["seq", f"i{k}"], [f"p{k}"]))
        nodes.append(helper.make_node(op, [f"p{k}"], [f"q{k}"]))
        nodes.append(helper.make_node("Mul", [f"q{k}", "c"], [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [2, 3, None]))
    graph = helper.make_graph(nodes, "split_pieces",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6]),
                               helper.make_tensor_value_info("sizes", TensorProto.INT64, [2])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("readers", [((-1, "Relu"), (0, "Relu")), ((0, "Neg"), (1, "Abs"), (-2, "Relu"))],
                         ids=["two", "three"])
def test_pieces_of_a_run_time_split_share_no_dim_name(level, readers):
    model = _split_model(readers)
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 3, 6)).astype(np.float32), "sizes": np.array([1, 5], np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    proto = onnx_fuse.optimize(model, level=level, target="ort").to_proto()
    shapes = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(proto.graph.value_info) + list(proto.graph.output) if vi.type.tensor_type.HasField("shape")}
    pieces = [shapes.get(n) for n in shapes if n.startswith(("p", "q", "y"))]
    named = {d for s in pieces if s for d in s if isinstance(d, str) and d.startswith("unk__")}
    assert not named, shapes
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=0)
