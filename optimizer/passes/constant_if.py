"""Inline an ``If`` whose condition is a constant: its taken branch replaces it.

Cases handled: an ``If`` in the main graph or in any subgraph whose condition is a true constant
(an initializer that is not a graph input, a Constant node, an earlier folded result) holding one
element. The taken branch's nodes move in front of the ``If`` (nested subgraphs move with them),
its initializers become initializers of the graph that held the ``If``, and
each ``If`` output becomes an ``Identity`` of the branch output, which identity elimination then
removes where it can. Branch names that clash with a name elsewhere in the model get a suffix.

Why this is a pass of its own and runs at O1: once constant folding has made a condition constant
(``Size`` of a static input, say), ONNX Runtime's default graph optimizations inline the branch
themselves on load, and then run ONNX shape inference on values the ``If`` used to hide. A branch
that hands ``Range`` a one-element 1-D constant (which ORT's kernel accepts and ONNX inference
refuses once the data is visible, as in the node suite's expanded AffineGrid) then makes the
optimized model fail to load. Inlining it here lets constant folding evaluate what the branch
made constant, exactly as the runtime computes it, before ORT sees it.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes.constant_folding import constant_tensor


def _condition(node: ir.Node) -> bool | None:
    """The constant condition of an ``If``, or None when it is not a known single element."""
    cond = node.inputs[0] if node.inputs else None
    tensor = constant_tensor(cond)
    if tensor is None or tensor.size != 1 or tensor.dtype != ir.DataType.BOOL:
        return None
    return bool(np.asarray(tensor.numpy()).reshape(-1)[0])


def _name_counts(model: ir.Model) -> tuple[collections.Counter, collections.Counter]:
    """How often each value name and each node name occurs over all graphs of the model."""
    values: collections.Counter[str] = collections.Counter()
    nodes: collections.Counter[str] = collections.Counter()
    for graph in model.graphs():
        values.update(v.name for v in itertools.chain(graph.inputs, graph.initializers.values()) if v.name)
        for node in graph:
            nodes.update([node.name] if node.name else [])
            values.update(v.name for v in node.outputs if v.name)
    return values, nodes


def _fresh(name: str, taken: collections.Counter) -> str:
    for k in itertools.count(1):
        candidate = f"{name}__inl{k}"
        if candidate not in taken:
            taken[candidate] += 1
            return candidate
    raise AssertionError("unreachable")


class InlineConstantIfPass(FusePass):
    """Replace every ``If`` with a constant condition by the branch it takes (see module doc)."""

    name = "if-inlining"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in list(model.graphs()):
            for node in list(graph):
                if (node.graph is graph and node.op_type == "If" and node.domain in ("", "ai.onnx")
                        and _condition(node) is not None):
                    self._inline(node, graph, model)
                    self.stats["If"] += 1
                    modified = True
        return ir.passes.PassResult(model, modified=modified)

    def _inline(self, node: ir.Node, graph: ir.Graph, model: ir.Model) -> None:
        which = "then_branch" if _condition(node) else "else_branch"
        branch = node.attributes[which].as_graph()
        # A branch name that occurs more than once in the model (its own occurrence included)
        # clashes with another scope's name once it moves: rename it.
        values, node_names = _name_counts(model)
        moved: list[ir.Node] = []
        for name, init in list(branch.initializers.items()):
            branch.initializers.pop(name)
            if values[name] > 1:
                init.name = _fresh(name, values)
            graph.register_initializer(init)
        branch_outputs = list(branch.outputs)
        branch.outputs.clear()
        for inner in list(branch):
            branch.remove(inner)
            if inner.name and node_names[inner.name] > 1:
                inner.name = _fresh(inner.name, node_names)
            for v in inner.outputs:
                if v.name and values[v.name] > 1:
                    v.name = _fresh(v.name, values)
            moved.append(inner)
        for out, src in zip(node.outputs, branch_outputs):
            ident = ir.node("Identity", [src])
            new = ident.outputs[0]
            new.type = out.type or src.type
            new.shape = src.shape if src.shape is not None else out.shape
            moved.append(ident)
            name = out.name
            out.replace_all_uses_with(new, replace_graph_outputs=True)
            out.name = None
            new.name = name
        graph.insert_before(node, moved)
        # the branch not taken goes with the If: its nodes must stop reading outer values, which
        # onnx-ir counts as uses at any depth (a value only it read would look alive to DCE, a
        # graph input only it read would stay in the interface: a merged decoder's attention_mask)
        other = node.attributes["else_branch" if which == "then_branch" else "then_branch"].as_graph()
        for inner in ir.traversal.RecursiveGraphIterator(other):
            for i in range(len(inner.inputs)):
                inner.replace_input_with(i, None)
        graph.remove(node, safe=True)
