"""A Gemm on a 2-D view of an N-D value, viewed back, as a MatMul on the value (fold-layout-chains'
``gemm-view``, layout_chains.py).

Reshape(Gemm(Reshape(t [.., K], [-1, K]), W, c), [.., N]) is t @ W' + c when the second view puts
back t's own leading dims: the first view merges every leading axis into the rows (row-major), the
Gemm works on each row alone, and the second view splits the rows the same way. torch's
nn.MultiheadAttention writes its out-projection so (``view(tgt_len * bsz, C)``, ``linear``,
``view(tgt_len, bsz, C)``) around a time-first Transpose: as a MatMul the projection joins the
transpose sink's region and the Transposes on both sides cancel (batch_first=True: 2 -> 0). Done
where a Transpose reads or feeds the views, the one place the 2-D form blocks a layout move, and where
the rows view merges no two axes (every leading axis but at most one is a static 1: the views only
drop and restore size-1 axes, so the 2-D form is t itself and the views are two nodes for nothing;
torch MHA's probe query, [B, 1, C] viewed [B, C] for its out-projection, SigLIP's pooling head). A
Gemm whose rows merge batch and sequence with no Transpose beside it (GPT-2's Conv1D) stays. The
dims are compared symbolically (the inferred shapes), never assumed.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader
from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import array_initializer, fresh_name, graph_names
from onnx_fuse.passes.constant_folding import constant_tensor


def gemm_view(graph: ir.Graph, r1: ir.Node) -> bool:
    """The Reshape ``r1`` -> Gemm -> Reshape chain as MatMul (+ Add) on r1's input (module docstring)."""
    if len(r1.inputs) < 2 or r1.inputs[0] is None:
        return False
    t, rows = r1.inputs[0], r1.outputs[0]
    gemm = one_reader(rows)
    if not is_default_op(gemm, "Gemm") or gemm.inputs[0] is not rows or rows.is_graph_output():
        return False
    if attr_value(gemm, "transA", 0) != 0:
        return False
    y = gemm.outputs[0]
    r2 = one_reader(y)
    if not is_default_op(r2, "Reshape") or r2.inputs[0] is not y or y.is_graph_output():
        return False
    w = constant_tensor(gemm.inputs[1])
    c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    bias = None if c is None else constant_tensor(c)
    if w is None or len(w.shape) != 2 or (c is not None and bias is None):
        return False
    wt = w.numpy().T if attr_value(gemm, "transB", 0) else w.numpy()
    k, n = wt.shape
    if bias is not None and not (bias.size == 1 or tuple(bias.shape) in ((n,), (1, n))):
        return False  # a bias that varies along the rows is not row-wise
    dims = value_dims(t)
    if dims is None or len(dims) < 2 or None in dims or dims[-1] != (k, ()):
        return False
    mid, out = reshape_out_dims(rows), reshape_out_dims(r2.outputs[0])
    if mid is None or len(mid) != 2 or mid[1] != (k, ()) or out != dims[:-1] + [(n, ())]:
        return False
    near = r1.inputs[0].producer()
    squeeze = sum(d != (1, ()) for d in dims[:-1]) <= 1
    if not (squeeze or is_default_op(near, "Transpose") or is_default_op(one_reader(r2.outputs[0]), "Transpose")):
        return False  # rows merged from several axes, no Transpose beside them: the 2-D form blocks nothing
    alpha, beta = float(attr_value(gemm, "alpha", 1.0)), float(attr_value(gemm, "beta", 1.0))
    taken = graph_names(graph)
    base = gemm.outputs[0].name or "gemm"
    weight = array_initializer(graph, f"{base}_w", (wt * alpha).astype(wt.dtype), w.dtype, taken)
    nodes = [ir.node("MatMul", [t, weight])]
    if bias is not None:
        b = (bias.numpy().reshape(-1) * beta).astype(wt.dtype)
        b = np.broadcast_to(b, (n,)).copy()
        nodes.append(ir.node("Add", [nodes[0].outputs[0], array_initializer(graph, f"{base}_b", b, bias.dtype, taken)]))
    final = r2.outputs[0]
    nodes[0].outputs[0].name = fresh_name(f"{base}_mm", taken)
    for node in nodes:
        node.outputs[0].type, node.outputs[0].shape = final.type, final.shape
    graph.insert_after(r2, nodes)
    reroute(final, nodes[-1].outputs[0])
    for node in (r2, gemm, r1):
        graph.remove(node, safe=True)
    return True

