"""Picks of a packed axis (fold-layout-chains' ``picks-through-transpose`` and ``picks-as-split``,
layout_chains.py).

torch's nn.MultiheadAttention splits its packed in-projection [S, B, 3C] with
``unflatten(-1, (3, C)).unsqueeze(0).transpose(0, -2).squeeze(-2)`` and picks q, k, v by index: a
Reshape to [S, B, 3, C], a Transpose by [2, 0, 1, 3] and Gathers of 0, 1, 2 over axis 0, each then
transposed to [B, S, C] for the fused attention. Two identities take that apart:
  - Gather(Transpose(v, p), i, axis=a) = Transpose(Gather(v, i, axis=p[a]), p without a): done where
    every reader of the Transpose is such a Gather, read only by a Transpose whose perm then takes the
    rest (or read any way where p moved the picked axis alone: the pick is then the same value), so the
    one Transpose before the picks goes and those after them compose (an identity drops);
  - Gather(Reshape(t [.., G*C], [.., G, C]), i, axis=-2) is the i-th of G equal parts of t's last axis:
    where every reader of the view is such a pick, the view and picks are one Split of t (dims proven
    from the inferred shapes), which the transpose sink then crosses (its Split case).
Matched on perms, shapes and constant indices only.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import axis_attr, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names, int64_initializer
from onnx_fuse.passes._transpose_region import perm_of
from onnx_fuse.passes.constant_folding import constant_tensor


def _pick(node: ir.Node, rank: int) -> tuple[int, int] | None:
    """(index, axis) of a Gather by a constant scalar over an axis of a rank-``rank`` value, normalized."""
    if not is_default_op(node, "Gather") or len(node.inputs) != 2:
        return None
    t = constant_tensor(node.inputs[1])
    if t is None or len(t.shape) != 0 or not t.dtype.is_integer():
        return None
    axis = axis_attr(node, rank)
    return None if axis is None else (int(t.numpy()), axis)


def picks_through_transpose(graph: ir.Graph, t: ir.Node) -> bool:
    """Gathers of the Transpose ``t``'s output read ``t``'s input, their Transposes composed (module docstring)."""
    p = perm_of(t)
    if p is None or not t.inputs or t.inputs[0] is None or t.outputs[0].is_graph_output():
        return False
    uses = list(t.outputs[0].uses())
    plans = []
    for use in uses:
        g = use.node
        pick = _pick(g, len(p)) if use.idx == 0 else None
        if pick is None or g.outputs[0].is_graph_output():
            return False
        a = pick[1]
        rest = [d - (d > p[a]) for j, d in enumerate(p) if j != a]  # p without axis a, on Gather(v)'s axes
        if rest == sorted(rest):  # p moved the picked axis alone: the pick is the same value
            plans.append((g, None, p[a], None))
            continue
        readers = list(g.outputs[0].uses())
        if len(readers) != 1 or not is_default_op(readers[0].node, "Transpose"):
            return False
        q = perm_of(readers[0].node)
        if q is None or len(q) != len(p) - 1:
            return False
        plans.append((g, readers[0].node, p[a], [rest[i] for i in q]))
    if not plans:
        return False
    v = t.inputs[0]
    for g, t2, axis, composed in plans:
        g.replace_input_with(0, v)
        g.attributes["axis"] = ir.AttrInt64("axis", axis)
        out = g.outputs[0]
        if v.shape is not None:
            out.shape = ir.Shape([d for j, d in enumerate(v.shape.dims) if j != axis])
        if t2 is not None:
            t2.attributes["perm"] = ir.AttrInt64s("perm", composed)
    graph.remove(t, safe=True)
    return True


def picks_as_split(graph: ir.Graph, r: ir.Node, opset: int) -> bool:
    """The Reshape ``r`` splitting t's last axis into [G, C], read only by Gathers over G: a Split of t."""
    if opset < 13 or len(r.inputs) < 2 or r.inputs[0] is None or r.outputs[0].is_graph_output():
        return False
    x, view = r.inputs[0], r.outputs[0]
    ins, outs = value_dims(x), reshape_out_dims(view)
    if ins is None or outs is None or len(outs) != len(ins) + 1 or len(ins) < 1:
        return False
    (g, ga), (c, ca), (w, wa) = outs[-2], outs[-1], ins[-1] if ins[-1] is not None else (None, None)
    if ga or ca or wa or w is None or g < 2 or c < 1 or g * c != w or outs[:-2] != ins[:-1]:
        return False
    picks = []
    for use in view.uses():
        pick = _pick(use.node, len(outs)) if use.idx == 0 else None
        if pick is None or pick[1] != len(outs) - 2 or not -g <= pick[0] < g:
            return False
        picks.append((use.node, pick[0] % g))
    if not picks:
        return False
    taken = graph_names(graph)
    sizes = int64_initializer(graph, f"{view.name or 'packed'}_parts", [c] * g, taken)
    split = ir.node("Split", [x, sizes], attributes={"axis": len(ins) - 1}, num_outputs=g)
    part_shape = None if x.shape is None else ir.Shape([*x.shape.dims[:-1], c])
    for i, o in enumerate(split.outputs):
        o.name = fresh_name(f"{view.name or 'packed'}_part{i}", taken)
        o.type, o.shape = x.type, part_shape
    graph.insert_after(r, [split])
    for node, i in picks:
        reroute(node.outputs[0], split.outputs[i])
        graph.remove(node, safe=True)
    graph.remove(r, safe=True)
    return True
