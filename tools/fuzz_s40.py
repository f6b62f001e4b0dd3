"""Fuzz motifs for session 38's rewrites that fuzz_s39 does not reach, each with near misses drawn on purpose:

  zero_mask     attention-zero-mask (rules/attention/zero_mask.yaml) over value_range's decided comparisons
                (rewrite/_value_bound.py): a keep-mask of positions, Range(0, S) >= 0 over the keys or the queries
                (viewed, sometimes expanded to [B, 1, S, T]), written as >= 0, > -1, Not(< 0), And / Or with a bool
                input, a Where of a decided condition, a Range from 2 compared with >= 1, added as Where(keep, 0,
                fill) or applied as Where(keep, scores, fill). Traps that must not be decided: a Range from -1, > 0
                (the first key dropped), a negative step, a run-time step or start (fed -1 sometimes), one key
                dropped by an Equal, an int32 Range plus / times a constant that wraps past int32's end, a uint8
                0 - 1 (255, not -1), an int64 offset of 2^62; and the condition or the mask read elsewhere.
  cast_chain    cast-of-select (passes/cast_of_select.py) in chains: Cast(Where(cond, c1, c2)) of constants with
                edges (float16's 65504 / 65520, subnormals, NaN, -0), then a second Cast: float32 -> float16 ->
                float32 is no identity (rounding; inf), float16 -> float32 -> float16 is; casts to / from int32
                and bool (NaN is true), bfloat16; c1 / c2 broadcast against the condition; the Where or the
                condition read elsewhere.
  split_seq     SplitToSequence of constant sizes -> SequenceConstruct(Split) (passes/sequence_ops.py): 1-D sizes
                or a scalar chunk (the last piece shorter), a positive or negative axis, keepdims 0 (ignored where
                split is given), readers SequenceAt (negative indices too), ConcatFromSequence (new_axis), a
                SequenceMap. Traps: a SequenceLength reader, a SequenceInsert reader, sizes fed at run time, a
                run-time index, a piece of size 0, a chunk over a symbolic axis, no split at all.
  rope_cut      rotate-half and the halves form over cos / sin rows of a cache cut at run time, rows [p, p + S):
                p fed, read off a past tensor's shape, or counted back from the end, placed in bhsd / bshd / sbhd.
                Traps: sin cut one row later than cos, every other row (a step of 2), the rows reversed, the cut
                tables read elsewhere.

fuzz_motifs.make_case draws a case of this family for S40_SHARE of the seeds from a side stream of its own
(S40_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import I64, Builder, build_one_motif
from fuzz_s34b import BIG, _half, _heads, _merge, _place_rows, rotate_partial
from fuzz_s39 import _halves, _rotate_halves

#: share of the motif-graph seeds that are session-40 cases (a side stream of the seed decides)
S40_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S40_SALT = 0x40BE
MOTIFS = ("zero_mask", "cast_chain", "split_seq", "rope_cut")
ZERO_FORMS = ("ge-zero", "gt-minus-one", "not-lt", "and", "or-input", "where-decided", "from-two")
ZERO_NEAR = ("from-minus-one", "gt-zero", "neg-step", "step-input", "start-input", "drop-one", "i32-add-wrap",
             "i32-mul-wrap", "u8-wrap", "i64-big", "cond-shared", "mask-shared", "bias-one")
#: the near misses whose mask drops a key for some feed (the others keep every key, undecided or not)
DROPS = ("from-minus-one", "gt-zero", "neg-step", "start-input", "drop-one", "i32-add-wrap", "i32-mul-wrap",
         "u8-wrap")
CAST_CHAINS = ("f32-f16", "f16-f32", "f32-f16-f32", "f16-f32-f16", "f32-f64")
CAST_NEAR = ("nan", "to-int32", "from-int32", "to-bool", "bf16", "where-shared", "cond-shared", "fill-input")
SPLIT_NEAR = ("length-reader", "insert-reader", "sizes-input", "index-input", "zero-size", "chunk-symbolic",
              "no-split")
CUT_FROM = ("fed", "past-shape", "from-end")
CUT_NEAR = ("sin-offset", "step-two", "reversed", "cut-shared")
F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
I32, U8, BOOL, BF16 = TensorProto.INT32, TensorProto.UINT8, TensorProto.BOOL, TensorProto.BFLOAT16
I32_MAX = int(np.iinfo(np.int32).max)


def _near(b: Builder, nears: tuple, plain: int) -> str:
    near = b.pick(["none"] * plain + list(nears))
    if near != "none":
        b.trap(f"near-{near}")
    return near


def _int(b: Builder, value: int, dtype: int = I64) -> str:
    return b.const(np.array(value, dtype=b.np_dtype(dtype)), dtype, stem="n")


def _length(b: Builder, t: str, axis: int, dtype: int = I64) -> str:
    """t's length on ``axis`` as a scalar of ``dtype`` (Shape, Squeeze; Cast for int32)."""
    n = b.op("Squeeze", [b.op("Shape", [t], start=axis, end=axis + 1)])
    return n if dtype == I64 else b.op("Cast", [n], to=int(dtype))


def _positions(b: Builder, t: str, axis: int, near: str) -> tuple[str, str]:
    """A Range over t's ``axis`` and the comparison's right side: (cond-ready left value, constant right value)
    per the near miss; the pair is compared with GreaterOrEqual unless the caller changes it."""
    if near in ("i32-add-wrap", "i32-mul-wrap"):
        n = _length(b, t, axis, I32)
        r = b.op("Range", [_int(b, 0, I32), n, _int(b, 1, I32)])
        if near == "i32-add-wrap":   # 0 + max holds; 1 + max wraps to int32's lowest
            return b.op("Add", [r, _int(b, I32_MAX, I32)]), _int(b, 0, I32)
        one = b.op("Add", [r, _int(b, 1, I32)])   # (r + 1) 2^30: 2^31 wraps for r = 1
        return b.op("Mul", [one, _int(b, 1 << 30, I32)]), _int(b, 0, I32)
    n = _length(b, t, axis)
    if near == "from-minus-one":
        return b.op("Range", [_int(b, -1), b.op("Sub", [n, _int(b, 1)]), _int(b, 1)]), _int(b, 0)
    if near == "neg-step":   # n .. 1, compared > 1 by the caller: the last position dropped
        return b.op("Range", [n, _int(b, 0), _int(b, -1)]), _int(b, 1)
    if near == "step-input":   # step 1 fed: every position kept, but nothing proves it
        step = b.input([], dtype=I64, stem="step")
        b.feeds[step] = np.array(1, np.int64)
        return b.op("Range", [_int(b, 0), b.op("Mul", [n, step]), step]), _int(b, 0)
    if near == "start-input":   # a start that may be negative (fed -1 half the time)
        p = b.input([], dtype=I64, stem="start")
        b.feeds[p] = np.array(int(b.pick([0, -1])), np.int64)
        return b.op("Range", [p, b.op("Add", [p, n]), _int(b, 1)]), _int(b, 0)
    r = b.op("Range", [_int(b, 2 if near == "from-two" else 0), b.op("Add", [n, _int(b, 2)]) if near == "from-two"
                       else n, _int(b, 1)])
    if near == "i64-big":   # r + 2^62 >= 2^62: true, but an interval near int64's end is no proof
        return b.op("Add", [r, _int(b, 1 << 62)]), _int(b, 1 << 62)
    return r, _int(b, 1 if near == "from-two" else 0)


def _keep(b: Builder, t: str, axis: int, form: str, near: str) -> str:
    """A bool over t's positions on ``axis`` (a 1-D [n]) in ``form``; the near misses' versions."""
    if near == "u8-wrap":   # Cast(r >= 1) - 1 in uint8: 255 at r = 0 (not -1), so < 1 fails there
        r, _ = _positions(b, t, axis, "none")
        u = b.op("Cast", [b.op("GreaterOrEqual", [r, _int(b, 1)])], to=int(U8))
        return b.op("Less", [b.op("Sub", [u, _int(b, 1, U8)]), _int(b, 1, U8)])
    lhs, rhs = _positions(b, t, axis, near)
    if near == "gt-zero" or near == "neg-step":
        return b.op("Greater", [lhs, rhs])
    if near == "drop-one":   # r >= 0 and r != 1: key 1 dropped
        return b.op("And", [b.op("GreaterOrEqual", [lhs, rhs]), b.op("Not", [b.op("Equal", [lhs, _int(b, 1)])])])
    if form == "gt-minus-one" and near == "none":
        return b.op("Greater", [lhs, _int(b, -1)])
    if form == "not-lt" and near == "none":
        return b.op("Not", [b.op("Less", [lhs, rhs])])
    ge = b.op("GreaterOrEqual", [lhs, rhs]) if b.p(0.7) else b.op("LessOrEqual", [rhs, lhs])
    if form == "and" and near == "none":
        return b.op("And", [ge, b.op("LessOrEqual", [rhs, lhs])])
    if form == "or-input" and near == "none":   # true Or anything is true
        other = b.input([1], dtype=BOOL, stem="flag")
        b.feeds[other] = np.array([False])
        return b.op("Or", [other, ge] if b.p(0.5) else [ge, other])
    return ge


def motif_zero_mask(b: Builder, opset: int) -> str:
    form, near = b.pick(ZERO_FORMS), _near(b, ZERO_NEAR, 10)
    b.trap(f"zero-{form}")
    drops = near in DROPS   # such a mask drops keys: over two or more of them, so that every query keeps one
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 4), 0.5)
    kv = seq if b.p(0.5) and not drops else b.dim("kv", (4, 6), 0.6)
    heads, dh = int(b.pick([1, 2])), int(b.pick([4, 8]))
    q = b.input([bsz, heads, seq, dh], stem="q")
    k = b.input([bsz, heads, kv, dh], stem="k")
    v = b.input([bsz, heads, kv, dh], stem="v")
    over_keys = drops or b.p(0.6)
    b.trap("over-keys" if over_keys else "over-queries")
    keep = _keep(b, k if over_keys else q, 2, form, near if near not in ("cond-shared", "mask-shared",
                                                                          "bias-one") else "none")
    keep = b.op("Unsqueeze", [keep, b.ints([0, 1, 2] if over_keys else [0, 1, 3])])
    if b.p(0.5):   # expanded to [B, 1, S, T] as transformers' sdpa mask is
        b.trap("mask-expanded")
        tgt = b.op("Concat", [b.op("Shape", [q], start=0, end=1), b.ints([1]), b.op("Shape", [q], start=2, end=3),
                              b.op("Shape", [k], start=2, end=3)], axis=0)
        keep = b.op("Expand", [keep, tgt])
    if near == "cond-shared":   # the condition read elsewhere (as a 0/1 float)
        b.output(b.op("Cast", [keep], to=int(b.dtype)))
    scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          b.scalar(1.0 / np.sqrt(dh))])
    lowest = float(np.finfo(b.np_dtype()).min)
    fill = float(b.pick([lowest, -np.inf, -1e4]))
    if b.p(0.3) and near != "bias-one":   # a boolean select of the scores
        b.trap("mask-select")
        masked = b.op("Where", [keep, scores, b.scalar(fill)])
    else:
        if form == "where-decided" and near == "none":   # the mask's keep branch itself a Where of the condition
            zero = b.op("Where", [keep, b.scalar(0.0), b.scalar(fill)])
        else:
            zero = b.scalar(1.0 if near == "bias-one" else 0.0)
        mask = b.op("Where", [keep, zero, b.scalar(fill)])
        if near == "mask-shared":
            b.output(b.op("Identity", [mask]))
        masked = b.op("Add", [scores, mask] if b.p(0.5) else [mask, scores])
    return b.op("MatMul", [b.op("Softmax", [masked], axis=-1), v])


def _edge_values(b: Builder, from_type: int, near: str) -> tuple[np.ndarray, np.ndarray]:
    """Two constants of ``from_type`` with cast edges: float16's largest / beyond it, a tie, a subnormal, -0."""
    if from_type == I32:
        return np.array(int(b.pick([3, -7, 2049, 16777217])), np.int32), np.array(int(b.pick([0, -1])), np.int32)
    pool = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, 7e4, -7e4, 1e-5, 3e-8, 1.0009765625, -3.4e38, np.inf]
    a, c = float(b.pick(pool)), float(b.pick(pool))
    if near == "nan":
        a = float("nan")
    shape_a, shape_c = b.pick([(), (1,), (1, 3)]), b.pick([(), (1,)])
    return np.full(shape_a, a), np.full(shape_c, c)


def motif_cast_chain(b: Builder, opset: int) -> str:
    bsz, n = b.dim("batch", (1, 2), 0.5), 3
    x = b.input([bsz, n], stem="x")
    chain, near = b.pick(CAST_CHAINS), _near(b, CAST_NEAR, 6)
    b.trap(f"chain-{chain}")
    flag = b.input([bsz, 1] if b.p(0.5) else [bsz, n], dtype=BOOL, stem="cond")
    b.feeds[flag] = b.rng.random(b.feeds[flag].shape) < 0.5
    cond = flag
    if b.p(0.3):   # a computed condition: x > 0
        cond = b.op("Greater", [x, b.scalar(0.0)])
    if near == "cond-shared":
        b.output(b.op("Cast", [cond], to=int(b.dtype)))
    types = {"f32-f16": (F32, F16), "f16-f32": (F16, F32), "f32-f16-f32": (F32, F16, F32),
             "f16-f32-f16": (F16, F32, F16), "f32-f64": (F32, F64)}[chain]
    if near == "to-int32":
        types = (types[0], I32)
    elif near == "from-int32":
        types = (I32, F32)
    elif near == "to-bool":
        types = (types[0], BOOL)
    elif near == "bf16":
        types = (F32, BF16, F32)
    c1, c2 = _edge_values(b, types[0], near)
    np_from = {F32: np.float32, F16: np.float16, I32: np.int32}[types[0]]
    with np.errstate(over="ignore"):
        c1, c2 = c1.astype(np_from), c2.astype(np_from)
    a = b.const(c1, types[0], stem="keep")
    if near == "fill-input":
        c = b.input([1], dtype=types[0], stem="fill")
        b.feeds[c] = np.atleast_1d(c2).reshape(1)
    else:
        c = b.const(c2, types[0], stem="fill")
    w = b.op("Where", [cond, a, c])
    if near == "where-shared":
        b.output(b.op("Identity", [w]))
    y = w
    for to in types[1:]:
        y = b.op("Cast", [y], to=int(to))
    if types[-1] != b.dtype:   # back to the graph's dtype (a bool as 0 / 1), then read with x
        y = b.op("Cast", [y], to=int(b.dtype))
    return b.op("Add", [x, y] if b.p(0.5) else [y, x])


def _map_body(dtype: int) -> onnx.GraphProto:
    """A SequenceMap body: each element negated."""
    return oh.make_graph([oh.make_node("Neg", ["elem"], ["negated"])], "neg_body",
                         [oh.make_tensor_value_info("elem", dtype, None)],
                         [oh.make_tensor_value_info("negated", dtype, None)])


def motif_split_seq(b: Builder, opset: int) -> str:
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (2, 3), 0.3)
    d = int(b.pick([6, 7, 8]))
    near = _near(b, SPLIT_NEAR, 6)
    if near == "chunk-symbolic" and isinstance(seq, int):
        seq = b.dim("seq", (2, 3), 1.0)
    h = b.input([bsz, seq, d], stem="hidden")
    x = b.op("MatMul", [h, b.weight([d, d])]) if b.p(0.6) else h
    axis_pos = 1 if near == "chunk-symbolic" else 2
    axis = axis_pos - 3 if b.p(0.4) else axis_pos
    length = d if axis_pos == 2 else b.rt(seq)
    attrs = {"axis": axis, **({"keepdims": 0} if b.p(0.3) else {})}
    scalar_chunk = near == "chunk-symbolic" or (near != "zero-size" and b.p(0.4))
    squeezed = scalar_chunk and attrs.get("keepdims") == 0
    if scalar_chunk:
        # keepdims 0 with a scalar chunk: ORT squeezes the axis (pieces of 1 only; it fails on a longer chunk),
        # where the spec says keepdims is ignored once split is given
        chunk = 1 if squeezed else int(b.pick([2, 3])) if length > 2 else 1
        if squeezed:
            b.trap("chunk-squeezed")
        sizes = [chunk] * (length // chunk) + ([length % chunk] if length % chunk else [])
        b.trap("split-chunk")
        split = b.const(np.array(chunk, np.int64), I64, stem="chunk")
    else:
        cut = int(b.rng.integers(1, length))
        sizes = [cut, length - cut] if near != "zero-size" else [0, cut, length - cut]
        if b.p(0.4) and length - cut > 1 and near != "zero-size":
            sizes = [cut, 1, length - cut - 1]
        if near == "sizes-input":
            split = b.input([len(sizes)], dtype=I64, stem="sizes")
            b.feeds[split] = np.array(sizes, np.int64)
        else:
            split = b.ints(sizes, stem="sizes")
    if near == "no-split":
        seqv = b.op("SplitToSequence", [x], axis=axis, keepdims=1)
        sizes = [1] * length
    else:
        seqv = b.op("SplitToSequence", [x, split], **attrs)
    whole = seqv   # the SplitToSequence's own output (a SequenceLength reads it)
    if near == "insert-reader":
        seqv = b.op("SequenceInsert", [seqv, b.op("Identity", [x])])
        sizes = sizes + [length]
    count = len(sizes)
    readers = b.pick(["at", "at", "concat", "map"])
    b.trap(f"reader-{readers}")
    outs = []
    if readers == "concat" and near not in ("zero-size", "insert-reader"):
        new_axis = int(b.p(0.3))
        cat_axis = axis if not new_axis else int(b.pick([0, -1]))
        if new_axis and len(set(sizes)) > 1:   # stacking needs pieces of one shape
            new_axis, cat_axis = 0, axis
        if squeezed:   # squeezed pieces are stacked back on their axis
            new_axis, cat_axis = 1, axis
        outs.append(b.op("ConcatFromSequence", [seqv], axis=cat_axis, new_axis=new_axis))
    if readers == "map":
        seqv = b.op("SequenceMap", [seqv], body=_map_body(b.dtype))
    picks = sorted({int(b.rng.integers(count)) for _ in range(2)})
    for i in picks:
        if near == "zero-size" and sizes[i] == 0:
            continue
        idx = i - count if b.p(0.4) else i
        if near == "index-input":
            pos = b.input([], dtype=I64, stem="index")
            b.feeds[pos] = np.array(idx, np.int64)
        else:
            pos = b.const(np.array(idx, np.int64), I64, stem="index")
        if idx < 0:
            b.trap("index-negative")
        piece = b.op("SequenceAt", [seqv, pos])
        if b.p(0.2):   # the piece itself a graph output
            b.trap("piece-is-output")
        else:
            piece = b.op("Mul", [piece, b.scalar(1.5)])
        outs.append(piece)
    if near == "length-reader":
        b.output(b.op("Cast", [b.op("SequenceLength", [whole])], to=int(b.dtype)))
    if near == "zero-size":   # the empty piece only through the whole: concatenated back
        outs.append(b.op("ConcatFromSequence", [seqv], axis=axis))   # (1-D sizes: never squeezed)
    if not outs:
        outs.append(b.op("SequenceAt", [seqv, b.const(np.array(count - 1, np.int64), I64, stem="index")]))
    for o in outs[1:]:
        b.output(o)
    return outs[0]


def _cut_rows(b: Builder, buf: str, x: str, seq_axis: int, near: str, sin: bool) -> str:
    """buf's rows [p, p + S) (S read off x's ``seq_axis``), p per the drawn source (the same p for both tables, as
    exporters write it); the near misses' rows."""
    s = b.op("Shape", [x], start=seq_axis, end=seq_axis + 1)
    if not hasattr(b, "cut_start"):
        src = b.pick(CUT_FROM)
        b.trap(f"cut-{src}")
        p0 = int(b.rng.integers(b.cut_spare + 1))
        if src == "fed":
            b.cut_start = b.input([1], dtype=I64, stem="past_len")
            b.feeds[b.cut_start] = np.array([p0], np.int64)
        elif src == "past-shape":
            past = b.input([1, 1, b.dim("past", (p0,), 1.0), 2], stem="past_key")
            b.cut_start = b.op("Shape", [past], start=2, end=3)
        else:   # counted back from the buffer's end: R - (m S + k), k the rows left after the cut
            m = 2 if near == "step-two" else 1
            k = b.cut_rows - m * b.rt(b.cut_seq) - p0
            span = b.op("Add", [b.op("Mul", [s, b.ints([m])]) if m > 1 else s, b.ints([k])])
            b.cut_start = b.op("Sub", [b.op("Shape", [buf], start=0, end=1), span])
    start = b.cut_start
    if near == "sin-offset" and sin:   # sin one row later: a different angle, no rotary of one table
        start = b.op("Add", [start, b.ints([1])])
    if near == "step-two":   # every other row of [p, p + 2S)
        return b.op("Slice", [buf, start, b.op("Add", [start, b.op("Mul", [s, b.ints([2])])]), b.ints([0]),
                              b.ints([2])])
    if near == "reversed":   # rows p + S - 1 down to p (an end of -1 would name the last row: -BIG then)
        end = b.op("Sub", [start, b.ints([1])])
        end = b.op("Where", [b.op("Less", [end, b.ints([0])]), b.ints([-BIG]), end])
        return b.op("Slice", [buf, b.op("Add", [start, b.op("Sub", [s, b.ints([1])])]), end, b.ints([0]),
                              b.ints([-1])])
    return b.op("Slice", [buf, start, b.op("Add", [start, s]), b.ints([0])])


def motif_rope_cut(b: Builder, opset: int) -> str:
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 4), 0.6)
    d = int(b.pick([16, 32]))
    layout = b.pick(("bhsd", "bshd", "sbhd"))
    form = b.pick(["rotate-half", "halves"])
    near = _near(b, CUT_NEAR, 6)
    for t in (f"cut-{layout}", f"cut-{form}"):
        b.trap(t)
    x = b.input([bsz, seq, d], stem="hidden")
    dh, heads = int(b.pick([8, 16])), int(b.pick([1, 2]))
    rd = dh // 2 if b.p(0.25) else dh
    w = rd // 2 if form == "halves" else rd
    spare = int(b.pick([0, 2, 5]))
    rows = b.rt(seq) * (2 if near == "step-two" else 1) + spare + (1 if near == "sin-offset" else 0)
    b.cut_spare, b.cut_rows, b.cut_seq = spare, rows, seq
    # angles from 0.1 on: no row is the identity (angle 0: cos 1, sin 0, whose x * cos folds away)
    pos = (np.arange(rows)[:, None] + 0.1) * (1.0 / 50.0 ** (np.arange(rd // 2) / (rd // 2)))[None, :]
    ang = pos if form == "halves" else np.concatenate([pos, pos], axis=-1)
    c, s = (_cut_rows(b, b.const(t, stem=n), x, 1, near, n == "sin_cache")
            for t, n in ((np.cos(ang), "cos_cache"), (np.sin(ang), "sin_cache")))
    if near == "cut-shared":
        b.output(b.op("Identity", [c]))
    c, s = _place_rows(b, c, layout, False), _place_rows(b, s, layout, False)
    outs = []
    for _ in range(1 if b.p(0.6) else 2):   # q, and k on the same tables
        def rotate(xr):
            if form == "halves":
                return _rotate_halves(b, *_halves(b, xr, rd, b.pick(["slices", "split"])), c, s, "none")
            return _half(b, xr, c, s, rd, "none")

        y = rotate_partial(b, _heads(b, x, d, heads, dh, layout), rd, dh, rotate)
        outs.append(_merge(b, y, heads, dh, layout))
    if len(outs) == 2:
        b.output(outs[1])
    return outs[0]


BUILDERS = {"zero_mask": motif_zero_mask, "cast_chain": motif_cast_chain, "split_seq": motif_split_seq,
            "rope_cut": motif_rope_cut}


def build_s40(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
