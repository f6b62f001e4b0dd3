"""Reshape(Reshape(x, s1), s2) read as Reshape(x, s2) where that is the same (fold-layout-chains'
``reshape-of-reshape``, layout_chains.py): s2 copies (0) no dim of the middle value that x lacks at
the same axis; identity-elimination then drops a Reshape to x's own shape, so a head split undone by
its merge cancels. An Unsqueeze or Squeeze in the middle is a view as well (einsum-to-matmul's
Unsqueeze of a batch letter one operand lacks, before the grouped GQA body's Reshape of it)."""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader, zero_entries
from onnx_fuse.passes._dim_products import reshape_out_dims, value_dims
from onnx_fuse.passes._infra import is_default_op
from onnx_fuse.passes._shape_values import invented_name


def reshape_of_reshape(r2: ir.Node) -> bool:
    """``r2`` reads the first Reshape's (or view's) input directly, when that is the same (module docstring)."""
    if len(r2.inputs) < 2 or r2.inputs[0] is None:
        return False
    x = view_source(r2, r2.inputs[0], r2)
    if x is None:
        return False
    r2.replace_input_with(0, x)
    return True


def view_source(r2: ir.Node, mid: ir.Value, reader: ir.Node) -> ir.Value | None:
    """The input x of the Reshape / view making ``mid`` when Reshape(x, r2's target) gives what r2 gives
    from ``mid`` (or from an elementwise op of ``mid``: a Cast between the views, _cast_between_views.py);
    ``reader`` must be ``mid``'s one reader. None when not."""
    if len(r2.inputs) < 2:
        return None
    r1 = mid.producer()
    view = is_default_op(r1, "Unsqueeze", "Squeeze")
    if not (view or (is_default_op(r1, "Reshape") and len(r1.inputs) >= 2)):
        return None
    if not r1.inputs or r1.inputs[0] is None or one_reader(mid) is not reader:
        return None
    x = r1.inputs[0]
    a1 = r1.attributes.get("allowzero")
    if not view and a1 is not None and (a1.is_ref() or a1.value != 0) and zero_entries(r1.inputs[1]) != []:
        return None  # a literal 0 in s1 (an empty middle value) or an unread s1: left alone
    a = r2.attributes.get("allowzero")
    if a is not None and (a.is_ref() or a.value not in (0, 1)):
        return None
    if not (a is not None and a.value == 1) and not _zeros_copy_same(r2.inputs[1], mid, x, view):
        return None
    return x


def _zeros_copy_same(shape: ir.Value | None, mid: ir.Value, x: ir.Value, view: bool) -> bool:
    """Each 0 of ``shape`` (copy the input's dim) copies the same dim from x as from ``mid``."""
    zeros = zero_entries(shape)
    if zeros is None:
        return False
    if not zeros:
        return True
    got, have = value_dims(mid) if view else reshape_out_dims(mid), value_dims(x)
    if got is None or have is None:
        return False
    return all(i < len(got) and i < len(have) and have[i] is not None and got[i] == have[i]
               and not any(invented_name(s) for s in have[i][1]) for i in zeros)
