"""A reduction without its kept axes, viewed back with them: one reduction that keeps them.

torch's ``var`` / ``std`` decompositions (``x.var(dim=-1, keepdim=True, unbiased=False)``; xLSTM's per-head
LayerNorm) reduce with keepdims=0 and Reshape the result to x's shape with 1 at the reduced axes. The norm
rules read the variance as ``ReduceMean(sq, keepdims=1)``; this pass writes it so, proved on dims, not on how
the target is spelled:

    Reshape(ReduceX(x, axes, keepdims=0), t)  ==  ReduceX(x, axes, keepdims=1)
        when the Reshape provably outputs x's dims with every reduced axis 1
        (passes/_dim_products.reshape_out_dims: a constant target, or one computed from shapes).

A Reshape keeps the elements in order, so any target with those dims is the kept-axes result. The new
reduction takes the old one's inputs and attributes with keepdims=1; the old one stays for its other readers
(dead code removes it otherwise). Runs in the cleanup passes (every level).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._consts import node_axes
from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute

REDUCE_OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def reduce_axes(node: ir.Node, rank: int) -> list[int] | None:
    """The reduction's axes in [0, rank), in its order (passes/_consts.node_axes); None where they are
    not constant, out of range, or empty (all axes, or none)."""
    return node_axes(node, rank) or None


def _kept_dims(reduced: ir.Value) -> list | None:
    """x's dims with 1 at the axes the keepdims=0 reduction producing ``reduced`` removed."""
    node = reduced.producer()
    if not is_default_op(node, *REDUCE_OPS) or attr_value(node, "keepdims", 1) != 0:
        return None
    dims = value_dims(node.inputs[0])
    if dims is None or any(d is None for d in dims):
        return None
    axes = reduce_axes(node, len(dims))
    if axes is None:
        return None
    return [(1, ()) if i in axes else d for i, d in enumerate(dims)]


class ReduceKeepdimsPass(FusePass):
    """Reshape(ReduceX(keepdims=0)) back to x's rank with 1 at the reduced axes -> ReduceX(keepdims=1)."""

    name = "reduce-keepdims"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if not is_default_op(node, "Reshape") or node.inputs[0] is None:
                    continue
                want = _kept_dims(node.inputs[0])
                if want is None or reshape_out_dims(node.outputs[0]) != want:
                    continue
                red = node.inputs[0].producer()
                attrs = [a for name, a in red.attributes.items() if name != "keepdims"]
                kept = ir.Node("", red.op_type, list(red.inputs), attributes=[*attrs, ir.AttrInt64("keepdims", 1)],
                               version=red.version, name=f"{red.name or red.op_type}_kept", num_outputs=1)
                graph.insert_before(node, kept)
                out = kept.outputs[0]
                out.dtype, out.shape = node.outputs[0].dtype, node.outputs[0].shape
                reroute(node.outputs[0], out)
                self.stats[red.op_type] += 1
                modified = True
        return ir.passes.PassResult(model, modified=modified)
