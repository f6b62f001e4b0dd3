"""head_size_bindings (passes/contrib_head_size.py): the symbolic head size of a KV cache input
(onnxruntime-genai's kv_cache_dim) read from what fixes it: the com.microsoft GroupQueryAttention that
takes the cache (packed QKV width / (H + 2 Hkv)) or a Concat joining it to new keys of a static head
size (the builder's fp16 CPU form before MultiHeadAttention); two different sizes bind nothing."""

from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from onnx_fuse.passes.contrib_head_size import BindContribHeadSizePass, head_size_bindings


def _concat_model(new_head=16, second=None):
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("past", f, ["b", 2, "p", "kv_cache_dim"]),
           helper.make_tensor_value_info("new", f, ["b", 2, "s", new_head])]
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2)]
    outs = [helper.make_tensor_value_info("present", f, ["b", 2, "t", "kv_cache_dim"])]
    if second is not None:   # another layer whose keys have another head size
        ins += [helper.make_tensor_value_info("past1", f, ["b", 2, "p", "kv_cache_dim"]),
                helper.make_tensor_value_info("new1", f, ["b", 2, "s", second])]
        nodes.append(helper.make_node("Concat", ["past1", "new1"], ["present1"], axis=2))
        outs.append(helper.make_tensor_value_info("present1", f, ["b", 2, "t", "kv_cache_dim"]))
    graph = helper.make_graph(nodes, "g", ins, outs)
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))


def test_concat_join_binds_the_head_size():
    model = _concat_model()
    assert head_size_bindings(model.graph) == {"kv_cache_dim": 16}
    assert BindContribHeadSizePass()(model).modified
    assert [d for d in model.graph.inputs[0].shape] == [ir.SymbolicDim("b"), 2, ir.SymbolicDim("p"), 16]
    assert model.graph.outputs[0].shape[3] == 16


def test_conflicting_sizes_bind_nothing():
    assert head_size_bindings(_concat_model(16, second=32).graph) == {}


def test_gqa_binds_from_the_packed_width():
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("qkv", f, ["b", "s", (4 + 2 * 2) * 64]),
           helper.make_tensor_value_info("past_key", f, ["b", 2, "p", "kv_cache_dim"]),
           helper.make_tensor_value_info("past_value", f, ["b", 2, "p", "kv_cache_dim"]),
           helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["b"]),
           helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k",
                                                    "total_sequence_length"], ["y", "pk", "pv"],
                            domain="com.microsoft", num_heads=4, kv_num_heads=2)
    outs = [helper.make_tensor_value_info("y", f, ["b", "s", 256])]
    graph = helper.make_graph([node], "g", ins, outs)
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid("com.microsoft", 1)]))
    assert head_size_bindings(model.graph) == {"kv_cache_dim": 64}
