"""Rotary tables read as values: ``rotation_pair(c, s)`` and ``table_layout(t, xe)``.

``rotation_pair``: whether c and s are the cos and sin of the same angles, times one common number
(HF's attention_scaling), whatever ops made them, so that the pair rotates. Proven
- on values where both are constants (c^2 + s^2 == r^2 throughout, rotation_scale);
- on structure otherwise, walking both up in step: Cos(f) beside Sin(f) of the one value f; the
  same view or gather op on each (Unsqueeze, Squeeze, Reshape, Slice, Gather, GatherND, Expand,
  Transpose, Tile, Flatten, Cast, Identity) with the same attributes and the same other inputs
  (one value, or equal constants: cos and sin cut and gathered alike); Mul / Div of each by the
  same one-element number; Concat of pairs that each rotate; ScatterND of a pair into a pair at one
  set of indices (Qwen3's interleaved M-RoPE writes its streams' columns so); down to two constants
  that rotate (a buffer's rows cut at run time).
Nothing here fails: unprovable is False.

``table_layout``: where a table broadcast against xe holds its positions, read from its dims; xe is
what the table multiplies: x's even columns for the complex product (x [.., .., .., D]: xe
[.., .., .., D/2]; or x viewed as pairs [.., .., .., D/2, 2]: xe [.., .., .., D/2, 1]), or x itself for
rotate-half's full-width tables. It returns [layout, axes, proven, dims]: layout "bhsd" (tables
[1|B, 1, S, .], x [B, H, S, D]), "bshd" ([1|B, S, 1, .], x [B, S, H, D]), "sbhd" ([S, 1, 1, .],
x [S, B, H, D]) or "shd" ([S, 1, .], x [S, H, D]: packed patches without a batch axis, the vision
towers' apply_rotary_pos_emb_vision; read as bshd with a batch of 1, the only reading of a rank-3 x);
axes, the table's own axes to squeeze so that it is [1|B, S, .] or [S, .] (the head axis, sbhd's batch
axis, the pairs' axis of 1 where the table has them); proven, whether its row count
is provably x's (else the caches are expanded to x's positions); dims, the table's once squeezed (None
where unknown). ["", [], False, []] when none holds. Only the axis the table varies along matters,
not what x's axes are called: the rotation is elementwise with the tables, so reading a table that
varies over axis 2 as bhsd is exact whatever axis 2 holds. A reading with the row count proven comes
first, then bhsd, bshd, sbhd: where several hold (S = H = 1) each is exact.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes, ctx_ints
from onnx_fuse.passes._shape_values import read_dims, shape_entries, sum_entries

_VIEWS = {"Unsqueeze", "Squeeze", "Reshape", "Slice", "Gather", "GatherND", "Expand", "Transpose", "Tile",
          "Flatten", "Cast", "Identity"}
_DEPTH = 32


def rotation_scale(c: np.ndarray, s: np.ndarray, rtol: float = 1e-2) -> float:
    """r when c^2 + s^2 == r^2 throughout (within rtol of r^2: half-precision tables round), else 0."""
    try:
        r2 = np.square(np.asarray(c, np.float64)) + np.square(np.asarray(s, np.float64))
    except ValueError:
        return 0.0
    if not r2.size or not np.all(np.isfinite(r2)):
        return 0.0
    mean = float(r2.mean())
    if mean <= 0.0 or not np.allclose(r2, mean, rtol=rtol, atol=0.0):
        return 0.0
    return float(np.sqrt(mean))


def rotation_pair(ctx, c: ir.Value, s: ir.Value) -> bool:
    return _pair(ctx, c, s, _DEPTH)


def _same_input(ctx, a: ir.Value | None, b: ir.Value | None) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    va, vb = ctx.constant(a), ctx.constant(b)
    return va is not None and vb is not None and va.shape == vb.shape and np.array_equal(va, vb)


def _attrs(node: ir.Node) -> dict:
    return {k: repr(a.value) for k, a in node.attributes.items()}


def _scalar_operand(ctx, node: ir.Node) -> tuple[ir.Value, ir.Value] | None:
    """(table, k) of Mul(table, k) / Mul(k, table) / Div(table, k), k one element."""
    ins = list(node.inputs)
    if len(ins) != 2:
        return None
    orders = [(0, 1), (1, 0)] if node.op_type == "Mul" else [(0, 1)]
    for t, k in orders:
        dims = ins[k].shape.dims if ins[k] is not None and ins[k].shape is not None else None
        if dims is not None and all(d == 1 for d in dims):
            return ins[t], ins[k]
    return None


def _pair(ctx, c: ir.Value | None, s: ir.Value | None, depth: int) -> bool:
    if c is None or s is None or c is s or depth <= 0:
        return False
    cv, sv = ctx.constant(c), ctx.constant(s)
    if cv is not None and sv is not None:
        return cv.shape == sv.shape and rotation_scale(cv, sv) > 0
    nc, ns = c.producer(), s.producer()
    if nc is None or ns is None or nc.domain not in ("", "ai.onnx") or ns.domain not in ("", "ai.onnx"):
        return False
    if nc.op_type == "Cos" and ns.op_type == "Sin":
        return nc.inputs[0] is ns.inputs[0] and nc.inputs[0] is not None
    if nc.op_type != ns.op_type or _attrs(nc) != _attrs(ns) or len(nc.inputs) != len(ns.inputs):
        return False
    op, ci, si = nc.op_type, list(nc.inputs), list(ns.inputs)
    if op in _VIEWS:
        return all(_same_input(ctx, a, b) for a, b in zip(ci[1:], si[1:])) and _pair(ctx, ci[0], si[0], depth - 1)
    if op in ("Mul", "Div"):
        pc, ps = _scalar_operand(ctx, nc), _scalar_operand(ctx, ns)
        return pc is not None and ps is not None and _same_input(ctx, pc[1], ps[1]) and \
            _pair(ctx, pc[0], ps[0], depth - 1)
    if op == "Concat":
        return all(_pair(ctx, a, b, depth - 1) for a, b in zip(ci, si))
    if op == "ScatterND":   # each element is data's or updates', at one set of indices: a pair if both are
        red = nc.attributes.get("reduction")
        return (red is None or red.value == "none") and len(ci) == 3 and _same_input(ctx, ci[1], si[1]) and \
            _pair(ctx, ci[0], si[0], depth - 1) and _pair(ctx, ci[2], si[2], depth - 1)
    return False


def table_dims(ctx, v: ir.Value, depth: int = 8) -> list | None:
    """v's dims, those inference left unknown read through the ops above it: Unsqueeze / Cast /
    Identity keep their input's, a Slice keeps those of the axes it does not cut (ONNX inference
    drops every dim of a Slice with a computed start, the head dim a table's last axis keeps)."""
    d = read_dims(v, names="model", unknown="opaque")
    node = v.producer() if v is not None else None
    if d is not None and all(isinstance(x, (int, str)) for x in d) or \
            node is None or depth <= 0 or node.domain not in ("", "ai.onnx"):
        return d
    src = table_dims(ctx, node.inputs[0], depth - 1) if node.inputs and node.inputs[0] is not None else None
    if src is None:
        return d
    op = node.op_type
    if op in ("Cast", "Identity"):
        got = src
    elif op == "Unsqueeze":
        axes = ctx_axes(ctx, node)
        rank = len(src) + len(axes or [])
        if axes is None or any(not -rank <= a < rank for a in axes):
            return d
        axes = sorted(a % rank for a in axes)
        got, it = [], iter(src)
        for i in range(rank):
            got.append(1 if i in axes else next(it))
    elif op == "Slice":
        axes = ctx_ints(ctx, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None \
            else list(range(len(src)))
        if axes is None:
            return d
        # a cut axis's dim is unknown, but for a one-row window [p, p + 1) of a run-time p
        one = {a % len(src) for a, k in zip(axes, _one_row_cut(ctx, node, len(axes))) if k}
        cut = {a % len(src) for a in axes}
        got = [(1 if i in one else object()) if i in cut else x for i, x in enumerate(src)]
    else:
        return d
    if d is not None and len(d) != len(got):
        return d
    # a dim inference knew stays (it may be the cut's length); the walk fills the others
    return [a if isinstance(a, (int, str)) else b for a, b in zip(d, got)] if d is not None else got


def _window_length(ctx, starts: ir.Value | None, ends: ir.Value | None) -> list | None:
    """ends - starts entry by entry where it is known whatever starts holds: ends = starts + n (either
    order; n a constant or a shape read, as exporters cut the rows [p, p + S) at a run-time p), starts =
    ends - n, or the two read as sizes whose difference is a number (shape_entries). None otherwise."""
    if starts is None or ends is None:
        return None
    for whole, part, op in ((ends, starts, "Add"), (starts, ends, "Sub")):
        node = whole.producer()
        if node is None or node.op_type != op or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        a, b = node.inputs
        for mine, n in ((a, b), (b, a)) if op == "Add" else ((a, b),):
            if _same_input(ctx, mine, part):
                got = shape_entries(n)
                return None if got is None else got[0]
    diff = sum_entries("Sub", shape_entries(ends), shape_entries(starts))
    return None if diff is None else diff[0]


def _one_row_cut(ctx, node: ir.Node, n_axes: int) -> list[bool]:
    """Per axis of a Slice: whether it keeps one row at most whatever p holds at run time: a window
    [p, p + n) of step k >= n > 0 (a decode step's one position cut from a cos / sin buffer, n = S = 1;
    a negative p counts from the end, and clamping only drops rows). One row, not a count: a start past
    the end keeps none, an out-of-range position the original too could not read."""
    ins = list(node.inputs)
    steps = ctx_ints(ctx, ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * n_axes
    length = _window_length(ctx, ins[1], ins[2]) if len(ins) > 2 else None
    if steps is None or length is None or len(length) != n_axes or len(steps) != n_axes:
        return [False] * n_axes
    return [isinstance(n, int) and 0 < n <= k for n, k in zip(length, steps)]


def table_layout(ctx, t: ir.Value, xe: ir.Value) -> list:
    td, xd = table_dims(ctx, t), read_dims(xe, names="model", unknown="opaque")
    none = ["", [], False, []]
    full = td
    if td is None or xd is None or len(xd) not in (3, 4, 5) or len(td) > len(xd):
        return none
    packed = len(xd) == 3          # x [S, H, D] without a batch axis: read as [1, S, H, D]
    pad = len(xd) - len(td)        # the table's axis i reads x's axis i + pad
    if packed:
        xd, pad = [1] + xd, pad + 1
    if len(xd) == 5:               # pairs [.., D/2, 1]: the table's last axis must be that 1
        if xd[4] != 1 or td[-1] != 1:
            return none
        extra = [len(td) - 1]
        td, xd = td[:-1], xd[:4]
    else:
        extra = []
    t4 = [1] * (4 - len(td)) + td
    if t4[3] != xd[3]:
        return none

    def rows(k):
        """The table holds x's positions on axis k: provably (equal dims), or as the original's
        broadcast allows at run time (rows 1 or x's; an unknown or other symbolic count, as a cut of a
        buffer's rows has), which the caches' Expand to x's positions then makes exact."""
        if t4[k] == xd[k]:
            return "proven"
        both = isinstance(t4[k], int) and isinstance(xd[k], int)
        return "run time" if not both and xd[k] != 1 else ""

    def table_axes(ks):
        return [k - pad for k in ks if k - pad >= 0]

    def read(layout, ks, k):
        axes = table_axes(ks) + extra
        kept = [d if isinstance(d, (int, str)) else None for i, d in enumerate(full) if i not in axes]
        return [layout, axes, rows(k) == "proven", kept]

    batch = t4[0] == 1 or t4[0] == xd[0]
    if packed:                     # rows on x's first axis, one table for every head
        return read("shd", [2], 1) if t4[2] == 1 and rows(1) else none
    found = []
    if t4[1] == 1 and rows(2) and batch:
        found.append(read("bhsd", [1], 2))
    if t4[2] == 1 and rows(1) and batch:
        found.append(read("bshd", [2], 1))
    if t4[1] == 1 and t4[2] == 1 and rows(0):
        found.append(read("sbhd", [1, 2], 0))
    # a reading whose row count is proven before one the run time must bear out
    return next((f for f in found if f[2]), found[0] if found else none)
