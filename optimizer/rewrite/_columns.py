"""``prove_columns(ctx, v, column)``: whether v's last axis provably has one column property, read back
through whatever ops made v. The walk shared by _half_columns.py (the first half of the columns equals the
second) and _paired.py (column 2j equals column 2j + 1); a ``Column`` gives what is the property's own:

- ``constant(arr)``: the check on a constant's values;
- ``step(ctx, node, v, sub)``: the ops that make or keep the property in its own way (Concat / Tile /
  Reshape / Expand, elementwise pairs of operands): True or False, or None for an op it leaves to the
  walk; ``sub(u)`` proves u one level down;
- ``gate(v)`` (optional): what v itself must show before any op is read.

The walk: a memo and cycle guard, a depth bound, constants, a default-domain producer with a first input;
then unary elementwise ops (Cast / Neg / Cos / Sin / Identity) keep the property, the step reads its ops,
and ops on other axes than the last keep it too (Unsqueeze / Squeeze / Slice / Gather / GatherND /
Transpose, a Reshape keeping the last dim). Nothing here fails: unprovable is False.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes, ctx_ints
from onnx_fuse.passes._shape_values import read_dims

UNARY = {"Cast", "Neg", "Cos", "Sin", "Identity"}
BINARY = {"Mul", "Add", "Sub", "Div"}
_DEPTH = 48


@dataclass(frozen=True)
class Column:
    constant: Callable[[np.ndarray], bool]
    step: Callable[..., bool | None]
    gate: Callable[[ir.Value], bool] | None = None


def prove_columns(ctx, v: ir.Value, column: Column) -> bool:
    return _walk(ctx, v, _DEPTH, {}, column)


def dims(v: ir.Value | None) -> list | None:
    """Ints and symbol names; an unknown dim is an object equal to nothing else."""
    return read_dims(v, unknown="opaque")


def flat(v: ir.Value | None) -> bool:
    """Constant along the last axis (a scalar, or width 1): it broadcasts alike over every column."""
    d = dims(v)
    return d is not None and (len(d) == 0 or d[-1] == 1)


def last_kept(axes: list[int] | None, rank: int) -> bool:
    """Whether an op over ``axes`` of a rank-``rank`` tensor leaves its last axis alone."""
    return axes is not None and rank > 0 and all(a % rank != rank - 1 for a in axes)


def _walk(ctx, v: ir.Value | None, depth: int, memo: dict, column: Column) -> bool:
    if v is None or depth <= 0:
        return False
    if v in memo:
        return memo[v]
    memo[v] = False  # a cycle proves nothing
    memo[v] = ok = _prove(ctx, v, depth, memo, column)
    return ok


def _prove(ctx, v: ir.Value, depth: int, memo: dict, column: Column) -> bool:
    arr = ctx.constant(v)
    if arr is not None:
        return bool(column.constant(np.asarray(arr)))
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    if column.gate is not None and not column.gate(v):
        return False

    def sub(u: ir.Value | None) -> bool:
        return _walk(ctx, u, depth - 1, memo, column)

    if node.op_type in UNARY:
        return sub(node.inputs[0])
    own = column.step(ctx, node, v, sub)
    if own is not None:
        return own
    return _other_axes(ctx, node) and sub(node.inputs[0])


def _other_axes(ctx, node: ir.Node) -> bool:
    """Whether node works on other axes of its first input than the last (whatever dims inference kept:
    a cut at run time loses them), so its output's columns are the input's."""
    op, ins, src = node.op_type, list(node.inputs), dims(node.inputs[0])
    if not src:
        return False
    rank = len(src)
    if op == "Unsqueeze":
        axes = ctx_axes(ctx, node)
        return axes is not None and last_kept(axes, rank + len(axes))
    if op == "Squeeze":
        return last_kept(ctx_axes(ctx, node), rank)
    if op == "Slice":
        if len(ins) > 3 and ins[3] is not None:
            return last_kept(ctx_ints(ctx, ins[3]), rank)
        n = dims(ins[1]) if len(ins) > 1 else None   # no axes: the leading len(starts) axes
        return bool(n) and isinstance(n[0], int) and n[0] < rank
    if op == "Gather":
        a = node.attributes.get("axis")
        return last_kept([a.as_int() if a is not None else 0], rank)
    if op == "Transpose":
        perm = node.attributes.get("perm")
        return perm is not None and list(perm.as_ints())[-1] % rank == rank - 1
    if op == "Reshape":    # a view keeping the last dim keeps each row's columns together
        out = dims(node.outputs[0])
        return bool(out) and isinstance(src[-1], int) and src[-1] == out[-1]
    if op == "GatherND":   # indices [.., k] pick along the first batch_dims + k axes only
        idx = dims(ins[1]) if len(ins) > 1 else None
        b = node.attributes.get("batch_dims")
        return bool(idx) and isinstance(idx[-1], int) and (b.as_int() if b is not None else 0) + idx[-1] < rank
    return False
