"""``head_repeat(x, axis)`` / ``head_source(x, axis)``: x repeats each head of a value s n times.

Grouped-query attention reads K / V with each of its Hkv heads repeated n = H / Hkv times in a row,
``x[..., h, ...] = s[..., h // n, ...]`` on the heads axis (repeat_interleave; transformers'
repeat_kv). Exporters write that in several ways, all read here on what they compute:

- a new axis after the heads, broadcast to n and merged back: Reshape(Expand | Tile | Concat of n
  copies (Unsqueeze(s, axis + 1))) (torch's repeat_kv and dynamo's repeat_interleave: Expand;
  TorchScript's repeat_interleave and tf.repeat through tf2onnx: Tile [.., 1, n, 1, ..]; a stack of
  n copies: Concat), the Reshape proven to merge exactly those two axes (its shape vector read
  symbolically, as has_dims does);
- Gather(s, idx, axis) with the constant index table idx = [0, .., 0, 1, .., 1, ..] (i // n);
- one head broadcast to all (Hkv = 1: Expand or Tile on the heads axis itself), where repeat and
  interleave agree.
A Tile on the heads axis itself with Hkv > 1 is ``s[..., h % Hkv, ...]`` (torch's k.repeat(1, n,
1, 1)), another head map: not a repeat here (0), so the attention keeps the tiled K / V as they are.
Nothing here fails: unprovable is 0 (head_source then fails with the reason).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes as _axes
from onnx_fuse.passes._consts import ctx_ints
from onnx_fuse.passes._infra import is_default_op as _default
from onnx_fuse.rewrite import _dims


def head_repeat(ctx, x: ir.Value, axis: int) -> int:
    """n when ``x`` provably repeats each head of another value n times on ``axis`` (n >= 2, or the
    head count when one head is broadcast), else 0."""
    got = _prove(ctx, x, int(axis))
    return got[1] if got is not None else 0


def head_source(ctx, x: ir.Value, axis: int) -> ir.Value | None:
    """The value whose heads ``x`` repeats on ``axis`` (None when not proven)."""
    got = _prove(ctx, x, int(axis))
    return got[0] if got is not None else None


def _dims_of(ctx, v: ir.Value) -> list | None:
    from onnx_fuse.rewrite._expr import UNKNOWN_DIM, _shape

    if v is None or v.shape is None:
        return None
    dims = _shape(ctx, v)
    return None if any(d is UNKNOWN_DIM for d in dims) else dims


def _prove(ctx, x: ir.Value, axis: int) -> tuple[ir.Value, int] | None:
    if not isinstance(x, ir.Value) or x.shape is None:
        return None
    rank = len(x.shape)
    if not 0 <= axis < rank:
        return None
    node = x.producer()
    if _default(node, "Reshape"):
        return _merged(ctx, node, x, axis)
    if _default(node, "Gather"):
        return _gathered(ctx, node, x, axis)
    if _default(node, "Tile", "Expand"):
        return _broadcast(ctx, node, x, axis)
    return None


def _merged(ctx, reshape: ir.Node, x: ir.Value, axis: int) -> tuple[ir.Value, int] | None:
    """Reshape(Expand | Tile | Concat(Unsqueeze(s, axis + 1)) of n on that axis) merging it back."""
    e = reshape.inputs[0]
    en = e.producer() if e is not None else None
    if not _default(en, "Expand", "Tile", "Concat") or not en.inputs or en.inputs[0] is None:
        return None
    u = en.inputs[0]
    un = u.producer()
    if not _default(un, "Unsqueeze") or un.inputs[0] is None:
        return None
    s = un.inputs[0]
    sd = _dims_of(ctx, s)
    if sd is None or len(sd) != len(x.shape) or not isinstance(sd[axis], int):
        return None
    new = axis + 1
    if [a % (len(sd) + 1) for a in (_axes(ctx, un) or [None]) if a is not None] != [new]:
        return None
    ones = sd[:new] + [1] + sd[new:]
    n = _new_axis_count(ctx, en, u, ones, new)
    if n is None or n < 2:
        return None
    rep = sd[:new] + [n] + sd[new:]
    want = sd[:axis] + [sd[axis] * n] + sd[new:]
    return (s, n) if _dims.has_dims(x, want, rep) else None


def _new_axis_count(ctx, en: ir.Node, u: ir.Value, ones: list, new: int) -> int | None:
    """How many copies of u (with a 1 at ``new``) the Expand / Tile / Concat makes on that axis, when
    it leaves every other axis as it is."""
    if en.op_type == "Concat":
        axis = en.attributes.get("axis")
        ok = axis is not None and axis.as_int() % len(ones) == new and all(i is u for i in en.inputs)
        return len(en.inputs) if ok else None
    if en.op_type == "Tile":
        reps = ctx_ints(ctx, en.inputs[1]) if len(en.inputs) > 1 else None
        if reps is None or len(reps) != len(ones) or any(r != 1 for i, r in enumerate(reps) if i != new):
            return None
        return reps[new]
    from onnx_fuse.rewrite._expr import _expanded_dims

    out = _expanded_dims(ctx, ones, en.inputs[1], en.outputs[0])
    if len(out) != len(ones) or not isinstance(out[new], int):
        return None
    return out[new] if all(out[i] == ones[i] for i in range(len(ones)) if i != new) else None


def _gathered(ctx, node: ir.Node, x: ir.Value, axis: int) -> tuple[ir.Value, int] | None:
    """Gather(s, [i // n for i in range(Hkv * n)], axis)."""
    s = node.inputs[0]
    a = node.attributes.get("axis")
    sd = _dims_of(ctx, s)
    if sd is None or len(sd) != len(x.shape) or (a.as_int() if a is not None else 0) % len(sd) != axis:
        return None
    idx = ctx.constant(node.inputs[1]) if len(node.inputs) > 1 else None
    hkv = sd[axis]
    if idx is None or np.asarray(idx).ndim != 1 or not isinstance(hkv, int) or hkv < 1:
        return None
    idx = np.asarray(idx).astype(np.int64)
    n = len(idx) // hkv
    if n < 2 or len(idx) != n * hkv or not np.array_equal(idx, np.arange(len(idx)) // n):
        return None
    return s, n


def _broadcast(ctx, node: ir.Node, x: ir.Value, axis: int) -> tuple[ir.Value, int] | None:
    """One head (Hkv = 1) tiled or expanded to n on the heads axis, nothing else changed."""
    s = node.inputs[0]
    sd = _dims_of(ctx, s)
    if sd is None or len(sd) != len(x.shape) or sd[axis] != 1 or len(node.inputs) < 2:
        return None
    if node.op_type == "Tile":
        reps = ctx_ints(ctx, node.inputs[1])
        ok = reps is not None and len(reps) == len(sd) and all(r == 1 for i, r in enumerate(reps) if i != axis)
        n = reps[axis] if ok else 0
    else:
        from onnx_fuse.rewrite._expr import _expanded_dims

        out = _expanded_dims(ctx, sd, node.inputs[1], x)
        ok = len(out) == len(sd) and isinstance(out[axis], int) and all(
            out[i] == sd[i] for i in range(len(sd)) if i != axis)
        n = out[axis] if ok else 0
    return (s, n) if n >= 2 else None
