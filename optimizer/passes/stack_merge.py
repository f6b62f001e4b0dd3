"""A stack along a new second-to-last axis, viewed back with that axis merged into the last: a Concat.

keras-hub's RoPE (tf2onnx) writes rotate_half as stack([-x2, x1], axis=-2) viewed as x, and its
frequency table as stack([f, f], axis=-2) viewed as [.., 2 * D/2]: Reshape(Concat(Unsqueeze(a, r),
Unsqueeze(b, r), axis=r), t) for rank-r operands. Where the Reshape provably outputs the operands'
dims with the last one multiplied by their count, that is Concat(a, b, ..., axis=-1): the same
elements in the same order (the new axis is the slower of the two merged ones). The RoPE rules and
split-rotate-half (which must see Concat(Neg(second), first)) read the Concat. Runs at O2 in the
expand-contrib stage, before split-rotate-half.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._consts import raw_axes
from onnx_fuse.passes._dim_products import mul, reshape_out_dims, value_dims
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass


class StackMergePass(FusePass):
    """Reshape(Concat of Unsqueezes at the second-to-last axis) as a Concat on the last (module docstring)."""

    name = "stack-merge"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if is_default_op(node, "Reshape") and node.graph is graph:
                    modified |= self._rewrite(graph, node)
        if modified:   # the stacks left unread would be second readers of the halves split-rotate-half checks
            DeadCodeEliminationPass()(model)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        src = node.inputs[0] if node.inputs else None
        cat = None if src is None else src.producer()
        if not is_default_op(cat, "Concat") or len(cat.inputs) < 2 or len(list(src.uses())) != 1 \
                or src.is_graph_output():
            return False
        parts = []
        for v in cat.inputs:
            u = None if v is None else v.producer()
            if not is_default_op(u, "Unsqueeze") or u.inputs[0] is None:
                return False
            parts.append((u.inputs[0], raw_axes(u)))
        x0 = parts[0][0]
        rank, dims = (None, None) if x0.shape is None else (len(x0.shape), value_dims(x0))
        if not rank or dims is None or any(d is None for d in dims):
            return False
        if any(ax is None or len(ax) != 1 or ax[0] % (rank + 1) != rank - 1 or value_dims(x) != dims
               for x, ax in parts):
            return False
        if attr_value(cat, "axis", 0) % (rank + 1) != rank - 1:
            return False
        if reshape_out_dims(node.outputs[0]) != dims[:-1] + [mul(dims[-1], (len(parts), ()))]:
            return False
        out = node.outputs[0]
        y = ir.Value(name=f"{out.name}_concat", type=out.type, shape=out.shape)
        graph.insert_before(node, [ir.Node("", "Concat", [x for x, _ in parts], attributes=[ir.AttrInt64("axis", -1)],
                                           outputs=[y], name=f"{node.name or out.name}_concat")])
        reroute(out, y)
        graph.remove(node, safe=True)
        self.stats["stack"] += 1
        return True
