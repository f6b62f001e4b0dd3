"""A bound on a value's magnitude proven from constants: ``value_bound(v)`` of rule checks.

It walks up from ``v`` through ops that only move or select elements (on their data inputs:
a Gather's table, not its indices) and a few whose result's magnitude follows from their inputs'
(Add, Sub, Mul, Neg, Abs, Max, Min, Where's two branches, float Casts), down to constants; the
bound is what those constants allow. Anything else (a graph input, an activation, an op not
listed) is unbounded: ``inf``. A rule uses it where exactness needs a term kept far from a mask
fill: a relative-position bias gathered from its weight table (rules/attention/bias_sum.yaml).
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


def value_bound(ctx: Any, v: ir.Value) -> float:
    """The largest magnitude ``v`` can hold, proven from constants; inf where unproven."""
    seen: dict[int, float] = {}

    def bound(x: ir.Value | None) -> float:
        if x is None:
            return math.inf
        if id(x) in seen:
            return seen[id(x)]
        if len(seen) >= _LIMIT:
            return math.inf
        seen[id(x)] = math.inf   # a cycle (never in a valid graph) stays unbounded
        arr = ctx.constant(x)
        node = x.producer()
        if arr is not None:
            a = np.asarray(arr, dtype=np.float64) if arr.size else np.zeros(1)
            b = float(np.max(np.abs(a)))
        elif node is None or node.domain not in ("", "ai.onnx"):
            b = math.inf
        elif node.op_type in _MOVES:
            b = max(bound(node.inputs[i]) if i < len(node.inputs) else math.inf for i in _MOVES[node.op_type])
        elif node.op_type in _ELEMENTWISE_MAX:
            b = max(bound(i) for i in node.inputs)
        elif node.op_type in ("Add", "Sub"):
            b = sum(bound(i) for i in node.inputs)
        elif node.op_type == "Mul":
            b = math.prod(bound(i) for i in node.inputs)
        elif node.op_type == "Cast" and x.dtype is not None and x.dtype.is_floating_point():
            b = bound(node.inputs[0])
        else:
            b = math.inf
        seen[id(x)] = b if math.isfinite(b) else math.inf
        return seen[id(x)]

    return bound(v)
