"""Small transformer-ish ONNX graphs for the TensorRT build / check / run tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh


def encoder_model(hidden: int = 32, heads: int = 2, layers: int = 1, seed: int = 0,
                  opset: int = 20) -> onnx.ModelProto:
    """Embedding + pre-softmax-masked self-attention + LayerNorm + GELU MLP, dynamic batch/seq."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def w(name, shape):
        inits.append(nh.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"{op.lower()}_{len(nodes)}", **attrs))

    ids = helper.make_tensor_value_info("input_ids", TP.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TP.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("last_hidden_state", TP.FLOAT, ["batch", "seq", hidden])
    hd = hidden // heads
    node("Gather", [w("emb", (100, hidden)), "input_ids"], ["x0"])
    c("shape_bshd", np.array([0, 0, heads, hd], np.int64))
    c("shape_bsh", np.array([0, 0, hidden], np.int64))
    c("scale", np.array(1 / np.sqrt(hd), np.float32))
    c("one", np.array(1.0, np.float32))
    c("neg", np.array(-1e4, np.float32))
    node("Unsqueeze", ["attention_mask", c("ax12", np.array([1, 2], np.int64))], ["m4"])
    node("Cast", ["m4"], ["m4f"], to=TP.FLOAT)
    node("Sub", ["one", "m4f"], ["m4i"])
    node("Mul", ["m4i", "neg"], ["bias"])
    x = "x0"
    for layer in range(layers):
        p = f"l{layer}_"
        for t in "qkv":
            node("MatMul", [x, w(p + t + "_w", (hidden, hidden))], [p + t + "0"])
            node("Reshape", [p + t + "0", "shape_bshd"], [p + t + "1"])
            node("Transpose", [p + t + "1"], [p + t], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])
        node("MatMul", [p + "q", p + "k"], [p + "s0"])
        node("Mul", [p + "s0", "scale"], [p + "s1"])
        node("Add", [p + "s1", "bias"], [p + "s2"])
        node("Softmax", [p + "s2"], [p + "p"], axis=-1)
        node("MatMul", [p + "p", p + "v"], [p + "o0"])
        node("Transpose", [p + "o0"], [p + "o1"], perm=[0, 2, 1, 3])
        node("Reshape", [p + "o1", "shape_bsh"], [p + "o2"])
        node("MatMul", [p + "o2", w(p + "o_w", (hidden, hidden))], [p + "o3"])
        node("Add", [x, p + "o3"], [p + "r"])
        node("LayerNormalization", [p + "r", c(p + "g", np.ones(hidden, np.float32)),
                                    c(p + "b", np.zeros(hidden, np.float32))], [p + "ln"],
             axis=-1, epsilon=1e-5)
        node("MatMul", [p + "ln", w(p + "f1", (hidden, 4 * hidden))], [p + "h"])
        node("Gelu", [p + "h"], [p + "g1"])
        node("MatMul", [p + "g1", w(p + "f2", (4 * hidden, hidden))], [p + "f"])
        node("Add", [p + "ln", p + "f"], [p + "out"])
        x = p + "out"
    node("Identity", [x], ["last_hidden_state"])
    graph = helper.make_graph(nodes, "encoder", [ids, mask], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


ENCODER_PROFILE = ["input_ids:1x1,2x16,4x64", "attention_mask:1x1,2x16,4x64"]


def fused_attention_node(name="fa0", *, inputs=("q", "k", "v", "lens"), num_heads=2,
                         kv_num_heads=2, scale=0.0, causal=1, version="1",
                         namespace="onnx_fuse", **extra):
    attrs = {"num_heads": num_heads, "kv_num_heads": kv_num_heads, "scale": scale,
             "causal": causal, **extra}
    if version is not None:
        attrs["plugin_version"] = version
    if namespace is not None:
        attrs["plugin_namespace"] = namespace
    return helper.make_node("FusedAttention", list(inputs), ["y"], name=name, domain="onnx_fuse",
                            **attrs)


def fused_attention_model(node=None, *, dtype=TP.FLOAT16, hidden=128, kv_hidden=None,
                          lens_dtype=TP.INT32, with_lens=True) -> onnx.ModelProto:
    """One FusedAttention node between graph inputs and output (Hq*D = hidden)."""
    kvh = kv_hidden or hidden
    ins = [helper.make_tensor_value_info("q", dtype, ["b", "s", hidden]),
           helper.make_tensor_value_info("k", dtype, ["b", "s", kvh]),
           helper.make_tensor_value_info("v", dtype, ["b", "s", kvh])]
    if with_lens:
        ins.append(helper.make_tensor_value_info("lens", lens_dtype, ["b"]))
    node = node or fused_attention_node(inputs=[i.name for i in ins])
    out = helper.make_tensor_value_info("y", dtype, ["b", "s", hidden])
    graph = helper.make_graph([node], "fa", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20),
                                                   helper.make_opsetid("onnx_fuse", 1)])


@pytest.fixture
def encoder(tmp_path):
    path = tmp_path / "encoder.onnx"
    onnx.save(encoder_model(), path)
    return path


@pytest.fixture
def models():
    """The model builders above, for tests that need variants (importlib mode: no imports)."""
    class _Models:
        encoder = staticmethod(encoder_model)
        fused_attention = staticmethod(fused_attention_model)
        fused_attention_node = staticmethod(fused_attention_node)
        ENCODER_PROFILE = list(ENCODER_PROFILE)
    return _Models
