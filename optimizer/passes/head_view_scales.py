"""Head-view scales: a constant per-channel scale on a projection's head view joins the projection's weight.

TimesFM scales its queries per head dimension, q viewed [B, S, H, D] (or [B, H, S, D]) times
softplus(s)[D] * c, a learned vector once folding made it constant. attention-q-scale takes one number
only, so the Mul stayed between the projection and the attention (MultiHeadAttention at scale 1.0, no
packed Attention at ort). Read by value, not by the exporter's subgraph:

    Mul(views(t), c)  ->  views(Mul(t, tile(c, N / D)))

where views is a Reshape whose output's last axis has D entries (D dividing t's last dim N, so the
last axis of the view at flat position i of t's row is i mod D whatever the Reshape does to the other
axes: row-major order), then at most one Transpose that keeps the last axis last; c a constant of
t's dtype that varies along its last axis (D) only and is not uniform (one number is the attention's
scale, attention-q-scale); Div by such a c likewise. The move is made only where merge-linear-branches
(passes/linear_branches.py: (x @ W + b) * l  ->  x @ (W * l) + b * l) then takes the scaled projection
into its weight, so the graph loses the Mul and keeps the plain projection the attention rules read;
otherwise it is undone. Refused: a view read by anything but the chain (Shape / Size aside: they read
dims only), a scale along another axis, a weight another op reads too (the merge's own check), a scale
that is not a constant.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names
from onnx_fuse.passes.linear_branches import MergeLinearBranchesPass, _float_tensor, _varies

_DIM_READERS = ("Shape", "Size")


def _only_read_by(value: ir.Value, node: ir.Node) -> bool:
    """value's data is read by ``node`` alone (Shape / Size readers read its dims), never a graph output."""
    return not value.is_graph_output() and all(
        u.node is node or is_default_op(u.node, *_DIM_READERS) for u in value.uses())


def _last_axis_scale(scale_node: ir.Node):
    """(view, c [D] float64) for Mul(view, c) / Mul(c, view) / Div(view, c), c constant along its last axis only."""
    if not is_default_op(scale_node, "Mul", "Div") or len(scale_node.inputs) != 2:
        return None
    pairs = [(0, 1)] + ([(1, 0)] if scale_node.op_type == "Mul" else [])
    for vi, ci in pairs:
        view, const = scale_node.inputs[vi], scale_node.inputs[ci]
        t = _float_tensor(const)
        if view is None or t is None or _float_tensor(view) is not None or view.shape is None:
            continue
        dims = [int(d) for d in t.shape]
        if t.dtype != view.dtype or not dims or len(dims) > len(view.shape) or any(d != 1 for d in dims[:-1]):
            continue
        c = np.asarray(t.numpy()).astype(np.float64).reshape(-1)
        if c.size < 2 or not _varies(c) or view.shape[-1] != c.size:
            continue
        return view, c
    return None


def _head_view(view: ir.Value, scale_node: ir.Node):
    """(Reshape node, its input t) for view = [Transpose keeping the last axis](Reshape(t)), each step read by
    the next alone."""
    node = view.producer()
    if is_default_op(node, "Transpose"):
        perm = attr_value(node, "perm", None)
        if perm is None or list(perm)[-1] != len(perm) - 1 or not _only_read_by(view, scale_node):
            return None
        reader, view = node, node.inputs[0]
        node = view.producer() if view is not None else None
    else:
        reader = scale_node
    if not is_default_op(node, "Reshape") or not _only_read_by(view, reader):
        return None
    t = node.inputs[0]
    if t is None or t.shape is None or not t.shape.rank() or not isinstance(t.shape[-1], int):
        return None
    return node, t


class FoldHeadViewScalesPass(MergeLinearBranchesPass):
    """A per-channel constant scale on a projection's head view into the projection (module docstring)."""

    name = "fold-head-view-scales"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is graph and is_default_op(node, "Mul", "Div"):
                    modified |= self._fold(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _fold(self, graph: ir.Graph, scale_node: ir.Node) -> bool:
        found = _last_axis_scale(scale_node)
        if found is None:
            return False
        view, c = found
        head = _head_view(view, scale_node)
        if head is None:
            return False
        reshape, t = head
        n = int(t.shape[-1])
        if n % c.size:
            return False
        row = np.tile(c, n // c.size)
        taken = graph_names(graph)
        stem = t.name or "projection"
        row_const = array_initializer(graph, f"{stem}_head_scale", row.astype(ir.DataType(t.dtype).numpy()),
                                      t.dtype, taken)
        scaled = ir.Value(name=fresh_name(f"{stem}_head_scaled", taken), type=t.type, shape=t.shape)
        moved = ir.Node("", scale_node.op_type, [t, row_const], outputs=[scaled])
        graph.insert_before(reshape, moved)
        reshape.replace_input_with(0, scaled)
        if not self._merge(graph, moved):
            reshape.replace_input_with(0, t)   # the merge refused: the graph as it was
            graph.remove(moved, safe=True)
            graph.initializers.pop(row_const.name, None)
            return False
        reroute(scale_node.outputs[0], view)
        graph.remove(scale_node, safe=True)
        if not row_const.uses():   # the merged weight holds it
            graph.initializers.pop(row_const.name, None)
        self.stats["folded"] += 1
        return True
