"""``gelu_erf_input(y)`` of rule checks: the x of an erf GELU x * 0.5 * (1 + erf(x / sqrt 2)),
read by value whatever the grouping of its product (gelu-erf, rules/activation/gelu.yaml).

Exporters write the product of the three factors {x, 0.5, 1 + erf(...)} in any grouping:
(x * 0.5) * a, (x * a) * 0.5, x * (0.5 * a) (ESM's `x * 0.5 * (1.0 + erf(x / sqrt 2))` and
transformers' `0.5 * x * (...)` differ only there), with 0.5 also as a Div by 2. Alternatives in
a pattern cannot say "these three factors in any grouping": a leaf of one alternative may bind to
the wrong node and accept a * 0.5 * 0.5. So the product is read here as what it computes:

- ``y``'s Mul tree is flattened into its factors: a Mul is opened when its output has no reader
  but its parent (it dies with the fusion), a Div by a constant c contributes 1 / c; anything
  else, or a value with other readers, is a factor as it is;
- a constant counts when it holds one number, in any shape (like a rule's `scalar:`; the rule
  checks shape(y) == shape(x), so none broadcasts x), read at its own dtype (a float16 0.5 is 0.5,
  a bfloat16 0.7071 is 0.70703125); the constants must multiply to 0.5 (rtol 1e-5), the other
  factors must be exactly x and a = Add(Erf(t), 1) (either order), a and Erf's output read by
  nothing else;
- t is flattened the same way and must be x times constants multiplying to 1 / sqrt 2
  (rtol 1e-3: x / 1.4142 and x * 0.70710678 both pass, erf(0.7 x) does not), the same x value as
  the outer factor (x has several readers: the product and the erf's argument).

Every node of the product, the Add, the Erf and t's tree then has no reader outside the GELU, so
replacing y leaves them dead (the rewriter removes them). Anything else fails with the reason.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import is_default_op as _default
from onnx_fuse.rewrite._expr import EvalFailure

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)
_NODES = 16   # a GELU's product has 2 Muls; a few more for folded constants


def _name(v: ir.Value) -> str:
    return repr(v.name or "?")


def _scalar(ctx: Any, v: ir.Value | None) -> float | None:
    """The value of a float constant holding one number (in any shape, like a rule's `scalar:`)
    as its dtype stores it, else None."""
    arr = ctx.constant(v) if v is not None else None
    if arr is None or arr.size == 0 or v.dtype not in _FLOATS:
        return None
    flat = np.asarray(arr).astype(np.float64).reshape(-1)
    return float(flat[0]) if np.all(flat == flat[0]) else None


def _private(v: ir.Value) -> bool:
    """Whether v is read by one node only and is no graph output (it dies with that reader)."""
    return not v.is_graph_output() and len(v.uses()) == 1


def factors(ctx: Any, v: ir.Value) -> tuple[float, list[ir.Value]]:
    """(product of the constant factors, the other factors) of the Mul / Div-by-constant tree
    computing v; v's own producer is opened whatever its readers, the nodes under it only where
    their output is private to the tree."""
    scale, leaves, seen = 1.0, [], [0]

    def walk(x: ir.Value, top: bool) -> None:
        nonlocal scale
        c = _scalar(ctx, x)
        if c is not None:
            scale *= c
            return
        node = x.producer()
        if not top and not _private(x) or seen[0] >= _NODES:
            leaves.append(x)
            return
        if _default(node, "Mul") and len(node.inputs) == 2:
            seen[0] += 1
            walk(node.inputs[0], False)
            walk(node.inputs[1], False)
            return
        d = _scalar(ctx, node.inputs[1]) if _default(node, "Div") and len(node.inputs) == 2 else None
        if d:
            seen[0] += 1
            scale /= d
            walk(node.inputs[0], False)
            return
        leaves.append(x)

    walk(v, True)
    return scale, leaves


def _erf_argument(ctx: Any, a: ir.Value) -> ir.Value | None:
    """t when a = Add(Erf(t), 1) (either order), a and the Erf's output private, else None."""
    node = a.producer()
    if not _default(node, "Add") or len(node.inputs) != 2 or not _private(a):
        return None
    for e, one in (node.inputs, node.inputs[::-1]):
        erf = e.producer() if e is not None else None
        if _default(erf, "Erf") and _scalar(ctx, one) == 1.0:
            if not _private(e):
                raise EvalFailure(f"the erf {_name(e)} has readers outside the GELU"
                                  + (" (a graph output)" if e.is_graph_output() else ""))
            return erf.inputs[0]
    return None


def gelu_erf_input(ctx: Any, y: ir.Value) -> ir.Value:
    """x when y computes x * 0.5 * (1 + erf(x / sqrt 2)) in any grouping (module docstring);
    raises EvalFailure with the reason otherwise."""
    if not isinstance(y, ir.Value):
        raise EvalFailure("gelu_erf_input() needs a graph value")
    scale, leaves = factors(ctx, y)
    if len(leaves) != 2:
        raise EvalFailure(f"{_name(y)} is a product of {len(leaves)} non-constant factors, not x and 1 + erf")
    for x, a in (leaves, leaves[::-1]):
        t = _erf_argument(ctx, a)
        if t is None:
            continue
        if x.dtype not in _FLOATS:
            raise EvalFailure(f"x {_name(x)} is not a float tensor")
        if not math.isclose(scale, 0.5, rel_tol=1e-5):
            raise EvalFailure(f"the product's constant factor is {scale:.7g}, not 0.5")
        if not _private(t):
            raise EvalFailure(f"the erf's argument {_name(t)} has readers outside the GELU")
        k, inner = factors(ctx, t)
        if len(inner) != 1 or inner[0] is not x:
            raise EvalFailure(f"the erf reads {', '.join(_name(i) for i in inner) or 'a constant'}, "
                              f"not the product's factor {_name(x)}")
        if not math.isclose(k, 1 / math.sqrt(2), rel_tol=1e-3):
            raise EvalFailure(f"the erf's argument is x times {k:.7g}, not 1 / sqrt(2)")
        return x
    raise EvalFailure(f"no factor of {_name(y)} is 1 + erf(.) read by the product alone")
