"""A bound on a value's magnitude proven from constants: ``value_bound(v)`` of rule checks.

It walks up from ``v`` through ops that only move or select elements (on their data inputs:
a Gather's table, not its indices) and a few whose result's magnitude follows from their inputs'
(Add, Sub, Mul, Neg, Abs, Max, Min, Clip, Where's two branches, float Casts, Casts of a bool; a Range from its
start by a step of known sign; an integer interval past its dtype's ends is none: the op wrapped), down to
constants or a bool (0 or 1, whatever computed it, unless an integer comparison of intervals that settle it made it:
then 1 or 0 everywhere, and a Where of it takes one branch), carrying an interval [lo, hi] (value_range); the bound is its larger end's magnitude. Anything else (a graph
input, an activation, an op not listed) is unbounded: ``inf``. A rule uses it where exactness needs a
term kept far from a mask fill: a relative-position bias gathered from its weight table, GPT-1's causal
(1 - b) * -1e4 (rules/attention/bias_sum.yaml).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx_ir as ir

# op -> indices of the inputs whose elements reach the output (others are indices or shapes)
_MOVES = {"Identity": (0,), "Transpose": (0,), "Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,),
          "Flatten": (0,), "Expand": (0,), "Tile": (0,), "Slice": (0,), "Gather": (0,),
          "GatherElements": (0,), "GatherND": (0,), "Where": (1, 2), "Neg": (0,), "Abs": (0,)}
_ELEMENTWISE_MAX = {"Max", "Min", "Concat"}   # |max(a, b)| <= max(|a|, |b|); Concat joins them
_LIMIT = 64   # nodes visited: a bias's cone is a few layout ops over its table


def _is_bool(v: ir.Value | None) -> bool:
    return v is not None and v.dtype == ir.DataType.BOOL


# comparison -> whether a <op> b holds for every a in [a0, a1], b in [b0, b1] / for none
_ALWAYS = {"Greater": lambda a, b: a[0] > b[1], "GreaterOrEqual": lambda a, b: a[0] >= b[1],
           "Less": lambda a, b: a[1] < b[0], "LessOrEqual": lambda a, b: a[1] <= b[0]}
_NEVER = {"Greater": lambda a, b: a[1] <= b[0], "GreaterOrEqual": lambda a, b: a[1] < b[0],
          "Less": lambda a, b: a[0] >= b[1], "LessOrEqual": lambda a, b: a[0] > b[1]}


def _is_int(v: ir.Value) -> bool:
    return v.dtype is not None and v.dtype.is_integer()


def _wrapped(x: ir.Value, node: ir.Node | None, r: tuple[float, float]) -> tuple[float, float]:
    """``r`` for an integer ``x`` as its dtype holds it: an interval past the dtype's ends is no bound (the integer
    op wrapped: int32's max + 1 is its min, uint8's 0 - 1 is 255), so it is unbounded. A Range stops below its
    limit, itself of the dtype: its open end is the dtype's. int64's infinite ends stay (a Range's from a length
    read at run time, which no export has near 2^63; finite ends near it are _decided's 2^53 guard's)."""
    if x.dtype is None or not x.dtype.is_integer():
        return r
    info = np.iinfo(x.dtype.numpy())
    lo, hi = float(info.min), float(info.max)
    open_ok = x.dtype == ir.DataType.INT64   # an infinite end is the int64 Range's
    if node is not None and node.op_type == "Range" and not open_ok:
        r = (max(r[0], lo), min(r[1], hi))
    if (r[0] < lo and not (open_ok and r[0] == -math.inf)) or (r[1] > hi and not (open_ok and r[1] == math.inf)):
        return (-math.inf, math.inf)
    return r


def _decided(node: ir.Node, rng: Any) -> tuple[float, float]:
    """A bool's interval: (1, 1) where its comparison (or Not / And / Or of such) holds for every
    value the inputs' intervals allow, (0, 0) where it holds for none, else (0, 1). transformers 5's
    bidirectional mask under export is `q_idx >= 0` of a Range from 0: true everywhere."""
    both = (0.0, 1.0)
    ins = list(node.inputs)
    if node.op_type in _ALWAYS and len(ins) == 2 and all(i is not None and _is_int(i) for i in ins):
        # integers only: a float interval may have come through a rounding Cast, where 2049 > 2048 can turn false
        a, b = rng(ins[0]), rng(ins[1])
        if any(math.isfinite(e) and abs(e) >= 2.0 ** 53 for e in (*a, *b)):
            return both   # near int64's ends an Add may wrap where the float64 interval does not
        return (1.0, 1.0) if _ALWAYS[node.op_type](a, b) else ((0.0, 0.0) if _NEVER[node.op_type](a, b) else both)
    if node.op_type == "Not" and ins and ins[0] is not None:
        lo, hi = rng(ins[0])
        return (1.0 - hi, 1.0 - lo)
    if node.op_type in ("And", "Or") and len(ins) == 2 and all(i is not None for i in ins):
        (a0, a1), (b0, b1) = rng(ins[0]), rng(ins[1])
        return (min(a0, b0), min(a1, b1)) if node.op_type == "And" else (max(a0, b0), max(a1, b1))
    if node.op_type in _MOVES and ins and ins[0] is not None and node.op_type not in ("Where", "Neg", "Abs"):
        return rng(ins[0])   # a view of a bool (Expand, Unsqueeze, ...) holds its values
    return both


def value_bound(ctx: Any, v: ir.Value) -> float:
    """The largest magnitude ``v`` can hold, proven from constants; inf where unproven."""
    lo, hi = value_range(ctx, v)
    return max(abs(lo), abs(hi))


def value_range(ctx: Any, v: ir.Value) -> tuple[float, float]:
    """An interval [lo, hi] holding every value of ``v``, proven from constants; (-inf, inf) where
    unproven. Intervals, not magnitudes, so that ``(1 - b) * -1e4`` of a 0/1 buffer b (GPT-1's
    causal mask) is bounded by 1e4, not by 2e4."""
    seen: dict[int, tuple[float, float]] = {}
    everything = (-math.inf, math.inf)

    def rng(x: ir.Value | None) -> tuple[float, float]:
        if x is None:
            return everything
        if id(x) in seen:
            return seen[id(x)]
        if len(seen) >= _LIMIT:
            return everything
        seen[id(x)] = everything   # a cycle (never in a valid graph) stays unbounded
        arr = ctx.constant(x)
        node = x.producer()
        if arr is not None:
            a = np.asarray(arr, dtype=np.float64) if arr.size else np.zeros(1)
            r = (float(np.min(a)), float(np.max(a)))
        elif x.dtype == ir.DataType.BOOL:   # an input too: a bool holds 0 or 1 whatever computed it
            r = _decided(node, rng) if node is not None and node.domain in ("", "ai.onnx") else (0.0, 1.0)
        elif node is None or node.domain not in ("", "ai.onnx"):
            r = everything
        elif node.op_type == "Where" and len(node.inputs) == 3 and rng(node.inputs[0]) in ((1.0, 1.0), (0.0, 0.0)):
            r = rng(node.inputs[1 if rng(node.inputs[0]) == (1.0, 1.0) else 2])   # a condition that never changes
        elif node.op_type == "Range" and len(node.inputs) == 3:
            (a0, _), (d0, d1) = rng(node.inputs[0]), rng(node.inputs[2])
            # start, start + delta, ... (none where limit is reached first): from start up for delta > 0
            r = (a0, math.inf) if d0 > 0 else ((-math.inf, rng(node.inputs[0])[1]) if d1 < 0 else everything)
        elif node.op_type in _MOVES or node.op_type in _ELEMENTWISE_MAX:
            ins = [rng(node.inputs[i]) if i < len(node.inputs) else everything for i in _MOVES[node.op_type]] \
                if node.op_type in _MOVES else [rng(i) for i in node.inputs]
            r = (min(i[0] for i in ins), max(i[1] for i in ins))
            if node.op_type == "Neg":
                r = (-r[1], -r[0])
            elif node.op_type == "Abs":
                r = (0.0 if r[0] <= 0 <= r[1] else min(abs(r[0]), abs(r[1])), max(abs(r[0]), abs(r[1])))
            elif node.op_type in ("Max", "Min"):   # max(a, b) >= max of the lows; min(a, b) <= min of the highs
                f = max if node.op_type == "Max" else min
                r = (f(i[0] for i in ins), f(i[1] for i in ins))
        elif node.op_type in ("Add", "Sub") and len(node.inputs) == 2:
            (a0, a1), (b0, b1) = rng(node.inputs[0]), rng(node.inputs[1])
            r = (a0 + b0, a1 + b1) if node.op_type == "Add" else (a0 - b1, a1 - b0)
        elif node.op_type == "Mul" and len(node.inputs) == 2:
            (a0, a1), (b0, b1) = rng(node.inputs[0]), rng(node.inputs[1])
            ends = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]   # inf * 0 is nan: unbounded
            r = everything if any(math.isnan(e) for e in ends) else (min(ends), max(ends))
        elif node.op_type == "Clip":   # min(max(x, lo), hi), bounds as inputs (opset 11+) or attributes
            bounds = []
            for i, name, absent in ((1, "min", -math.inf), (2, "max", math.inf)):
                attr = node.attributes.get(name)
                if i < len(node.inputs) and node.inputs[i] is not None:
                    bounds.append(rng(node.inputs[i]))
                else:
                    b = float(attr.value) if attr is not None else absent
                    bounds.append((b, b))
            (a0, a1), (m0, m1), (h0, h1) = rng(node.inputs[0]), *bounds
            r = (min(max(a0, m0), h0), min(max(a1, m1), h1))
        elif node.op_type == "Cast" and x.dtype is not None and (x.dtype.is_floating_point() or _is_bool(node.inputs[0])):
            r = rng(node.inputs[0])   # to a float, or from a bool (0 / 1 in any type)
        else:
            r = everything
        if any(math.isnan(e) for e in r):
            r = everything
        r = _wrapped(x, node, r)
        seen[id(x)] = r
        return r

    return rng(v)
