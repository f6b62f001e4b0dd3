"""Fuzz motifs for session 38's rewrites, which no other family draws as such, each with its traps:

  rope_halves   the rotary written half by half, y = concat(a cos - b sin, b cos + a sin), a / b the halves of
                q's rotated width (contiguous Slices, a Split, or the even / odd columns), in the layouts bhsd /
                bshd / sbhd and packed patches [S, H, D] (shd), over tables of width D/2 (constant, computed,
                gathered; fuzz_s34b's tables; [S, 1, D/2] for shd), partial
                rotary sometimes, q and k on one pair of tables sometimes. Traps: the sign on the other product
                (a rotation by -angle: still a rotary), the halves concatenated the other way round, cos in both
                products of one half, the tables varying over the heads, b broadcast over the heads, sin of
                other angles.
  rope_packed   rotate-half over packed patches x [S, H, D] (no batch axis), tables [S, 1, D] constant or computed,
                partial rotary sometimes. Traps: tables over the heads, sin of other angles, the sign on the other
                half, no sign, GPT-J's interleaved tables.
  cast_where    Cast(Where(cond, c1, c2)) of constants c1 / c2 added to attention scores before a Softmax: a
                float32 mask cast to a float16 graph's dtype (float32's lowest becomes -inf), or a float16 one
                cast up, or (float16) a float32 softmax island's mask, which the attention rewrite casts to q's
                dtype; c1 / c2 scalars or [1]. Traps: c2 a graph input or an initializer listed as one (an
                overridable default), a NaN constant, the Where read elsewhere, a cast to int32 (then multiplied),
                a cast to bool.

fuzz_motifs.make_case draws a case of this family for S39_SHARE of the seeds from a side stream of its own
(S39_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import I64, Builder, Dim, build_one_motif
from fuzz_s34b import BIG, _angles, _half, _heads, _merge, _tables, _widen, rotate_partial

#: share of the motif-graph seeds that are session-39 cases (a side stream of the seed decides)
S39_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S39_SALT = 0x55DE
MOTIFS = ("rope_halves", "rope_packed", "cast_where")
LAYOUTS = ("bhsd", "bshd", "sbhd", "shd")
HALVES = ("slices", "split", "strided")
HALVES_NEAR = ("sign-other", "cat-swapped", "cos-twice", "heads", "b-broadcast", "angles-differ")
PACKED_NEAR = ("heads", "angles-differ", "half-sign", "half-no-neg", "gptj-tables")
MASK_CONSTS = ("zero-lowest", "zero-ninf", "zero-1e4", "one-zero")
WHERE_NEAR = ("other-input", "default-input", "nan", "where-shared", "int-cast", "bool-cast")
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _halves(b: Builder, xr: str, rd: int, form: str) -> tuple[str, str]:
    """xr's two halves of the rotated width rd: [0, rd/2) and [rd/2, rd), or the even and odd columns."""
    h = rd // 2
    if form == "split":
        return tuple(b.op("Split", [xr, b.ints([h, h])], n_out=2, axis=-1))
    if form == "strided":
        return (b.op("Slice", [xr, b.ints([0]), b.ints([BIG]), b.ints([-1]), b.ints([2])]),
                b.op("Slice", [xr, b.ints([1]), b.ints([BIG]), b.ints([-1]), b.ints([2])]))
    return (b.op("Slice", [xr, b.ints([0]), b.ints([h]), b.ints([-1])]),
            b.op("Slice", [xr, b.ints([h]), b.ints([BIG if b.p(0.5) else rd]), b.ints([-1])]))


def _mul(b: Builder, x: str, t: str) -> str:
    return b.op("Mul", [x, t] if b.p(0.5) else [t, x])


def _rotate_halves(b: Builder, a: str, bb: str, c: str, s: str, near: str) -> str:
    """concat(a c - b s, b c + a s) (the near misses' variants of it)."""
    lo = b.op("Sub", [_mul(b, a, c), _mul(b, bb, s)])
    if near == "sign-other":   # a c + b s, b c - a s: the rotation by -angle
        lo = b.op("Add", [_mul(b, a, c), _mul(b, bb, s)])
        hi = b.op("Sub", [_mul(b, bb, c), _mul(b, a, s)])
    else:
        s_hi = c if near == "cos-twice" else s
        hi = b.op("Add", [_mul(b, bb, c), _mul(b, a, s_hi)] if b.p(0.5) else [_mul(b, a, s_hi), _mul(b, bb, c)])
    return b.op("Concat", [hi, lo] if near == "cat-swapped" else [lo, hi], axis=-1)


def _packed_tables(b: Builder, seq: Dim, heads: int, w: int, style: str, near: str) -> tuple[str, str]:
    """cos / sin [S, 1, w'] of packed patches x [S, H, D] (w' = w; rotate-half's cat(a, a): 2 w), constant or
    computed from an input's angles; near misses: tables over the heads [1, H, w'], sin of other angles, GPT-J's
    interleaved tables."""
    if near == "heads":
        ang = _widen((1.0 + np.arange(heads))[:, None] * (1.0 / 50.0 ** (np.arange(w) / w))[None, :], style, near)
        return b.const(np.cos(ang)[None], stem="cos"), b.const(np.sin(ang)[None], stem="sin")
    if isinstance(seq, int) and b.p(0.5):
        b.trap("packed-const")
        ang = _angles(b, seq, 1, w)[0]
        other = ang * 1.3 + 0.2 if near == "angles-differ" else ang
        c, s = np.cos(_widen(ang, style, near)), np.sin(_widen(other, style, near))
        if b.p(0.5):
            return b.const(c[:, None], stem="cos"), b.const(s[:, None], stem="sin")
        return tuple(b.op("Unsqueeze", [b.const(t, stem=n), b.ints([1])]) for t, n in ((c, "cos"), (s, "sin")))
    b.trap("packed-computed")
    f = b.input([seq, w], stem="freqs")
    g = b.input([seq, w], stem="freqs_b") if near == "angles-differ" else f
    if style == "half":
        f, g = (b.op("Concat", [t, t], axis=-1) for t in (f, g))
    return tuple(b.op("Unsqueeze", [b.op(op, [t]), b.ints([1])]) for op, t in (("Cos", f), ("Sin", g)))


def _packed_heads(b: Builder, x: str, d: int, heads: int, dh: int) -> str:
    return b.op("Reshape", [b.op("MatMul", [x, b.weight([d, heads * dh])]),
                            b.ints([0, heads, dh] if b.p(0.5) else [-1, heads, dh])])


def motif_rope_halves(b: Builder, opset: int) -> str:
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 5), 0.6)
    d = int(b.pick([16, 32]))
    layout, form = b.pick(LAYOUTS), b.pick(HALVES)
    x = b.input([seq, d] if layout == "shd" else [bsz, seq, d], stem="hidden")
    dh = int(b.pick([4, 8, 16]))
    heads = int(b.pick([1, 2, 3]))
    rd = dh // 2 if dh % 8 == 0 and b.p(0.25) else dh
    near = b.pick(["none"] * 6 + list(HALVES_NEAR))
    if near in ("heads", "b-broadcast") and heads == 1:
        near = "none"
    for t in (f"halves-{layout}", f"halves-{form}", *(["halves-partial"] if rd < dh else []),
              *([f"near-{near}"] if near != "none" else [])):
        b.trap(t)
    table_near = near if near in ("heads", "angles-differ") else "none"
    if layout == "shd":   # packed patches [S, H, D] (a vision tower's), tables [S, 1, D/2]
        c, s = _packed_tables(b, seq, heads, rd // 2, "complex", table_near)
    else:                 # fuzz_s34b's tables of one angle per column pair (its "complex" style: width rd / 2)
        c, s = _tables(b, x, bsz, seq, heads, rd // 2, layout, "complex", table_near)
    outs = []
    for _ in range(1 if b.p(0.6) else 2):   # q, and k on the same tables
        def rotate(xr):
            a, bb = _halves(b, xr, rd, form)
            if near == "b-broadcast":   # b is one head's half, broadcast over the heads
                bb = b.op("Slice", [bb, b.ints([0]), b.ints([1]), b.ints([{"bhsd": 1, "shd": 1}.get(layout, 2)])])
            return _rotate_halves(b, a, bb, c, s, near)

        x4 = _packed_heads(b, x, d, heads, dh) if layout == "shd" else _heads(b, x, d, heads, dh, layout)
        y = rotate_partial(b, x4, rd, dh, rotate)
        outs.append(b.op("Reshape", [y, b.ints([0, heads * dh])]) if layout == "shd" else
                    _merge(b, y, heads, dh, layout))
    if len(outs) == 2:
        b.output(outs[1])
    return outs[0]


def motif_rope_packed(b: Builder, opset: int) -> str:
    """rotate-half over packed patches x [S, H, D] (no batch axis: Qwen2-VL-style vision towers), tables [S, 1, D]."""
    seq = b.dim("seq", (3, 4, 6), 0.6)
    d = int(b.pick([16, 32]))
    x = b.input([seq, d], stem="patches")
    dh = int(b.pick([4, 8, 16]))
    heads = int(b.pick([1, 2, 3]))
    rd = dh // 2 if dh % 8 == 0 and b.p(0.25) else dh
    near = b.pick(["none"] * 5 + list(PACKED_NEAR))
    if near == "heads" and heads == 1:
        near = "none"
    for t in (*(["packed-partial"] if rd < dh else []), *([f"near-{near}"] if near != "none" else [])):
        b.trap(t)
    c, s = _packed_tables(b, seq, heads, rd // 2, "half", near)
    outs = []
    for _ in range(1 if b.p(0.6) else 2):   # q, and k on the same tables
        y = rotate_partial(b, _packed_heads(b, x, d, heads, dh), rd, dh, lambda xr: _half(b, xr, c, s, rd, near))
        outs.append(b.op("Reshape", [y, b.ints([0, heads * dh])]))
    if len(outs) == 2:
        b.output(outs[1])
    return outs[0]


def _mask_values(kind: str, from_type: int) -> tuple[float, float]:
    low = float(np.finfo(np.float32 if from_type == F32 else np.float16).min)
    return {"zero-lowest": (0.0, low), "zero-ninf": (0.0, -np.inf), "zero-1e4": (0.0, -1e4),
            "one-zero": (1.0, 0.0)}[kind]


def _condition(b: Builder, bsz: Dim, seq: Dim, kv: Dim) -> str:
    """A [B|1, 1, S|1, T] bool: a key padding mask from a 0/1 input, a causal compare of positions, or a bool input."""
    kind = b.pick(["padding", "causal", "bool"])
    b.trap(f"cond-{kind}")
    if kind == "padding":
        m = b.input([bsz, kv], dtype=I64, stem="attention_mask", kind="mask01")
        eq = b.op("Equal", [m, b.const(np.array(1, np.int64), I64)])
        return b.op("Unsqueeze", [eq, b.ints([1, 2])])
    if kind == "causal":
        rows = b.op("Range", [b.const(np.array(0, np.int64), I64), b.op("Squeeze", [b.op("Shape", [b.q], start=2,
                                                                                          end=3)]),
                              b.const(np.array(1, np.int64), I64)])
        cols = b.op("Range", [b.const(np.array(0, np.int64), I64), b.op("Squeeze", [b.op("Shape", [b.k], start=2,
                                                                                          end=3)]),
                              b.const(np.array(1, np.int64), I64)])
        # key j visible to query i when j <= i + (T - S) (the past before the queries)
        off = b.op("Sub", [b.op("Shape", [b.k], start=2, end=3), b.op("Shape", [b.q], start=2, end=3)])
        lim = b.op("Add", [b.op("Unsqueeze", [rows, b.ints([1])]), off])
        return b.op("LessOrEqual", [b.op("Unsqueeze", [cols, b.ints([0])]), lim])
    keep = b.input([bsz, 1, 1, kv], dtype=TensorProto.BOOL, stem="keep")
    arr = b.rng.random(b.feeds[keep].shape) < 0.7
    arr[..., 0] = True   # every row keeps a key
    b.feeds[keep] = arr
    return keep


def motif_cast_where(b: Builder, opset: int) -> str:
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 4), 0.5)
    kv = seq if b.p(0.5) else b.dim("kv", (4, 6), 0.6)
    if seq == 1:   # one static query row: a causal mask keeps every key, so the whole mask may go
        b.trap("one-query")
    heads, dh = int(b.pick([1, 2])), int(b.pick([4, 8]))
    b.q = b.input([bsz, heads, seq, dh], stem="q")
    b.k = b.input([bsz, heads, kv, dh], stem="k")
    v = b.input([bsz, heads, kv, dh], stem="v")
    near = b.pick(["none"] * 6 + list(WHERE_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    cond = _condition(b, bsz, seq, kv)
    # a float16 graph's float32 mask cast down; a float32 graph's float16 one cast up
    from_type = F32 if b.dtype == F16 else F16
    consts = b.pick(MASK_CONSTS)
    b.trap(f"mask-{consts}")
    keep, drop = _mask_values(consts, from_type)
    if near == "nan":
        keep = float("nan")
    shape = b.pick([(), (1,)])
    c1 = b.const(np.full(shape, keep), from_type)
    c2 = (b.input([1], dtype=from_type, stem="fill") if near == "other-input"
          else b.const(np.full((1,) if near == "default-input" else b.pick([(), (1,)]), drop), from_type,
                       as_input=near == "default-input"))   # (a 0-d default's overriding feed would be a NumPy scalar)
    if near == "other-input":
        b.feeds[c2] = np.array([drop], dtype=b.np_dtype(from_type))
    w = b.op("Where", [cond, c1, c2])
    if near == "where-shared":
        b.output(b.op("Identity", [w]))
    scores = b.op("Mul", [b.op("MatMul", [b.q, b.op("Transpose", [b.k], perm=[0, 1, 3, 2])]),
                          b.scalar(1.0 / np.sqrt(dh))])
    if near in ("int-cast", "bool-cast"):
        to = TensorProto.INT32 if near == "int-cast" else TensorProto.BOOL
        m = b.op("Cast", [w], to=int(to))
        if to == TensorProto.BOOL:   # where the mask's value is non-zero the score is dropped
            masked = b.op("Where", [m, b.scalar(-1e4 if consts != "one-zero" else 0.0), scores])
        else:
            masked = b.op("Add", [scores, b.op("Cast", [b.op("Mul", [m, b.const(np.array(1, np.int32),
                                                                                 TensorProto.INT32)])],
                                              to=int(b.dtype))])
    elif b.dtype == F16 and consts != "one-zero" and b.p(0.4):
        # a float32 softmax island: the float32 mask is added to the scores cast up, no Cast of its own (the
        # attention rewrite writes the one that gives it q's dtype)
        b.trap("mask-island")
        masked = b.op("Add", [b.op("Cast", [scores], to=int(F32)), w])
        return b.op("MatMul", [b.op("Cast", [b.op("Softmax", [masked], axis=-1)], to=int(F16)), v])
    else:
        m = b.op("Cast", [w], to=int(b.dtype))
        b.maybe_expose(m, 0.04)
        if consts == "one-zero":   # a 1 / 0 keep mask turned into a bias: (1 - m) * -1e4
            m = b.op("Mul", [b.op("Sub", [b.scalar(1.0), m]), b.scalar(-1e4)])
        masked = b.op("Add", [scores, m] if b.p(0.5) else [m, scores])
    return b.op("MatMul", [b.op("Softmax", [masked], axis=-1), v])


BUILDERS = {"rope_halves": motif_rope_halves, "rope_packed": motif_rope_packed, "cast_where": motif_cast_where}


def build_s39(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
