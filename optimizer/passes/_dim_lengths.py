"""Lengths computed from other lengths, as Dims: windowed ops' outputs and Slice cuts (passes/_dim_source.py).

``window_length`` says how a Conv / pool / ConvTranspose output length follows from the input's (for
``floor_div`` to name); ``cut_length`` how many entries a Slice keeps, from its bounds and the axis's
size where that is provable (``minus``, ``at_least``; a lower bound the graph's Convs give a size counts:
passes/_dim_bounds.py). Both as ONNX Runtime computes them, checked
against it at every input length (tests/passes/test_window_lengths.py). No graph walking here: the
callers read the sizes (``known_dim``).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._dim_bounds import lower
from onnx_fuse.passes._dim_products import Dim, floor_div, floor_plus, mul, parse_floor, parse_mod_neg, to_dim
from onnx_fuse.passes._dim_sums import dim_diff, dim_sum
from onnx_fuse.passes._shape_values import _attr, invented_name


def clean(d: Dim | None) -> bool:
    """A Dim that states a fact: known, and no name onnx's inference invented in it."""
    return d is not None and not any(invented_name(a) for a in d[1])


def _ints_attr(node: ir.Node, name: str, n: int, default: int) -> list[int] | None:
    got = _attr(node, name, None)
    got = [default] * n if got is None or (isinstance(got, (list, tuple)) and not got) else got
    return [int(e) for e in got] if isinstance(got, (list, tuple)) and all(isinstance(e, int) for e in got) else None


def _window_attrs(node: ir.Node, n: int) -> tuple[list[int], list[int], list[int], list[int], str] | None:
    """(kernel, strides, dilations, pads, auto_pad) of a Conv / pool / ConvTranspose over ``n`` spatial
    axes (a Conv's kernel from its weight's shape where the attribute is absent); None where any is not
    read as ints of its length."""
    kernel = _attr(node, "kernel_shape", None)
    w = node.inputs[1].shape if node.op_type in ("Conv", "ConvTranspose") and len(node.inputs) > 1 \
        and node.inputs[1] is not None else None
    if kernel is None and w is not None and len(w) == n + 2:
        kernel = list(w.dims[2:])
    strides, dilations = _ints_attr(node, "strides", n, 1), _ints_attr(node, "dilations", n, 1)
    pads = _ints_attr(node, "pads", 2 * n, 0)
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if not (isinstance(kernel, (list, tuple)) and len(kernel) == n and all(isinstance(e, int) for e in kernel)) \
            or strides is None or dilations is None or pads is None or len(strides) != n or len(dilations) != n \
            or len(pads) != 2 * n:
        return None
    return [int(e) for e in kernel], strides, dilations, pads, auto_pad


def window_length(node: ir.Node, n: int, k: int) -> tuple[int, int, int] | int | None:
    """Spatial axis ``k`` of ``n``: the output length as ``(s, c, scale)``, floor((scale * L + c) /
    s) of the input length L, or an int (an explicit output_shape); None where not read. As ONNX
    Runtime computes it (checked against it for every case here):
    - Conv / pool: floor((L + pads - span) / s) + 1, span = dilation * (kernel - 1) + 1; SAME
      padding ceil(L / s);
    - pool with ceil_mode: the windows that start inside the input or its left padding,
      ceil((L + pad_begin + min(pad_end + s - span, 0)) / s) (the spec drops a last window that
      would start in the right padding, so the plain ceil formula holds only where pad_end + s <= span);
    - ConvTranspose: s * (L - 1) + output_padding + span - pads (SAME: s * L, pads clamped at 0), or
      its output_shape.
    Where the padded input is shorter than one window, ONNX Runtime truncates the negative quotient
    (one window) where these names floor it (none): inputs torch refuses, outside what the names claim."""
    op = node.op_type
    got = _window_attrs(node, n)
    ceil = _attr(node, "ceil_mode", 0)
    if got is None or ceil not in (0, 1) or (ceil and got[4] != "NOTSET"):
        return None
    kernel, strides, dilations, pads, auto_pad = got
    s, span = strides[k], dilations[k] * (kernel[k] - 1) + 1
    if s <= 0:
        return None
    if op == "ConvTranspose":
        out_shape, out_pad = _ints_attr(node, "output_shape", 0, 0), _ints_attr(node, "output_padding", n, 0)
        if out_shape:
            return out_shape[k] if len(out_shape) == n else None
        if out_pad is None or len(out_pad) != n:
            return None
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):   # s * L, less where the pads would be negative
            return 1, min(out_pad[k] + span - s, 0), s
        if auto_pad not in ("NOTSET", "VALID"):
            return None
        total = (pads[k] + pads[k + n]) if auto_pad == "NOTSET" else 0
        return 1, out_pad[k] + span - total - s, s
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX Runtime pads a dilated pool for the undilated kernel: ceil(L / s) only without dilation
        return (s, s - 1, 1) if op == "Conv" or dilations[k] == 1 else None
    if auto_pad == "VALID":
        return s, s - span, 1
    if auto_pad != "NOTSET":
        return None
    if ceil:
        return s, pads[k] + min(pads[k + n] + s - span, 0) + s - 1, 1
    return s, pads[k] + pads[k + n] - span + s, 1


def conv_least_input(node: ir.Node, n: int, k: int) -> int | None:
    """The least length spatial axis ``k`` of a Conv's input may have: ONNX Runtime refuses a padded
    input shorter than the dilated kernel (explicit pads or VALID; passes/_dim_bounds.py). None for
    SAME padding or attributes not read."""
    got = _window_attrs(node, n) if node.op_type == "Conv" else None
    if got is None or got[4] not in ("NOTSET", "VALID") or not 0 <= k < n:
        return None
    kernel, _, dilations, pads, auto_pad = got
    span = dilations[k] * (kernel[k] - 1) + 1
    return span - (pads[k] + pads[k + n] if auto_pad == "NOTSET" else 0)


INT64_MAX = 2 ** 63 - 1
#: A constant Slice end at or above this reads as the end of the axis (ONNX clamps an end to the
#: axis's length). Exporters write "to the end" as INT64_MAX (torch), INT32_MAX, or 10**9 (tf2onnx's
#: strided_slice end_mask). Exact for every axis shorter than 10**9 entries: an assumption, not a
#: proof (a symbolic dim has no upper bound), but one no model here comes near (a sequence of a
#: billion positions; a 2**30 bound would miss tf2onnx's 10**9).
TO_END = 10 ** 9
#: cut_length's answer for a cut that keeps the whole axis
WHOLE = object()


def cut_length(start: Dim, end: Dim, n: Dim | None):
    """How many of ``n`` entries ``[start:end]`` keeps (ONNX clamps both bounds into [0, n]; a
    negative bound counts from the end), where provable from sizes alone: ``WHOLE``, a Dim, or None.
    An end provably >= n (n itself read from a shape) or a constant >= ``TO_END`` is the end of the axis.
    - ``[-m:]``: min(n, m): the whole axis where m >= n, m where n >= m (attention_mask[:, -S:]) and
      m >= 1 (at m = 0 the bound is the axis's start and the cut all of it: ``_from_end``); ``[-m:-k]``: m - k where
      n >= m >= k >= 1;
    - ``[s:]``: n - s where n >= s (the patch grid after a class token, ``x[:, 1:]``);
    - ``[s:e]``: e - s where n >= e >= s (a causal conv's ``(S+3)//1`` frames cut to ``[:S]``);
    - ``[s:-k]``: n - k - s where n >= k + s, k >= 1; ``[:-k]`` of a computed length ``(L+c)//s``:
      ``(L+c-k*s)//s`` where c >= k*s, so that n >= k (``floor_plus``: SEW-D's same-pad cut, which
      then meets its pool's length)."""
    if n is None or not clean(n) or not clean(start) or not clean(end):
        return None
    to_end = (not end[1] and end[0] >= TO_END) or at_least(end, n)
    if start[0] < 0:
        m = (-start[0], start[1])
        if to_end:
            return WHOLE if at_least(m, n) else m if at_least(n, m) and _from_end(m, n) else None
        k = (-end[0], end[1])
        return minus(m, k) if end[0] < 0 and at_least(n, m) and at_least(k, _ONE) else None
    if to_end:
        return WHOLE if start == (0, ()) else minus(n, start)
    if end[0] < 0:
        if start == (0, ()) and not end[1] and n[0] == 1 and len(n[1]) == 1 \
                and (folded := floor_plus(n[1][0], end[0])) is not None:
            # floor((L + c') / s) with c' >= 0 is never negative (L a size), so n >= k: exact; so is
            # a bound n >= k (_dim_bounds)
            return (1, (folded,)) if parse_floor(folded)[1] >= 0 or lower(n) >= -end[0] else None
        k = (-end[0], end[1])
        rest = minus(n, k) if at_least(k, _ONE) else None
        return minus(rest, start) if rest is not None else None
    return minus(end, start) if at_least(n, end) else None


#: a bound -m counts from the end only for m >= 1: -0 is the axis's start (x[:, -S:] at S = 0 is all of x)
_ONE = (1, ())


def _from_end(m: Dim, n: Dim) -> bool:
    """Whether ``[-m:]`` of ``n`` (n >= m) keeps m entries for every m: m >= 1, or n - m is a multiple
    of m's own product (``[-S:]`` of S + S), so that m = 0, where the cut keeps all n, has n = 0 too."""
    rest = minus(n, m)
    return at_least(m, _ONE) or (rest is not None and bool(rest[1]) and rest[1] == m[1])


def minus(a: Dim | None, b: Dim | None) -> Dim | None:
    """The size ``a - b`` where ``a`` is provably >= ``b`` (``dim_diff``: an int >= 0 or a sum of
    sizes), a stride-1 window's length ``(L+c)//1`` read as the sum L + c; else None."""
    if a is None or b is None or not clean(a) or not clean(b):
        return None
    stepped = _floor_minus(a, b)
    if stepped is not None:
        return stepped
    got = parse_floor(a[1][0]) if a[0] == 1 and len(a[1]) == 1 else None
    base = to_dim(got[0]) if got is not None and got[0] and got[1] >= 0 and got[2] == 1 else None
    if clean(base) and base[1]:
        a = dim_sum([base, (got[1], ())]) or a
    return dim_diff(a, b) or _less_bounded(a, b)


def _less_bounded(a: Dim, b: Dim) -> Dim | None:
    """``a - k`` for an int k where a bound proves ``a >= k`` (passes/_dim_bounds.py): a floor atom
    ``(L+c)//s`` (or ``m`` times one, m dividing k) less k is ``(L+c-k*s)//s`` (times m), a symbol L
    less k the stride-1 window ``(L-k)//1``; None for other spellings."""
    k = b[0]
    if b[1] or k < 0 or lower(a) < k:
        return None
    coef, atoms = a
    if len(atoms) != 1 or coef <= 0 or k % coef:
        return None
    if parse_floor(atoms[0]) is not None:
        folded = floor_plus(atoms[0], -(k // coef))
        return mul((coef, ()), (1, (folded,))) if folded is not None else None
    return floor_div((1, atoms), 1, -k) if coef == 1 and to_dim(atoms[0]) == a else None


def _floor_minus(a: Dim, b: Dim) -> Dim | None:
    """``a - b`` for a floor atom ``a = (L+c)//s`` (passes/_dim_products.py ``floor_div``) and an int
    ``b = k`` or another atom ``(L+c2)//s``: floor((L + c) / s) - k is (L+c-k*s)//s, a size where
    c >= k*s (L >= 0); the two atoms differ by (c - c2) / s where s divides it and c >= c2 (LongT5's
    blocks: ``(S+8)//3``, the block count padded by one each side, cut at ``(S+5)//3``)."""
    fa = parse_floor(a[1][0]) if a[0] == 1 and len(a[1]) == 1 else None
    if fa is None:
        return None
    text, c, s = fa
    if not b[1]:
        if b[0] < 0 or c < b[0] * s:
            return None
        return (1, (folded,)) if (folded := floor_plus(a[1][0], -b[0])) is not None else None
    fb = parse_floor(b[1][0]) if b[0] == 1 and len(b[1]) == 1 else None
    if fb is None or fb[0] != text or fb[2] != s or c < fb[1] or (c - fb[1]) % s:
        return None
    return (c - fb[1]) // s, ()


def at_least(n: Dim | None, m: Dim | None) -> bool:
    """Whether size ``n`` is provably >= size ``m`` (``minus``, or an int m under n's bound)."""
    return minus(n, m) is not None or (clean(n) and m is not None and not m[1] and lower(n) >= m[0])


def padded_length(n: Dim | None, begin: Dim | None, end: Dim | None) -> Dim | None:
    """An axis of ``n`` entries after ``begin`` and ``end`` more (a Pad's two pads, sizes): their sum,
    where a pad ``(-n) % m`` of the axis's own length (``mod_neg``: torch's pad to a multiple of a
    block, LongT5's ``_pad_to_multiple``) makes n up to ``m * ceil(n / m)``, named ``m*(n+m-1)//m``
    so that the blocks view's ``// m`` gives the block count ``(n+m-1)//m``. None where a pad is
    unknown or not a size (a negative pad crops)."""
    if n is None or begin is None or end is None or not all(clean(d) for d in (n, begin, end)):
        return None
    for pad, other in ((end, begin), (begin, end)):
        got = parse_mod_neg(pad)
        if got is not None and got[0] == n and parse_mod_neg(other) is None:
            ceil = floor_div(n, got[1], got[1] - 1)
            return dim_sum([other, mul((got[1], ()), ceil)]) if ceil is not None else None
    return dim_sum([n, begin, end])
