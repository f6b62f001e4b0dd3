"""A Cast of a view read as the view of a Cast the view's source already has.

ONNX Runtime's offline optimizer on the CPU provider (ORT_ENABLE_BASIC and above) gives a float16
model's ops without a float16 kernel float32 inputs: each float16 input gets its own Cast up
(InsertCastTransformer). A value read both whole and through a view then reaches the float32 ops
twice, once as Cast(x) and once as Cast(view(x)): rotate_half's halves, Cast(Slice(q)), beside
q * cos's Cast(q), so the RoPE rules see two unrelated values (hold-out 50: every float16 file through
ort1 / ort2 lost its RoPE). Cast(view(x)) is view(Cast(x)) exactly (a Cast converts each element on
its own, a view only moves them: every dtype, every value), so where x already has a Cast to the same
type, the view reads that Cast instead; common-subexpression elimination has nothing left to merge
and the view's old Cast dies. Views: Slice, Transpose, Reshape, Unsqueeze, Squeeze, Expand, Flatten, and
a Split whose every part is read by one such Cast (ORT_ENABLE_EXTENDED's rotate_half Split, cast up half by
half: split-rotate-half, after this pass, then reads it as the two Slices);
only where the view's output is read by the Cast alone (so nothing is duplicated); matched on the
values (the shared source), not on ORT's node names.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names

VIEWS = ("Slice", "Transpose", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Flatten")


def _twin_cast(x: ir.Value, to: int, other: ir.Node) -> ir.Node | None:
    """A Cast of x to ``to`` other than ``other`` (the first in graph order)."""
    for use in x.uses():
        node = use.node
        if node is not other and is_default_op(node, "Cast") and use.idx == 0 and attr_value(node, "to", None) == to:
            return node
    return None


def shared_cast_split(graph: ir.Graph, split: ir.Node, taken: set) -> bool:
    """Split(x) whose every part is read by one Cast alone, all to one type that x has a Cast to already:
    one Split of that Cast (ONNX Runtime's rotate_half Split, GatherSliceToSplitFusion, with each half
    cast up)."""
    if not split.inputs or split.inputs[0] is None or split.graph is not graph:
        return False
    casts = []
    for part in split.outputs:
        uses = list(part.uses())
        if part.is_graph_output() or len(uses) != 1 or not is_default_op(uses[0].node, "Cast"):
            return False
        casts.append(uses[0].node)
    to = attr_value(casts[0], "to", None)
    if any(attr_value(c, "to", None) != to for c in casts):
        return False
    x = split.inputs[0]
    twin = _twin_cast(x, to, casts[0])
    if twin is None or twin.graph is not graph:
        return False
    order = list(graph)
    first = min(casts, key=order.index)
    up = ir.Node("", "Cast", [x], attributes=list(casts[0].attributes.values()), num_outputs=1)
    u = up.outputs[0]
    u.name, u.dtype, u.shape = fresh_name(f"{x.name or 'x'}_src", taken), casts[0].outputs[0].dtype, x.shape
    moved = ir.Node("", "Split", [u, *split.inputs[1:]], attributes=list(split.attributes.values()),
                    num_outputs=len(split.outputs))
    for out, c in zip(moved.outputs, casts):
        y = c.outputs[0]
        out.name, out.dtype, out.shape = fresh_name(f"{y.name or 'y'}_part", taken), y.dtype, y.shape
    graph.insert_before(first, [up, moved])
    for out, c in zip(moved.outputs, casts):
        reroute(c.outputs[0], out)
    return True


def shared_cast_view(graph: ir.Graph, cast: ir.Node, taken: set) -> bool:
    """Rewrite Cast(view(x)) as view(Cast(x)) where x has that Cast already (module docstring)."""
    if not cast.inputs or cast.inputs[0] is None or len(cast.outputs) != 1:
        return False
    v = cast.inputs[0]
    view = v.producer()
    if not is_default_op(view, *VIEWS) or view.graph is not graph or not view.inputs or view.inputs[0] is None:
        return False
    uses = list(v.uses())
    if v.is_graph_output() or len(uses) != 1:
        return False
    twin = _twin_cast(view.inputs[0], attr_value(cast, "to", None), cast)
    if twin is None or twin.graph is not graph:
        return False
    y = cast.outputs[0]
    # a Cast of x of its own, here (the twin may come later in the graph): CSE merges the two
    up = ir.Node("", "Cast", [view.inputs[0]], attributes=list(cast.attributes.values()), num_outputs=1)
    u = up.outputs[0]
    u.name, u.dtype, u.shape = fresh_name(f"{y.name or 'y'}_src", taken), y.dtype, view.inputs[0].shape
    moved = ir.Node("", view.op_type, [u, *view.inputs[1:]], attributes=list(view.attributes.values()),
                    num_outputs=1)
    out = moved.outputs[0]
    out.name, out.dtype, out.shape = fresh_name(f"{y.name or 'y'}_view", taken), y.dtype, y.shape
    graph.insert_before(cast, [up, moved])
    reroute(y, out)
    return True


class SharedCastViewsPass(FusePass):
    """Cast(view(x)) as view(Cast(x)) where x is Cast to that type already (module docstring)."""

    name = "shared-cast-views"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            taken = graph_names(graph)
            for node in list(graph):
                if node.graph is graph and is_default_op(node, "Cast") and shared_cast_view(graph, node, taken):
                    self.stats["shared-cast-view"] += 1
                    modified = True
                elif node.graph is graph and is_default_op(node, "Split") and shared_cast_split(graph, node, taken):
                    self.stats["shared-cast-split"] += 1
                    modified = True
        return ir.passes.PassResult(model, modified=modified)
