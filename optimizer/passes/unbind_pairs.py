"""A pair picked out of x viewed as [..., D/2, 2] as the strided Slice of x it is.

``x.unflatten(-1, (-1, 2)).unbind(-1)`` (Flux's and other diffusers transformers' interleaved RoPE,
``x.reshape(*x.shape[:-1], -1, 2)[..., k]`` alike) takes the even (k = 0) or odd (k = 1) columns of
x's last axis. Exporters write it as Reshape(x, [..., D/2, 2]) and then, per k, Slice [k:k+1] on
the new axis + Squeeze, a Gather of index k, or one two-way Split + Squeezes. The RoPE rules read
rotate_every_two's halves as Slice(x, k::2) on x's last axis (rules/rope/rotary_interleaved.yaml),
so each pick becomes that Slice. Recognized on shapes: the Reshape must only split x's last axis
(its output is x's dims with the last, D, replaced by [D/2, 2]); the picks must be on the new axis
of 2. Exact: the Slice selects the same elements. The Reshape dies with its last reader.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import raw_axes, stored_ints
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._shape_values import read_dims


def _only_reader(v: ir.Value) -> ir.Node | None:
    uses = list(v.uses())
    return uses[0].node if len(uses) == 1 and not v.is_graph_output() else None


def _squeezes_last(node: ir.Node | None, rank: int) -> bool:
    if not is_default_op(node, "Squeeze"):
        return False
    axes = raw_axes(node)
    return axes is not None and len(axes) == 1 and axes[0] % rank == rank - 1


class UnbindPairsPass(FusePass):
    """Picks of [..., D/2, 2] views as strided Slices (module docstring)."""

    name = "unbind-pairs"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if is_default_op(node, "Reshape") and self._splits_last(node):
                    modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _splits_last(node: ir.Node) -> bool:
        src, out = read_dims(node.inputs[0], unknown="opaque"), read_dims(node.outputs[0], unknown="opaque")
        if src is None or out is None or not src or len(out) != len(src) + 1:
            return False
        d = src[-1]
        return isinstance(d, int) and d > 0 and d % 2 == 0 and out[-2:] == [d // 2, 2] and out[:-2] == src[:-1]

    def _rewrite(self, graph: ir.Graph, reshape: ir.Node) -> bool:
        x, r = reshape.inputs[0], reshape.outputs[0]
        rank = len(r.shape)
        picks: list[tuple[ir.Node, ir.Value, int]] = []  # (node to insert before, value replaced, k)
        for use in list(r.uses()):
            node = use.node
            if use.idx != 0:
                continue
            if is_default_op(node, "Gather"):
                idx = stored_ints(node.inputs[1])
                if (int(attr_value(node, "axis", 0)) % rank == rank - 1 and idx is not None and len(idx) == 1
                        and node.inputs[1].shape is not None and len(node.inputs[1].shape) == 0):
                    picks.append((node, node.outputs[0], idx[0] % 2))
            elif is_default_op(node, "Slice") and len(node.inputs) >= 4:
                st, en, ax = (stored_ints(node.inputs[i]) for i in (1, 2, 3))
                steps = stored_ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else [1]
                sq = _only_reader(node.outputs[0])
                if (st is not None and en is not None and ax is not None and steps == [1] and len(st) == 1
                        and ax[0] % rank == rank - 1 and st[0] in (0, 1) and en[0] >= st[0] + 1
                        and (st[0] == 1 or en[0] == 1) and _squeezes_last(sq, rank)):
                    picks.append((sq, sq.outputs[0], st[0]))
            elif is_default_op(node, "Split") and len(node.outputs) == 2:
                sizes = stored_ints(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else \
                    attr_value(node, "split", None)
                readers = [_only_reader(o) for o in node.outputs]
                if (int(attr_value(node, "axis", 0)) % rank == rank - 1 and (sizes is None or list(sizes) == [1, 1])
                        and all(_squeezes_last(q, rank) for q in readers)):
                    picks += [(q, q.outputs[0], k) for k, q in enumerate(readers)]
        # a pick already rerouted (no readers left) waits for dead-code removal
        picks = [p for p in picks if p[1].is_graph_output() or list(p[1].uses())]
        if not picks:
            return False
        stem = reshape.name or r.name or "unbind_pairs"
        consts = {}
        for what, value in (("ends", x.shape.dims[-1]), ("axes", -1), ("steps", 2), ("even", 0), ("odd", 1)):
            name = f"{stem}_pair_{what}"
            while name in graph.initializers:
                name += "_"
            c = ir.Value(name=name, const_value=ir.tensor(np.array([value], np.int64)))
            graph.register_initializer(c)
            consts[what] = c
        for node, old, k in picks:
            new = ir.Value(name=f"{old.name}_cols", type=old.type, shape=old.shape)
            start = consts["odd" if k else "even"]
            graph.insert_before(node, [ir.Node("", "Slice", [x, start, consts["ends"], consts["axes"], consts["steps"]],
                                               outputs=[new], name=f"{stem}_pair{k}_{self.stats['pick']}")])
            reroute(old, new)
            self.stats["pick"] += 1
        return True
