"""tools/same_graph.py: an export's twin check without running (exporter-drift sweeps, docs/holdout.md twentieth
sweep): names do not count; an attribute, a constant's values, an initializer's bytes, a dim name or an op each do."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.tool_modules import load_tool


def _tool():
    return load_tool("same_graph", "same_graph_tool")


def _model(prefix="", freqs=(1.0, 0.1), other=(1.0, 0.01), axis=-1, total="past + seq", w=None):
    """Two Constants feeding two Muls (the two rope tables of a per-layer-type export), a Softmax, a weight."""
    w = np.arange(4, dtype=np.float32).reshape(2, 2) if w is None else w
    p = prefix
    nodes = [
        helper.make_node("Constant", [], [p + "c0"], value=numpy_helper.from_array(np.array(freqs, np.float32))),
        helper.make_node("Constant", [], [p + "c1"], value=numpy_helper.from_array(np.array(other, np.float32))),
        helper.make_node("Mul", ["x", p + "c0"], [p + "m0"], name=p + "mul0"),
        helper.make_node("Mul", [p + "m0", p + "c1"], [p + "m1"], name=p + "mul1"),
        helper.make_node("MatMul", [p + "m1", p + "w"], [p + "mm"]),
        helper.make_node("Softmax", [p + "mm"], ["y"], axis=axis),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", total, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", total, 2])],
                              [numpy_helper.from_array(w, p + "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_renamed_values_and_nodes_are_the_same_graph():
    assert _tool().differences(_model(), _model(prefix="/m/layers.0/")) == []


@pytest.mark.parametrize("changed, part", [
    (dict(freqs=(1.0, 0.01), other=(1.0, 0.1)), "nodes 6 -> 6, first difference at node 0, same ops"),  # tables swapped
    (dict(axis=1), "first difference at node 5"),
    (dict(w=np.ones((2, 2), np.float32)), "initializers 1 -> 1, 1 differ"),
    (dict(total="seq + past"), "outputs y"),
])
def test_each_part_the_optimizer_reads_counts(changed, part):
    diff = _tool().differences(_model(), _model(**changed))
    assert diff and part in "; ".join(diff)


def test_an_extra_node_and_another_opset_are_named():
    a, b = _model(), _model()
    b.graph.node.insert(5, helper.make_node("Identity", ["mm"], ["mm2"]))
    b.graph.node[6].input[0] = "mm2"
    b.opset_import[0].version = 21
    diff = "; ".join(_tool().differences(a, b))
    assert "nodes 6 -> 7" in diff and "'Identity': 1" in diff and "opsets {'': 20} -> {'': 21}" in diff


def test_twin_names_drop_the_version_tag_and_main_reports(tmp_path, capsys):
    tool = _tool()
    assert tool.twin_name("gemma3_pt2150__torchscript__trained.onnx") == "gemma3__torchscript__trained.onnx"
    assert tool.twin_name("llama_os060__kv__trained.onnx") == "llama__kv__trained.onnx"
    assert tool.twin_name("gpt2__kv__trained16.onnx") == "gpt2__kv__trained16.onnx"
    twins, new = tmp_path / "twins", tmp_path / "new"
    twins.mkdir(), new.mkdir()
    onnx.save(_model(), twins / "a__kv__trained.onnx")
    onnx.save(_model(prefix="n/"), new / "a_pt2150__kv__trained.onnx")
    onnx.save(_model(axis=0), new / "a_pt2150__dyn_mask__trained.onnx")
    assert tool.main([str(twins), str(new)]) == 0
    out = capsys.readouterr().out
    assert "a_pt2150__kv__trained.onnx: SAME" in out and "a_pt2150__dyn_mask__trained.onnx: no twin" in out
    assert tool.main([str(tmp_path / "missing"), str(new)]) == 2
