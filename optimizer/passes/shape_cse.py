"""Merge shape values that hold the same symbolic dims, whichever tensor they were read from.

Per-layer glue reads the same dims from different tensors: one attention lowering takes the past
length from ``Shape(past_key_values.0.key)[2]``, the next from ``Shape(past_key_values.1.key)[2]``;
each RoPE takes the batch from ``Shape(its own q or k)[0]``. Plain CSE sees different inputs and
keeps every copy, although all of them are ``past_sequence`` (or ``batch``): by the ONNX rule for
dim_param, which shape inference propagates, equal dim names are equal sizes. ``shape_entries``
says what each small integer value holds (ints and dim names, through the Shape -> Slice / Gather /
Squeeze / Unsqueeze / Concat / Cast chains); values with the same dtype and entries are one value,
so every later copy is replaced by the first. Node CSE then merges what reads them (the Concat of
the Expand target, the Expand, the mask arithmetic), and dead code removes the copies.

The first copy itself is read from a graph input when one has those dims side by side (a new
``Shape(input, start, end)`` at the top of the graph): a Shape of an intermediate keeps that
intermediate alive, which is what stops a head-split Reshape/Transpose from dying once the ops
it fed read the 3-D tensor instead (rules/layout/heads_3d.yaml).

Unknown dims (no name) never match; values whose entries are all ints are left to folding.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._shape_values import shape_entries


def _key(value: ir.Value) -> object | None:
    if value.dtype is None or not value.dtype.is_integer():
        return None
    if value.shape is not None and len(value.shape) > 1:
        return None
    got = shape_entries(value)
    if got is None:
        return None
    entries, scalar = got
    if all(isinstance(e, int) for e in entries):
        return None
    return (value.dtype, tuple(entries), scalar)


def _dims(value: ir.Value) -> list | None:
    if value.shape is None:
        return None
    out = []
    for d in value.shape:
        if isinstance(d, int):
            out.append(d)
        elif d.value is not None:
            out.append(str(d.value))
        else:
            out.append(None)
    return out


def _from_input(graph: ir.Graph, key) -> ir.Value | None:
    """A new 1-D ``Shape(input, start, end)`` holding ``key``'s entries, when a graph input has
    them side by side; None otherwise (or for scalars, or before opset 15's start/end)."""
    dtype, entries, scalar = key
    if scalar or dtype != ir.DataType.INT64 or graph.opset_imports.get("", 0) < 15:
        return None
    n = len(entries)
    for inp in graph.inputs:
        dims = _dims(inp)
        if dims is None:
            continue
        for start in range(len(dims) - n + 1):
            if dims[start:start + n] == list(entries):
                out = ir.Value(name=None, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([n]))
                node = ir.Node("", "Shape", [inp], attributes=[ir.AttrInt64("start", start),
                                                                 ir.AttrInt64("end", start + n)],
                               outputs=[out])
                first = next(iter(graph), None)
                if first is None:
                    graph.append(node)
                else:
                    graph.insert_before(first, node)
                return out
    return None


def _reads_input(value: ir.Value) -> bool:
    node = value.producer()
    return (node is not None and node.op_type == "Shape" and node.inputs[0] is not None
            and node.inputs[0].is_graph_input())


def merge_equal_shape_values(graph: ir.Graph, merge) -> int:
    """Point uses of each later shape value at the first equal one; returns how many merged.

    ``merge(keep, drop)`` does the rewiring (CSE's, which keeps graph output names)."""
    seen: dict[object, ir.Value] = {}
    merged = 0
    for node in graph:
        if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        value = node.outputs[0]
        if not value.uses() and not value.is_graph_output():
            continue
        key = _key(value)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            first = seen[key] = value
            if _reads_input(value) or value.is_graph_output() or (src := _from_input(graph, key)) is None:
                continue
            seen[key] = first = src
        if merge([first], [value]):
            merged += 1
    return merged
