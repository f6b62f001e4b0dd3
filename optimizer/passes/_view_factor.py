"""A factor applied on a head view, applied to the unsplit value (fold-layout-chains' ``view-factor``,
layout_chains.py).

Reshape(Mul(Reshape(x [B, S, N], [B, S, H, D]), f), x's dims) where f is 1 on both split axes (a
per-position or per-batch factor, [1, S, 1, 1]) multiplies every element of a token's row alike, so
it is Mul(x, Squeeze(f, [-1])): f's last axis dropped, its other axes line up with x's [B, S] from
the right. Ministral 3 (llama_4_scaling_beta) scales the rotated queries by a per-position factor;
once the transpose sink has moved it next to RoPE's 3-D output (its [B, S, H, D] view, times
[1, S, 1, 1], viewed back) the two views per layer are glue. Dims are the inferred shapes, read
symbolically: the outer Reshape must provably give x's own dims, the inner split x's last axis only,
and f's axes before the split ones must be 1 or x's (no broadcast wider than x). Below opset 13
Squeeze takes its axes as an attribute (f's last axis, counted from the front: opsets before 11 take no
negative axis), one Squeeze per factor.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader
from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names, int64_initializer

_ONE = (1, ())


def view_factor(graph: ir.Graph, y_node: ir.Node, opset: int) -> bool:
    """Rewrite the Reshape ``y_node`` closing a factor's head view (module docstring)."""
    y = y_node.outputs[0]
    m = y_node.inputs[0] if y_node.inputs else None
    mul = m.producer() if m is not None else None
    if not is_default_op(mul, "Mul") or len(mul.inputs) != 2 or one_reader(m) is not y_node:
        return False
    for r, f in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
        split = r.producer() if r is not None else None
        if (is_default_op(split, "Reshape") and split.inputs and split.inputs[0] is not None
                and one_reader(r) is mul and f is not None and _fits(split.inputs[0], r, f, y)):
            break
    else:
        return False
    x = split.inputs[0]
    taken = graph_names(graph)
    if opset < 13:
        sq = ir.Node("", "Squeeze", [f], attributes=[ir.AttrInt64s("axes", [len(value_dims(f)) - 1])],
                     num_outputs=1)
    else:
        # one axes initializer for every layer: CSE then shares the Squeeze of a factor they all read
        axes = next((v for name, v in graph.initializers.items() if name.startswith("view_factor_axes")
                     and v.const_value is not None and v.const_value.numpy().tolist() == [-1]), None)
        if axes is None:
            axes = int64_initializer(graph, "view_factor_axes", [-1], taken)
        sq = ir.Node("", "Squeeze", [f, axes], num_outputs=1)
    sq.outputs[0].name = fresh_name(f"{f.name or 'factor'}_squeezed", taken)
    new = ir.Node("", "Mul", [x, sq.outputs[0]], num_outputs=1)
    new.outputs[0].name = fresh_name(f"{y.name or 'y'}_factor", taken)
    new.outputs[0].dtype, new.outputs[0].shape = y.dtype, y.shape
    graph.insert_before(y_node, [sq, new])
    reroute(y, new.outputs[0])
    return True


def _fits(x: ir.Value, r: ir.Value, f: ir.Value, y: ir.Value) -> bool:
    xd, rd, fd = value_dims(x), reshape_out_dims(r), value_dims(f)
    if xd is None or rd is None or fd is None or len(xd) != 3 or len(rd) != 4 or None in xd:
        return False
    if rd[:2] != xd[:2] or reshape_out_dims(y) != xd:
        return False   # the view must split x's last axis only, and the outer Reshape give x's dims
    if not 2 <= len(fd) <= 4 or fd[-1] != _ONE or fd[-2] != _ONE:
        return False   # f must be 1 on both split axes
    return all(d == _ONE or d == want for d, want in zip(reversed(fd[:-2]), reversed(xd[:2])))
