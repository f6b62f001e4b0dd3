"""Paged KV asked for (O4, trt) on a model with past KV inputs but no attention over them that
recognize.yaml turns into a canonical AttentionKV: the report says why nothing was paged, in one
line (before, the graph_io rule found no candidate and said nothing).

The model keeps a sliding window as its cache, as TorchScript's Mistral export does: the present
output is Slice(Concat(past, new)) (the last W positions) and attention reads that window, so
the attention recognized is a plain one over the window, not one over Concat(past, new).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse

B, H, S, P, D, W = 1, 2, "S", "P", 64, 4


def _window_cache_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f, [B, H, s, D]) for n, s in (
        ("q", S), ("k", S), ("v", S), ("past_key_values.0.key", P), ("past_key_values.0.value", P))]
    inits = [numpy_helper.from_array(np.array(x, np.int64), n) for n, x in (
        ("starts", [-W]), ("ends", [2**62]), ("axes", [2]))]
    inits.append(numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale"))
    nodes = [
        helper.make_node("Concat", ["past_key_values.0.key", "k"], ["kc"], axis=2),
        helper.make_node("Concat", ["past_key_values.0.value", "v"], ["vc"], axis=2),
        helper.make_node("Slice", ["kc", "starts", "ends", "axes"], ["present.0.key"]),
        helper.make_node("Slice", ["vc", "starts", "ends", "axes"], ["present.0.value"]),
        helper.make_node("Transpose", ["present.0.key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"]),
        helper.make_node("Mul", ["qk", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "present.0.value"], ["out"]),
    ]
    outputs = [helper.make_tensor_value_info("out", f, [B, H, S, D]),
               helper.make_tensor_value_info("present.0.key", f, [B, H, None, D]),
               helper.make_tensor_value_info("present.0.value", f, [B, H, None, D])]
    graph = helper.make_graph(nodes, "window_cache", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_no_attention_kv_says_why_nothing_was_paged():
    result = onnx_fuse.optimize(_window_cache_model(), level=4, target="trt", float32_plugins=True)
    names = [v.name for v in result.model.graph.inputs]
    assert "past_key_values.0.key" in names and "block_tables" not in names  # nothing paged
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert len(notes) == 1, result.report.warnings
    note = notes[0]
    assert "no attention over the KV cache was recognized" in note
    assert "'present.0.key' is Slice" in note and "Concat('past_key_values.0.key', new)" in note


def test_models_without_a_kv_cache_get_no_line():
    """An encoder at O4 trt: nothing to page, nothing said."""
    model = _window_cache_model()
    g = model.graph
    keep = {"Transpose", "MatMul", "Mul", "Softmax"}
    nodes = [n for n in g.node if n.op_type in keep]
    nodes[0].input[0] = "k"
    nodes[-1].input[1] = "v"
    del g.node[:]
    g.node.extend(nodes)
    del g.input[3:]
    del g.output[1:]
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    assert not [w for w in result.report.warnings if "trt-paged-kv" in w], result.report.warnings
