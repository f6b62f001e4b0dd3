"""Subgraphs (If / Loop / Scan bodies) prepared for onnx's shape inference, on the copy given to it.

Two ways onnx infers a body worse than the same nodes in a main graph, both seen in Optimum's
merged decoders (every layer in the two branches of an If on ``use_cache_branch``):

- Outer constants: onnx infers a body with the outer scope's value *types* only, so a Reshape
  target, Unsqueeze axes or Expand shape read from an outer initializer or Constant node is an
  unknown tensor there and the body's views lose their dims (fuzz seed 187: a GQA key view in a
  branch without head / length facts, attention lowered to the fallback). ``share_outer_constants``
  gives each subgraph the small outer constants it reads as initializers of its own.
- Sibling names: the two branches of a merged decoder use the same value names (both come from one
  model), and onnx's data propagation keys the shape values it computes by name across the whole
  model: a branch's ``Concat_9`` (a head merge [B, S, -1]) took the other branch's ``Concat_9``
  (a KV repeat [B, 2, 2, T, 16]) and its Reshape got a rank-5 shape, so every norm and attention
  after it lost its shape. ``unique_subgraph_names`` renames a subgraph's values that another graph
  also defines, and ``restore_names`` puts the names back on what inference returns.
"""

from __future__ import annotations

import onnx

#: Largest outer constant copied into a subgraph (elements): shape vectors, axes, scalars.
MAX_ELEMENTS = 64


def _elements(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _small(t: onnx.TensorProto) -> bool:
    return t.data_location != onnx.TensorProto.EXTERNAL and _elements(t) <= MAX_ELEMENTS


def _constant_output(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a ``Constant`` node with a ``value`` attribute (the form folding writes)."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    return attr.t if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR else None


def _reads(graph: onnx.GraphProto) -> set[str]:
    """Names read by ``graph``'s nodes and those of its nested subgraphs."""
    names = {i for node in graph.node for i in node.input if i}
    for sub in _subgraphs(graph):
        names |= _reads(sub)
    return names


def _node_subgraphs(node: onnx.NodeProto):
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _subgraphs(graph: onnx.GraphProto):
    for node in graph.node:
        yield from _node_subgraphs(node)


def all_subgraphs(graph: onnx.GraphProto):
    """Every If / Loop / Scan body under ``graph``, nested ones too (outermost first)."""
    for sub in _subgraphs(graph):
        yield sub
        yield from all_subgraphs(sub)


def _defined(graph: onnx.GraphProto) -> set[str]:
    return ({v.name for v in graph.input} | {t.name for t in graph.initializer}
            | {o for n in graph.node for o in n.output if o})


def share_outer_constants(graph: onnx.GraphProto, fed: frozenset[str] = frozenset(),
                          outer: dict[str, onnx.TensorProto] | None = None) -> int:
    """Copy into each subgraph of ``graph`` (recursively) the small constants of its enclosing
    scopes that it reads and does not define; returns how many were copied. ``fed``: the main
    graph's real inputs (onnx-ir's ``call_onnx_api`` lists every initializer as an input too; an
    initializer that is a real input can be overridden, so it is no constant)."""
    scope = dict(outer or {})
    inputs = fed if outer is None else {v.name for v in graph.input}
    for v in graph.input:
        scope.pop(v.name, None)
    for t in graph.initializer:
        if t.name not in inputs and _small(t):
            scope[t.name] = t
        else:
            scope.pop(t.name, None)   # a fed input or a big weight shadows an outer constant
    copied = 0
    for node in graph.node:
        for sub in _node_subgraphs(node):
            wanted = sorted((_reads(sub) - _defined(sub)) & scope.keys())
            sub.initializer.extend(scope[name] for name in wanted)
            copied += len(wanted) + share_outer_constants(sub, outer=scope)
        t = _constant_output(node)
        for out in node.output:
            scope.pop(out, None)
        if t is not None and node.output and _small(t):
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = node.output[0]
            scope[node.output[0]] = copy
    return copied


#: Joins a renamed value's name and its graph's number (a name no exporter writes).
_MARK = "#onnx_fuse_scope"


def unique_subgraph_names(graph: onnx.GraphProto) -> dict[str, str]:
    """Rename, in every subgraph of ``graph``, the values that another graph of the model also
    defines (to ``name#onnx_fuse_scope<k>``), uses in nested subgraphs included; returns new -> old."""
    counts: dict[str, int] = {}
    for g in (graph, *all_subgraphs(graph)):
        for name in _defined(g):
            counts[name] = counts.get(name, 0) + 1
    shared = {name for name, c in counts.items() if c > 1}
    back: dict[str, str] = {}
    if shared:
        number = iter(range(1, 1 << 30))
        for sub in _subgraphs(graph):
            _rename(sub, {}, shared, number, back)
    return back


def _rename(graph: onnx.GraphProto, outer: dict[str, str], shared: set[str], number, back: dict) -> None:
    k = next(number)
    names = dict(outer)
    for name in _defined(graph) & shared:
        names[name] = new = f"{name}{_MARK}{k}"
        back[new] = name
    if names:
        _apply_names(graph, names)
    for sub in _subgraphs(graph):
        _rename(sub, names, shared, number, back)


def restore_names(graph: onnx.GraphProto, back: dict[str, str]) -> None:
    """Undo ``unique_subgraph_names`` on ``graph`` (an inferred copy) and its subgraphs."""
    if not back:
        return
    for g in (graph, *all_subgraphs(graph)):
        _apply_names(g, back)


def _apply_names(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Every value name of ``graph`` itself (not its subgraphs) mapped through ``names``."""
    for v in (*graph.input, *graph.output, *graph.value_info):
        v.name = names.get(v.name, v.name)
    for t in graph.initializer:
        t.name = names.get(t.name, t.name)
    for node in graph.node:
        node.input[:] = [names.get(i, i) for i in node.input]
        node.output[:] = [names.get(o, o) for o in node.output]
