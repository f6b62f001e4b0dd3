"""Constant reads shared by the passes and the rule helpers, each written once (session 24: the
modules had their own twins of these).

- ``is_constant``: a value no op computes at run time (an initializer with its data, a Constant
  node's output); ``dense`` narrows Constant nodes to the float-capable dense ones the precision
  pass converts in place.
- ``const_ints``: a true constant's integers (``constant_tensor``: an initializer that is also a
  graph input is not one), flat, optionally only up to ``limit`` elements.
- ``stored_ints``: the tensor a value stores (``const_value``: initializers, and values a pass gave
  one; not a Constant node's output otherwise), any dtype, as ints.
- ``ctx_ints``: a rule context's constant (``ctx.constant``) as ints.
- ``raw_axes``: a Reduce* / Unsqueeze / Squeeze node's constant axes as written (input or attribute).
- ``node_axes``: a Reduce* / Unsqueeze / Squeeze node's constant axes normalized to a rank, in the
  node's order or sorted (CSE keys reductions by order: [1, 3] is not merged with [3, 1]).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = ["const_ints", "ctx_axes", "ctx_ints", "is_constant", "node_axes", "raw_axes", "stored_ints"]

#: Constant attributes that hold a dense value of a float-capable type
_DENSE_VALUES = ("value", "value_float", "value_floats")


def is_constant(v: ir.Value, *, dense: bool = True) -> bool:
    """``v`` is an initializer holding its data (one that is also a graph input counts), or the
    output of a default-domain Constant node: with ``dense`` (the precision pass: what it converts
    in place) only one given by ``value`` / ``value_float`` / ``value_floats``; without it any
    (``sparse_value``, ``value_int(s)``, strings: still nothing computed at run time; the quantizer
    cones, passes/_quant_regions.py)."""
    if v.is_initializer():
        return v.const_value is not None
    p = v.producer()
    if p is None or p.op_type != "Constant" or p.domain not in ("", "ai.onnx"):
        return False
    return not dense or any(k in p.attributes for k in _DENSE_VALUES)


def const_ints(value: ir.Value | None, limit: int | None = None, *,
               max_rank: int | None = None) -> list[int] | None:
    """The integers of a true constant of an integer type (``constant_tensor``), flat; None for
    any other value, for one of more than ``limit`` elements, and for one of rank above ``max_rank``."""
    from onnx_fuse.passes.constant_folding import constant_tensor

    t = constant_tensor(value)
    if (t is None or not t.dtype.is_integer() or (limit is not None and t.size > limit)
            or (max_rank is not None and len(t.shape) > max_rank)):
        return None
    return [int(x) for x in t.numpy().reshape(-1)]


def stored_ints(v: ir.Value | None) -> list[int] | None:
    """``v``'s stored tensor (``const_value``) as ints, flat, whatever its dtype; None without one."""
    t = None if v is None else v.const_value
    return None if t is None else [int(x) for x in np.asarray(t.numpy()).reshape(-1)]


def ctx_ints(ctx, v: ir.Value | None) -> list[int] | None:
    """The rule context's constant of ``v`` (``ctx.constant``) as ints, flat; None when it has none."""
    arr = ctx.constant(v) if v is not None else None
    return None if arr is None else [int(x) for x in np.asarray(arr).reshape(-1)]


def ctx_axes(ctx, node: ir.Node) -> list[int] | None:
    """A Reduce* / Unsqueeze / Squeeze node's axes in a rule context: its ``axes`` attribute (older
    opsets) or its second input's constant; None when it has neither."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.as_ints()]
    return ctx_ints(ctx, node.inputs[1]) if len(node.inputs) > 1 else None


def raw_axes(node: ir.Node) -> list[int] | None:
    """A Reduce* / Unsqueeze / Squeeze node's axes as written (negative ones kept): its second
    input's integer constant of rank 0 or 1 (opset 13 / 18 on), else its ``axes`` attribute (older
    opsets). None where they are not constant (a ref attribute too) or absent; an empty list stays
    empty. ``node_axes`` range-checks them for a known rank."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        return const_ints(node.inputs[1], max_rank=1)
    attr = node.attributes.get("axes")
    return None if attr is None or attr.is_ref() else [int(a) for a in attr.value]


def node_axes(node: ir.Node, rank: int, *, sort: bool = False) -> list[int] | None:
    """A Reduce* / Unsqueeze / Squeeze node's axes (``raw_axes``) in [0, rank); kept in order unless
    ``sort``. None where they are not constant (a ref attribute too), absent, or out of range; an
    empty list stays empty (what it means is the op's: all axes, or none). An Unsqueeze's rank is
    its output's."""
    axes = raw_axes(node)
    if axes is None or not all(-rank <= a < rank for a in axes):
        return None
    axes = [a % rank for a in axes]
    return sorted(axes) if sort else axes
