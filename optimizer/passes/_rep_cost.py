"""What a shape-cse representative costs in nodes kept alive (passes/shape_cse.py).

shape-cse replaces every copy of a shape value by one representative: the first copy, or a fresh
read from the graph inputs when that copy reads an intermediate. A fresh read is not free (a sum
``Shape(past)[2] + Shape(ids)[1]`` is 3 nodes), while the first copy may cost one node on top of
a cone other consumers keep alive anyway (a rewrite's ``Unsqueeze(P + S)`` of the scalar its
Range reads). These counts let the pass keep the cheaper one. Constant nodes are not counted
(folding turns them into initializers, which dedupe).
"""

from __future__ import annotations

import onnx_ir as ir

_MAX_CONE = 64   # shape glue is small; a larger cone is no shape read worth keeping


def live_nodes(graph: ir.Graph) -> set[ir.Node]:
    """The nodes of ``graph`` that a graph output reaches (what dead code keeps). A use from a
    subgraph counts as live: its body is not looked into."""
    outputs = set(graph.outputs)
    live: set[ir.Node] = set()
    for node in reversed(graph):
        if any(v in outputs or any(u.node in live or u.node.graph is not graph for u in v.uses())
               for v in node.outputs):
            live.add(node)
    return live


def _cone(value: ir.Value, graph: ir.Graph, inputs: set[ir.Value]) -> list[ir.Node] | None:
    """The producers of ``value`` down to Shapes of ``inputs`` and constants; None when the cone
    reads anything else (an intermediate's Shape, another input's, a tensor's data, an outer
    scope) or is large."""
    out: list[ir.Node] = []
    seen: set[ir.Node] = set()
    stack = [value.producer()]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        if node is None or node.graph is not graph or len(seen) >= _MAX_CONE:
            return None
        seen.add(node)
        out.append(node)
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            x = node.inputs[0]
            if x is None or not (x in inputs or x.const_value is not None):
                return None
            continue
        for x in node.inputs:
            if x is not None and x.const_value is None:
                stack.append(x.producer())
    return out


def keep_cost(value: ir.Value, graph: ir.Graph, live: set[ir.Node], fresh: set[ir.Node]) -> int | None:
    """Nodes that stay alive only for ``value`` (what pointing its uses elsewhere frees); None when
    its cone reads more than the shapes of the graph inputs the fresh read's Shapes read, and
    constants (then the fresh read is taken: which input a size is read from matters to the mask
    probes, which vary some inputs' lengths and not others; attention_mask's is not varied)."""
    inputs = {n.inputs[0] for n in fresh if n.op_type == "Shape"}
    cone = _cone(value, graph, inputs)
    if cone is None:
        return None
    freed = {cone[0]}
    grew = True
    while grew:
        grew = False
        for node in cone:
            if node in freed or any(v.is_graph_output() for v in node.outputs):
                continue
            if all(u.node in freed or (u.node not in live and u.node.graph is graph)
                   for v in node.outputs for u in v.uses()):
                freed.add(node)
                grew = True
    return sum(n.op_type != "Constant" for n in freed)


def _const_key(x: ir.Value):
    from onnx_fuse.passes.cse import _tensor_key

    t = x.const_value
    node = x.producer()
    if t is None and node is not None and node.op_type == "Constant" and "value" in node.attributes:
        t = node.attributes["value"].value
    return None if t is None else ("c", _tensor_key(t))


def _key(node: ir.Node, name) -> tuple | None:
    from onnx_fuse.passes.cse import COMMUTATIVE, _UNHASHABLE, _attr_key

    attrs = tuple((k, _attr_key(a)) for k, a in sorted(node.attributes.items()))
    if any(a[1] is _UNHASHABLE for a in attrs):
        return None
    ins = tuple(None if x is None else (_const_key(x) or name(x)) for x in node.inputs)
    if node.op_type in COMMUTATIVE and len(ins) == 2:
        ins = tuple(sorted(ins, key=repr))
    return (node.domain, node.op_type, ins, attrs)


_READ_OPS = ("Shape", "Gather", "Add")   # what a fresh read is built of, besides Constants


def twin_index(graph: ir.Graph, live: set[ir.Node]) -> dict:
    """The live nodes a fresh read's nodes could be twins of, by key (the first in graph order)."""
    index = {}
    for node in graph:
        if node in live and node.op_type in _READ_OPS:
            if (k := _key(node, lambda x: ("v", id(x)))) is not None:
                index.setdefault(k, node)
    return index


def fresh_cost(src: ir.Value, fresh: set[ir.Node], index: dict) -> int:
    """New nodes the fresh read ``src`` adds: its nodes (in ``fresh``) that no live node of the
    graph already computes (``twin_index``; node CSE merges those into the twin)."""
    twin: dict[ir.Value, ir.Value] = {}
    cost = 0
    for node in _topo(src, fresh):
        if node.op_type == "Constant":
            continue
        k = _key(node, lambda x: ("v", id(twin[x])) if x in twin else ("f", id(x)))
        other = index.get(k) if k is not None else None
        if other is None:
            cost += 1
            continue
        twin.update(zip(node.outputs, other.outputs))
    return cost


def _topo(src: ir.Value, fresh: set[ir.Node]) -> list[ir.Node]:
    """The fresh nodes under ``src``, producers first."""
    out: list[ir.Node] = []

    def visit(node: ir.Node | None) -> None:
        if node is None or node not in fresh or node in out:
            return
        for x in node.inputs:
            if x is not None:
                visit(x.producer())
        out.append(node)

    visit(src.producer())
    return out
