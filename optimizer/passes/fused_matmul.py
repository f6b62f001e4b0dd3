"""ONNX Runtime's com.microsoft::FusedMatMul back into Transpose -> MatMul -> Mul.

A graph ONNX Runtime optimized offline (SessionOptions.optimized_model_filepath at EXTENDED, or
the transformers optimizer / Optimum at O2+) carries FusedMatMul where the export had
``MatMul(Transpose(a), Transpose(b)) * alpha``: the attention scores ``q k^T * scale`` (the
exporter's Mul of q and of k by sqrt(scale) folded into alpha = scale) become one op the attention
rules do not match, and that the onnx and trt targets cannot run. Expanded, the scores read as the
export they came from: a MatMul of the (transposed) operands followed by a Mul by alpha, the scale
after the product that the attention rules recognize. ORT fuses the leftover MatMul + Mul again when
it loads the model (its MatMulScaleFusion), so an ort graph loses nothing where attention does not fuse.

Exact up to one rounding: alpha * (A B) instead of ORT's scaled GEMM. Only the plain forms:
transBatchA / transBatchB (batch axes moved next to the matrix axes) stay fused, as does a
transposed operand whose rank is unknown (the Transpose needs its perm).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, reroute


class ExpandFusedMatMulPass(FusePass):
    """FusedMatMul as Transpose -> MatMul -> Mul (module docstring)."""

    name = "expand-fused-matmul"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type == "FusedMatMul" and node.domain == "com.microsoft":
                    modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        if len(node.inputs) != 2 or any(x is None for x in node.inputs) or len(node.outputs) != 1:
            return False
        if attr_value(node, "transBatchA", 0) or attr_value(node, "transBatchB", 0):
            return False
        alpha = float(attr_value(node, "alpha", 1.0))
        trans = (attr_value(node, "transA", 0), attr_value(node, "transB", 0))
        out = node.outputs[0]
        dtype = out.dtype or node.inputs[0].dtype
        if alpha != 1.0 and dtype is None:
            return False  # the Mul's constant needs the output's element type
        for x, t in zip(node.inputs, trans):
            if t and (x.shape is None or x.shape.rank() < 2):
                return False
        stem = node.name or out.name or "fused_matmul"
        new_nodes: list[ir.Node] = []

        def transposed(x: ir.Value, tag: str) -> ir.Value:
            rank = x.shape.rank()
            perm = [*range(rank - 2), rank - 1, rank - 2]
            y = ir.Value(name=f"{stem}_{tag}", type=x.type, shape=ir.Shape([x.shape[p] for p in perm]))
            new_nodes.append(ir.Node("", "Transpose", [x], attributes=[ir.AttrInt64s("perm", perm)],
                                     outputs=[y], name=f"{stem}_{tag}"))
            return y

        a, b = (transposed(x, tag) if t else x for x, t, tag in zip(node.inputs, trans, ("lhs_t", "rhs_t")))
        if alpha == 1.0:
            final = ir.Value(name=f"{stem}_matmul", type=out.type, shape=out.shape)
            new_nodes.append(ir.Node("", "MatMul", [a, b], outputs=[final], name=f"{stem}_matmul"))
        else:
            product = ir.Value(name=f"{stem}_matmul", type=out.type, shape=out.shape)
            new_nodes.append(ir.Node("", "MatMul", [a, b], outputs=[product], name=f"{stem}_matmul"))
            scale = ir.Value(name=f"{stem}_alpha", const_value=ir.tensor(alpha, dtype=dtype))
            graph.register_initializer(scale)
            final = ir.Value(name=f"{stem}_scaled", type=out.type, shape=out.shape)
            new_nodes.append(ir.Node("", "Mul", [product, scale], outputs=[final], name=f"{stem}_scaled"))
        graph.insert_before(node, new_nodes)
        reroute(out, final)
        graph.remove(node, safe=True)
        self.stats["FusedMatMul"] += 1
        return True
