"""Symbolic dim products and what a Reshape outputs, read from values (no rule-engine imports).

A dim is a product ``coef * atom * atom...`` (``Dim``); an atom is a symbol or a dim string that is
not a plain product (``"past + sequence"``), compared as text. ``shape_vector`` reads a small int
tensor symbolically (Shape -> Gather/Slice/Squeeze/Unsqueeze/Concat/Cast, plus Mul/Div of entries,
as TorchScript and dynamo compute ``batch * num_heads``, a Div that does not divide as the floor
atom ``(L)//s`` that ``floor_div`` names computed lengths with (``parse_floor`` reads one back: the
one parser of those atoms; ``(L + c) // s`` with c >= 0 too), the pad to a multiple ``(-L) % m`` (also
spelled ``(m - L % m) % m``: Swin's window padding), Add / Sub of plain ints, and TorchScript's ``expand(-1)``
guard ``Where(Equal(v, -1), 1, v)`` (also before folding: a ConstantOfShape of known length and int
fill reads as its entries, and a Where whose condition's entries are known picks entry by entry);
a Concat part of known length whose values cannot be read gives None entries, and moves of a
tensor of static shape, Reshape / Transpose / Slice of any step, are followed on its indices:
TorchScript's F.pad pads); ``reshape_out_dims`` says what a Reshape outputs: ``0`` copies an input
dim, and one ``-1`` (or one entry that cannot be read) is solved from the element count by
cancelling factors. Used by the rule language's ``has_dims``
(rewrite/_dims.py) and by the Shape-read rerouting (passes/_dim_source.py). Nothing here fails:
unprovable is None.
"""

from __future__ import annotations

import re

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints
from onnx_fuse.passes._shape_values import _attr, constant_tensor, invented_name

Dim = tuple[int, tuple[str, ...]]  # coef, sorted atoms

_TOKEN = re.compile(r"^\s*(\d+|[A-Za-z_][\w.]*)\s*$")
_DIVISOR = re.compile(r"//(\d+)")
_OFFSET = re.compile(r"[+-]\d+$")


def broadcast_entries(a: tuple[list, bool] | None, b: tuple[list, bool] | None) -> tuple[list, list, bool] | None:
    """The two (entries, static) shape reads of an elementwise op's inputs, a length-1 side repeated to
    the other's length: (entries a, entries b, both static); None where a read failed or the lengths
    differ otherwise (no numpy broadcasting beyond that is read)."""
    if a is None or b is None:
        return None
    (ea, sa), (eb, sb) = a, b
    if len(ea) != len(eb) and 1 not in (len(ea), len(eb)):
        return None
    n = max(len(ea), len(eb))
    return (ea * n if len(ea) == 1 else ea), (eb * n if len(eb) == 1 else eb), sa and sb


def to_dim(d) -> Dim | None:
    """A dim (int, str, a list meaning the product of its items) in canonical form; None if unknown."""
    if isinstance(d, (bool, np.bool_)):
        return None
    if isinstance(d, (int, np.integer)):
        return int(d), ()
    if isinstance(d, (list, tuple)):
        out: Dim = (1, ())
        for x in d:
            f = to_dim(x)
            if f is None:
                return None
            out = mul(out, f)
        return out
    if isinstance(d, str):
        parts = _top_level_factors(d)
        if "**" not in d and all(_TOKEN.match(p) or parse_floor(p) for p in parts):
            out = (1, ())
            for p in (p.strip() for p in parts):
                out = mul(out, (int(p), ()) if p.isdigit() else (1, (p,)))
            return out
        return 1, (d.strip(),)
    return None


def _outside(text: str) -> list[bool] | None:
    """For each character of ``text``, whether it lies outside every parenthesis pair (the pair's
    own characters count as inside); None when the parentheses do not balance."""
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        out.append(depth == 0)
        depth -= ch == ")"
        if depth < 0:
            return None
    return out if depth == 0 else None


def parse_floor(atom: str) -> tuple[str, int, int] | None:
    """A floor_div atom ``"(L+c)//s"`` read back as ``(L, c, s)`` (``"((L)//2-1)//2"`` is
    ``("(L)//2", -1, 2)``): the text must be one parenthesized group, balanced, followed by ``//``
    and an int, and ``c`` is the group's trailing signed int (0 without one). None for anything
    else: a product of atoms (``"(a)//2*(b)//2"``: the first group closes before the end), a sum,
    unbalanced text."""
    text = atom.strip()
    flags = _outside(text)
    if not flags or not text.startswith("("):
        return None
    after = flags.index(True) if True in flags else len(text)   # just past the first group's ")"
    m = _DIVISOR.fullmatch(text[after:])
    inner = text[1:after - 1]
    if m is None or not inner:
        return None
    tail = _OFFSET.search(inner)
    return (inner[:tail.start()], int(tail.group(0)), int(m.group(1))) if tail else (inner, 0, int(m.group(1)))


def _top_level_factors(d: str) -> list[str]:
    """``d`` split at the ``*`` outside parentheses (a plain product splits as ``d.split("*")``;
    unbalanced text stays whole)."""
    flags = _outside(d)
    if flags is None:
        return [d]
    cuts = [k for k, (ch, out) in enumerate(zip(d, flags)) if ch == "*" and out]
    return [d[a + 1:b] for a, b in zip([-1] + cuts, cuts + [len(d)])]


def dim_text(d: Dim) -> str:
    """A symbolic Dim as text ``to_dim`` reads back (``2*batch``)."""
    return "*".join(([str(d[0])] if d[0] != 1 else []) + list(d[1])) if d[1] else str(d[0])


def floor_div(a: Dim | None, s: int, c: int = 0) -> Dim | None:
    """floor((a + c) / s) for a size ``a`` (never negative): the int or exact quotient where there is
    one, else the atom ``"(a+c)//s"``, which names a size only computed (a strided conv's or pool's
    output length, a length halved in shape arithmetic) the same whichever way it was computed:
    AveragePool(kernel 2, stride 2) over L frames and ``Shape(x)[1] // 2`` are both ``(L)//2``.
    None where ``a`` is unknown, invented or not a size."""
    if a is None or s <= 0 or a[0] < 0 or any(invented_name(t) for t in a[1]):
        return None
    if not a[1]:
        return (a[0] + c) // s, ()
    if c == 0 and (q := div(a, (s, ()))) is not None:
        return q
    if a[0] == 0:
        return None
    text = dim_text(a)
    tail = f"+{c}" if c > 0 else f"-{-c}" if c < 0 else ""   # no " + ": that spells a sum (_dim_sums)
    return (1, (f"({text}{tail})//{s}",)) if " " not in text else None


def floor_plus(atom: str, k: int) -> str | None:
    """``floor((L + c) / s) + k`` as the one atom ``(L+c')//s``, c' = c + k * s; None when ``atom`` is
    not a floor_div atom (a sum keeps its terms then: passes/_dim_sums.py)."""
    got = parse_floor(atom)
    if got is None or " " in atom.strip():
        return None
    text, c, s = got
    c += k * s
    return f"({text}{f'+{c}' if c > 0 else f'-{-c}' if c < 0 else ''})//{s}"


def mod_neg(n: Dim, m: int) -> Dim | None:
    """``(-n) % m`` for a size ``n``: an int for an int, else the atom ``"(-n)%m"`` (a value in [0, m),
    the amount that pads n up to a multiple of m; ``parse_mod_neg`` reads it back). None for a
    size not spelled as a product (a sum) or invented."""
    if n[0] < 0 or any(invented_name(t) for t in n[1]):
        return None
    if not n[1]:
        return (-n[0]) % m, ()
    text = dim_text(n)
    if not _TOKEN.match(text):   # -(L)//4 would read as (-L)//4: negate the whole size
        text = f"({text})"
    return (1, (f"(-{text})%{m}",)) if " " not in text and m > 1 else ((0, ()) if m == 1 else None)


_MOD_NEG = re.compile(r"^\(-(.+)\)%(\d+)$")


def parse_mod_neg(d: Dim | None) -> tuple[Dim, int] | None:
    """A ``mod_neg`` entry read back as ``(n, m)``; None for anything else."""
    if d is None or d[0] != 1 or len(d[1]) != 1:
        return None
    got = _MOD_NEG.match(d[1][0])
    text = got.group(1) if got else ""
    flags = _outside(text)
    if flags is None:
        return None
    if text.startswith("(") and not any(flags):   # one group around the whole size (mod_neg's)
        text = text[1:-1]
    n = to_dim(text) if got else None
    return (n, int(got.group(2))) if n is not None else None


def _int_div(a: Dim, b: Dim) -> Dim | None:
    """An integer Div of shape entries: the exact quotient, else a size divided by a positive int,
    rounded down (ONNX truncates, the same for sizes): ``n_frames // squeeze_factor``."""
    q = div(a, b)
    if q is not None or b[1] or b[0] <= 0:
        return q
    return floor_div(a, b[0]) if a[1] and a[0] > 0 else None


def mul(a: Dim, b: Dim) -> Dim:
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def div(a: Dim, b: Dim) -> Dim | None:
    if b[0] == 0 or a[0] % b[0]:
        return None
    atoms = list(a[1])
    for s in b[1]:
        if s not in atoms:
            return None
        atoms.remove(s)
    return a[0] // b[0], tuple(atoms)



def value_dims(v: ir.Value) -> list[Dim | None] | None:
    if v is None or v.shape is None:
        return None
    out = []
    for d in v.shape.dims:
        if isinstance(d, int):
            out.append((d, ()))
        elif getattr(d, "value", None) is not None:
            out.append(to_dim(str(d.value)))
        else:
            out.append(None)
    return out


def shape_vector(v: ir.Value | None, alias: dict[str, Dim], depth: int = 0, sums: bool = False):
    """(entries, is_scalar) of a small int tensor; an entry is a Dim or None (unknown). None when
    even the number of entries is unknown. ``sums``: read Add/Sub of entries as sums
    (passes/_dim_sums.py: a Range's length) and Neg as a negated entry (a Slice's start); off, they are unknown, so a view's or an Expand's
    entry falls back to the inferred dim rather than meet a differently spelled equal one."""
    if v is None or depth > 16:
        return None
    t = constant_tensor(v)
    if t is not None:
        if not t.dtype.is_integer() or t.size > 16:
            return None
        return [(int(x), ()) for x in t.numpy().reshape(-1)], len(t.shape) == 0
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    op, ins = node.op_type, list(node.inputs)
    # entries of a tensor of several axes are read flat, so only the moves (_moved_entries) take them
    any_rank = (lambda i: shape_vector(ins[i], alias, depth + 1, sums) if i < len(ins) else None)
    sub = (lambda i: any_rank(i) if i < len(ins) and not _multi_axis(ins[i]) else None)
    sub_any = (lambda w: shape_vector(w, alias, depth + 1, sums) if w is not None and not _multi_axis(w) else None)
    if op == "Shape":
        dims = value_dims(ins[0])
        if dims is None:
            return None
        start, end = _attr(node, "start", None), _attr(node, "end", None)
        if not all(x is None or isinstance(x, int) for x in (start, end)):
            return None
        names = [str(d.value) if not isinstance(d, int) and getattr(d, "value", None) is not None else None
                 for d in ins[0].shape.dims]
        dims = [alias.get(n, d) if n is not None else d for n, d in zip(names, dims)]
        return dims[slice(start, end)], False
    if op in ("Identity", "Cast"):
        if op == "Cast" and not ir.DataType(_attr(node, "to", 1)).is_integer():
            return None
        return any_rank(0) if depth > 0 else sub(0)
    if op in ("Squeeze", "Unsqueeze", "Reshape"):
        inner = sub(0)
        if inner is None:
            return _moved_entries(node, v, any_rank) if _multi_axis(ins[0]) and (depth > 0 or _rank_at_most_1(v)) else None
        entries, scalar = inner
        if op == "Squeeze" and len(entries) == 1 and not scalar:
            return entries, True
        if op == "Unsqueeze" and scalar:
            return entries, False
        if op == "Reshape" and len(entries) == 1:
            return entries, False
        return _moved_entries(node, v, any_rank) if depth > 0 or _rank_at_most_1(v) else None
    if op == "ConstantOfShape" and len(ins) == 1:
        # a filled vector of known length (TorchScript's expand guard writes its -1s as ConstantOfShape * -1)
        shape, fill = sub(0), _attr(node, "value", None)
        if shape is None or len(shape[0]) != 1 or shape[0][0] is None or shape[0][0][1] \
                or not 0 <= shape[0][0][0] <= 16:
            return None
        if fill is None or not hasattr(fill, "numpy") or not fill.dtype.is_integer() or fill.size != 1:
            return None   # float zeros (no value) or a float fill: no int entries
        return [(int(fill.numpy().reshape(-1)[0]), ())] * shape[0][0][0], False
    if op == "Where" and len(ins) == 3:
        # a condition whose entries are known picks entry by entry (TorchScript's expand(b, -1, -1) guard
        # once its Equal reads as [0, 1, 1]: the -1s become the ones)
        picks = broadcast_entries(sub(0), sub(1))
        other = broadcast_entries(sub(0), sub(2))
        if picks is not None and other is not None and all(c is not None and not c[1] and c[0] in (0, 1)
                                                           for c in picks[0]):
            return [a if c[0] else b for c, a, b in zip(picks[0], picks[1], other[1])], picks[2] and other[2]
        # torch's expand(-1) as TorchScript writes it: Where(Equal(v, -1), ones, v) is v when no
        # entry of v can be -1 (sizes read from shapes are never negative)
        cond = ins[0].producer() if ins[0] is not None else None
        if cond is None or cond.op_type != "Equal" or cond.inputs[0] is not ins[2]:
            return None
        inner, neg = sub(2), sub_any(cond.inputs[1])
        if inner is None or neg is None or not all(e is not None and not e[1] and e[0] < 0 for e in neg[0]):
            return None
        if any(e is None or e[0] < 0 for e in inner[0]):
            return None
        return inner
    if op == "Concat" and _attr(node, "axis") in (0, -1):
        out = []
        for i in range(len(ins)):
            inner = sub(i)
            n = _static(ins[i])
            if inner is None and n is not None and len(n) == 1 and n[0] <= 16:
                inner = [None] * n[0], False   # a part of known length, its values unread
            if inner is None or inner[1]:
                return None
            out += inner[0]
        return out, False
    if op == "Gather" and _attr(node, "axis", 0) == 0 and len(ins) == 2:
        inner, idx = sub(0), constant_tensor(ins[1])
        if inner is None or inner[1] or idx is None or idx.size > 16:
            return None
        n = len(inner[0])
        picked = [int(k) for k in idx.numpy().reshape(-1)]
        if not all(-n <= k < n for k in picked):
            return None
        return [inner[0][k] for k in picked], len(idx.shape) == 0
    if op == "Slice" and len(ins) >= 3:
        inner = sub(0)
        starts, ends = constant_tensor(ins[1]), constant_tensor(ins[2])
        axes = constant_tensor(ins[3]) if len(ins) > 3 and ins[3] is not None else None
        steps = constant_tensor(ins[4]) if len(ins) > 4 and ins[4] is not None else None
        if inner is None or inner[1] or starts is None or ends is None or starts.size != 1 or \
                (axes is not None and int(axes.numpy().reshape(-1)[0]) not in (0, -1)) or \
                (steps is not None and int(steps.numpy().reshape(-1)[0]) != 1):
            return _moved_entries(node, v, any_rank) if depth > 0 or _rank_at_most_1(v) else None
        n = len(inner[0])
        s, e = (max(min(int(x.numpy().reshape(-1)[0]), n), -n) for x in (starts, ends))
        return inner[0][s:e], False
    if op == "Div" and len(ins) == 2 and (got := _plus_const(ins[0])) is not None \
            and (k := _positive_int(ins[1])) is not None:
        # (n + c) // s of a size, c >= 0 (Swin's merged grid (W + 1) // 2): never negative, so ONNX's
        # truncation is the floor, named as floor_div names a computed length
        inner = sub_any(got[0])
        if inner is None or len(inner[0]) != 1:
            return None
        e = inner[0][0]
        return [None if e is None or e[0] < 0 else floor_div(e, k, got[1])], inner[1]
    if op in ("Mul", "Div") and len(ins) == 2:
        pair = broadcast_entries(sub(0), sub(1))
        if pair is None:
            return None
        ea, eb, static = pair
        f = mul if op == "Mul" else _int_div
        return [None if x is None or y is None else f(x, y) for x, y in zip(ea, eb)], static
    if op == "ReduceProd" and len([i for i in ins if i is not None]) == 1 and _attr(node, "noop_with_empty_axes", 0) == 0 \
            and _attr(node, "axes", None) is None:
        # the number of elements of merged axes: tf2onnx's Einsum writes ReduceProd(Gather(Shape(x), [0, 1]))
        inner = sub(0)
        if inner is None or inner[1] or not inner[0] or any(e is None for e in inner[0]):
            return None
        prod = inner[0][0]
        for e in inner[0][1:]:
            prod = mul(prod, e)
        return [prod], _attr(node, "keepdims", 1) == 0
    if op in ("Max", "Min") and len(ins) == 2:   # of two equal entries: that entry (else unknown)
        pair = broadcast_entries(sub(0), sub(1))
        if pair is None:
            return None
        ea, eb, static = pair
        return [x if x is not None and x == y else None for x, y in zip(ea, eb)], static
    if op == "Equal" and len(ins) == 2:
        # tf2onnx's tf.slice end: begin + size + INT32_MAX * (size == -1); a size is never negative
        pair = broadcast_entries(sub(0), sub(1))
        if pair is None:
            return None
        ea, eb, static = pair
        return [_equal_entry(x, y) for x, y in zip(ea, eb)], static
    if op == "Mod" and len(ins) == 2 and _attr(node, "fmod", 0) == 0:
        # the pad to a multiple, (-n) % m (torch's -x.shape[d] % block), or (c - n % m) % m with c a
        # multiple of m (Swin's window padding (w - W % w) % w), which is the same number for every
        # integer n (Mod with fmod 0 takes the divisor's sign): the atom pad_to_multiple reads
        k = _positive_int(ins[1])
        n = _negated_mod_of(ins[0], k) if k is not None else None
        if n is None:
            return None
        inner = shape_vector(n, alias, depth + 1)
        if inner is None or (depth == 0 and _multi_axis(n)):
            return None
        return [None if e is None else mod_neg(e, k) for e in inner[0]], inner[1]
    if sums and op == "Neg":   # a Slice's start -S (TorchScript's x[:, -S:]); never read as a size
        inner = sub(0)
        return None if inner is None else ([None if e is None else (-e[0], e[1]) for e in inner[0]], inner[1])
    if sums and op in ("Add", "Sub") and len(ins) == 2:   # P + S, (P + S) - P
        from onnx_fuse.passes._dim_sums import dim_diff, dim_sum

        a, b = sub(0), sub(1)
        if a is None or b is None or len(a[0]) != len(b[0]):
            return None
        f = (lambda x, y: dim_sum([x, y])) if op == "Add" else dim_diff
        return [None if x is None or y is None else f(x, y) for x, y in zip(a[0], b[0])], a[1] and b[1]
    if op in ("Add", "Sub") and len(ins) == 2:   # of plain ints: one spelling (F.pad's 8 - len(pads) zeros)
        pair = broadcast_entries(sub(0), sub(1))
        if pair is None:
            return None
        ea, eb, static = pair
        f = (lambda x, y: x + y) if op == "Add" else (lambda x, y: x - y)
        return [None if x is None or y is None or x[1] or y[1] else (f(x[0], y[0]), ())
                for x, y in zip(ea, eb)], static
    if op in ("Transpose", "Flatten") and (depth > 0 or _rank_at_most_1(v)):
        return _moved_entries(node, v, any_rank)
    return None


def _int_scalar(v: ir.Value | None) -> int | None:
    """A one-element int constant's value (``const_ints``)."""
    got = const_ints(v, 1) if v is not None else None
    return got[0] if got is not None and len(got) == 1 else None


def _positive_int(v: ir.Value | None) -> int | None:
    """A one-element positive int constant's value."""
    k = _int_scalar(v)
    return k if k is not None and k > 0 else None


def _plus_const(v: ir.Value | None) -> tuple[ir.Value, int] | None:
    """``(n, c)`` where ``v`` is ``Add(n, c)`` (either order) with c a one-element int constant >= 0."""
    node = v.producer() if v is not None else None
    if node is None or node.op_type != "Add" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    for a, b in (node.inputs, node.inputs[::-1]):
        c = _int_scalar(b)
        if a is not None and c is not None and c >= 0 and constant_tensor(a) is None:
            return a, c
    return None


def _negated_mod_of(v: ir.Value | None, m: int) -> ir.Value | None:
    """``n`` where ``v`` is ``Neg(n)`` or ``Sub(c, Mod(n, m))`` with c a constant multiple of m (fmod 0),
    so that ``v % m`` is ``(-n) % m``; else None."""
    node = v.producer() if v is not None else None
    if node is None or node.domain not in ("", "ai.onnx") or len(node.inputs) < 1:
        return None
    if node.op_type == "Neg":
        return node.inputs[0]
    if node.op_type != "Sub" or len(node.inputs) != 2:
        return None
    c = _int_scalar(node.inputs[0])
    inner = node.inputs[1].producer() if node.inputs[1] is not None else None
    if c is None or c % m or inner is None or inner.op_type != "Mod" or inner.domain not in ("", "ai.onnx") \
            or len(inner.inputs) != 2 or _attr(inner, "fmod", 0) != 0 or _positive_int(inner.inputs[1]) != m:
        return None
    return inner.inputs[0]


def _rank_at_most_1(v: ir.Value) -> bool:
    return v.shape is not None and len(v.shape) <= 1


def _multi_axis(v: ir.Value | None) -> bool:
    return v is not None and v.shape is not None and len(v.shape) > 1


def _static(v: ir.Value | None) -> tuple[int, ...] | None:
    if v is None or v.shape is None or not all(isinstance(d, int) for d in v.shape):
        return None
    return tuple(int(d) for d in v.shape)


def _equal_entry(x: Dim | None, y: Dim | None) -> Dim | None:
    """Equal of two entries as 1 / 0 where known: two ints, or a size (a positive multiple of
    dim names, never negative) against a negative int."""
    if x is None or y is None:
        return None
    if not x[1] and not y[1]:
        return int(x[0] == y[0]), ()
    for a, b in ((x, y), (y, x)):
        if a[1] and a[0] > 0 and not b[1] and b[0] < 0:
            return 0, ()
    return None


def same_dim(a, b) -> bool:
    """Two dims (ints or ir.SymbolicDims) that are provably one length: equal ints, or one named symbol."""
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return a is not None and b is not None and getattr(a, "value", None) is not None \
        and a.value == getattr(b, "value", None)


def slice_range(start: int, end: int, step: int, d: int) -> range:
    """ONNX Slice's indices on an axis of length d (its clamping, not Python's)."""
    start, end = start + d if start < 0 else start, end + d if end < 0 else end
    if step > 0:
        return range(min(max(start, 0), d), min(max(end, 0), d), step)
    return range(min(max(start, 0), d - 1), min(max(end, -1), d - 1), step)


def _moved_entries(node: ir.Node, v: ir.Value, sub) -> tuple[list, bool] | None:
    """Entries of a small int tensor that ``node`` moved (Reshape, Flatten, Squeeze, Unsqueeze,
    Transpose, or a Slice with constant bounds) between static shapes of at most 16 elements: the
    op run on the entries' indices says where each came from, so a vector read in part (unknown
    entries None) keeps its known entries through TorchScript's F.pad reversal of the pads (Reshape
    [-1, 2], Slice step -1, Transpose, Reshape [-1]). Shapes of more than one axis are read only
    inside such a chain (shape_vector's callers get vectors)."""
    ins = list(node.inputs)
    shape_in, shape_out = _static(ins[0] if ins else None), _static(v)
    if shape_in is None or shape_out is None or int(np.prod(shape_in)) > 16:
        return None
    inner = sub(0)
    if inner is None or len(inner[0]) != int(np.prod(shape_in)):
        return None
    idx = np.arange(len(inner[0])).reshape(shape_in)
    op = node.op_type
    if op == "Transpose":
        perm = _attr(node, "perm", None)
        if perm is not None and sorted(perm) != list(range(len(shape_in))):
            return None
        idx = idx.transpose(perm)
    elif op == "Slice":
        bounds = [constant_tensor(ins[k]) if k < len(ins) and ins[k] is not None else None for k in range(1, 5)]
        starts, ends, axes, steps = ([int(x) for x in t.numpy().reshape(-1)] if t is not None else None for t in bounds)
        if starts is None or ends is None or len(starts) != len(ends) or (len(ins) > 3 and ins[3] is not None
                                                                       and axes is None) or \
                (len(ins) > 4 and ins[4] is not None and steps is None):
            return None
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        if len(axes) != len(starts) or len(steps) != len(starts) or 0 in steps:
            return None
        for a, s0, e0, st in zip(axes, starts, ends, steps):
            if not -len(shape_in) <= a < len(shape_in):
                return None
            idx = np.take(idx, list(slice_range(s0, e0, st, idx.shape[a])), axis=a)
    if idx.size != int(np.prod(shape_out)):
        return None   # an inferred shape that disagrees with the op: read nothing
    return [inner[0][k] for k in idx.reshape(-1)], len(shape_out) == 0


def reshape_out_dims(r, in_dims=None) -> list[Dim] | None:
    """The dims the Reshape producing ``r`` provably outputs when its input has ``in_dims``
    (default: the input's inferred shape); None when some dim is not provable."""
    if not isinstance(r, ir.Value):
        return None
    node = r.producer()
    if node is None or node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    x, shp = node.inputs[0], node.inputs[1]
    if in_dims is None:
        ins = value_dims(x)
    else:
        ins = [to_dim(d) for d in in_dims]
        if x is not None and x.shape is not None and len(x.shape) != len(ins):
            return None
    if ins is None or any(d is None for d in ins):
        return None
    alias: dict[str, Dim] = {}
    if x is not None and x.shape is not None:
        for d, true in zip(x.shape.dims, ins):
            if not isinstance(d, int) and getattr(d, "value", None) is not None:
                alias.setdefault(str(d.value), true)
    got = shape_vector(shp, alias)
    if got is None or got[1]:
        return None
    allowzero = _attr(node, "allowzero", 0)
    outs: list[Dim | None] = []
    for i, e in enumerate(got[0]):
        if e is not None and e == (0, ()) and allowzero == 0:
            if i >= len(ins):
                return None
            e = ins[i]
        elif e is not None and (e == (-1, ()) or e[0] < 0):
            if e != (-1, ()):
                return None
            e = None
        outs.append(e)
    if outs.count(None) > 1:
        return None
    if None in outs:  # the one -1 (or unreadable entry) is what the element count leaves
        total: Dim = (1, ())
        for d in ins:
            total = mul(total, d)
        rest: Dim = (1, ())
        for d in outs:
            if d is not None:
                rest = mul(rest, d)
        solved = div(total, rest)
        if solved is None:
            return None
        outs[outs.index(None)] = solved
    return outs
