"""``gelu_erf_input(y)`` / ``gelu_tanh_input(y)`` of rule checks: the x of an erf GELU
x * 0.5 * (1 + erf(x / sqrt 2)) or of a tanh GELU, read by value whatever the grouping of its
product (gelu-erf, gelu-tanh, rules/activation/gelu.yaml).

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

``gelu_tanh_input(y)`` reads the tanh GELU x * 0.5 * (1 + tanh(s)) the same way (gelu-tanh): the
product is flattened as above, and s must be sqrt(2 / pi) * (x + 0.044715 x^3) of the product's x.
Exporters spell s many ways (Pow(x, 3), x * x * x, x * (x * x), BLOOM's factored
0.79788456 * x * (1 + 0.044715 * x * x)), so s's private tree of Mul / Add / Sub / Neg /
Div-by-constant / Pow-by-small-integer over x and constants is evaluated as a polynomial in x
(numpy coefficient arithmetic in float64 on the constants as their dtype stores them: exact up to
float64 rounding, no probing) and its coefficients are compared: x's with sqrt(2 / pi), x^3's over
x's with 0.044715, every other one zero (rtol 1e-4 + two ulps of x's dtype, as the constants of a
float16 or bfloat16 export are rounded: a float16 0.044715 is 0.04470825; 0.04 or 0.05 refuse).
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
_POLY_NODES = 24   # tanh's argument: 5 to 7 nodes as exported; room for folded constants
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_CUBIC = 0.044715


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


def _one_plus_argument(ctx: Any, a: ir.Value, op: str) -> ir.Value | None:
    """t when a = Add(op(t), 1) (either order; op Erf or Tanh), a and op's output private, else None."""
    node = a.producer()
    if not _default(node, "Add") or len(node.inputs) != 2 or not _private(a):
        return None
    for e, one in (node.inputs, node.inputs[::-1]):
        f = e.producer() if e is not None else None
        if _default(f, op) and _scalar(ctx, one) == 1.0:
            if not _private(e):
                raise EvalFailure(f"the {op.lower()} {_name(e)} has readers outside the GELU"
                                  + (" (a graph output)" if e.is_graph_output() else ""))
            return f.inputs[0]
    return None


def _gelu_factors(ctx: Any, y: ir.Value, op: str) -> tuple[ir.Value, ir.Value]:
    """(x, t) when y is the product of x, constants multiplying to 0.5 and 1 + op(t), t private."""
    if not isinstance(y, ir.Value):
        raise EvalFailure(f"gelu_{op.lower()}_input() needs a graph value")
    scale, leaves = factors(ctx, y)
    if len(leaves) != 2:
        raise EvalFailure(f"{_name(y)} is a product of {len(leaves)} non-constant factors, "
                          f"not x and 1 + {op.lower()}")
    for x, a in (leaves, leaves[::-1]):
        t = _one_plus_argument(ctx, a, op)
        if t is None:
            continue
        if x.dtype not in _FLOATS:
            raise EvalFailure(f"x {_name(x)} is not a float tensor")
        if not math.isclose(scale, 0.5, rel_tol=1e-5):
            raise EvalFailure(f"the product's constant factor is {scale:.7g}, not 0.5")
        if not _private(t):
            raise EvalFailure(f"the {op.lower()}'s argument {_name(t)} has readers outside the GELU")
        return x, t
    raise EvalFailure(f"no factor of {_name(y)} is 1 + {op.lower()}(.) read by the product alone")


def gelu_erf_input(ctx: Any, y: ir.Value) -> ir.Value:
    """x when y computes x * 0.5 * (1 + erf(x / sqrt 2)) in any grouping (module docstring);
    raises EvalFailure with the reason otherwise."""
    x, t = _gelu_factors(ctx, y, "Erf")
    k, inner = factors(ctx, t)
    if len(inner) != 1 or inner[0] is not x:
        raise EvalFailure(f"the erf reads {', '.join(_name(i) for i in inner) or 'a constant'}, "
                          f"not the product's factor {_name(x)}")
    if not math.isclose(k, 1 / math.sqrt(2), rel_tol=1e-3):
        raise EvalFailure(f"the erf's argument is x times {k:.7g}, not 1 / sqrt(2)")
    return x


def _number(ctx: Any, v: ir.Value | None) -> float | None:
    """One number held by a constant of any numeric dtype (Pow's exponent may be an integer)."""
    arr = ctx.constant(v) if v is not None else None
    if arr is None or arr.size == 0 or not np.issubdtype(np.asarray(arr).dtype, np.number):
        return _scalar(ctx, v)
    flat = np.asarray(arr).astype(np.float64).reshape(-1)
    return float(flat[0]) if np.all(flat == flat[0]) else None


def polynomial(ctx: Any, s: ir.Value, x: ir.Value) -> np.ndarray:
    """The coefficients (constant term first) of s as a polynomial in x, when s's tree down to x is
    Mul / Add / Sub / Neg / Div by a constant / Pow by an integer 0..4 of private values and
    float constants (read at their dtype); raises EvalFailure naming what is not."""
    seen = [0]

    def walk(v: ir.Value) -> np.ndarray:
        if v is x:
            return np.array([0.0, 1.0])
        c = _scalar(ctx, v)
        if c is not None:
            return np.array([c])
        node = v.producer()
        if node is None:
            raise EvalFailure(f"the tanh's argument reads {_name(v)}, not the product's factor {_name(x)}")
        if not _private(v):
            raise EvalFailure(f"{_name(v)} in the tanh's argument has readers outside the GELU"
                              + (" (a graph output)" if v.is_graph_output() else ""))
        seen[0] += 1
        if seen[0] > _POLY_NODES:
            raise EvalFailure(f"the tanh's argument has more than {_POLY_NODES} nodes")
        ins = list(node.inputs)
        op = node.op_type if _default(node, node.op_type) else f"{node.domain}::{node.op_type}"
        if op in ("Mul", "Add", "Sub") and len(ins) == 2:
            a, b = walk(ins[0]), walk(ins[1])
            p = {"Mul": np.polynomial.polynomial.polymul, "Add": np.polynomial.polynomial.polyadd,
                 "Sub": np.polynomial.polynomial.polysub}[op](a, b)
        elif op == "Neg" and len(ins) == 1:
            p = -walk(ins[0])
        elif op == "Div" and len(ins) == 2 and _scalar(ctx, ins[1]):
            p = walk(ins[0]) / _scalar(ctx, ins[1])
        elif op == "Pow" and len(ins) == 2 and _number(ctx, ins[1]) in (0.0, 1.0, 2.0, 3.0, 4.0):
            p = np.polynomial.polynomial.polypow(walk(ins[0]), int(_number(ctx, ins[1])))
        else:
            raise EvalFailure(f"{_name(v)} in the tanh's argument is computed by {op}, "
                              "not by Mul / Add / Sub / Neg / Div or Pow by constants")
        if len(p) > 8:
            raise EvalFailure(f"the tanh's argument is a polynomial of degree {len(p) - 1} in x")
        return p

    return walk(s)


def gelu_tanh_input(ctx: Any, y: ir.Value) -> ir.Value:
    """x when y computes x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) in any grouping,
    the argument in any spelling of that polynomial (module docstring); raises EvalFailure with
    the reason otherwise."""
    x, s = _gelu_factors(ctx, y, "Tanh")
    p = np.zeros(8)
    got = polynomial(ctx, s, x)
    p[:len(got)] = got
    # the constants are rounded to x's dtype: two ulps of it on top of the old rules' rtol 1e-4
    eps = 2.0 ** -10 if x.dtype == ir.DataType.FLOAT16 else 2.0 ** -7 if x.dtype == ir.DataType.BFLOAT16 else 0.0
    rtol = 1e-4 + 2 * eps
    terms = " + ".join(f"{c:.7g} x^{i}" for i, c in enumerate(p) if c)
    if not math.isclose(p[1], _SQRT_2_OVER_PI, rel_tol=rtol):
        raise EvalFailure(f"the tanh's argument is {terms or '0'}: x's coefficient is {p[1]:.7g}, "
                          "not sqrt(2 / pi)")
    if not math.isclose(p[3] / p[1], _CUBIC, rel_tol=rtol):
        raise EvalFailure(f"the tanh's argument is {terms}: x^3's coefficient over x's is "
                          f"{p[3] / p[1]:.7g}, not 0.044715")
    if any(abs(p[i]) > rtol * abs(p[1]) for i in (0, 2, 4, 5, 6, 7)):
        raise EvalFailure(f"the tanh's argument is {terms}, not sqrt(2 / pi) * (x + 0.044715 x^3)")
    return x
