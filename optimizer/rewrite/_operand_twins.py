"""Canonical ops' operands that the fuse stage computed twice are merged before lowering.

A recognition rule rewrites one match at a time, so what it builds beside each canonical op is
built once per layer even where every layer reads the same exporter value: attention-native-23
turns the boolean mask of each Attention-23 into ``Where(mask, 0, -inf)`` with its own two
constants, one Where per layer over the one mask torch built. The lowerings then decide per
canonical op what to do with its operand, and some decide by what dies with it (net_nodes,
freed_ops): a mask read by one layer's Where and the next layer's frees only that Where, where
the same mask written once as a float bias (the opset-18 export) frees its whole cone. Merging
the twins first gives the lower stage the graph cse would leave, so an exporter value shared by
the layers stays one value, whatever the recognizer wrote per match.

Twins here are default-domain nodes that compute an operand of a canonical op (or, up to a few
levels, what such an operand reads), with the same op, attributes and inputs, a constant input
comparing by value (small initializers of the graph, as cse's). The earlier node in graph order
is kept, so every reader of the later one still comes after its producer.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes.cse import NONDETERMINISTIC, _attrs_key, _merge_values, _tensor_key, _UNHASHABLE

_DEPTH = 4   # how far below a canonical op's operand twins are looked for


def _value_key(v: ir.Value | None, keys: dict, depth: int):
    """A key equal for two values that hold the same data: a small constant by its contents, a
    merged value by its keeper, anything else by identity."""
    if v is None:
        return None
    if v.is_initializer() and not v.is_graph_input() and v.const_value is not None:
        k = _tensor_key(v.const_value)
        if k is not _UNHASHABLE:
            return ("const", k)
    p = v.producer()
    if p is not None and depth > 0:
        nk = _node_key(p, keys, depth - 1)
        if nk is not None:
            return ("out", nk, p.outputs.index(v))
    return ("id", id(v))


def _node_key(node: ir.Node, keys: dict, depth: int):
    if id(node) in keys:
        return keys[id(node)]
    key = None
    if node.domain in ("", "ai.onnx") and node.op_type not in NONDETERMINISTIC and node.graph is not None:
        attrs = _attrs_key(node)
        if attrs is not None:
            inputs = tuple(_value_key(i, keys, depth) for i in node.inputs)
            key = (node.op_type, node.overload, len(node.outputs), inputs, attrs)
    keys[id(node)] = key
    return key


def merge_operand_twins(graph: ir.Graph, domain: str) -> int:
    """Merge the twin producers of ``domain`` ops' operands in ``graph`` (see the module doc);
    returns how many nodes were removed."""
    order = {id(n): i for i, n in enumerate(graph)}
    keys: dict = {}
    first: dict = {}
    drop: list[tuple[ir.Node, ir.Node]] = []
    for node in graph:
        if node.domain != domain:
            continue
        for v in node.inputs:
            p = v.producer() if v is not None else None
            if p is None or p.graph is not graph or id(p) not in order:
                continue
            k = _node_key(p, keys, _DEPTH)
            if k is None:
                continue
            kept = first.setdefault(k, p)
            if kept is p:
                continue
            if order[id(p)] < order[id(kept)]:
                first[k] = p
                kept, p = p, kept
            drop.append((kept, p))
    removed = 0
    gone: set[int] = set()
    for kept, p in drop:
        if id(p) in gone or id(kept) in gone:
            continue
        if _merge_values(graph, list(kept.outputs), list(p.outputs)):
            gone.add(id(p))
            graph.remove(p, safe=True)
            removed += 1
    return removed
