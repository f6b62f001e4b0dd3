"""The KV pools of an ``onnx_fuse::PagedAttention`` node as graph I/O, shared by the passes that
set the pools' dtype (``precision``: the op's 16-bit type; ``kv-cache-fp8``: float8e4m3fn).

A pool is state that the op updates in place (the TensorRT plugin aliases ``key_cache_out`` /
``value_cache_out`` to its inputs 3 and 4), so its graph input and output must carry the op's own
cache type with nothing in between: a Cast there makes TensorRT convert the whole pool twice per
step and the in-place write lands in the Cast's copy. :func:`pool_io` finds each pool's graph input
and output, directly or through one Cast (``precision`` leaves those at float32 graph I/O), and
:func:`bind_pools` removes those Casts and retypes the pool I/O.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["POOL_SLOTS", "pool_io", "bind_pools"]

#: (tag, input index of the cache); its updated copy is output ``index - 2`` (docs/ops.md)
POOL_SLOTS = (("k", 3), ("v", 4))


def _graph_input(v: ir.Value):
    """(graph input, the Cast between it and v or None) where v is a graph input read once, or
    the Cast of one read by nothing else."""
    if v is None:
        return None
    if v.is_graph_input():
        return (v, None) if len(v.uses()) == 1 else None
    p = v.producer()
    if (p is not None and p.op_type == "Cast" and p.domain in ("", "ai.onnx")
            and p.inputs[0] is not None and p.inputs[0].is_graph_input()
            and len(p.inputs[0].uses()) == 1 and len(v.uses()) == 1 and not v.is_graph_output()):
        return p.inputs[0], p
    return None


def _graph_output(v: ir.Value):
    """(graph output, the Cast between v and it or None), as _graph_input."""
    if v.is_graph_output():
        return v, None
    uses = v.uses()
    if len(uses) == 1:
        user = uses[0][0]
        if (user.op_type == "Cast" and user.domain in ("", "ai.onnx")
                and user.outputs[0].is_graph_output()):
            return user.outputs[0], user
    return None


def pool_io(node: ir.Node):
    """``[(tag, (graph input, Cast or None), (graph output, Cast or None))]`` for the k and v
    pools of a PagedAttention node, or None when a pool is not a graph input read by this node
    only (directly or through one Cast) with its update a graph output."""
    pools = []
    for tag, i in POOL_SLOTS:
        if len(node.inputs) <= i or len(node.outputs) <= i - 2:
            return None
        pool, out = _graph_input(node.inputs[i]), _graph_output(node.outputs[i - 2])
        if pool is None or out is None:
            return None
        pools.append((tag, pool, out))
    return pools


def bind_pools(graph: ir.Graph, node: ir.Node, pools, dtype: ir.DataType) -> int:
    """Wire the pools of ``pool_io(node)`` straight to the node (the Casts removed, the graph
    output keeping its name) and make both ends ``dtype``; returns how many Casts went."""
    removed = 0
    for tag, (pool, cast_in), (out, cast_out) in pools:
        i = dict(POOL_SLOTS)[tag]
        if cast_in is not None:   # the pool's bytes are the state: no Cast on them
            node.replace_input_with(i, pool)
            graph.remove(cast_in, safe=True)
            removed += 1
        if cast_out is not None:
            name, value = out.name, node.outputs[i - 2]
            graph.outputs[graph.outputs.index(out)] = value
            graph.remove(cast_out, safe=True)
            value.name, out = name, value
            removed += 1
        for v in (pool, out):
            v.type = ir.TensorType(dtype)
    return removed
