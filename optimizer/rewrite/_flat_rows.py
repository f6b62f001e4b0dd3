"""``flat_fill_rows(s)`` of rule checks: whether a row (the last axis) of ``s`` may hold one large finite
number throughout, a select's fill on a row whose every key is masked.

exp(s - logsumexp(s)) is softmax(s) only where s - logsumexp(s) keeps its precision: on a row of one
value F, logsumexp is F + log(n) rounded, which is F itself once |F| is large (float32 -1e9: the
spacing is 64), so every weight is exp(0) = 1, not 1 / n, and `p v` sums the values where a softmax
averages them (Reformer's padded queries, masked with -1e9). Such rows come from a select or an
additive mask; attention scores themselves (a MatMul) are read as moderate, the assumption every
mask fill makes. So the walk goes up from s through positive scalings and float Casts:
- a MatMul / Gemm / Einsum, a Tanh scaled by at most the limit (softcapping), a value proven small: no;
- Where(c, a, b): a constant branch whose every finite entry, scaled, is within the limit is fine
  (-inf gives NaN rows either way); a larger one only where c is constant and every row of it
  takes the other branch somewhere; the other branches are walked on;
- Add(a, b): one side proven within the limit (a relative-position bias), the other walked on;
- anything else (a graph input, an unknown op) may: True.
A constant mask keeps a key in every row only if the kept keys are scores: a second large finite fill
anywhere in the walk (two constant masks whose union leaves a row keyless, each keeping a key in every
row on its own) may make a row that fill at every kept key, so two such fills are refused. -inf fills are
not counted: ONNX Runtime's ReduceLogSumExp gives NaN on a row of -inf and one large fill (nan-rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite._value_bound import value_bound, value_range

LIMIT = 1e3        # |F| up to this: F + log(n) keeps log(n) to about 6e-5 in float32
_SCORES = {"MatMul", "Gemm", "Einsum"}
_PASS = {"Identity", "Cast"}
_DEPTH = 16


def flat_fill_rows(ctx: Any, s: ir.Value) -> bool:
    large: list[ir.Value] = []          # the Where branches of a large finite fill taken under a constant mask
    return _walk(ctx, s, 1.0, 0, large) or len(large) > 1


def _scalar(ctx: Any, v: ir.Value | None) -> float | None:
    arr = None if v is None else ctx.constant(v)
    if arr is None or arr.size != 1:
        return None
    return float(np.asarray(arr, np.float64).reshape(()))


def _branch_ok(arr: np.ndarray, scale: float) -> bool:
    a = np.asarray(arr, np.float64) * scale
    return bool(np.all(~np.isfinite(a) | (np.abs(a) <= LIMIT)))


def _walk(ctx: Any, v: ir.Value, scale: float, depth: int, large: list) -> bool:
    if depth > _DEPTH:
        return True
    arr = ctx.constant(v)
    if arr is not None:
        return not _branch_ok(arr, scale)
    if value_bound(ctx, v) * scale <= LIMIT:
        return False
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return True
    op, ins = node.op_type, list(node.inputs)
    if op in _SCORES:
        return False
    if op == "Tanh":            # softcapping: |tanh| <= 1, times the scale above it
        return scale > LIMIT
    if op in _PASS:
        return _walk(ctx, ins[0], scale, depth + 1, large)
    if op in ("Mul", "Div") and len(ins) == 2:
        for i in (0, 1):
            c = _scalar(ctx, ins[i])
            if c is not None and c > 0 and (op == "Mul" or i == 1):
                return _walk(ctx, ins[1 - i], scale * (c if op == "Mul" else 1.0 / c), depth + 1, large)
        return True
    if op == "Add" and len(ins) == 2:
        for i in (0, 1):
            lo, hi = value_range(ctx, ins[i])
            if max(abs(lo), abs(hi)) * scale <= LIMIT:
                return _walk(ctx, ins[1 - i], scale, depth + 1, large)
        return True
    if op == "Where" and len(ins) == 3:
        return _where(ctx, ins, scale, depth, large)
    return True


def _where(ctx: Any, ins: list, scale: float, depth: int, large: list) -> bool:
    cond = ctx.constant(ins[0])
    for i, other in ((1, 2), (2, 1)):
        arr = ctx.constant(ins[i])
        if arr is None:
            if _walk(ctx, ins[i], scale, depth + 1, large):
                return True
        elif not _branch_ok(arr, scale):
            if cond is None:
                return True
            # the rows (last axis) where this branch is taken throughout
            c = np.atleast_1d(np.asarray(cond, bool))
            takes_other = c if other == 1 else ~c
            if not bool(np.all(np.any(takes_other, axis=-1))):
                return True
            large.append(ins[i])
    return False
