"""The KV pools of an ``onnx_fuse::PagedAttention`` node as graph I/O, shared by the passes that
set the pools' dtype (``precision``: the op's 16-bit type; ``kv-cache-fp8``: float8e4m3fn).

A pool is state that the op updates in place (the TensorRT plugin aliases ``key_cache_out`` /
``value_cache_out`` to its inputs 3 and 4), so its graph input and output must carry the op's own
cache type with nothing in between: a Cast there makes TensorRT convert the whole pool twice per
step and the in-place write lands in the Cast's copy. :func:`pool_io` finds each pool's graph input
and output wired straight to the node (the paged-KV rewrite makes them so, and ``precision``
exempts them from ``keep_io_types``, so it never puts a Cast there); :func:`retype_pools` sets
their dtype.
"""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["POOL_SLOTS", "pool_io", "retype_pools"]

#: (tag, input index of the cache); its updated copy is output ``index - 2`` (docs/ops.md)
POOL_SLOTS = (("k", 3), ("v", 4))


def pool_io(node: ir.Node):
    """``[(tag, graph input, graph output)]`` for the k and v pools of a PagedAttention node, or
    None when a pool is not a graph input read by this node only, with its update (the node's
    own output, no Cast between) a graph output."""
    pools = []
    for tag, i in POOL_SLOTS:
        if len(node.inputs) <= i or len(node.outputs) <= i - 2:
            return None
        pool, out = node.inputs[i], node.outputs[i - 2]
        if pool is None or not pool.is_graph_input() or len(pool.uses()) != 1:
            return None
        if not out.is_graph_output():
            return None
        pools.append((tag, pool, out))
    return pools


def retype_pools(pools, dtype: ir.DataType) -> None:
    """Make both ends of every pool of ``pool_io(node)`` ``dtype``."""
    for _, pool, out in pools:
        for v in (pool, out):
            v.type = ir.TensorType(dtype)
