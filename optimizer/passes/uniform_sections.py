"""Sections of a split, each taken at its own index of an axis the tensor does not vary along: one Gather.

HunYuan-VL's XD-RoPE (and any multi-axis RoPE written the same way) builds its tables from K position streams:
``t = concat([m[i % K] for i, m in enumerate(cat(f, f).split(2 * sections, -1))], -1)`` for f [K, B, S, D/2],
exported as Split on the last axis, a Gather of one constant index on axis 0 per piece, and a Concat of the
gathered pieces. For text-only positions the K streams are one [1, B, S] row Expand'ed, so every index names
the same values and the table is Gather(cat(f, f), 0, axis 0) -- the concat(c, c) form whose halves the RoPE
rules prove equal (rewrite/_half_columns.py). This pass proves it from the values (self_writes.uniform_axes: an
Expand of a size-1 axis, kept through elementwise ops, Cast, Unsqueeze ...), not from the exporter's spelling:

    Concat(Gather(Split(X, axis=s)[0], k0, axis=g), ..., Gather(Split(X)[n-1], k_{n-1}, axis=g), axis=s')
      == Gather(X, 0, axis=g)   when g != s, axis g of X is uniform, the pieces are all the Split's outputs in
                                order and s' is s with g removed.

Where X is itself a Concat on the split axis, the Gather goes to its inputs (one per distinct input), so
cat(f, f) comes out as Concat(c, c) with c = Gather(f, 0). Runs in the cleanup passes (every level).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, axis_attr, is_default_op, reroute
from onnx_fuse.passes.constant_folding import constant_tensor
from onnx_fuse.passes.self_writes import uniform_axes


def _scalar_index(value: ir.Value | None) -> int | None:
    t = constant_tensor(value)
    if t is None or not t.dtype.is_integer() or len(t.shape) != 0:
        return None
    return int(t.numpy())


class UniformSectionsPass(FusePass):
    """Concat of a Split's pieces gathered along a uniform axis: one Gather (module docstring)."""

    name = "uniform-sections"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.graph is graph and is_default_op(node, "Concat"):
                    found = self._match(node)
                    if found is not None:
                        self._rewrite(graph, node, *found)
                        self.stats["Concat"] += 1
                        modified = True
        return ir.passes.PassResult(model, modified=modified)

    def _match(self, node: ir.Node) -> tuple[ir.Value, int, int] | None:
        gathers = [v.producer() if v is not None else None for v in node.inputs]
        if len(gathers) < 2 or not all(is_default_op(g, "Gather") and len(g.inputs) == 2 for g in gathers):
            return None
        if any(_scalar_index(g.inputs[1]) is None for g in gathers):
            return None
        split = gathers[0].inputs[0].producer() if gathers[0].inputs[0] is not None else None
        if not is_default_op(split, "Split") or len(split.outputs) != len(gathers):
            return None
        if any(g.inputs[0] is not split.outputs[i] for i, g in enumerate(gathers)):
            return None
        x = split.inputs[0]
        if x is None or x.shape is None:
            return None
        r = len(x.shape)
        if r < 2:
            return None
        axes = {axis_attr(g, r) for g in gathers}
        ga, sa, ca = axes.pop() if len(axes) == 1 else None, axis_attr(split, r), axis_attr(node, r - 1)
        if ga is None or sa is None or ca is None or ga == sa or ca != (sa if sa < ga else sa - 1):
            return None
        size = x.shape[ga]
        if not isinstance(size, int) or size < 1 or any(not -size <= _scalar_index(g.inputs[1]) < size
                                                         for g in gathers):
            return None
        if ga not in uniform_axes(x):
            return None
        return x, ga, sa

    def _rewrite(self, graph: ir.Graph, node: ir.Node, x: ir.Value, ga: int, sa: int) -> None:
        zero = ir.node("Constant", [], attributes={"value": ir.tensor(np.array(0, np.int64))})
        graph.insert_before(node, zero)
        out = node.outputs[0]
        r = len(x.shape)
        parts = x.producer()
        if is_default_op(parts, "Concat") and axis_attr(parts, r) == sa \
                and all(v is not None and v.shape is not None and len(v.shape) == r for v in parts.inputs):
            taken: dict[int, ir.Value] = {}
            pieces = []
            for v in parts.inputs:
                if id(v) not in taken:
                    g = ir.node("Gather", [v, zero.outputs[0]], attributes={"axis": ga})
                    graph.insert_before(node, g)
                    taken[id(v)] = g.outputs[0]
                pieces.append(taken[id(v)])
            # the outer Concat's own axis attribute (-1 stays -1: the RoPE rules match it so)
            new = ir.node("Concat", pieces, attributes={"axis": node.attributes["axis"].value})
        else:
            new = ir.node("Gather", [x, zero.outputs[0]], attributes={"axis": ga})
        graph.insert_before(node, new)
        new.outputs[0].type, new.outputs[0].shape = out.type, out.shape
        reroute(out, new.outputs[0])
        graph.remove(node, safe=True)
