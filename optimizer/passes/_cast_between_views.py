"""A Cast between two views moved below the second, so the views merge (fold-layout-chains'
``cast-between-views``, layout_chains.py).

Reshape(Cast(v(x)), s2), v a Reshape / Unsqueeze / Squeeze, is Cast(Reshape(x, s2)) wherever
reshape-of-reshape would read Reshape(v(x), s2) from x: a Cast converts each element on its own and
a view only moves elements, so the two commute exactly (every dtype, every value; a 0 of s2 copies
the same dim from the Cast's output as from its input). A float16 export's float32 island ends that
way: the fused attention's [B, S, H, D] output view, cast up for the model's float32 residual, merged
back to [B, S, H*D] (Voxtral Realtime's TorchScript export: 2 Reshapes a layer that its float32 twin
does not have); identity-elimination then drops a Reshape to x's own dims. Only where both the view's
output and the Cast's are read by the next op alone, so the old nodes die and nothing is duplicated.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader
from onnx_fuse.passes._infra import is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes._reshape_of_reshape import view_source


def cast_between_views(graph: ir.Graph, r2: ir.Node) -> bool:
    """Rewrite the Reshape ``r2`` of a Cast of a view as Cast(Reshape(x, s2)) (module docstring)."""
    if len(r2.inputs) < 2 or r2.inputs[0] is None:
        return False
    c = r2.inputs[0]
    cast = c.producer()
    if not is_default_op(cast, "Cast") or one_reader(c) is not r2 or not cast.inputs or cast.inputs[0] is None:
        return False
    x = view_source(r2, cast.inputs[0], cast)
    if x is None:
        return False
    y = r2.outputs[0]
    taken = graph_names(graph)
    reshape = ir.Node("", "Reshape", [x, r2.inputs[1]], attributes=list(r2.attributes.values()), num_outputs=1)
    t = reshape.outputs[0]
    t.name, t.dtype, t.shape = fresh_name(f"{y.name or 'y'}_precast", taken), x.dtype, y.shape
    up = ir.Node("", "Cast", [t], attributes=list(cast.attributes.values()), num_outputs=1)
    u = up.outputs[0]
    u.name, u.dtype, u.shape = fresh_name(f"{y.name or 'y'}_cast", taken), y.dtype, y.shape
    graph.insert_before(r2, [reshape, up])
    reroute(y, u)
    return True
