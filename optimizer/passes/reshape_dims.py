"""Static dims of Reshape outputs that onnx's inference leaves unknown, from symbolic shape values.

TorchScript and Optimum exports split heads with ``Reshape(x [B,S,64], Concat(Shape(x)[0],
Shape(x)[1], [-1], [16]))``: onnx sees two symbolic entries and cannot size the ``-1``, so the head
count (4) stays unknown and every rule that needs it gives up. The entries are the input's own
dims (``shape_entries`` follows the Shape -> Gather -> Concat chain), so they cancel: ``-1`` is the
product of the input's remaining dims divided by the other entries. Only exact cases are filled:
every entry known (an int, a symbol, or 0 = copy), at most one -1, and the division exact.

Tile gets the same treatment (``tile_output_dims``): Optimum's GPT-J tiles its position table by
``Concat(Shape(position_ids)[0], [1], [1])`` and its indices by ``[1, 1, Shape(table)[2]]``; onnx
sizes a Tile only from constant repeats. A dim is known when the input dim is 1 (the repeat count),
the repeat is 1 (the input dim), or both are ints.

Resize too (``resize_output_dims``): torch's interpolate of a mask built at run time (DETR's
``interpolate(pixel_mask[None], size=feature_map.shape[-2:])``, TorchScript) sizes its output by
``Concat(Shape(x)[0:2], [h, w])``; onnx sizes a Resize only from constant sizes or scales, so the batch
behind it was lost and with it the heads of every attention the mask's position embedding reaches. The
sizes entries are the output dims exactly (the default ``stretch`` policy; with ``axes`` for those axes
only, the others keep the input's); a scale of exactly 1 keeps the input dim.
"""

from __future__ import annotations

from collections import Counter

import onnx_ir as ir

from onnx_fuse.passes._shape_values import _attr, constant_tensor, shape_entries, unknown_or_invented


def _key(d) -> object:
    return d if isinstance(d, int) else (str(d.value) if d.value is not None else None)


def reshape_output_dims(node: ir.Node) -> list | None:
    """The output dims (ints or symbol names) of a Reshape, or None when not exactly known."""
    x, shp = (list(node.inputs) + [None, None])[:2]
    if x is None or x.shape is None or _attr(node, "allowzero", 0) != 0:
        return None
    got = shape_entries(shp)
    if got is None or got[1]:
        return None
    entries = list(got[0])
    ins = [_key(d) for d in x.shape]
    if None in ins:
        return None
    out = [ins[i] if e == 0 and i < len(ins) else e for i, e in enumerate(entries)]
    if out.count(-1) > 1:
        return None
    if -1 not in out:
        return out
    # cancel the symbols and numbers that appear on both sides, then divide what is left
    left, right = Counter(ins), Counter(d for d in out if d != -1)
    common = left & right
    left, right = left - common, right - common
    if any(isinstance(k, str) for k in (*left, *right)):
        return None
    num = 1
    for k, n in left.items():
        num *= k ** n
    den = 1
    for k, n in right.items():
        den *= k ** n
    if den == 0 or num % den:
        return None
    return [num // den if d == -1 else d for d in out]


def tile_output_dims(node: ir.Node) -> list | None:
    """The output dims (ints, symbol names, or None where unknown) of a Tile, or None."""
    x, reps = (list(node.inputs) + [None, None])[:2]
    if x is None or x.shape is None:
        return None
    got = shape_entries(reps)
    if got is None or got[1] or len(got[0]) != len(x.shape):
        return None
    out = []
    for d, r in zip((_key(d) for d in x.shape), got[0]):
        if d == 1:
            out.append(r)
        elif r == 1:
            out.append(d)
        elif isinstance(d, int) and isinstance(r, int):
            out.append(d * r)
        else:
            out.append(None)
    return out


def expand_output_dims(node: ir.Node) -> list | None:
    """The output dims (ints, symbol names, or None where unknown) of an Expand whose target is a
    shape vector (torch's expand writes Where(Equal(c, -1), 1, c)), or None."""
    x, target = (list(node.inputs) + [None, None])[:2]
    if x is None or x.shape is None:
        return None
    got = shape_entries(target)
    if got is None or got[1]:
        return None
    ins, tgt = [_key(d) for d in x.shape], list(got[0])
    n = max(len(ins), len(tgt))
    ins, tgt = [1] * (n - len(ins)) + ins, [1] * (n - len(tgt)) + tgt
    out = []
    for d, t in zip(ins, tgt):
        if t == 1 or d == t:
            out.append(d)
        elif d == 1 or (isinstance(t, int) and t > 1):
            out.append(t)  # d is 1 or equals t (else the model is invalid)
        else:
            out.append(None)
    return out


def resize_output_dims(node: ir.Node) -> list | None:
    """The output dims (ints, symbol names, or None where unknown) of a Resize, or None."""
    ins = (list(node.inputs) + [None] * 4)[:4]
    x, scales, sizes = ins[0], ins[2], ins[3]
    if x is None or x.shape is None or _attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return None
    rank, dims = len(x.shape), [_key(d) for d in x.shape]
    axes = _attr(node, "axes", None)
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if sizes is not None and sizes.name:  # an empty name is an omitted input
        got = shape_entries(sizes)
        if got is None or got[1] or len(got[0]) != len(axes):
            return None
        for a, e in zip(axes, got[0]):
            dims[a] = e
        return dims
    t = constant_tensor(scales) if scales is not None else None
    if t is None or t.size != len(axes):
        return None
    for a, f in zip(axes, t.numpy().reshape(-1).tolist()):
        if f != 1.0:
            dims[a] = dims[a] * f if isinstance(dims[a], int) and float(dims[a] * f).is_integer() else None
    return [int(d) if isinstance(d, float) else d for d in dims]


_MAX_DIM = (1 << 63) - 1   # a dim is an int64 >= 0


def refine_reshape_outputs(model: ir.Model) -> int:
    """Give Reshape (and Tile) outputs the dims ``reshape_output_dims`` (``tile_output_dims``)
    proves: static dims always, symbols where the value had none or an invented one (Tile only:
    a Reshape's symbols come from onnx already); returns how many outputs gained."""
    gained = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.op_type not in ("Reshape", "Tile", "Expand", "Resize") or node.domain not in ("", "ai.onnx") \
                or not node.outputs:
            continue
        out = node.outputs[0]
        dims = {"Reshape": reshape_output_dims, "Tile": tile_output_dims, "Expand": expand_output_dims,
                "Resize": resize_output_dims}[node.op_type](node)
        if dims is None or (out.shape is not None and len(out.shape) != len(dims)):
            continue
        if any(isinstance(d, int) and not 0 <= d <= _MAX_DIM for d in dims):
            continue  # the node fails at run time (a -2 entry); no dim to state
        old = list(out.shape) if out.shape is not None else [None] * len(dims)
        new, changed = [], False
        for o, d in zip(old, dims):
            if isinstance(d, int) and not isinstance(o, int):
                new.append(d)
                changed = True
            elif (node.op_type != "Reshape" and isinstance(d, str) and (o is None or unknown_or_invented(o))
                  and (o is None or str(o.value) != d)):   # an Expand of an invented dim already has it
                new.append(ir.SymbolicDim(d))
                changed = True
            else:
                new.append(o if o is not None else d)
        if changed:
            out.shape = ir.Shape(new)
            gained += 1
    return gained
