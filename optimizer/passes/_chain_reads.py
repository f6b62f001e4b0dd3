"""What a Reshape / Transpose / Flatten chain is read from: its values' readers, a Reshape's target
entries, a Flatten's axis, the chain input's known dims (fold-layout-chains, layout_chains.py)."""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._dim_products import Dim, shape_vector, value_dims
from onnx_fuse.passes._infra import is_default_op
from onnx_fuse.passes._shape_values import invented_name
from onnx_fuse.passes.constant_folding import constant_tensor

#: the ops a static chain is made of (Flatten is a Reshape to [prod(dims[:axis]), prod(dims[axis:])])
LAYOUT_OPS = ("Transpose", "Reshape", "Flatten")


def one_reader(value: ir.Value) -> ir.Node | None:
    """The one node that reads ``value`` (once), which is no graph output; else None."""
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    return uses[0].node if len(uses) == 1 else None


def chain_reader(value: ir.Value) -> tuple[ir.Node | None, bool]:
    """The one layout op (Transpose / Reshape / Flatten) that reads ``value`` beside Shape reads
    only, and whether there are such Shape reads; (None, _) for any other reader or a graph output."""
    if value.is_graph_output():
        return None, False
    uses = [u.node for u in value.uses()]
    shapes = [n for n in uses if is_default_op(n, "Shape")]
    rest = [n for n in uses if not is_default_op(n, "Shape")]
    if len(rest) != 1 or not is_default_op(rest[0], *LAYOUT_OPS):
        return None, False
    return rest[0], bool(shapes)


def zero_entries(shape: ir.Value | None) -> list[int] | None:
    """Where a constant Reshape shape holds 0; None when it is not a small int constant."""
    t = constant_tensor(shape)
    if t is None or not t.dtype.is_integer() or t.size > 64:
        return None
    return [i for i, e in enumerate(t.numpy().reshape(-1)) if int(e) == 0]


def reshape_target(node: ir.Node) -> list[Dim] | None:
    """A Reshape's target entries with 0 (copy) and -1 still to resolve: a constant, or a vector
    computed from shapes (TorchScript's Concat of Shape Gathers) read as dim products; None when an
    entry cannot be read or names a dim inference invented."""
    if len(node.inputs) < 2:
        return None
    t = constant_tensor(node.inputs[1])
    if t is not None:
        if not t.dtype.is_integer() or t.size > 64:
            return None
        entries = [(int(e), ()) for e in t.numpy().reshape(-1)]
    else:
        got = shape_vector(node.inputs[1], {})
        if got is None or got[1] or any(e is None or any(invented_name(a) for a in e[1]) for e in got[0]):
            return None
        entries = list(got[0])
    a = node.attributes.get("allowzero")
    if a is not None and (a.is_ref() or a.value != 0) and (0, ()) in entries:
        return None  # a literal 0: an empty tensor
    return entries


def flatten_axis(node: ir.Node) -> int | None:
    """A Flatten's axis (negative: from the end, resolved in _chain_atoms.atoms); None when it is a reference."""
    a = node.attributes.get("axis")
    if a is None:
        return 1
    return None if a.is_ref() else int(a.value)


def reusable_target(node: ir.Node) -> ir.Value | None:
    """A Reshape's own computed target, usable after any input of the same size: no 0 entry (a 0
    copies the input's dim at its index) and not a constant (a constant target is written afresh)."""
    if node.op_type != "Reshape" or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    if constant_tensor(node.inputs[1]) is not None:
        return None
    entries = reshape_target(node)
    return node.inputs[1] if entries is not None and (0, ()) not in entries else None


def known_dims(x: ir.Value) -> list[Dim] | None:
    """x's dims as products (``4*batch`` is (4, ("batch",))); None when one is unknown or invented
    by inference (no fact to fold on) or not positive."""
    dims = value_dims(x)
    if dims is None or any(d is None or d[0] <= 0 or any(invented_name(a) for a in d[1]) for d in dims):
        return None
    return dims
