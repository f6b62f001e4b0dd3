"""``half_columns(v)``: whether v's last axis provably holds its first half again as its second half.

Rotate-half RoPE multiplies by tables of width D built as cos / sin(concat(f, f)) (HF's ``emb =
torch.cat((freqs, freqs), dim=-1)``), and RotaryEmbedding-23 takes the half-width table v[..., :D/2];
that is exact only where v[..., :D/2] == v[..., D/2:]. The twin of _paired.py's paired_columns (GPT-J's
interleave-repeated tables), read the same way, whatever ops made the table:

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

from onnx_fuse.passes._consts import ctx_axes, ctx_ints
from onnx_fuse.passes._shape_values import read_dims

_UNARY = {"Cast", "Neg", "Cos", "Sin", "Identity"}
_BINARY = {"Mul", "Add", "Sub", "Div"}
_DEPTH = 48


def half_columns(ctx, v: ir.Value) -> bool:
    return _halves(ctx, v, _DEPTH, {})


def _last_kept(axes: list[int] | None, rank: int) -> bool:
    """Whether an op over ``axes`` of a rank-``rank`` tensor leaves its last axis alone."""
    return axes is not None and rank > 0 and all(a % rank != rank - 1 for a in axes)


def _halves(ctx, v: ir.Value | None, depth: int, memo: dict) -> bool:
    if v is None or depth <= 0:
        return False
    if v in memo:
        return memo[v]
    memo[v] = False  # a cycle proves nothing
    memo[v] = ok = _prove(ctx, v, depth, memo)
    return ok


def _flat(v: ir.Value | None) -> bool:
    """Constant along the last axis (a scalar, or width 1): it broadcasts alike over both halves."""
    d = read_dims(v, unknown="opaque")
    return d is not None and (len(d) == 0 or d[-1] == 1)


def _same(ctx, a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is None or b is None:
        return False
    if a is b:
        return True
    va, vb = ctx.constant(a), ctx.constant(b)
    return va is not None and vb is not None and va.shape == vb.shape and np.array_equal(va, vb)


def _prove(ctx, v: ir.Value, depth: int, memo: dict) -> bool:
    arr = ctx.constant(v)
    if arr is not None:
        arr = np.asarray(arr)
        if arr.ndim == 0 or arr.shape[-1] % 2 or not arr.shape[-1]:
            return False
        h = arr.shape[-1] // 2
        return bool(np.array_equal(arr[..., :h], arr[..., h:]))
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    op, ins, nxt = node.op_type, list(node.inputs), depth - 1
    out, src = read_dims(v, unknown="opaque"), read_dims(ins[0], unknown="opaque")
    if op in _UNARY:
        return _halves(ctx, ins[0], nxt, memo)
    if op in _BINARY:
        # each operand flat along the last axis or with equal halves (two such of widths that broadcast:
        # equal widths, as an even width never broadcasts against another)
        return len(ins) == 2 and not all(_flat(i) for i in ins) and \
            all(_flat(i) or _halves(ctx, i, nxt, memo) for i in ins)
    if src is None or not src:
        return False
    rank = len(src)
    if op == "Concat":
        axis = node.attributes.get("axis")
        if axis is None:
            return False
        if axis.as_int() % rank == rank - 1:     # concat(f, f): the halves are one value
            return len(ins) == 2 and _same(ctx, ins[0], ins[1])
        return all(_halves(ctx, i, nxt, memo) for i in ins)   # rows (or batch rows) appended
    if op == "Tile":
        reps = ctx_ints(ctx, ins[1]) if len(ins) > 1 else None
        return bool(reps) and (reps[-1] % 2 == 0 or _halves(ctx, ins[0], nxt, memo))
    if op == "Expand":
        if src[-1] == 1:
            return True    # every column the same
        return out is not None and len(out) > 0 and src[-1] == out[-1] and _halves(ctx, ins[0], nxt, memo)
    if op == "Reshape":   # a view keeping the last dim keeps each row's columns together
        return out is not None and len(out) > 0 and isinstance(src[-1], int) and src[-1] == out[-1] and \
            _halves(ctx, ins[0], nxt, memo)
    if op == "Unsqueeze":
        axes = ctx_axes(ctx, node)
        return axes is not None and _last_kept(axes, rank + len(axes)) and _halves(ctx, ins[0], nxt, memo)
    # ops on other axes leave the last alone (whatever dims inference kept: a cut at run time loses them)
    if op == "Squeeze":
        kept = _last_kept(ctx_axes(ctx, node), rank)
    elif op == "Slice":
        if len(ins) > 3 and ins[3] is not None:
            kept = _last_kept(ctx_ints(ctx, ins[3]), rank)
        else:   # no axes: the leading len(starts) axes
            n = read_dims(ins[1], unknown="opaque") if len(ins) > 1 else None
            kept = bool(n) and isinstance(n[0], int) and n[0] < rank
    elif op == "Gather":
        a = node.attributes.get("axis")
        kept = _last_kept([a.as_int() if a is not None else 0], rank)
    elif op == "Transpose":
        perm = node.attributes.get("perm")
        kept = perm is not None and list(perm.as_ints())[-1] % rank == rank - 1
    elif op == "GatherND":   # indices [.., k] pick along the first batch_dims + k axes only
        idx = read_dims(ins[1], unknown="opaque") if len(ins) > 1 else None
        b = node.attributes.get("batch_dims")
        kept = bool(idx) and isinstance(idx[-1], int) and (b.as_int() if b is not None else 0) + idx[-1] < rank
    else:
        return False
    return kept and _halves(ctx, ins[0], nxt, memo)


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
