"""``paired_columns(v)``: whether v's last axis provably holds every value twice in a row.

Interleaved RoPE multiplies by repeat_interleave'd tables (column 2j equals column 2j + 1), and
RotaryEmbedding-23 interleaved takes the half-width table v[..., ::2]. Constant tables are checked
on their values; computed ones (Flux builds cos / sin from the position ids at run time, one
repeat_interleave per id axis, concatenated) are proven on their structure, for every input:

- the repeat: Reshape(Expand | Tile (Unsqueeze(h, last axis)) to 2 on that axis) or
  Reshape(Concat(u, u, axis=-1)), the Reshape (or a Flatten: TorchScript's repeat_interleave of a
  2-D table is Unsqueeze, Tile, Flatten(axis=1)) merging the last two axes back;
- Concat on the last axis of parts that are each paired and of even width;
- elementwise ops of paired operands, or of operands constant along the last axis (width 1):
  Cast, Neg, Cos, Sin, Identity, Mul, Add, Sub, Div;
- ops that leave the last axis alone: Unsqueeze / Squeeze / Slice / Gather / Expand / Transpose
  on other axes.
Nothing here fails: unprovable is False.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes as _axes
from onnx_fuse.passes._consts import ctx_ints
from onnx_fuse.passes._shape_values import read_dims

_UNARY = {"Cast", "Neg", "Cos", "Sin", "Identity"}
_BINARY = {"Mul", "Add", "Sub", "Div"}
_DEPTH = 48


def paired_columns(ctx, v: ir.Value) -> bool:
    return _paired(ctx, v, _DEPTH, {})


def _dims(v: ir.Value | None) -> list | None:
    """Ints and symbol names; an unknown dim is an object equal to nothing else."""
    return read_dims(v, unknown="opaque")


def _last_kept(axes: list[int] | None, rank: int) -> bool:
    """Whether an op over ``axes`` of a rank-``rank`` tensor leaves its last axis alone."""
    return axes is not None and all(a % rank != rank - 1 for a in axes)


def _even_width(v: ir.Value) -> bool:
    d = _dims(v)
    return bool(d) and isinstance(d[-1], int) and d[-1] % 2 == 0 and d[-1] > 0


def _paired(ctx, v: ir.Value | None, depth: int, memo: dict) -> bool:
    if v is None or depth <= 0:
        return False
    if v in memo:
        return memo[v]
    memo[v] = False  # a cycle proves nothing
    memo[v] = ok = _prove(ctx, v, depth, memo)
    return ok


def _flat(ctx, v, depth, memo) -> bool:
    """Constant along the last axis: width 1 (broadcast) or paired."""
    d = _dims(v)
    return d is not None and (len(d) == 0 or d[-1] == 1) or _paired(ctx, v, depth, memo)


def _prove(ctx, v: ir.Value, depth: int, memo: dict) -> bool:
    arr = ctx.constant(v)
    if arr is not None:
        arr = np.asarray(arr)
        return arr.ndim > 0 and arr.shape[-1] % 2 == 0 and arr.shape[-1] > 0 and \
            np.array_equal(arr[..., 0::2], arr[..., 1::2])
    node = v.producer()
    out = _dims(v)
    if node is None or node.domain not in ("", "ai.onnx") or out is None or not out:
        return False
    op, ins, rank = node.op_type, list(node.inputs), len(out)
    nxt = depth - 1
    if op in _UNARY:
        return _paired(ctx, ins[0], nxt, memo)
    if op in _BINARY:
        return len(ins) == 2 and all(_flat(ctx, i, nxt, memo) for i in ins) and \
            any(_paired(ctx, i, nxt, memo) for i in ins)
    if op == "Concat":
        axis = node.attributes.get("axis")
        return axis is not None and axis.as_int() % rank == rank - 1 and all(
            _even_width(i) and _paired(ctx, i, nxt, memo) for i in ins)
    if op in ("Reshape", "Flatten"):  # _repeat checks the output is the input's last two axes merged
        return _repeat(ctx, ins[0], out)
    if op == "Unsqueeze":
        return _last_kept(_axes(ctx, node), rank) and _paired(ctx, ins[0], nxt, memo)
    if op in ("Squeeze", "Slice", "Gather", "Expand", "Transpose"):
        src = _dims(ins[0])
        if src is None or not src or src[-1] != out[-1]:
            return False
        if op == "Squeeze":
            kept = _last_kept(_axes(ctx, node), len(src))
        elif op == "Slice":
            kept = _last_kept(ctx_ints(ctx, ins[3]) if len(ins) > 3 else list(range(len(src))), len(src))
        elif op == "Gather":
            a = node.attributes.get("axis")
            kept = _last_kept([a.as_int() if a is not None else 0], len(src))
        elif op == "Transpose":
            perm = node.attributes.get("perm")
            kept = perm is not None and list(perm.as_ints())[-1] % len(src) == len(src) - 1 and len(src) == rank
        else:  # Expand: the last dim already equals the output's (no broadcast on it)
            kept = True
        return kept and _paired(ctx, ins[0], nxt, memo)
    return False


def _repeat(ctx, u: ir.Value | None, out: list) -> bool:
    """u [..., n, 2] is a pair of copies on its last axis, and the Reshape merges its last two axes."""
    src = _dims(u)
    if src is None or len(src) != len(out) + 1 or src[-1] != 2 or src[:-2] != out[:-1]:
        return False
    if not (isinstance(src[-2], int) and out[-1] == 2 * src[-2]):
        return False
    node = u.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    ins = list(node.inputs)
    if node.op_type == "Concat":  # stack([h, h], -1)
        axis = node.attributes.get("axis")
        return len(ins) == 2 and ins[0] is ins[1] and axis is not None and axis.as_int() % len(src) == len(src) - 1
    if node.op_type in ("Expand", "Tile"):  # a new axis of 1 broadcast (or tiled) to 2
        if node.op_type == "Tile" and (ctx_ints(ctx, ins[1]) or [0])[-1] != 2:
            return False
        one = _dims(ins[0])
        return one is not None and len(one) == len(src) and one[-1] == 1
    return False
