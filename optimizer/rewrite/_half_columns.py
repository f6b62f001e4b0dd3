"""``half_columns(v)``: whether v's last axis provably holds its first half again as its second half.

Rotate-half RoPE multiplies by tables of width D built as cos / sin(concat(f, f)) (HF's ``emb =
torch.cat((freqs, freqs), dim=-1)``), and RotaryEmbedding-23 takes the half-width table v[..., :D/2];
that is exact only where v[..., :D/2] == v[..., D/2:]. Proven by _columns.py's walk, whatever ops made the
table (as _paired.py's paired_columns proves GPT-J's interleave-repeated tables); this module gives the
equal halves' own steps (constants, Concat, Tile, Expand, Reshape, elementwise pairs):

- constants on their values;
- Concat on the last axis of one value with itself (or of two equal constants);
- Tile whose last repeat count is even (any count keeps halves that were already equal);
- elementwise ops of operands that have equal halves or are constant along the last axis (width 1):
  Cast, Neg, Cos, Sin, Identity, Mul, Add, Sub, Div;
- ops that leave the last axis alone: Unsqueeze / Squeeze / Slice / Gather / GatherND / Expand / Transpose
  on other axes, a Reshape keeping the last dim, and Concat of such tables on another axis (rows appended);
- Expand of a last axis of 1.
Nothing here fails: unprovable is False.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_ints
from onnx_fuse.passes._shape_values import read_dims
from onnx_fuse.rewrite._columns import BINARY, Column, dims, flat, prove_columns


def half_columns(ctx, v: ir.Value) -> bool:
    return prove_columns(ctx, v, _HALVES)


def _equal_halves(arr: np.ndarray) -> bool:
    if arr.ndim == 0 or arr.shape[-1] % 2 or not arr.shape[-1]:
        return False
    h = arr.shape[-1] // 2
    return bool(np.array_equal(arr[..., :h], arr[..., h:]))


def _same(ctx, a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is None or b is None:
        return False
    if a is b:
        return True
    va, vb = ctx.constant(a), ctx.constant(b)
    return va is not None and vb is not None and va.shape == vb.shape and np.array_equal(va, vb)


def _step(ctx, node: ir.Node, v: ir.Value, sub) -> bool | None:
    """The ops that make equal halves, or keep them in their own way; None for the walk's."""
    op, ins = node.op_type, list(node.inputs)
    if op in BINARY:
        # each operand flat along the last axis or with equal halves (two such of widths that broadcast:
        # equal widths, as an even width never broadcasts against another)
        return len(ins) == 2 and not all(flat(i) for i in ins) and all(flat(i) or sub(i) for i in ins)
    out, src = dims(v), dims(ins[0])
    if not src:
        return False
    rank = len(src)
    if op == "Concat":
        axis = node.attributes.get("axis")
        if axis is None:
            return False
        if axis.as_int() % rank == rank - 1:     # concat(f, f): the halves are one value
            return len(ins) == 2 and _same(ctx, ins[0], ins[1])
        return all(sub(i) for i in ins)   # rows (or batch rows) appended
    if op == "Tile":
        reps = ctx_ints(ctx, ins[1]) if len(ins) > 1 else None
        return bool(reps) and (reps[-1] % 2 == 0 or sub(ins[0]))
    if op == "Expand":
        if src[-1] == 1:
            return True    # every column the same
        return out is not None and len(out) > 0 and src[-1] == out[-1] and sub(ins[0])
    return None   # Reshape and the ops on other axes: the walk's


_HALVES = Column(_equal_halves, _step)


def half_readers(ctx, v: ir.Value) -> bool:
    """Whether every reader of v's values takes the same first half of its last axis (Slice 0:D/2):
    then moving that Slice below v's producer (rules/rope/half_slice_sink.yaml) leaves the full-width
    v unread, and the readers' moved copies are equal ops that CSE joins, so no node is added. Shape /
    Size readers read only dims; a graph output reads all of v, so it is not one."""
    d = read_dims(v, unknown="opaque")
    if v.is_graph_output() or not d or not isinstance(d[-1], int) or d[-1] % 2:
        return False
    rank, half, seen = len(d), d[-1] // 2, 0
    for use in v.uses():
        node = use.node
        if node.op_type in ("Shape", "Size"):
            continue
        ins = list(node.inputs) + [None] * (5 - len(node.inputs))
        if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or use.idx != 0:
            return False
        axes = ctx_ints(ctx, ins[3]) if ins[3] is not None else None
        steps = ctx_ints(ctx, ins[4]) if ins[4] is not None else [1]
        if (ctx_ints(ctx, ins[1]) != [0] or ctx_ints(ctx, ins[2]) != [half] or axes is None
                or len(axes) != 1 or axes[0] % rank != rank - 1 or steps != [1]):
            return False
        seen += 1
    return seen > 0
