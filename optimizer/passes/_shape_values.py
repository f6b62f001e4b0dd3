"""Symbolic contents of small integer tensors (shape vectors), shared by folding and no-op removal.

``shape_entries(v)`` says what a shape-like value holds without running the model: a list whose
entries are ints or names of symbolic dims, followed through the Shape -> Gather / Slice / Squeeze /
Unsqueeze / Reshape / Concat / Cast chains exporters emit. Same dim names mean same values (the ONNX
rule for dim_param, which shape inference propagates).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints

#: Prefix of the dim names onnx's shape inference invents for dims it cannot relate to any other.
#: They are no facts: each inference run numbers them afresh (passes/shape_inference.py).
INVENTED_DIM_PREFIX = "unk__"


def invented_name(name) -> bool:
    """A dim name onnx's inference made up (``unk__N``, or its per-run tag ``unk__r<run>_N``)."""
    return isinstance(name, str) and name.startswith(INVENTED_DIM_PREFIX)


def unknown_or_invented(dim) -> bool:
    """An ir dim that states no fact: unknown, or named by inference rather than the model."""
    return not isinstance(dim, int) and (dim.value is None or invented_name(str(dim.value)))


def read_dims(value: ir.Value | None, *, names: str = "all", unknown: str = "none") -> list | None:
    """``value``'s dims as a list (None when the value or its rank is unknown), in the convention its
    caller compares in. Ints stay ints. A symbolic dim: its name with ``names="all"``, its name unless
    inference invented it with ``"model"`` (an invented name states no fact), never with ``"none"``
    (every symbolic dim is then unknown), the ir dim itself with ``"raw"``. A dim that states nothing:
    None with ``unknown="none"``, with ``"opaque"`` a fresh object equal to nothing (so two unknown
    dims never compare equal)."""
    if value is None or value.shape is None:
        return None
    out = []
    for d in value.shape:
        if isinstance(d, int) or names == "raw":
            out.append(d)
        elif d.value is not None and (names == "all" or (names == "model" and not invented_name(d.value))):
            out.append(d.value)
        else:
            out.append(object() if unknown == "opaque" else None)
    return out


def constant_tensor(value):
    from onnx_fuse.passes.constant_folding import constant_tensor as _ct

    return _ct(value)


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None or a.is_ref():
        return default if a is None else object()
    return a.value


def shape_read_bounds(node: ir.Node, rank: int) -> tuple[int, int] | None:
    """The run [start, end) of axes a Shape node reads from a rank-``rank`` input, clamped as ONNX
    clamps them; None for a reference attribute (function bodies), whose value is not known here."""
    out = []
    for name, default in (("start", 0), ("end", rank)):
        attr = node.attributes.get(name)
        if attr is not None and attr.is_ref():
            return None
        k = default if attr is None else int(attr.value)
        k = k + rank if k < 0 else k
        out.append(min(max(k, 0), rank))
    return out[0], out[1]


def shape_read_dims(node: ir.Node, **how) -> list | None:
    """The dims a Shape node reads of its input (start / end applied) in read_dims' convention ``how``; None
    when the input's rank or a bound is not known."""
    dims = read_dims(node.inputs[0] if node.inputs else None, **how)
    bounds = None if dims is None else shape_read_bounds(node, len(dims))
    return None if bounds is None else dims[bounds[0]:bounds[1]]


def shape_entries(value: ir.Value | None, depth: int = 0) -> tuple[list, bool] | None:
    """What a small int tensor holds, symbolically: (entries, is_scalar) where an entry is an int
    or the name of a symbolic dim, followed through the Shape -> Gather/Slice/Squeeze/Unsqueeze/
    Reshape/Concat/Cast chains exporters emit. None when some entry is not known."""
    if value is None or depth > 12 or (value.dtype is not None and not value.dtype.is_integer()):
        return None
    t = constant_tensor(value)
    if t is not None:
        if not t.dtype.is_integer() or t.size > 16:
            return None
        return [int(v) for v in t.numpy().reshape(-1)], len(t.shape) == 0
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, list(node.inputs)
    if op == "Shape":
        dims = shape_read_dims(node)
        return None if dims is None or None in dims else (dims, False)
    if op in ("Identity", "Cast") or op in ("Squeeze", "Unsqueeze", "Reshape"):
        to = _attr(node, "to") if op == "Cast" else None
        if op == "Cast" and not (isinstance(to, int) and ir.DataType(to).is_integer()):
            return None
        inner = shape_entries(ins[0], depth + 1)
        if inner is None:
            return None
        entries, scalar = inner
        if op in ("Identity", "Cast"):
            return inner
        if op == "Squeeze":
            return (entries, True) if len(entries) == 1 and not scalar else None
        if op == "Unsqueeze":
            return (entries, False) if scalar and const_ints(ins[1] if len(ins) > 1 else None, 64) == [0] else None
        target = const_ints(ins[1], 64) if len(ins) > 1 else None
        return (entries, False) if len(entries) == 1 and target in ([-1], [1]) else None
    if op == "Concat" and _attr(node, "axis") in (0, -1):
        out = []
        for v in ins:
            inner = shape_entries(v, depth + 1)
            if inner is None or inner[1]:
                return None
            out += inner[0]
        return out, False
    if op == "Gather" and _attr(node, "axis", 0) == 0 and len(ins) == 2:
        inner, idx = shape_entries(ins[0], depth + 1), constant_tensor(ins[1])
        if inner is None or inner[1] or idx is None or idx.size > 16:
            return None
        picked = []
        for i in (int(k) for k in idx.numpy().reshape(-1)):
            if not -len(inner[0]) <= i < len(inner[0]):
                return None
            picked.append(inner[0][i])
        return picked, len(idx.shape) == 0
    if op == "Where" and len(ins) == 3:
        return _where_entries(ins, depth)
    if op in ("Add", "Sub") and len(ins) == 2:
        return _sum_entries(op, ins, depth)
    if op == "Slice" and len(ins) >= 3:
        inner = shape_entries(ins[0], depth + 1)
        starts, ends = const_ints(ins[1], 64), const_ints(ins[2], 64)
        axes = const_ints(ins[3], 64) if len(ins) > 3 and ins[3] is not None else [0]
        steps = const_ints(ins[4], 64) if len(ins) > 4 and ins[4] is not None else [1]
        if inner is None or inner[1] or starts is None or ends is None or len(starts) != 1:
            return None
        if axes not in ([0], [-1]) or steps != [1]:
            return None
        n = len(inner[0])
        s, e = (max(min(v, n), -n) for v in (starts[0], ends[0]))
        return inner[0][s:e], False
    return None


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _sum_entries(op: str, ins: list, depth: int) -> tuple[list, bool] | None:
    """The entries of an Add / Sub of two shape reads (sum_entries)."""
    return sum_entries(op, shape_entries(ins[0], depth + 1), shape_entries(ins[1], depth + 1))


def sum_entries(op: str, a: tuple[list, bool] | None, b: tuple[list, bool] | None) -> tuple[list, bool] | None:
    """Sizes added or subtracted entry by entry (a cache's ``past + new``, ``(p + s) - s``), in the
    one spelling shape inference gives such a dim (passes/_dim_sums.py), so the read of a present's
    length and the sum computed from the inputs are one value. A size and a nonzero number read
    the same way (a decode step's present length ``P + 1``, whose read a mask cut at the keys'
    length would otherwise keep on the present: attention-kv-cache would make a cycle); None
    where an entry is no such sum (a number minus a size, or ``P - 1``: P may be 0)."""
    from onnx_fuse.passes._dim_products import broadcast_entries, to_dim
    from onnx_fuse.passes._dim_sums import dim_diff, dim_sum

    pair = broadcast_entries(a, b)
    if pair is None:
        return None
    ea, eb, static = pair
    out = []
    for x, y in zip(ea, eb):
        if isinstance(x, int) and isinstance(y, int):
            z = x + y if op == "Add" else x - y
            if not INT64_MIN <= z <= INT64_MAX:
                return None  # ONNX's int64 wraps; Python's ints do not: no fact, not a wrong one
            out.append(z)
            continue
        if 0 in (x, y):
            # size + 0 stays as written: a decode step's cache positions P + Range(0, 1) fold to
            # P + [0], the form the paged-KV readers hook takes (targets/trt_paged_kv.py)
            return None
        got = dim_sum([to_dim(x), to_dim(y)]) if op == "Add" else dim_diff(to_dim(x), to_dim(y))
        if got is None:
            return None
        coef, atoms = got
        if not atoms:
            out.append(coef)
        elif coef == 1 and len(atoms) == 1:
            out.append(atoms[0])
        else:
            return None
    return out, static


def _where_entries(ins: list, depth: int) -> tuple[list, bool] | None:
    """torch's expand target: Where(Equal(c, m), a, c) with m, a constant, m < 0 where c holds a
    symbol (a dim is never negative, so a symbol keeps its place)."""
    cond, a, c = ins
    eq = cond.producer() if cond is not None else None
    if eq is None or eq.op_type != "Equal" or eq.domain not in ("", "ai.onnx") or c not in list(eq.inputs):
        return None
    m = const_ints([v for v in eq.inputs if v is not c][0] if list(eq.inputs).count(c) == 1 else None, 64)
    inner, fill = shape_entries(c, depth + 1), const_ints(a, 64)
    if inner is None or inner[1] or m is None or fill is None:
        return None
    n = len(inner[0])
    if len(m) not in (1, n) or len(fill) not in (1, n):
        return None
    out = []
    for i, e in enumerate(inner[0]):
        mi, fi = m[i % len(m)], fill[i % len(fill)]
        if isinstance(e, int):
            out.append(fi if e == mi else e)
        elif mi < 0:
            out.append(e)
        else:
            return None
    return out, False
