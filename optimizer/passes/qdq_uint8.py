"""int8 activation Q -> DQ pairs as uint8 in a model at opset >= 21 (targets ort, onnx).

ONNX Runtime 1.32 refuses valid QDQ graphs whose QuantizeLinear writes int8 once the model is at
opset 21 or more: under its default graph optimizations QDQ propagation copies such a Q past a
Reshape / Transpose with ``output_dtype`` set, then its int8-to-uint8 rewrite swaps the copy's zero
point to uint8 ("output_dtype INT8 does not match y_zero_point type UINT8", onnxruntime issue
25526). The fusions raise a model to 23 (Attention-23, RMSNormalization-23, RotaryEmbedding-23), so
a static int8 QDQ model that loaded before fusion no longer did. uint8 activations load at 23.

The rewrite is the one ORT itself makes at load and is exact: with z' = z + 128,
saturate(round(x / s) + z', 0, 255) = saturate(round(x / s) + z, -128, 127) + 128, and
DequantizeLinear gives (q' - z') s = (q - z) s. Only a Q whose every reader is a DequantizeLinear
with the same zero point is rewritten (its int8 values are then seen by nobody else); weights
(int8 constants behind a DQ) stay int8. trt keeps int8: TensorRT parses only int8 Q/DQ with zero
point 0, and is not affected by ORT's rewrite.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, is_default_op

#: The first default-domain opset at which ORT 1.32 refuses int8-activation QDQ graphs.
ORT_INT8_QDQ_REFUSED = 21


def _zero_point(node: ir.Node) -> ir.Value | None:
    return node.inputs[2] if len(node.inputs) > 2 else None


def _int8_const(v: ir.Value | None) -> np.ndarray | None:
    if v is None or v.const_value is None or v.is_graph_input() or v.const_value.dtype != ir.DataType.INT8:
        return None
    return v.const_value.numpy()


def _same(a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is b:
        return True
    x, y = _int8_const(a), _int8_const(b)
    return x is not None and y is not None and x.shape == y.shape and bool(np.array_equal(x, y))


class Int8QdqToUint8Pass(FusePass):
    """Activation QuantizeLinear -> DequantizeLinear pairs from int8 to uint8 (module docstring)."""

    name = "qdq-int8-to-uint8"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
        if opset is None or opset < ORT_INT8_QDQ_REFUSED:
            return ir.passes.PassResult(model, False)
        made: dict[tuple[int, int], ir.Value] = {}   # (int8 zero point, graph) -> its uint8 one
        changed = False
        for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
            if is_default_op(node, "QuantizeLinear") and self._convertible(node):
                self._convert(node, made)
                changed = True
        return ir.passes.PassResult(model, changed)

    @staticmethod
    def _convertible(node: ir.Node) -> bool:
        zp, out = _zero_point(node), node.outputs[0]
        dtype = node.attributes.get("output_dtype")
        if _int8_const(zp) is None or (dtype is not None and dtype.as_int() not in (0, ir.DataType.INT8)):
            return False
        if out.is_graph_output() or not out.uses():
            return False
        return all(is_default_op(user, "DequantizeLinear") and idx == 0 and _same(_zero_point(user), zp)
                   for user, idx in out.uses())

    def _convert(self, node: ir.Node, made: dict[tuple[int, int], ir.Value]) -> None:
        q = node.outputs[0]
        readers = [user for user, _ in q.uses()]
        for n in (node, *readers):
            key = (id(_zero_point(n)), id(n.graph))
            if key not in made:
                made[key] = self._uint8_zero_point(n.graph, _zero_point(n))
            n.replace_input_with(2, made[key])
        if "output_dtype" in node.attributes:
            node.attributes["output_dtype"] = ir.AttrInt64("output_dtype", ir.DataType.UINT8)
        q.type = ir.TensorType(ir.DataType.UINT8)
        self.stats["Q/DQ int8 -> uint8"] += 1

    @staticmethod
    def _uint8_zero_point(graph: ir.Graph, zp: ir.Value) -> ir.Value:
        arr = (_int8_const(zp).astype(np.int16) + 128).astype(np.uint8)
        name, i = f"{zp.name}_uint8", 0
        while name in graph.initializers:
            i += 1
            name = f"{zp.name}_uint8_{i}"
        v = ir.Value(name=name, const_value=ir.Tensor(arr, name=name))
        v.type, v.shape = ir.TensorType(ir.DataType.UINT8), ir.Shape(list(arr.shape))
        graph.register_initializer(v)
        return v
