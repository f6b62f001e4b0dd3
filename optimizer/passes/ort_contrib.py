"""ONNX Runtime's default-domain SimplifiedLayerNormalization back into the RMSNorm it computes.

ORT's optimizers (its offline EXTENDED level, the transformers optimizer, Optimum -O2+) write RMSNorm
as ``SimplifiedLayerNormalization`` in the default domain, where only ORT has a schema: the onnx
and trt targets cannot run it, the ONNX checker refuses it, and its output is opaque to the rules
after it (the q / k heads of the next attention). Expanded into the decomposition an exporter writes
(float32 island when the input is half: Cast, x * x, ReduceMean, + eps, Sqrt, Reciprocal, Mul,
Cast back, * scale), the norm rules fuse it again for every target (RMSNormalization, or ORT's
SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization at ort).

Only the plain form: normalized over the last axis, the inv_std_var output unused.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)


def _attr(node: ir.Node, name: str, default):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


class ExpandSimplifiedLayerNormPass(FusePass):
    """Default-domain SimplifiedLayerNormalization as its RMSNorm decomposition (module docstring)."""

    name = "expand-simplified-layer-norm"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type == "SimplifiedLayerNormalization" and node.domain in ("", "ai.onnx"):
                    modified |= self._rewrite(graph, node, opset)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node, opset: int) -> bool:
        if len(node.inputs) != 2 or any(x is None for x in node.inputs):
            return False
        if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
            return False  # inv_std_var is read
        x, scale = node.inputs
        out = node.outputs[0]
        dtype = x.dtype
        if dtype not in _FLOATS or x.shape is None:
            return False
        axis = int(_attr(node, "axis", -1))
        if axis not in (-1, x.shape.rank() - 1):
            return False
        eps = float(_attr(node, "epsilon", 1e-5))
        island = dtype != ir.DataType.FLOAT and int(_attr(node, "stash_type", 1)) == 1
        work = ir.DataType.FLOAT if island else dtype
        stem = node.name or out.name or "simplified_layer_norm"
        nodes: list[ir.Node] = []

        def add(op: str, inputs, tag: str, dt=work, attrs=(), shape=None) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", type=ir.TensorType(dt), shape=shape)
            nodes.append(ir.Node("", op, inputs, attributes=list(attrs), outputs=[v], name=f"{stem}_{tag}"))
            return v

        def const(value, tag: str, dt) -> ir.Value:
            v = ir.Value(name=f"{stem}_{tag}", const_value=ir.tensor(value, dtype=dt))
            graph.register_initializer(v)
            return v

        full = x.shape
        reduced = ir.Shape([*list(full)[:-1], 1])
        xf = add("Cast", [x], "x_f32", attrs=[ir.AttrInt64("to", int(work))], shape=full) if island else x
        sq = add("Mul", [xf, xf], "square", shape=full)
        if opset >= 18:
            ms = add("ReduceMean", [sq, const([-1], "axes", ir.DataType.INT64)], "mean", shape=reduced,
                     attrs=[ir.AttrInt64("keepdims", 1)])
        else:
            ms = add("ReduceMean", [sq], "mean", shape=reduced,
                     attrs=[ir.AttrInt64s("axes", [-1]), ir.AttrInt64("keepdims", 1)])
        ve = add("Add", [ms, const(eps, "epsilon", work)], "var_eps", shape=reduced)
        sd = add("Sqrt", [ve], "std", shape=reduced)
        inv = add("Reciprocal", [sd], "inv_std", shape=reduced)
        n = add("Mul", [xf, inv], "normalized", shape=full)
        if island:
            n = add("Cast", [n], "normalized_cast", dt=dtype, attrs=[ir.AttrInt64("to", int(dtype))], shape=full)
        y = add("Mul", [n, scale], "scaled", dt=dtype, shape=out.shape)
        graph.insert_before(node, nodes)
        name = out.name
        out.replace_all_uses_with(y, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if y.is_graph_output():  # the model's output keeps its name
            out.name, y.name = None, name
        self.stats["SimplifiedLayerNormalization"] += 1
        return True
