"""The safe expression language of `where: check:` entries and rewrite attributes.

Text is parsed with Python's ``ast`` and every node is checked against a whitelist at load time;
evaluation is our own small interpreter over that tree (never ``eval``). Values are Python
numbers, strings, lists, NumPy arrays, and graph values (``ir.Value``) that only the whitelisted
functions (``rank``, ``shape``, ``value``...) can look into.

Cases handled: arithmetic, comparisons (chained; symbolic dims compare as strings; an unknown dim
makes the comparison unprovable), boolean logic, conditional expressions, indexing/slicing, and
calls of the functions in ``FUNCTIONS``. Guards: exponent and repetition sizes are bounded so a
rule cannot make the optimizer allocate gigabytes.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import ml_dtypes
import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite import _dims
from onnx_fuse.rewrite._head_repeat import head_repeat as _head_repeat, head_source as _head_source_of
from onnx_fuse.rewrite._half_columns import half_columns as _half_columns
from onnx_fuse.rewrite._half_columns import half_readers as _half_readers
from onnx_fuse.rewrite._paired import paired_columns as _paired_columns
from onnx_fuse.rewrite._rebuild_cost import dead_cone as _dead_cone, net_nodes as _net_nodes
from onnx_fuse.rewrite._rotation_tables import rotation_pair as _rotation_pair
from onnx_fuse.rewrite._rotation_tables import rotation_scale as _rotation_scale_of
from onnx_fuse.rewrite._rotation_tables import table_layout as _table_layout


class ExprSyntaxError(ValueError):
    """The text is not a valid expression of the language (reported at load)."""


class EvalFailure(Exception):
    """Evaluation could not prove the expression: unknown shape, not a constant, unbound name."""


class UnknownDim:
    """A dimension with no static size and no symbol: equal to nothing, unequal to nothing."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "?"


UNKNOWN_DIM = UnknownDim()

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd,
            ast.Not, ast.Compare, ast.IfExp, ast.Call, ast.Name, ast.Load, ast.Constant, ast.List,
            ast.Tuple, ast.Subscript, ast.Slice, ast.keyword, *_BINOPS, *_CMPOPS)

_MAX_REPEAT = 1 << 16
_MAX_EXPONENT = 256


# --------------------------------------------------------------------------------------------
# Functions callable from expressions. Each takes evaluated arguments; ``ctx`` gives access to
# graph facts (the constant value of a graph value, whether a pattern output is consumed...).


def _as_value(v: Any, fn: str) -> ir.Value:
    if not isinstance(v, ir.Value):
        raise EvalFailure(f"{fn}() needs a graph value, got {type(v).__name__}")
    return v


def _shape(ctx, v) -> list:
    v = _as_value(v, "shape")
    if v.shape is None:
        raise EvalFailure(f"shape of {v.name!r} is unknown")
    dims = []
    for d in v.shape.dims:
        if isinstance(d, int):
            dims.append(d)
        elif getattr(d, "value", None) is not None:
            dims.append(_sum_spelled(d.value))
        else:
            dims.append(UNKNOWN_DIM)
    return dims


def _sum_spelled(name):
    """A dim named as a sum in its one canonical spelling (passes/_dim_sums.py): exporters and onnx's
    data propagation name (4 + s) + p "s + p + 4", the dims reading "p + s + 4"; checks compare dims as
    text, so they see every sum spelled the same way (has_dims compares sums so too: rewrite/_dims.py)."""
    if not isinstance(name, str) or " + " not in name:
        return name
    from onnx_fuse.passes._dim_products import to_dim
    from onnx_fuse.passes._dim_sums import dim_sum

    got = dim_sum([to_dim(name)])
    return got[1][0] if got is not None and got[0] == 1 and len(got[1]) == 1 else name


def _rank(ctx, v) -> int:
    v = _as_value(v, "rank")
    if v.shape is None:
        raise EvalFailure(f"rank of {v.name!r} is unknown")
    return len(v.shape)


def _dtype(ctx, v) -> str:
    v = _as_value(v, "dtype")
    if v.dtype is None:
        raise EvalFailure(f"dtype of {v.name!r} is unknown")
    return dtype_name(v.dtype)


def _elem_type(ctx, v) -> int:
    v = _as_value(v, "elem_type")
    if v.dtype is None:
        raise EvalFailure(f"dtype of {v.name!r} is unknown")
    return int(v.dtype)


def _value(ctx, v) -> np.ndarray:
    v = _as_value(v, "value")
    arr = ctx.constant(v)
    if arr is None:
        raise EvalFailure(f"{v.name!r} is not a constant")
    return arr


def _is_const(ctx, v) -> bool:
    return ctx.constant(_as_value(v, "is_const")) is not None


def _scalarize(x, fn: str):
    if isinstance(x, np.ndarray):
        if x.size != 1:
            raise EvalFailure(f"{fn}() of an array with {x.size} elements")
        return x.reshape(-1)[0].item()
    if isinstance(x, np.generic):
        return x.item()
    return x


def _float(ctx, x) -> float:
    x = _scalarize(x, "float")
    if isinstance(x, str):
        raise EvalFailure("float() of a string")
    return float(x)


def _int(ctx, x) -> int:
    x = _scalarize(x, "int")
    if isinstance(x, (str, UnknownDim)):
        raise EvalFailure(f"int() of a non-number {x!r}")
    return int(x)


def _array(ctx, x, dtype: str = "float") -> np.ndarray:
    try:
        np_dtype = ir.DataType[name_to_dtype(dtype).name].numpy()
    except KeyError as exc:
        raise EvalFailure(f"unknown dtype {dtype!r}") from exc
    arr = np.asarray(x, dtype=np_dtype)
    if arr.size > 1 << 22:
        raise EvalFailure("array too large")
    return arr


def is_float_dtype(dtype: np.dtype) -> bool:
    """A float NumPy dtype, ml_dtypes' too (bfloat16 and float8 are kind 'V' to NumPy)."""
    if dtype.kind == "f":
        return True
    try:
        return dtype.kind == "V" and ir.DataType.from_numpy(dtype).is_floating_point()
    except (TypeError, ValueError):
        return False


def is_numeric_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "iub" or is_float_dtype(dtype)


def _lowest(ctx, dtype: str) -> float:
    """The lowest finite value of a float dtype name: -65504.0 for float16, -3.39e38 for bfloat16."""
    try:
        np_dtype = ir.DataType[name_to_dtype(dtype).name].numpy()
    except KeyError as exc:
        raise EvalFailure(f"unknown dtype {dtype!r}") from exc
    if not is_float_dtype(np_dtype):
        raise EvalFailure(f"lowest() of a non-float dtype {dtype!r}")
    return float(ml_dtypes.finfo(np_dtype).min)


def _mask_floor(ctx, dtype: str) -> float:
    """The finite floor keep-masked-rows raises an attention bias of this dtype to, so ORT's
    Attention-23 does not read a masked entry as -inf: precision.FP16_MASK_FLOOR for float16 (the
    one constant the precision pass uses too), -1e30 for every other float dtype."""
    from onnx_fuse.passes.precision import FP16_MASK_FLOOR

    _lowest(ctx, dtype)   # fails on an unknown or non-float dtype
    return FP16_MASK_FLOOR if name_to_dtype(dtype) == ir.DataType.FLOAT16 else -1e30


def _list(ctx, x) -> list:
    if isinstance(x, np.ndarray):
        return x.tolist() if x.ndim else [x.item()]
    return list(x)


def _const_array(x, fn: str) -> np.ndarray:
    if isinstance(x, ir.Value):
        raise EvalFailure(f"{fn}() needs an array; use value() on a graph value first")
    arr = np.asarray(x)
    if arr.dtype == object:
        raise EvalFailure(f"{fn}() of a non-numeric value")
    return arr


def _slice_axis(ctx, x, axis, start=None, end=None, step=None) -> np.ndarray:
    """``x`` sliced along one axis, as NumPy's ``x[..., start:end:step, ...]`` (a view, no copy)."""
    arr = _const_array(x, "slice_axis")
    axis = _int(ctx, axis)
    if not -arr.ndim <= axis < arr.ndim:
        raise EvalFailure(f"slice_axis(): axis {axis} out of range for rank {arr.ndim}")
    key = [slice(None)] * arr.ndim
    key[axis] = slice(*(None if v is None else _int(ctx, v) for v in (start, end, step)))
    return arr[tuple(key)]


def _allclose(ctx, a, b, rtol=1e-5, atol=1e-6) -> bool:
    """Element-wise closeness of two arrays (broadcast); False when they cannot broadcast."""
    a, b = _const_array(a, "allclose"), _const_array(b, "allclose")
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return False
    return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=float(rtol), atol=float(atol)))


def _rotation_scale(ctx, c, s, rtol=1e-2) -> float:
    """The radius r of constant cos/sin tables when c^2 + s^2 == r^2 everywhere (within ``rtol``
    of r^2: float16 tables round), else 0.0. HF's attention_scaling (YaRN, LongRoPE) makes r != 1;
    folded into constants (onnxsim, onnxslim) it is one number for the whole table."""
    return _rotation_scale_of(_const_array(c, "rotation_scale"), _const_array(s, "rotation_scale"), float(rtol))


def _shape_entries(v: ir.Value, sums: bool = False) -> list | None:
    """The entries of a shape vector read symbolically (None for one that cannot be read; a sum
    of dims only with ``sums``), or None when even their number is unknown."""
    from onnx_fuse.passes._dim_products import shape_vector

    def count(x: ir.Value) -> int | None:
        ok = x.shape is not None and len(x.shape) == 1 and isinstance(x.shape.dims[0], int)
        return x.shape.dims[0] if ok else None

    got = shape_vector(v, {}, sums=sums)
    if got is not None and not got[1]:
        return list(got[0])
    node = v.producer()
    if node is not None and node.op_type == "Concat" and node.domain in ("", "ai.onnx") and all(
            i is not None for i in node.inputs):
        out: list = []
        for x in node.inputs:
            part = shape_vector(x, {}, sums=sums)
            if part is not None and not part[1]:
                out += part[0]
            elif count(x) is not None:
                out += [None] * count(x)
            else:
                return None
        return out
    return None if count(v) is None else [None] * count(v)


def _dim_quotient(ctx, a, b):
    """a / b for dims (ints or symbolic products: "4*batch" / 4 is "batch"), where provably exact;
    fails otherwise (an unknown dim, a remainder, a symbol b has that a lacks)."""
    from onnx_fuse.passes._dim_products import dim_text, div, to_dim

    if _has_unknown([a, b]):
        raise EvalFailure("dim_quotient: involves an unknown dimension")
    da, db = to_dim(a), to_dim(b)
    q = None if da is None or db is None else div(da, db)
    if q is None:
        raise EvalFailure(f"dim_quotient: {a} is not provably a multiple of {b}")
    return q[0] if not q[1] else dim_text(q)


def _expanded_dims(ctx, in_dims, shape, out=None) -> list:
    """The dims Expand(x, ``shape``) provably outputs when x has ``in_dims`` (ints, symbols;
    passing x's true dims where shape inference renamed an unknown one). ``shape`` is read
    symbolically (a constant, or Shape reads of values gathered and concatenated); per axis
    (numpy broadcasting, right-aligned): a 1 in ``shape`` keeps x's dim, a 1 in x takes the shape's,
    equal dims stay. An entry that cannot be read takes the inferred dim of ``out`` (the Expand's
    output) when that is known. Unprovable dims are None; an unreadable shape gives []."""
    from onnx_fuse.passes._dim_products import to_dim

    entries = _shape_entries(_as_value(shape, "expanded_dims"))
    if entries is None:
        return []
    # an entry that is a sum (a prefix's length plus the keys', BART-style prompts: P + S) is read as
    # the canonical sum (passes/_dim_sums.py), the spelling shape inference names such a dim, but only
    # where the plain reading had nothing and the output's inferred dim does not name it otherwise
    summed = _shape_entries(_as_value(shape, "expanded_dims"), sums=True) if None in entries else None
    from_sum = set()
    if summed is not None and len(summed) == len(entries):
        from_sum = {k for k, (e, t) in enumerate(zip(entries, summed)) if e is None and t is not None}
        entries = [t if k in from_sum else e for k, (e, t) in enumerate(zip(entries, summed))]
    want = [None if d is UNKNOWN_DIM else to_dim(d) for d in _list(ctx, in_dims)]
    n = max(len(want), len(entries))
    want = [(1, ())] * (n - len(want)) + want
    entries = [(1, ())] * (n - len(entries)) + entries
    inferred = _shape(ctx, out) if out is not None and _as_value(out, "expanded_dims").shape is not None else None
    res = []
    off = n - len(summed or ())
    for k, (a, b) in enumerate(zip(want, entries)):
        if k - off in from_sum and inferred is not None and len(inferred) == n and inferred[k] is not UNKNOWN_DIM:
            res.append(inferred[k])   # as before the sums were read: the inferred name wins
            continue
        d = None if a is None or b is None else a if b == (1, ()) else b if a in ((1, ()), b) else None
        if d is None:
            g = inferred[k] if inferred is not None and len(inferred) == n else UNKNOWN_DIM
            res.append(None if g is UNKNOWN_DIM or b is not None else g)
            continue
        res.append(d[0] if not d[1] else d[1][0] if d[0] == 1 and len(d[1]) == 1
                   else "*".join([str(d[0])] * (d[0] != 1) + list(d[1])))
    return res


def _reshape(ctx, x, shape) -> np.ndarray:
    arr = _const_array(x, "reshape")
    return arr.reshape([_int(ctx, d) for d in _list(ctx, shape)])


def _known_shape(ctx, v, dims) -> bool:
    """Whether ``v`` provably has these dims (ints or symbols; None = any); never fails."""
    if not isinstance(v, ir.Value) or v.shape is None or len(v.shape) != len(dims):
        return False
    for got, want in zip(_shape(ctx, v), dims):
        if want is None:
            continue
        if isinstance(got, UnknownDim) or isinstance(want, UnknownDim) or got != want:
            return False
    return True


def _producer_ops(v, n: int) -> list[str]:
    ops: list[str] = []
    while v is not None and len(ops) < n:
        node = v.producer()
        if node is None:
            break
        ops.append(node.op_type)
        v = node.inputs[0] if node.inputs else None
    return ops


def _value_bound(ctx, v) -> float:
    from onnx_fuse.rewrite._value_bound import value_bound

    return value_bound(ctx, _as_value(v, "value_bound"))


def _value_range(ctx, v) -> list[float]:
    from onnx_fuse.rewrite._value_bound import value_range

    return list(value_range(ctx, _as_value(v, "value_range")))


def _flat_fill_rows(ctx, v) -> bool:
    from onnx_fuse.rewrite._flat_rows import flat_fill_rows

    return flat_fill_rows(ctx, _as_value(v, "flat_fill_rows"))


def _row_max(ctx, c, t, axis) -> bool:
    from onnx_fuse.rewrite._row_max import row_max

    return row_max(ctx, c, t, axis)


def _unscaled(ctx, t, f) -> list:
    from onnx_fuse.rewrite._row_max import unscaled

    return unscaled(ctx, t, f)


def _gelu_erf_input(ctx, y):
    from onnx_fuse.rewrite._gelu_product import gelu_erf_input

    return gelu_erf_input(ctx, _as_value(y, "gelu_erf_input"))


def _gelu_tanh_input(ctx, y):
    from onnx_fuse.rewrite._gelu_product import gelu_tanh_input

    return gelu_tanh_input(ctx, _as_value(y, "gelu_tanh_input"))


def _power_of_two(ctx, x) -> bool:
    from onnx_fuse.rewrite._row_max import power_of_two

    return power_of_two(x)


def _causal_mask(ctx, m, q, past) -> bool:
    from onnx_fuse.rewrite._mask_probe import causal_mask

    return causal_mask(ctx, m, q, past)


def _sliding_window(ctx, m, q, past=None, without=None) -> int:
    from onnx_fuse.rewrite._mask_probe import sliding_window

    return sliding_window(ctx, m, q, past, without)


def _causal_only(ctx, m, q, k, past=None) -> bool:
    from onnx_fuse.rewrite._mask_probe import causal_only

    return causal_only(ctx, m, q, k, past)


def _concat_past(ctx, v):
    """The cached part of a KV cache's keys: the first input of ``v``'s producer when it is a
    Concat(past, new) on axis 2 (of rank 4), else None (a prefill's keys), so that a mask probe can
    take the past's length (``sliding_window(mask, q, concat_past(k))``)."""
    node = _as_value(v, "concat_past").producer()
    if node is None or node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    axis = node.attributes["axis"].value if "axis" in node.attributes else None
    rank = len(v.shape) if v.shape is not None else None
    return node.inputs[0] if rank == 4 and axis in (2, -2) else None


def _head_source(ctx, x, axis):
    got = _head_source_of(ctx, _as_value(x, "head_source"), int(axis))
    if got is None:
        raise EvalFailure(f"{x.name!r} does not repeat the heads of another value on axis {int(axis)}")
    return got


def _padding_mask(ctx, m, q) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import padding_mask

    return padding_mask(ctx, m, q)


def _padding_input(ctx, m, q):
    from onnx_fuse.rewrite._key_padding_proof import padding_input

    return padding_input(ctx, m, q)


def _padding_inverted(ctx, m, q) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import padding_inverted

    return padding_inverted(ctx, m, q)


def _padding_fill(ctx, m, q) -> float:
    from onnx_fuse.rewrite._key_padding_proof import padding_fill

    return padding_fill(ctx, m, q)


def _finite_mask(ctx, m) -> bool:
    """Whether an additive float32 mask provably holds finite values only (value_range: no -inf,
    no NaN), so that no query row can have every key at -inf. float32 only: a float16 mask at its
    lowest (-65504) overflows to -inf with a score below -16. value_range bounds in float64, where
    finfo.min + finfo.min is still finite: the bounds must lie in float32's own range. Never fails."""
    if not isinstance(m, ir.Value) or m.dtype != ir.DataType.FLOAT:
        return False
    from onnx_fuse.rewrite._value_bound import value_range

    lo, hi = value_range(ctx, m)
    f32 = np.finfo(np.float32)
    return bool(float(f32.min) <= lo and hi <= float(f32.max))


def _finite_rows(ctx, m, q, past=None) -> bool:
    from onnx_fuse.rewrite._mask_finite import finite_rows

    return finite_rows(ctx, m, q, past)


def _key_padding(ctx, m, q, k=None) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import key_padding

    return key_padding(ctx, m, q, k)


def _causal_key_padding(ctx, m, q, k=None) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import causal_key_padding

    return causal_key_padding(ctx, m, q, k)


def _cache_key_padding(ctx, m, q, past) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import cache_key_padding

    return cache_key_padding(ctx, m, q, past)


def _cache_padding_cut(ctx, m, q, past) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import cache_padding_cut

    return cache_padding_cut(ctx, m, q, past)


def _cache_padding_input(ctx, m, q, past):
    from onnx_fuse.rewrite._key_padding_proof import cache_padding_input

    return cache_padding_input(ctx, m, q, past)


def _cache_padding_fill(ctx, m, q, past) -> float:
    from onnx_fuse.rewrite._key_padding_proof import cache_padding_fill

    return cache_padding_fill(ctx, m, q, past)


def _padding_window(ctx, m, q) -> int:
    from onnx_fuse.rewrite._key_padding_proof import padding_window

    return padding_window(ctx, m, q)


def _band_padding(name: str):
    def call(ctx, *args):
        from onnx_fuse.rewrite import _band_padding as band

        return getattr(band, name)(ctx, *args)
    return call


def _key_mask_reduction(ctx, r) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import key_mask_reduction

    return key_mask_reduction(ctx, r)


def _reduced_key_mask(ctx, r):
    from onnx_fuse.rewrite._key_padding_proof import reduced_key_mask

    return reduced_key_mask(ctx, r)


def _reduced_key_mask_negated(ctx, r) -> bool:
    from onnx_fuse.rewrite._key_padding_proof import reduced_key_mask_negated

    return reduced_key_mask_negated(ctx, r)


def _cropped_window(ctx, m, q, kept, past) -> int:
    from onnx_fuse.rewrite._mask_probe import cropped_window

    return cropped_window(ctx, m, q, kept, past)


def _broadcast_vector(ctx, x, y, n) -> list | None:
    """The Expand shape (a constant vector, x's rank) that broadcasts the first ``n`` dims of x to
    y's and keeps the rest: 1 where the dims are equal (the same number or symbol) or y's is 1, y's
    dim where x's is 1 and y's is a number; None when that cannot be proven (a symbol against 1,
    different numbers, an unknown dim, ranks that differ)."""
    a, b, n = _shape(ctx, x), _shape(ctx, y), _int(ctx, n)
    if len(a) != len(b) or not 0 <= n <= len(a):
        return None
    vec = []
    for da, db in zip(a[:n], b[:n]):
        if da is UNKNOWN_DIM or db is UNKNOWN_DIM:
            return None
        if da == db or db == 1:
            vec.append(1)
        elif da == 1 and isinstance(db, (int, np.integer)):
            vec.append(int(db))
        else:
            return None
    return vec + [1] * (len(a) - n)


def _crop_length(ctx, kept, past) -> int:
    from onnx_fuse.rewrite._crop import crop_length

    return crop_length(ctx, kept, past)


def _ancestor_ops(v, n: int) -> list[str]:
    ops: list[str] = []
    seen: set[int] = set()
    queue = [v]
    while queue and len(ops) < n:
        node = queue.pop(0).producer()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        ops.append(node.op_type)
        queue.extend(i for i in node.inputs if i is not None)
    return ops


def _freed_ops(ctx, v, limit: int = 512) -> int:
    """How many nodes die with ``v`` once its readers stop reading it: its producer and, transitively, every
    node whose outputs only those nodes read (no graph output). At most ``limit`` (a mask's cone)."""
    return len(_dead_cone(_as_value(v, "freed_ops"), limit))


def _reads_input(ctx, v, n: int = 200) -> bool:
    """Whether ``v``'s values depend on a graph input's values: a Shape or Size of one reads only
    its dims (a mask sized from x stays a function of the shapes). True too past ``n`` producers,
    where the search gives up (unproven)."""
    seen: set[int] = set()
    queue = [_as_value(v, "reads_input")]
    while queue:
        x = queue.pop(0)
        if x is None or id(x) in seen or x.const_value is not None:
            continue
        seen.add(id(x))
        node = x.producer()
        if node is None:   # a graph input, or a value from outside this graph: unknown
            return True
        if len(seen) > n:
            return True
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            continue
        queue.extend(node.inputs)
    return False


def _unsqueeze_axes(ctx, ua, ub, r) -> list[int] | None:
    """The sorted axes of one Unsqueeze doing Unsqueeze(Unsqueeze(x, ua), ub) for x of rank r (negative
    axes numbered in each op's own output); None where an axis is out of range or repeated."""
    ua, ub, r = _list(ctx, ua), _list(ctx, ub), int(r)
    n1, n2 = r + len(ua), r + len(ua) + len(ub)
    a = {int(x) % n1 for x in ua if -n1 <= int(x) < n1}
    b = {int(x) % n2 for x in ub if -n2 <= int(x) < n2}
    if len(a) != len(ua) or len(b) != len(ub):
        return None
    kept = [i for i in range(n2) if i not in b]  # where the inner result's axes land, in order
    return sorted(b | {kept[p] for p in a})


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "rank": _rank,
    "shape": _shape,
    "dim": lambda ctx, v, i: _shape(ctx, v)[i],
    "dtype": _dtype,
    "elem_type": _elem_type,
    "value": _value,
    "is_const": _is_const,
    "bound": lambda ctx, name: ctx.is_bound(name),
    "consumed": lambda ctx, v: ctx.consumed(_as_value(v, "consumed")),
    "data_readers": lambda ctx, v: ctx.data_readers(_as_value(v, "data_readers")),
    "float": _float,
    "int": _int,
    "bool": lambda ctx, x: bool(_scalarize(x, "bool")),
    "len": lambda ctx, x: len(x),
    "abs": lambda ctx, x: abs(x),
    "min": lambda ctx, *a: min(*a),
    "max": lambda ctx, *a: max(*a),
    "sum": lambda ctx, x: sum(_list(ctx, x)),
    "all": lambda ctx, x: bool(np.all(x)),
    "any": lambda ctx, x: bool(np.any(x)),
    "list": _list,
    "sqrt": lambda ctx, x: np.sqrt(x) if isinstance(x, np.ndarray) else math.sqrt(x),
    "prod": lambda ctx, x: int(np.prod(x)) if all(isinstance(i, (int, np.integer)) for i in x) else float(np.prod(x)),
    "round": lambda ctx, x, n=0: round(x, n),
    "array": _array,
    # the lowest finite value of a float dtype (mask fills and clamps are compared with it)
    "lowest": _lowest,
    # the finite floor of an attention bias of a float dtype (keep-masked-rows, precision's Casts)
    "mask_floor": _mask_floor,
    "slice_axis": _slice_axis,
    "allclose": _allclose,
    # r when constant cos/sin tables satisfy c^2 + s^2 == r^2 throughout (scaled rotations), else 0
    "rotation_scale": _rotation_scale,
    # whether c and s are cos and sin of the same angles times one number: constants on their values,
    # computed ones on their structure (_rotation_tables.py), never fails
    "rotation_pair": lambda ctx, c, s: _rotation_pair(ctx, _as_value(c, "rotation_pair"), _as_value(s, "rotation_pair")),
    # ["bhsd" | "bshd" | "sbhd" | "", table axes to squeeze]: where a rotary table broadcast
    # against x's even columns holds its positions, read from its dims (_rotation_tables.py)
    "table_layout": lambda ctx, t, xe: _table_layout(ctx, _as_value(t, "table_layout"), _as_value(xe, "table_layout")),
    "reshape": _reshape,
    # two pattern names bound to one graph value (an optional node was absent between them)
    "same": lambda ctx, a, b: a is b,
    # op types met walking up first inputs from a value, at most n nodes
    "producer_ops": lambda ctx, v, n: _producer_ops(_as_value(v, "producer_ops"), int(n)),
    "has_shape": lambda ctx, v, dims: _known_shape(ctx, v, _list(ctx, dims)),
    "take": lambda ctx, a, idx: [_list(ctx, a)[int(i)] for i in _list(ctx, idx)],
    "iota": lambda ctx, n: _iota(int(n)),
    # the axes of one Unsqueeze doing two in a row (x of rank r), None when not valid
    "unsqueeze_axes": _unsqueeze_axes,
    "is_int": lambda ctx, x: isinstance(x, (int, np.integer)) and not isinstance(x, bool),
    # a value's name (graph_io templates derive new names from it) and splitting strings
    "name": lambda ctx, v: _as_value(v, "name").name or "",
    "split": lambda ctx, s, sep: str(s).split(str(sep)),
    # op types of every producer above a value (all inputs, breadth first, at most n nodes)
    "ancestor_ops": lambda ctx, v, n: _ancestor_ops(_as_value(v, "ancestor_ops"), int(n)),
    "reads_input": _reads_input,
    # how many nodes die with a value once its readers drop it (its exclusive cone, at most 512)
    "freed_ops": _freed_ops,
    # nodes the graph gains by rebuilding old as new (planned in this rewrite) instead of reading it
    # through keep: new's nodes no graph node computes (cse / shape-cse keys) less what dies with old
    "net_nodes": lambda ctx, new, old, keep=None: _net_nodes(ctx, new, old, keep),
    # the largest magnitude a value can hold, proven from constants through layout / gather /
    # simple arithmetic ops (inf where unproven: an input, an activation; _value_bound.py)
    "value_bound": _value_bound,
    # [lo, hi] holding every value of v, proven the same way (a bool is [0, 1])
    "value_range": _value_range,
    # whether a row of v may be one large finite number throughout (a select's fill on a row with
    # every key masked), where exp(v - logsumexp(v)) is not softmax(v) (_flat_rows.py)
    "flat_fill_rows": _flat_fill_rows,
    # whether c is t's maximum along the axis, kept or re-expanded, through the same monotone ops
    # as t (a softmax's own shift; _row_max.py); fails with the reason otherwise
    "row_max": _row_max,
    # [s, g]: t = s * g exactly, g a power of two <= 1 with f * g <= 1 (a scale f undone; _row_max.py)
    "unscaled": _unscaled,
    # x when y computes x * 0.5 * (1 + erf(x / sqrt 2)), its product in any grouping, read by
    # value (_gelu_product.py); fails with the reason otherwise
    "gelu_erf_input": _gelu_erf_input,
    # x when y computes x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), its product in any
    # grouping and the argument in any spelling of that polynomial, read by value (_gelu_product.py)
    "gelu_tanh_input": _gelu_tanh_input,
    # whether a positive number is exactly 2**n (scaling by it is exact)
    "power_of_two": _power_of_two,
    # whether v's last axis provably repeats every value twice in a row (repeat_interleave'd
    # tables, constant or computed; _paired.py)
    "paired_columns": lambda ctx, v: _paired_columns(ctx, _as_value(v, "paired_columns")),
    # whether v's last axis provably holds its first half again as its second (rotate-half's
    # cos / sin(concat(f, f)) tables, constant or computed; _half_columns.py)
    "half_columns": lambda ctx, v: _half_columns(ctx, _as_value(v, "half_columns")),
    # every reader of v takes its first half (Slice 0:D/2 on the last axis); half_slice_sink.yaml
    "half_readers": lambda ctx, v: _half_readers(ctx, _as_value(v, "half_readers")),
    # n when x repeats each head of a value n times on the axis (x[.., h, ..] = s[.., h // n, ..]:
    # GQA's K / V, however written), else 0; and that value s (_head_repeat.py)
    "head_repeat": lambda ctx, x, axis: _head_repeat(ctx, _as_value(x, "head_repeat"), int(axis)),
    "head_source": _head_source,
    # whether a value provably has these dims (products as lists), from its shape or its Reshape
    "has_dims": lambda ctx, v, dims, in_dims=None: _dims.has_dims(v, dims, in_dims),
    # a / b for dims where provably exact ("4*batch" / 4 is "batch"); fails otherwise
    "dim_quotient": _dim_quotient,
    # the dims Expand(x, shape) provably outputs for x of these dims (None where unprovable;
    # an unreadable shape entry takes the inferred dim of the Expand's output ``out``)
    "expanded_dims": _expanded_dims,
    # the constant Expand shape broadcasting x's first n dims to y's (None when not provable)
    "broadcast_vector": _broadcast_vector,
    # whether an additive mask is causal for q's new tokens after past's cached ones, decided on
    # its values (optimizer/rewrite/_mask_probe.py); fails with the reason otherwise
    "causal_mask": lambda ctx, m, q, past: _causal_mask(ctx, m, q, past),
    # the window W of a causal banded mask (0: plain causal), decided on its values like
    # causal_mask; past None for prefill; fails with the reason when it is neither
    "sliding_window": _sliding_window,
    # whether a mask computed from shapes alone is the causal mask and nothing else at every shape
    # probed, masked keys at (nearly) -inf (the causal flag's form), k's new keys q's length; past
    # None for prefill; never fails
    "causal_only": _causal_only,
    # the past of a Concat(past, new, axis=2) KV cache (its first input), None for other keys
    "concat_past": _concat_past,
    # the window W of a mask over a cache cropped to its last n tokens (kept = Slice(past, -n)):
    # n + 1, proven at full past lengths from n on (_mask_probe.cropped_window)
    "cropped_window": _cropped_window,
    # whether a prefill mask is an attention-mask input's key padding over a causal band or
    # nothing, decided on its values (_key_padding_proof.padding_mask); fails with the reason otherwise
    "padding_mask": _padding_mask,
    # that proof's attention-mask input, and its causal part: -1 none, 0 causal, W a band of W keys
    "padding_input": _padding_input,
    "padding_window": _padding_window,
    "padding_fill": _padding_fill,
    # padding_input's key mask marks masked keys (a [B, 1, 1, T] bool input, True = masked)
    "padding_inverted": _padding_inverted,
    # whether a mask is attention_mask's key padding alone with one fill for masked keys (the
    # contrib ops' 2-D key mask with mask_filter_value = padding_fill), never fails
    "key_padding": _key_padding,
    # the same over a plain causal part, one fill for causal and padded keys (the contrib ops' 2-D
    # key mask with unidirectional=1), never fails
    "causal_key_padding": _causal_key_padding,
    # the same for S new tokens over a cache of past's P (keys 0..P + i), never fails; its
    # attention-mask input and fill (fail where it does not hold)
    "cache_key_padding": _cache_key_padding,
    "cache_padding_input": _cache_padding_input,
    "cache_padding_fill": _cache_padding_fill,
    # whether that attention-mask input may be longer than P + S, its first P + S columns read
    # (the rebuild slices it: a model taking a longer mask keeps taking it)
    "cache_padding_cut": _cache_padding_cut,
    # whether a prefill mask over a static length is a key mask's padding And-ed with any fixed
    # pattern of keys (a window looking ahead), one fill (_band_padding.py), never fails; that
    # pattern as bool [1, 1, S, S], the key mask and the fill (fail where it does not hold)
    "banded_key_padding": _band_padding("banded_key_padding"),
    "padding_base": _band_padding("padding_base"),
    "base_padding_input": _band_padding("base_padding_input"),
    "base_padding_fill": _band_padding("base_padding_fill"),
    # whether a value [B, 1.., T] is a key mask's per-key value or its negation, whatever ops compute
    # it from the key mask (a 4-D mask reduced over its query axis), decided on its values
    # (_key_padding_proof.key_mask_reduction); fails with the reason otherwise; that key mask, and
    # whether the value is its negation
    "key_mask_reduction": _key_mask_reduction,
    "reduced_key_mask": _reduced_key_mask,
    "reduced_key_mask_negated": _reduced_key_mask_negated,
    # whether an additive float32 mask holds finite values only (value_range), never fails
    "finite_mask": _finite_mask,
    # whether an additive float32 mask leaves every query row a finite key for every 0/1 attention_mask, decided on its
    # values (_mask_finite.finite_rows: decoders' causal + padding masks), never fails
    "finite_rows": _finite_rows,
    # n when kept is past's last n tokens (a Slice of it, its bounds constant or computed from
    # shapes and probed), 0 when kept is past (_crop.crop_length); fails with the reason otherwise
    "crop_length": _crop_length,
    "initializer": None,  # rewrite-only, handled by the rewriter (see _rewriter.py)
}

# Names the `bound()` function receives unevaluated (it asks about a pattern name).
_QUOTED_ARG_FUNCTIONS = {"bound"}


_DTYPE_NAMES: dict[ir.DataType, str] = {}


def dtype_name(dtype: ir.DataType) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name.lower()
    return name


_DTYPE_ALIASES = {"float32": "FLOAT", "fp32": "FLOAT", "fp16": "FLOAT16", "half": "FLOAT16",
                  "float64": "DOUBLE", "fp64": "DOUBLE", "bf16": "BFLOAT16"}


def name_to_dtype(name: str) -> ir.DataType:
    key = _DTYPE_ALIASES.get(name.lower(), name.upper())
    return ir.DataType[key]


# --------------------------------------------------------------------------------------------


class Expr:
    """A parsed, whitelisted expression; ``names`` are the free names it reads."""

    __slots__ = ("text", "tree", "names", "calls", "_fn")

    def __init__(self, text: str, tree: ast.Expression, names: frozenset[str], calls: frozenset[str]):
        self.text = text
        self.tree = tree
        self.names = names
        self.calls = calls
        self._fn = _compile(tree.body)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def evaluate(self, env: Mapping[str, Any], ctx) -> Any:
        return self._fn(env, ctx)


def parse(text: str) -> Expr:
    """Parse and whitelist ``text``; raises ExprSyntaxError with a short reason."""
    if len(text) > 2000:
        raise ExprSyntaxError("expression longer than 2000 characters")
    return _parse_stripped(text.strip())


# The built-in rules hold ~3300 expressions, ~1000 of them distinct; an Expr is never changed
# after it is built, so rules share one per text (a third of the time to load the rules).
@functools.lru_cache(maxsize=8192)
def _parse_stripped(text: str) -> Expr:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprSyntaxError(f"bad expression {text.strip()!r}: {exc.msg}") from None
    names: set[str] = set()
    calls: set[str] = set()
    func_nodes = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            what = type(node).__name__
            if isinstance(node, ast.Attribute):
                what = f"attribute access '.{node.attr}'"
            raise ExprSyntaxError(f"{what} is not allowed in expressions ({text.strip()!r})")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                fname = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprSyntaxError(f"unknown function {fname!r}; allowed: "
                                      f"{', '.join(sorted(FUNCTIONS))}")
            calls.add(node.func.id)
            if node.func.id in _QUOTED_ARG_FUNCTIONS:
                if len(node.args) != 1 or not isinstance(node.args[0], ast.Name):
                    raise ExprSyntaxError(f"{node.func.id}() takes one pattern name")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool, type(None))):
                raise ExprSyntaxError(f"literal {node.value!r} is not allowed")
        elif isinstance(node, ast.Name) and id(node) not in func_nodes:
            names.add(node.id)
    return Expr(text, tree, frozenset(names), frozenset(calls))


# iota's cap: far above any axis a rule enumerates (heads, ranks, index tables), far below a list
# that exhausts memory (a rule file's iota(100000000000) was a MemoryError, an internal error)
_MAX_IOTA = 1 << 22


def _iota(n: int) -> list[int]:
    if n > _MAX_IOTA:
        raise EvalFailure(f"iota({n}): more than {_MAX_IOTA} values")
    return list(range(n))


def _check_size(op: type, a: Any, b: Any) -> None:
    if op is ast.Pow and isinstance(b, (int, float)) and abs(b) > _MAX_EXPONENT and \
            not isinstance(a, (float, np.floating)):
        raise EvalFailure("exponent too large")
    if op is ast.Mult:
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and n * max(len(seq), 1) > _MAX_REPEAT:
                raise EvalFailure("repetition too large")


def _eval(node: ast.AST, env: Mapping[str, Any], ctx) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise EvalFailure(f"name {node.id!r} is not bound in this match")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, env, ctx) for e in node.elts]
    if isinstance(node, ast.BinOp):
        a = _eval(node.left, env, ctx)
        b = _eval(node.right, env, ctx)
        if isinstance(a, UnknownDim) or isinstance(b, UnknownDim):
            raise EvalFailure("arithmetic on an unknown dimension")
        _check_size(type(node.op), a, b)
        try:
            return _BINOPS[type(node.op)](a, b)
        except (TypeError, ZeroDivisionError, ValueError, OverflowError) as exc:
            raise EvalFailure(f"{ast.unparse(node)}: {exc}") from None
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, ctx)
        if isinstance(node.op, ast.Not):
            return not _truth(v)
        if isinstance(v, UnknownDim):
            raise EvalFailure("arithmetic on an unknown dimension")
        try:
            return -v if isinstance(node.op, ast.USub) else +v
        except TypeError as exc:
            raise EvalFailure(f"{ast.unparse(node)}: {exc}") from None
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for e in node.values:
                result = _eval(e, env, ctx)
                if not _truth(result):
                    return result
            return result
        result = False
        for e in node.values:
            result = _eval(e, env, ctx)
            if _truth(result):
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, ctx)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, ctx)
            if _has_unknown(left) or _has_unknown(right):
                raise EvalFailure(f"{ast.unparse(node)}: involves an unknown dimension")
            try:
                ok = _CMPOPS[type(op)](_norm(left), _norm(right))
            except TypeError as exc:
                raise EvalFailure(f"{ast.unparse(node)}: {exc}") from None
            if not _truth(ok):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _truth(_eval(node.test, env, ctx)) else node.orelse, env, ctx)
    if isinstance(node, ast.Subscript):
        base = _eval(node.value, env, ctx)
        if isinstance(node.slice, ast.Slice):
            parts = [None if p is None else _eval(p, env, ctx)
                     for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            key: Any = slice(*parts)
        else:
            key = _eval(node.slice, env, ctx)
            if isinstance(key, list):
                key = tuple(key)
        try:
            return base[key]
        except (IndexError, KeyError, TypeError) as exc:
            raise EvalFailure(f"{ast.unparse(node)}: {exc}") from None
    if isinstance(node, ast.Call):
        fname = node.func.id  # type: ignore[attr-defined]
        if fname in _QUOTED_ARG_FUNCTIONS:
            return FUNCTIONS[fname](ctx, node.args[0].id)  # type: ignore[attr-defined]
        fn = FUNCTIONS[fname]
        if fn is None:
            raise EvalFailure(f"{fname}() is only allowed as a whole rewrite statement")
        args = [_eval(a, env, ctx) for a in node.args]
        kwargs = {k.arg: _eval(k.value, env, ctx) for k in node.keywords if k.arg}
        try:
            return fn(ctx, *args, **kwargs)
        except EvalFailure:
            raise
        except (TypeError, ValueError, IndexError, OverflowError) as exc:
            raise EvalFailure(f"{fname}(): {exc}") from None
    raise EvalFailure(f"cannot evaluate {type(node).__name__}")  # unreachable after parse()


def _truth(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return bool(np.all(v))
    if isinstance(v, UnknownDim):
        raise EvalFailure("truth value of an unknown dimension")
    return bool(v)


def _has_unknown(v: Any) -> bool:
    if isinstance(v, UnknownDim):
        return True
    return isinstance(v, (list, tuple)) and any(isinstance(x, UnknownDim) for x in v)


def _norm(v: Any) -> Any:
    """Compare lists and tuples alike; compare NumPy arrays element-wise into one bool."""
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    return v


class _SourceText:
    """A node's source, unparsed when a failure message first needs it: unparsing every compared
    or indexed node when the rules load cost as much as compiling them."""

    __slots__ = ("_node", "_text")

    def __init__(self, node: ast.AST):
        self._node, self._text = node, None

    def __str__(self) -> str:
        if self._text is None:
            self._text = ast.unparse(self._node)
        return self._text


def _compile(node: ast.AST) -> Callable[[Mapping[str, Any], Any], Any]:
    """Turn a whitelisted tree into nested closures (about 3x faster than walking it per call).

    Semantics are those of ``_eval``; nodes without a fast form fall back to it.
    """
    if isinstance(node, ast.Constant):
        value = node.value
        return lambda env, ctx: value
    if isinstance(node, ast.Name):
        name = node.id

        def load(env, ctx):
            try:
                return env[name]
            except KeyError:
                raise EvalFailure(f"name {name!r} is not bound in this match") from None
        return load
    if isinstance(node, ast.Call) and node.func.id not in _QUOTED_ARG_FUNCTIONS \
            and FUNCTIONS.get(node.func.id) is not None and not node.keywords:  # type: ignore[attr-defined]
        fname = node.func.id  # type: ignore[attr-defined]
        fn = FUNCTIONS[fname]
        args = [_compile(a) for a in node.args]

        def call(env, ctx):
            try:
                return fn(ctx, *[a(env, ctx) for a in args])
            except EvalFailure:
                raise
            except (TypeError, ValueError, IndexError, OverflowError) as exc:
                raise EvalFailure(f"{fname}(): {exc}") from None
        return call
    if isinstance(node, ast.Compare):
        left_f = _compile(node.left)
        pairs = [(_CMPOPS[type(op)], _compile(r)) for op, r in zip(node.ops, node.comparators)]
        text = _SourceText(node)

        def compare(env, ctx):
            left = left_f(env, ctx)
            for op, right_f in pairs:
                right = right_f(env, ctx)
                if _has_unknown(left) or _has_unknown(right):
                    raise EvalFailure(f"{text}: involves an unknown dimension")
                try:
                    ok = op(_norm(left), _norm(right))
                except TypeError as exc:
                    raise EvalFailure(f"{text}: {exc}") from None
                if not _truth(ok):
                    return False
                left = right
            return True
        return compare
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v) for v in node.values]
        if isinstance(node.op, ast.And):
            def and_(env, ctx):
                result: Any = True
                for f in parts:
                    result = f(env, ctx)
                    if not _truth(result):
                        return result
                return result
            return and_

        def or_(env, ctx):
            result: Any = False
            for f in parts:
                result = f(env, ctx)
                if _truth(result):
                    return result
            return result
        return or_
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _compile(node.operand)
        return lambda env, ctx: not _truth(inner(env, ctx))
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        base_f, key_f = _compile(node.value), _compile(node.slice)
        text = _SourceText(node)

        def subscript(env, ctx):
            base, key = base_f(env, ctx), key_f(env, ctx)
            if isinstance(key, list):
                key = tuple(key)
            try:
                return base[key]
            except (IndexError, KeyError, TypeError) as exc:
                raise EvalFailure(f"{text}: {exc}") from None
        return subscript
    return lambda env, ctx: _eval(node, env, ctx)
