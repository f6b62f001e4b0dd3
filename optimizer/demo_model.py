"""A small BERT-style encoder built with onnx.helper, the embedded default of ``onnx-fuse demo``.

It is written the way exporters write transformer blocks: LayerNorm decomposed into
ReduceMean/Sub/Pow/Sqrt/Div, GELU in its erf form, attention as MatMul/Reshape/Transpose/Softmax
with a scale and an additive padding mask, and a few things cleanup removes (Identity, a
same-type Cast, a foldable shape computation). Names are generic so nothing keys on them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, value, base: str = "c") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) * 0.05).astype(np.float32), "w")

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name("n"), **attrs))
        return outs[0] if n_out == 1 else outs

    def layer_norm(self, x: str, hidden: int) -> str:
        mean = self.op("ReduceMean", x, self.const(np.array([-1], np.int64)), keepdims=1)
        d = self.op("Sub", x, mean)
        sq = self.op("Pow", d, self.const(np.float32(2.0)))
        var = self.op("ReduceMean", sq, self.const(np.array([-1], np.int64)), keepdims=1)
        std = self.op("Sqrt", self.op("Add", var, self.const(np.float32(1e-12))))
        y = self.op("Div", d, std)
        y = self.op("Mul", y, self.const(np.ones(hidden, np.float32) + self.rng.standard_normal(hidden).astype(np.float32) * 0.1))
        return self.op("Add", y, self.const(self.rng.standard_normal(hidden).astype(np.float32) * 0.1))

    def linear(self, x: str, k: int, n: int) -> str:
        return self.op("Add", self.op("MatMul", x, self.weight(k, n)), self.weight(n))

    def gelu(self, x: str) -> str:
        e = self.op("Erf", self.op("Div", x, self.const(np.float32(np.sqrt(2.0)))))
        return self.op("Mul", self.op("Mul", x, self.op("Add", e, self.const(np.float32(1.0)))),
                       self.const(np.float32(0.5)))


def build_demo_model(layers: int = 2, hidden: int = 64, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """An encoder of ``layers`` BERT blocks; inputs hidden_states [batch, seq, hidden] and
    attention_mask [batch, seq] (int64, 1 = keep)."""
    b = _Builder(seed)
    head_dim = hidden // heads
    # Additive mask: (1 - mask) * -10000, broadcast to [batch, 1, 1, seq].
    m = b.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    m = b.op("Unsqueeze", m, b.const(np.array([1, 2], np.int64)))
    m = b.op("Mul", b.op("Sub", b.const(np.float32(1.0)), m), b.const(np.float32(-10000.0)))
    x = b.op("Identity", "hidden_states")
    x = b.op("Cast", x, to=TensorProto.FLOAT)  # same-type Cast: a no-op cleanup removes
    for _ in range(layers):
        shape = b.op("Concat", b.const(np.array([0, 0], np.int64)),
                     b.const(np.array([heads, head_dim], np.int64)), axis=0)  # foldable

        def split_heads(t: str) -> str:
            return b.op("Transpose", b.op("Reshape", t, shape), perm=[0, 2, 1, 3])

        q = split_heads(b.linear(x, hidden, hidden))
        k = split_heads(b.linear(x, hidden, hidden))
        v = split_heads(b.linear(x, hidden, hidden))
        kt = b.op("Transpose", k, perm=[0, 1, 3, 2])
        s = b.op("Div", b.op("MatMul", q, kt), b.const(np.float32(np.sqrt(head_dim))))
        p = b.op("Softmax", b.op("Add", s, m), axis=-1)
        ctx = b.op("Transpose", b.op("MatMul", p, v), perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", ctx, b.const(np.array([0, 0, hidden], np.int64)))
        x = b.layer_norm(b.op("Add", b.linear(ctx, hidden, hidden), x), hidden)
        ff = b.linear(b.gelu(b.linear(x, hidden, hidden * 4)), hidden * 4, hidden)
        x = b.layer_norm(b.op("Add", ff, x), hidden)
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name=b.name("n")))
    graph = helper.make_graph(
        b.nodes, "demo_encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["batch", "seq", hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="onnx-fuse-demo")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model
