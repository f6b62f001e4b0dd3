"""A chain of views back to its start's own shape is the start (fold-layout-chains' ``view-chain``,
layout_chains.py).

Reshape, Unsqueeze, Squeeze and Flatten keep the elements in order, so a chain of them whose last
Reshape, Squeeze or Unsqueeze (constant axes) provably gives the dims of the value the chain started
from is that value. A Squeeze / Unsqueeze end's dims are its input's (a Reshape's target read as for a
Reshape end) with the size-1 axes taken out / put in: the ort lowering of one-head attention (batch
B*H or B, head 1: attention-bmm-single-head, attention-bmm-channels-first) gives
MultiHeadAttention's [N, S, D] back as [N, 1, S, D], which the recognizer's Squeeze of the head axis
takes back to [N, S, D]. torch's
MultiheadAttention weights path with a key padding mask merges the [B, H, 1, S] mask to [B*H, 1, S]
for its baddbmm; the batched-heads recognizer views it back [B, H, 1, S] with an Unsqueeze and a
Reshape whose 0 entries copy dims the first view does not have at those axes, which
reshape-of-reshape (pairs, 0 copies read on both sides) leaves. Dims are the inferred shapes, read
symbolically; a dim that shape inference invented proves nothing.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader
from onnx_fuse.passes._consts import raw_axes
from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import is_default_op, reroute
from onnx_fuse.passes._shape_values import invented_name

_VIEWS = ("Reshape", "Unsqueeze", "Squeeze", "Flatten")
MAX_CHAIN = 8


def _out_dims(r: ir.Node) -> list | None:
    """The dims the view ``r`` provably outputs: a Reshape's by its target, a Squeeze's / Unsqueeze's
    by its input's (a Reshape's target when a Reshape makes it) and its axes; None when unknown."""
    if r.op_type == "Reshape":
        return reshape_out_dims(r.outputs[0])
    x = r.inputs[0]
    axes = raw_axes(r)
    if not axes:
        return None  # a Squeeze of every size-1 axis: which ones rests on inference
    ins = reshape_out_dims(x) if is_default_op(x.producer(), "Reshape") else value_dims(x)
    if ins is None or any(d is None for d in ins):
        return None
    rank = len(ins) + (len(axes) if r.op_type == "Unsqueeze" else 0)
    norm = sorted({a % rank for a in axes if -rank <= a < rank})
    if len(norm) != len(axes):
        return None
    if r.op_type == "Squeeze":
        if any(ins[a] != (1, ()) for a in norm):
            return None
        return [d for i, d in enumerate(ins) if i not in norm]
    it = iter(ins)
    return [(1, ()) if i in norm else next(it) for i in range(rank)]


def view_chain(r: ir.Node) -> bool:
    """The view ``r``'s readers read the chain's start where r gives back its dims (module docstring)."""
    out = r.outputs[0]
    if out.is_graph_output() or not r.inputs or r.inputs[0] is None:
        return False
    dims = _out_dims(r)
    if dims is None or any(invented_name(a) for _, atoms in dims for a in atoms):
        return False
    starts, cur = [], r.inputs[0]
    for _ in range(MAX_CHAIN):  # up through views whose one reader is the next view
        node = cur.producer()
        if not is_default_op(node, *_VIEWS) or not node.inputs or node.inputs[0] is None:
            break
        if one_reader(cur) is None:
            break
        cur = node.inputs[0]
        starts.append(cur)
    for start in reversed(starts):  # the farthest start first: the whole chain goes
        if value_dims(start) == dims:
            reroute(out, start)
            return True
    return False
