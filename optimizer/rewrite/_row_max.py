"""``row_max(c, t, axis)`` and ``unscaled(t, f)`` of rule checks: a softmax's input shifted by its own
row maximum, and a power-of-two scale undone (softmax-max-shift, rules/attention/softmax_shift.yaml).

softmax(t - c) is softmax(t) bit for bit when c is t's maximum along the softmax axis, whatever ops
keep or re-insert that axis: ONNX Runtime's Softmax subtracts the row maximum itself, and the row
maximum of t - max(t) is 0, so both compute exp(t - max(t)) rounded the same. ``row_max`` proves c
is that value on what it computes, walking up from c:
- views that leave each row's one value in place: Identity, an Expand, ReduceMax(keepdims=1) over
  the axis alone, or keepdims=0 re-expanded on the same axis by an Unsqueeze or a Reshape proven to
  insert a 1 there (its shape vector read symbolically, as has_dims does);
- elementwise monotone (non-decreasing) ops with a one-element finite constant of rank at most the
  value's (it cannot widen it): Mul by a positive number, Div by one, Add / Sub of one, a Cast to a
  float type. f(max(u)) is max(f(u)) for each, in floating point too (rounding is monotone), so
  c = f(max(u)) is the row maximum of t when t is f(u) through the same ops and constants, a Mul's
  or an Add's on either side (CogView's PB-Relax writes (s / a - max(s / a)) * a; a model may take
  max(s) then scale it as it scaled s).
Any other shift is refused with the reason: a row mean or minimum is -inf on a row holding a -inf
(masked) key, where s - c is NaN and softmax(s) is not; a constant or a computed value can be large
or infinite, where s - c loses s's low bits or is NaN.

``unscaled(t, f)``: t scaled back up by a power of two f > 1 (PB-Relax's alpha) is exact only where
t is itself a power-of-two scale-down of some s (t = s / a): then f * t is s * (f / a) exactly
(outside subnormals), and f * t cannot overflow. Returns [s, g] with t = s * g exactly (g a power
of two <= 1), walking up the fewest scale-downs that make f * g <= 1; fails with the reason. f <= 1
(a scale down after the shift, or none) gives [t, 1]: nothing to undo, so the rule asks once for any f.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes as _axes
from onnx_fuse.passes._infra import attr_value
from onnx_fuse.passes._infra import is_default_op as _default
from onnx_fuse.rewrite import _dims
from onnx_fuse.rewrite._expr import EvalFailure

_FLOATS = {int(ir.DataType.FLOAT), int(ir.DataType.FLOAT16), int(ir.DataType.BFLOAT16), int(ir.DataType.DOUBLE)}
_DEPTH = 12


def power_of_two(x: Any) -> bool:
    """Whether a positive number is exactly 2**n (scaling by it is exact in binary floating point)."""
    x = float(np.asarray(x, np.float64).reshape(-1)[0]) if not isinstance(x, (int, float)) else float(x)
    return x > 0 and math.isfinite(x) and math.frexp(x)[0] == 0.5


def _rank(v: ir.Value) -> int | None:
    return len(v.shape) if v is not None and v.shape is not None else None


def _one_const(ctx, v: ir.Value | None, rank: int | None) -> np.ndarray | None:
    """A one-element finite constant of rank <= ``rank``, the other operand's (it cannot widen it; 1
    where that is unknown), else None."""
    arr = ctx.constant(v) if v is not None else None
    if arr is None or arr.size != 1 or arr.ndim > (1 if rank is None else rank) \
            or not np.issubdtype(arr.dtype, np.floating):
        return None
    return arr if bool(np.isfinite(arr).all()) else None


def _monotone(ctx, node: ir.Node, rank: int):
    """(key, data input) when the node is a non-decreasing elementwise map of one input of ``rank``
    (the walk's: a value of the row maximum's rank), keyed by what it computes (op and constant, in
    either slot of a Mul / Add; Cast's target), else None."""
    if _default(node, "Identity"):
        return ("Identity",), node.inputs[0]
    if _default(node, "Cast"):
        to = node.attributes.get("to")
        return (("Cast", int(to.value)), node.inputs[0]) if to is not None and int(to.value) in _FLOATS else None
    if not _default(node, "Mul", "Div", "Add", "Sub") or len(node.inputs) != 2:
        return None
    for i in (1, 0):
        arr = _one_const(ctx, node.inputs[i], rank)
        if arr is None:
            continue
        x = float(arr.reshape(-1)[0])
        op = node.op_type
        ok = (op == "Mul" and x > 0) or (op == "Div" and i == 1 and x > 0) or op == "Add" or (op == "Sub" and i == 1)
        if ok:
            return (op, arr.dtype.str, arr.tobytes()), node.inputs[1 - i]   # Mul / Add commute
    return None


def _norm(axis: int, rank: int) -> int | None:
    a = axis + rank if axis < 0 else axis
    return a if 0 <= a < rank else None


def row_max(ctx: Any, c: Any, t: Any, axis: Any) -> bool:
    """True when c is t's maximum along ``axis`` (of t's rank), kept or re-expanded there; raises
    EvalFailure with the reason otherwise."""
    if not isinstance(c, ir.Value) or not isinstance(t, ir.Value):
        raise EvalFailure("row_max() needs two graph values")
    rank = _rank(t)
    if rank is None:
        raise EvalFailure(f"rank of {t.name!r} is unknown")
    ax = _norm(int(axis), rank)
    if ax is None:
        raise EvalFailure(f"axis {axis} is outside {t.name!r}'s rank {rank}")
    chain: list = []
    v, squeezed = c, False      # squeezed: v is the row maximum without the axis (keepdims=0)
    for _ in range(_DEPTH):
        node = v.producer()
        if node is None:
            raise EvalFailure(f"the shift {c.name!r} is not computed from {t.name!r} (a graph input or constant: "
                              f"its size is unbounded, s - c may lose s's low bits or be NaN)")
        m = _monotone(ctx, node, rank - 1 if squeezed else rank)
        if m is not None:
            chain.append(m[0])
            v = m[1]
            continue
        if _default(node, "ReduceMax"):
            keep = int(attr_value(node, "keepdims", 1))
            u = node.inputs[0]
            axes = _axes(ctx, node)
            if axes is None or _rank(u) != rank or [_norm(a, rank) for a in axes] != [ax]:
                raise EvalFailure(f"{node.name!r} is not a maximum over axis {ax} alone of a rank-{rank} value "
                                  f"(axes {axes}): not constant along each row, or not its own row's maximum")
            if bool(keep) == squeezed:
                raise EvalFailure(f"{node.name!r} (keepdims={keep}) does not line up with the softmax rows")
            _same_chain(ctx, t, u, chain)
            return True
        if not squeezed and _default(node, "Expand"):
            if _rank(node.inputs[0]) != rank:
                raise EvalFailure(f"{node.name!r} changes the shift's rank")
            v = node.inputs[0]
            continue
        if not squeezed and _default(node, "Unsqueeze"):
            axes = _axes(ctx, node)
            if axes is None or [_norm(a, rank) for a in axes] != [ax]:
                raise EvalFailure(f"{node.name!r} re-inserts axes {axes}, not the softmax axis {ax}")
            v, squeezed = node.inputs[0], True
            continue
        if not squeezed and _default(node, "Reshape"):
            dims = _reduced_dims(ctx, node.inputs[0], ax, rank)
            if dims is None or not _dims.reshapes_to(v, dims, dims[:ax] + [1] + dims[ax:]):
                raise EvalFailure(f"{node.name!r} is not proven to insert a 1 at axis {ax} alone")
            v, squeezed = node.inputs[0], True
            continue
        raise EvalFailure(f"the shift goes through {node.op_type} {node.name!r}, not the row maximum of "
                          f"{t.name!r} (a row mean or minimum is -inf on a row with a -inf key)")
    raise EvalFailure(f"the shift {c.name!r} is more than {_DEPTH} ops from a ReduceMax")


def _reduced_dims(ctx, x: ir.Value, ax: int, rank: int) -> list | None:
    """The dims of a keepdims=0 row maximum ``x`` (rank - 1), from its shape or, where that is not
    known, from its ReduceMax's input, reached along the monotone ops the walk then takes (they
    keep the dims): the Reshape's proof reads its input as these dims."""
    dims = _dims._value_dims(x)
    if dims is None or len(dims) != rank - 1 or any(d is None for d in dims):
        for _ in range(_DEPTH):
            m = _monotone(ctx, x.producer(), rank - 1) if x.producer() is not None else None
            if m is None:
                break
            x = m[1]
        node = x.producer()
        full = _dims._value_dims(node.inputs[0]) if _default(node, "ReduceMax") else None
        if full is None or len(full) != rank or any(d is None for d in full):
            return None
        dims = full[:ax] + full[ax + 1:]
    return list(dims)


def _same_chain(ctx, t: ir.Value, u: ir.Value, chain: list) -> None:
    """t must be u through the same monotone ops, outermost first, as the shift went above its max."""
    v = t
    for key in chain:
        if key == ("Identity",):
            continue
        node = v.producer()
        while _default(node, "Identity"):
            v = node.inputs[0]
            node = v.producer()
        m = _monotone(ctx, node, _rank(t)) if node is not None else None
        if m is None or m[0] != key:
            raise EvalFailure(f"{t.name!r} is not the value the shift's maximum was taken of, through the same "
                              f"ops ({key[0]} above the maximum, {node.op_type if node else 'nothing'} above "
                              f"{v.name!r})")
        v = m[1]
    while v is not u and _default(v.producer(), "Identity"):
        v = v.producer().inputs[0]
    if v is not u:
        raise EvalFailure(f"the maximum is taken of {u.name!r}, not of {t.name!r} (another row's values)")


def unscaled(ctx: Any, t: Any, f: Any) -> list:
    """[s, g] with t = s * g exactly, g a power of two <= 1 and f * g <= 1; fails with the reason."""
    if not isinstance(t, ir.Value):
        raise EvalFailure("unscaled() needs a graph value")
    f = float(f)
    v, g = t, 1.0
    for _ in range(_DEPTH):
        if f * g <= 1.0:
            if g < 1.0 and f * g < 2.0 ** -14:    # a net scale undone must be a normal float16 too (exact)
                raise EvalFailure(f"{t.name!r}: the net scale {f * g:g} is below float16's normal range")
            return [v, g]
        node = v.producer()
        step = None
        if _default(node, "Mul", "Div") and len(node.inputs) == 2:
            for i in ((1,) if node.op_type == "Div" else (1, 0)):
                arr = _one_const(ctx, node.inputs[i], _rank(node.inputs[1 - i]))
                if arr is None or not power_of_two(arr):
                    continue
                x = float(arr.reshape(-1)[0])
                k = 1.0 / x if node.op_type == "Div" else x
                if k < 1.0:
                    step = (node.inputs[1 - i], k)
                    break
        if step is None:
            raise EvalFailure(f"{t.name!r} is not a power-of-two scale-down of a value by 1/{f:g} or more "
                              f"(scaled up by {f:g} it could overflow, and only a power of two undoes exactly)")
        v, g = step[0], g * step[1]
    raise EvalFailure(f"{t.name!r}: more than {_DEPTH} scalings")
