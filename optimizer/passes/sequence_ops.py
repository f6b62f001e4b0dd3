"""Sequences built and taken apart in one graph, as the plain tensor ops they stand for.

The dynamo exporter writes torch.hstack / vstack / atleast_Nd of a list as a SequenceConstruct of the
tensors, a SequenceMap whose body is atleast_1d (an If on the rank), SequenceAt per element and a
Concat (the reference Llama's cache mask, ``torch.hstack([zeros(T, P), triu(full(T, T, -inf), 1)])``),
and torch.cat of a list at times as ConcatFromSequence. Where the sequence is a SequenceConstruct of
known tensors, nothing about it is dynamic:
- ``SequenceAt(SequenceConstruct(x0..xn), i)``, i a constant, is x_i;
- ``SequenceMap(SequenceConstruct(x0..xn))`` (one sequence in, one out, no other inputs) is
  ``SequenceConstruct(body(x0), .., body(xn))``: the body is copied once per element (its outer-scope
  reads kept), every value and node of a copy renamed apart;
- ``ConcatFromSequence(SequenceConstruct(x0..xn), axis, new_axis)`` is ``Concat(x0..xn, axis)``, each
  x_i unsqueezed at ``axis`` first where new_axis = 1.
The exporter's own optimizer (torch.onnx.export(optimize=True)) turns torch.split's SplitToSequence into a
Split; an export without it (optimize=False) keeps ``SequenceAt(SplitToSequence(x, split), i)``. With split a
constant (1-D sizes, or a scalar chunk over an axis of known length) and every reader of the sequence one of the
three above, ``SplitToSequence(x, split, axis)`` is ``SequenceConstruct(Split(x, sizes, axis))`` (keepdims is
ignored where split is given; not so in ORT for a scalar split, whose keepdims 0 squeezes the axis: such a node is
left), which the rules above then take apart.
Exact (the same tensors, the same ops on them). Constant folding and If inlining then see the
elements (atleast_1d's rank test folds once the rank is known), the attention rules see the mask,
and TensorRT, which runs no sequence op, gets a graph without them. The SequenceConstruct dies with
its last reader (dead-code).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir
from onnx_ir import _cloner

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes.constant_folding import constant_tensor


def _elements(seq: ir.Value | None) -> list[ir.Value] | None:
    node = seq.producer() if seq is not None else None
    return list(node.inputs) if is_default_op(node, "SequenceConstruct") and all(node.inputs) else None


def _const_index(v: ir.Value | None) -> int | None:
    t = constant_tensor(v) if v is not None else None
    if t is None or t.size != 1 or not t.dtype.is_integer():
        return None
    return int(np.asarray(t.numpy()).reshape(-1)[0])


def _taken_names(model: ir.Model) -> set[str]:
    taken: set[str] = set()
    for graph in model.graphs():
        taken.update(v.name for v in itertools.chain(graph.inputs, graph.initializers.values()) if v.name)
        for node in graph:
            taken.update(v.name for v in node.outputs if v.name)
            taken.update([node.name] if node.name else [])
    return taken


def _fresh(name: str | None, taken: set[str], tag: str) -> str:
    for k in itertools.count(1):
        candidate = f"{name or 'seq'}__{tag}{k}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate
    raise AssertionError("unreachable")


def _rename(nodes, taken: set[str], tag: str) -> None:
    """Rename every node and value a copy defines, in nested bodies too, apart from all others."""
    for node in nodes:
        node.name = _fresh(node.name, taken, tag) if node.name else None
        for v in node.outputs:
            v.name = _fresh(v.name, taken, tag)
        for attr in node.attributes.values():
            graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else \
                list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
            for g in graphs:
                for v in g.inputs:
                    v.name = _fresh(v.name, taken, tag)
                for name, init in list(g.initializers.items()):
                    g.initializers.pop(name)
                    init.name = _fresh(name, taken, tag)
                    g.register_initializer(init)
                _rename(list(g), taken, tag)


class SequenceOpsPass(FusePass):
    """SequenceAt / SequenceMap / ConcatFromSequence of a SequenceConstruct (or of a SplitToSequence with known
    sizes) as tensor ops (module doc)."""

    name = "sequence-ops"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        taken: set[str] | None = None
        opset = model.opset_imports.get("", 1)
        for graph in list(model.graphs()):
            for node in list(graph):
                if is_default_op(node, "SplitToSequence"):
                    taken = _taken_names(model) if taken is None else taken
                    if self._split(graph, node, opset, taken):
                        self.stats["SplitToSequence"] += 1
                        modified = True
            for node in list(graph):
                if node.graph is not graph or not is_default_op(
                        node, "SequenceAt", "SequenceMap", "ConcatFromSequence") or not node.inputs:
                    continue
                xs = _elements(node.inputs[0])
                if xs is None:
                    continue
                taken = _taken_names(model) if taken is None else taken
                if node.op_type == "SequenceAt":
                    i = _const_index(node.inputs[1] if len(node.inputs) > 1 else None)
                    if i is None or not -len(xs) <= i < len(xs):
                        continue
                    x = xs[i]
                    if node.outputs[0].is_graph_output():
                        # the element would take the output's name (a graph input, another output renamed):
                        # an Identity keeps it, and identity-elimination decides whether it can go
                        ident = ir.Node("", "Identity", [x], name=_fresh(f"{node.name or 'sequence_at'}_identity",
                                                                           taken, ""))
                        ident.outputs[0].type, ident.outputs[0].shape = node.outputs[0].type, node.outputs[0].shape
                        graph.insert_before(node, ident)
                        x = ident.outputs[0]
                    reroute(node.outputs[0], x)
                elif node.op_type == "SequenceMap":
                    if not self._map(graph, node, xs, taken):
                        continue
                else:
                    self._concat(graph, node, xs, opset, taken)
                graph.remove(node, safe=True)
                self.stats[node.op_type] += 1
                modified = True
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _split(graph: ir.Graph, node: ir.Node, opset: int, taken: set[str]) -> bool:
        """SplitToSequence(x, split) -> SequenceConstruct(Split(x, sizes)), where the sizes are known and every
        reader of the sequence is one this pass resolves."""
        seq = node.outputs[0]
        if len(node.inputs) < 2 or node.inputs[1] is None or seq.is_graph_output() or not seq.uses() or any(
                not is_default_op(use.node, "SequenceAt", "SequenceMap", "ConcatFromSequence") or use.idx != 0
                for use in seq.uses()):
            return False
        x, t = node.inputs[0], constant_tensor(node.inputs[1])  # an initializer or a Constant node's
        axis = int(attr_value(node, "axis", 0))
        if t is None or not t.dtype.is_integer() or t.shape.rank() > 1:
            return False
        sizes = [int(v) for v in np.asarray(t.numpy()).reshape(-1)]
        if t.shape.rank() == 0 and not int(attr_value(node, "keepdims", 1)):
            return False  # keepdims 0 with a scalar split: ORT squeezes the axis (a chunk of 1; longer ones fail),
            # where the spec ignores keepdims once split is given: left to the runtime
        if t.shape.rank() == 0:  # a chunk size: pieces of it, the last one shorter (torch.split's int form)
            rank = x.shape.rank() if x.shape is not None else None
            dim = x.shape[axis] if rank is not None and -rank <= axis < rank else None
            if not isinstance(dim, int) or sizes[0] <= 0:
                return False
            sizes = [sizes[0]] * (dim // sizes[0]) + ([dim % sizes[0]] if dim % sizes[0] else [])
        if not sizes or min(sizes) < 0:
            return False
        stem = node.name or seq.name or "split_to_sequence"
        name = lambda what: _fresh(f"{stem}_{what}", taken, "")  # noqa: E731
        attrs = [ir.AttrInt64("axis", axis)]
        if opset >= 13:  # split an input from opset 13 on, an attribute before
            sizes_in = ir.Value(name=name("sizes"), const_value=ir.tensor(np.array(sizes, np.int64)))
            graph.register_initializer(sizes_in)
            split = ir.Node("", "Split", [x, sizes_in], attributes=attrs, num_outputs=len(sizes), name=name("split"))
        else:
            split = ir.Node("", "Split", [x], attributes=[*attrs, ir.AttrInt64s("split", sizes)],
                            num_outputs=len(sizes), name=name("split"))
        for out in split.outputs:
            out.name, out.dtype = name("piece"), x.dtype
        construct = ir.Node("", "SequenceConstruct", list(split.outputs), name=name("construct"))
        construct.outputs[0].name, construct.outputs[0].type = name("seq"), seq.type
        graph.insert_before(node, [split, construct])
        reroute(seq, construct.outputs[0])
        graph.remove(node, safe=True)
        return True

    def _map(self, graph: ir.Graph, node: ir.Node, xs: list[ir.Value], taken: set[str]) -> bool:
        body = node.attributes["body"].as_graph() if "body" in node.attributes else None
        if body is None or len(node.inputs) != 1 or len(node.outputs) != 1 or len(body.inputs) != 1 \
                or len(body.outputs) != 1:
            return False
        consts = {}  # the body's initializers (an inlined If's, say) move to the graph, shared by the copies
        for init in body.initializers.values():
            moved = ir.Value(name=_fresh(init.name, taken, "map"), type=init.type, shape=init.shape,
                             const_value=init.const_value)
            graph.register_initializer(moved)
            consts[init] = moved
        outs = []
        for x in xs:
            value_map: dict = {**consts, body.inputs[0]: x}
            cloner = _cloner.Cloner(attr_map={}, value_map=value_map, metadata_props={},
                                    allow_outer_scope_values=True)
            copies = [cloner.clone_node(n) for n in body]
            _rename(copies, taken, "map")
            graph.insert_before(node, copies)
            outs.append(value_map.get(body.outputs[0], body.outputs[0]))
        seq = ir.Node("", "SequenceConstruct", outs, name=_fresh(node.name, taken, "map"))
        seq.outputs[0].name = _fresh(node.outputs[0].name, taken, "map")
        seq.outputs[0].type = node.outputs[0].type
        graph.insert_before(node, [seq])
        reroute(node.outputs[0], seq.outputs[0])
        return True

    @staticmethod
    def _concat(graph: ir.Graph, node: ir.Node, xs: list[ir.Value], opset: int, taken: set[str]) -> None:
        axis = int(attr_value(node, "axis", 0))
        out, stem = node.outputs[0], node.name or node.outputs[0].name or "concat_from_sequence"
        name = lambda what: _fresh(f"{stem}_{what}", taken, "")  # noqa: E731
        parts, new = xs, []
        if int(attr_value(node, "new_axis", 0)):  # stack: each element gets the new axis first
            parts = []
            axes = None
            if opset >= 13:
                axes = ir.Value(name=name("axes"), const_value=ir.tensor(np.array([axis], np.int64)))
                graph.register_initializer(axes)
            for k, x in enumerate(xs):
                u = ir.Node("", "Unsqueeze", [x, axes] if axes is not None else [x],
                            attributes=[] if axes is not None else [ir.AttrInt64s("axes", [axis])],
                            name=name("unsqueeze"))
                u.outputs[0].name = name("unsqueeze")
                parts.append(u.outputs[0])
                new.append(u)
        cat = ir.Node("", "Concat", parts, attributes=[ir.AttrInt64("axis", axis)], name=name("concat"))
        cat.outputs[0].type, cat.outputs[0].shape = out.type, out.shape
        cat.outputs[0].name = name("concat")
        graph.insert_before(node, [*new, cat])
        reroute(out, cat.outputs[0])
