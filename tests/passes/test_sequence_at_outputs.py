"""A SequenceAt whose output is a graph output is resolved too (passes/sequence_ops.py): an Identity of the
piece keeps the output's name, so no sequence op is left for TensorRT, which runs none (fuzz43's
split_seq trap piece-is-output, session 39)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_fuse

SEQ_OPS = {"SplitToSequence", "SequenceAt", "SequenceConstruct", "ConcatFromSequence"}


def _model(indices, relu_last: bool):
    """x [2, 6] split by constant sizes [2, 4] on axis 1; SequenceAt at ``indices`` straight to graph
    outputs, the last one read through a Relu when ``relu_last``."""
    nodes = [helper.make_node("Constant", [], ["sizes"],
                              value=helper.make_tensor("sv", TensorProto.INT64, [2], [2, 4])),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], axis=1)]
    outputs = []
    for k, index in enumerate(indices):
        nodes.append(helper.make_node("Constant", [], [f"i{k}"],
                                      value=helper.make_tensor(f"iv{k}", TensorProto.INT64, [], [index])))
        last = relu_last and k == len(indices) - 1
        nodes.append(helper.make_node("SequenceAt", ["seq", f"i{k}"], [f"p{k}" if last else f"y{k}"]))
        if last:
            nodes.append(helper.make_node("Relu", [f"p{k}"], [f"y{k}"]))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [2, None]))
    graph = helper.make_graph(nodes, "pieces_out", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("indices,relu_last", [((0, 1), True), ((-1, 0), False), ((0, 0), False), ((1,), False)],
                         ids=["one-out-one-relu", "two-out", "same-piece-twice", "one-out"])
def test_pieces_read_by_graph_outputs_leave_no_sequence_op(target, indices, relu_last):
    model = _model(indices, relu_last)
    x = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    proto = onnx_fuse.optimize(model, level=3, target=target).to_proto()
    assert not {n.op_type for n in proto.graph.node} & SEQ_OPS, [n.op_type for n in proto.graph.node]
    assert [o.name for o in proto.graph.output] == [o.name for o in model.graph.output]
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
