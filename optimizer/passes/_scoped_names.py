"""Names a pass gave in one graph that an enclosing graph or a subgraph already defines.

onnx-ir names new values per graph (``val_8``), knowing only that graph's names; a rewrite in the
main graph can so take the name of a value inside an If / Loop / Scan body, or one in a body the
name of an outer value. ONNX forbids a subgraph to define a name of an enclosing scope: the
checker refuses the model, and onnx's shape inference fails on it, so the facts the lowering rules
need were missing too (a canonical op left unlowered). Found by giving a model's branch the names
our passes invent (llama kv, demo encoder: internal errors at O2-O4).

The subgraph's value is renamed: references are by object in onnx-ir, a body's values are no part
of the model's interface, and its outputs and inputs are bound by position. Siblings (the two
branches of an If) may share names, as Optimum's merged decoders do.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx_ir as ir


def _defined(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from (o for o in node.outputs if o.name)


def _bodies(graph: ir.Graph) -> Iterator[ir.Graph]:
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield attr.value
            elif attr.type == ir.AttributeType.GRAPHS:
                yield from attr.value


def free_name(base: str, taken: set[str], sep: str) -> str:
    """``base + sep + k`` for the first k >= 1 not in ``taken``; added to ``taken``."""
    k = 1
    while f"{base}{sep}{k}" in taken:
        k += 1
    name = f"{base}{sep}{k}"
    taken.add(name)
    return name


def separate_scoped_names(model: ir.Model) -> int:
    """Rename every subgraph value whose name an enclosing graph defines; returns how many."""
    if all(g is model.graph for g in model.graphs()):
        return 0
    taken = {v.name for g in model.graphs() for v in _defined(g)}
    renamed = 0

    def walk(graph: ir.Graph, outer: frozenset[str]) -> None:
        nonlocal renamed
        here = set()
        for v in list(_defined(graph)):   # renaming an initializer re-keys graph.initializers
            if v.name in outer:
                v.name = free_name(v.name, taken, "__")
                renamed += 1
            here.add(v.name)
        for body in _bodies(graph):
            walk(body, outer | here)

    walk(model.graph, frozenset())
    return renamed
