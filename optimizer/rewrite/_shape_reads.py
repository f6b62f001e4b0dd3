"""Shape reads of a match's intermediates, moved onto a value the rewrite keeps.

A ``Shape`` node outside a match that reads one of its intermediates only wants the dims, yet it
makes the intermediate escape, and the rule is refused. Two exporter forms hit this:
transformers 4.4x's BERT-family attention sizes every layer's merge view from layer 0's
``Shape(key projection)`` (shape-cse keeps that read as the copy all layers share: no graph input
holds ``[batch, sequence, hidden]`` side by side), and Swin's shifted window, after
scores-bias-in-view, reads ``Shape(q, 0, 1)`` of the head Transpose for its zeros.

When the dims such a Shape reads (``o.shape[start:end]``: static sizes, or dim names the model
gave, which name equal sizes by ONNX's dim_param rule, as in shape-cse) lie side by side in the
shape of a value the match reads from outside (an input of the chain that produced ``o``, so it
is defined before the Shape), the matcher lets the use through and the commit points the Shape
there, with the start / end of that run. The Shape node stays one node: nothing is added, and
it moves only for a rewrite that fires. Unknown or inference-invented dims never match.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import is_default_op, repoint_shape
from onnx_fuse.passes._shape_values import read_dims, shape_read_bounds

#: (Shape node, the value it will read, start, end); end None: to the last axis
ShapeRead = tuple[ir.Node, ir.Value, int, int | None]


def _sources(o: ir.Value, used) -> list[ir.Value]:
    """Values the chain that produced ``o`` reads from outside the match, nearest first."""
    out, seen, todo = [], {o}, [o]
    while todo:
        v = todo.pop(0)
        node = v.producer()
        if node is None or node not in used:
            if v is not o and v.const_value is None:
                out.append(v)
            continue
        for x in node.inputs:
            if x is not None and x not in seen:
                seen.add(x)
                todo.append(x)
    return out


def reread(o: ir.Value, reader: ir.Node, used, opset: int | None) -> ShapeRead | None:
    """How ``reader`` (a use of the match's intermediate ``o``) reads the same dims from a value
    the match keeps; None when it is no plain Shape or no such value holds them side by side."""
    if not is_default_op(reader, "Shape") or len(reader.inputs) != 1:
        return None
    want = read_dims(o, names="model")
    if want is None:
        return None
    got = shape_read_bounds(reader, len(want))
    if got is None or got[0] >= got[1]:
        return None
    want = want[got[0]:got[1]]
    if None in want:
        return None
    n = len(want)
    for src in _sources(o, used):
        dims = read_dims(src, names="model")
        for start in range(len(dims or ()) - n + 1):
            if dims[start:start + n] == want:
                whole = start == 0 and n == len(dims)
                if not whole and (opset or 0) < 15:   # Shape's start / end: opset 15
                    return None
                return reader, src, start, None if start + n == len(dims) else start + n
    return None


def move_reads(reads: list[ShapeRead]) -> None:
    """Point each Shape at its new value (``reread``'s plan), before the match's nodes go."""
    for node, src, start, end in reads:
        repoint_shape(node, src, start or None, end)
