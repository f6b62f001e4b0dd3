"""Symbolic dim products and Reshape proofs: the ``has_dims`` function of the expression language.

``has_dims(v, dims, in_dims=None)``: whether ``v`` provably has ``dims``, where a dim is an int, a
symbol, or a list meaning the product of its items (``[[dim(q, 0), dim(q, 1)], dim(q, 2)]`` is
``[B*H, S]``), and None matches anything. Products compare in a canonical form, so ``["batch", 2]``
equals the ``"2*batch"`` the dynamo exporter writes. The proof is ``v``'s inferred shape, or,
when ``v`` is a Reshape output, what the Reshape outputs: its shape vector is read symbolically (Shape -> Gather/Slice/Squeeze/Unsqueeze/Concat/Cast, plus
Mul/Div of entries, as TorchScript and dynamo compute ``batch * num_heads``), ``0`` copies an
input dim, and one ``-1`` (or one entry that cannot be read) is solved from the element count by
cancelling factors. ``in_dims`` may give the input's true dims where shape inference left
unknowns (a symbol naming input dim i then stands for ``in_dims[i]``: same name, same value).
A dim is a product ``coef * atom * atom...``; an atom is a symbol or a dim string that is not a
plain product (``"past + sequence"``), compared as text. Nothing here fails: unprovable is False.
"""


from __future__ import annotations

import onnx_ir as ir

# the dim algebra lives with the passes (which reroute Shape reads with it); re-exported here
from onnx_fuse.passes._dim_products import (  # noqa: F401
    Dim, div as _div, mul as _mul, reshape_out_dims, shape_vector, to_dim, value_dims as _value_dims,
)


def has_dims(v, dims, in_dims=None) -> bool:
    if not isinstance(v, ir.Value) or not isinstance(dims, (list, tuple)):
        return False
    return _matches(_value_dims(v), dims) or reshapes_to(v, in_dims, dims)


def _matches(got: list[Dim | None] | None, want) -> bool:
    if got is None or len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if w is None:
            continue
        if g is None or (to_dim(w) != g and _sum_form(to_dim(w)) != _sum_form(g)):
            return False
    return True


def _sum_form(d: Dim) -> Dim:
    """A sum in its one canonical spelling (passes/_dim_sums.py), so that "s + p + 4" (onnx's data
    propagation, exporters' value_info) and "p + s + 4" (the dims reading) compare equal."""
    from onnx_fuse.passes._dim_sums import dim_sum

    return dim_sum([d]) or d


def reshapes_to(r, in_dims=None, out_dims=None) -> bool:
    """Whether the Reshape producing ``r`` provably outputs ``out_dims`` (None entries: any) when
    its input has ``in_dims`` (default: the input's inferred shape)."""
    if out_dims is None:
        return False
    return _matches(reshape_out_dims(r, in_dims), out_dims)
