"""New values a layout rewrite adds, named apart from every name the graph has."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def fresh_name(base: str, taken: set) -> str:
    """``base``, else ``base_1``, ``base_2`` ...: the first not in ``taken`` (added to it)."""
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def graph_names(graph: ir.Graph) -> set:
    """The names the graph's node outputs, initializers and inputs take."""
    return {o.name for n in graph for o in n.outputs} | set(graph.initializers) | {w.name for w in graph.inputs}


def array_initializer(graph: ir.Graph, base: str, array: np.ndarray, dtype: ir.DataType,
                      taken: set | None = None) -> ir.Value:
    """An initializer holding ``array`` as ``dtype`` under a fresh name (a merged weight, a bias)."""
    name = fresh_name(base, graph_names(graph) if taken is None else taken)
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(list(array.shape)),
                     const_value=ir.tensor(np.ascontiguousarray(array), dtype=dtype, name=name))
    graph.register_initializer(value)
    return value


def int64_initializer(graph: ir.Graph, base: str, values: list[int], taken: set | None = None) -> ir.Value:
    """A 1-D int64 initializer (a Reshape target, Gather indices) under a fresh name."""
    return array_initializer(graph, base, np.array(values, dtype=np.int64), ir.DataType.INT64, taken)
