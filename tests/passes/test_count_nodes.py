"""count_nodes (each pass record's before / after) counts nodes in every nested body."""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from onnx_fuse.passes._infra import count_nodes


def _branch(name: str, n: int, inner: onnx.GraphProto | None = None) -> onnx.GraphProto:
    nodes = [helper.make_node("Identity", ["x"], [f"{name}0"])]
    for i in range(1, n):
        nodes.append(helper.make_node("Neg", [f"{name}{i - 1}"], [f"{name}{i}"]))
    out = f"{name}{n - 1}"
    if inner is not None:
        nodes.append(helper.make_node("If", ["c"], [f"{name}_if"], then_branch=inner, else_branch=inner))
        out = f"{name}_if"
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])


def test_counts_nested_if_and_loop_bodies():
    inner = _branch("inner", 3)
    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Neg", ["x"], ["y"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["a"], then_branch=_branch("t", 2, inner), else_branch=_branch("e", 4)),
         helper.make_node("Loop", ["n", "c"], ["s"], body=loop_body),
         helper.make_node("Add", ["a", "x"], ["z"])],
        "main",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [None, 2])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    # main 3; then-branch 2 + its If 1 + the inner body twice (3 + 3); else-branch 4; loop body 2
    assert count_nodes(model) == 3 + (2 + 1 + 6) + 4 + 2
    assert count_nodes(model) == sum(1 for _ in ir.traversal.RecursiveGraphIterator(model.graph))
