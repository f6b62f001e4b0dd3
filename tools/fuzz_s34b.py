"""Fuzz motifs for rotary embeddings read by value (optimizer/rewrite/_rotation_tables.py: rotation_pair proves cos /
sin one rotation, table_layout reads the positions axis from the tables' dims), which the older rope motifs
(fuzz_motifs.motif_rope, fuzz_idioms' row / stack ropes, fuzz_decoder's tables) mostly draw as rotate-half:

  rotary  q (and k, sharing the tables half the time) projected from the hidden state and viewed as heads in the
          layout bhsd [B, H, S, D], bshd [B, S, H, D] or sbhd [S, B, H, D], rotated over the full head or its first
          half (partial rotary, the rest passed through), as
            complex  re = x0 cos - x1 sin, im = x0 sin + x1 cos of x's column pairs, read by step-2 Slices (the
                     pairs re-interleaved by Unsqueeze + Concat) or by the pairs view [.., D/2, 2]
            half     x cos + rotate_half(x) sin over tables of width D (cos(cat(f, f)))
          with tables that are constants (placed in the layout, or [S, w] broadcast, or unsqueezed in the graph),
          computed Cos / Sin of an input's angles (one row or one per batch row), or rows of a constant buffer
          gathered by position ids or cut at run time ([p, p + S), p a past length); both tables times one number sometimes (HF's attention_scaling).

Near misses (traps) a value-reading recognizer must get right: sin of other angles, sin negated, cos and sin
swapped, only cos scaled, tables that vary over the heads instead of the positions, tables that differ per batch
row (sbhd: [S, B, 1, w]); a complex product whose halves are concatenated instead of re-interleaved, a reflection
(re = x0 c + x1 s, im = x0 s - x1 c), re negated (x1 s - x0 c), im's cos another table; rotate-half over
interleave-repeated (GPT-J) tables, with the sign on the other half, or with no sign (cat(x2, x1)). Some of them are still
rotations (negated or swapped: the rotation by -a or pi/2 - a; the halves side by side: rotate-half of x's columns
regrouped, which rotary-halves takes), which a rewrite may take if it uses the tables' values; the harness only
checks the values.

fuzz_motifs.make_case draws a case of this family for S34B_SHARE of the seeds from a side stream of its own
(S34B_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np

from fuzz_motifs import I64, Builder, Dim, build_family

#: share of the motif-graph seeds that are rotary cases (a side stream of the seed decides)
S34B_SHARE = 0.06
#: the side stream that picks them (under it no seed a test names, and none of the first 120 that
#: test_fuzz_control_flow counts Ifs on, becomes one)
S34B_SALT = 0x3B7E
LAYOUTS = ("bhsd", "bshd", "sbhd")
STYLES = ("complex", "pairs", "half")
TABLES = ("const", "computed", "gathered")
#: near misses of the tables (any style) and of the product (style-specific)
TABLE_NEAR = ("angles-differ", "sin-negated", "swapped", "cos-scaled", "heads")
COMPLEX_NEAR = ("out-halves", "reflection", "re-negated", "im-other-cos")
HALF_NEAR = ("gptj-tables", "half-sign", "half-no-neg")
NEAR = (*TABLE_NEAR, *COMPLEX_NEAR, *HALF_NEAR)
BIG = np.iinfo(np.int64).max
_HEAD_AXIS = {"bhsd": 1, "bshd": 2, "sbhd": 2}


def _angles(b: Builder, rows: int, batch: int, w: int) -> np.ndarray:
    """[batch, rows, w] rotary angles pos * base^(-i / w), each batch row's positions shifted (left padding)."""
    pos = np.arange(rows)[None, :, None] + 0.7 * np.arange(batch)[:, None, None]
    return pos * (1.0 / 50.0 ** (np.arange(w) / max(w, 1)))[None, None, :] + 0.1 * b.rng.standard_normal([1, 1, w])


def _widen(ang: np.ndarray, style: str, near: str) -> np.ndarray:
    """complex tables hold one angle a column pair; rotate-half's cat(a, a) (GPT-J's interleave near miss)."""
    if style != "half":
        return ang
    return np.repeat(ang, 2, axis=-1) if near == "gptj-tables" else np.concatenate([ang, ang], axis=-1)


def _layout_values(t: np.ndarray, layout: str, pairs: bool) -> np.ndarray:
    """[Bt, S, w] -> the table broadcast against x in ``layout`` (a trailing 1 for the pairs view)."""
    t = t[:, None] if layout == "bhsd" else t[:, :, None] if layout == "bshd" else t.transpose(1, 0, 2)[:, :, None]
    return t[..., None] if pairs else t


def _place(b: Builder, t: str, layout: str, pairs: bool) -> str:
    """The graph's way to _layout_values: Unsqueeze (after a Transpose for sbhd)."""
    if layout == "sbhd":
        t = b.op("Transpose", [t], perm=[1, 0, 2])
    axis = 1 if layout == "bhsd" else 2
    return b.op("Unsqueeze", [t, b.ints([axis, 4] if pairs else [axis])])


def _place_rows(b: Builder, t: str, layout: str, pairs: bool) -> str:
    """[S, w] rows unsqueezed straight to the layout (seq-first code writes [:, None, None, :])."""
    axes = {"bhsd": [0, 1], "bshd": [0, 2], "sbhd": [1, 2]}[layout]
    return b.op("Unsqueeze", [t, b.ints(axes + [4] if pairs else axes)])


def _const_tables(b: Builder, ang_c, ang_s, layout: str, pairs: bool, heads: int) -> tuple[str, str]:
    c, s = np.cos(ang_c), np.sin(ang_s)
    if ang_c.shape[0] == 1 and b.p(0.3) and layout == "bhsd":   # [S, w] broadcast over batch and heads
        b.trap("table-rank2")
        return tuple(b.const(t[0][..., None] if pairs else t[0], stem=n) for t, n in ((c, "cos"), (s, "sin")))
    if b.p(0.5):
        return tuple(b.const(_layout_values(t, layout, pairs), stem=n) for t, n in ((c, "cos"), (s, "sin")))
    return tuple(_place(b, b.const(t, stem=n), layout, pairs) for t, n in ((c, "cos"), (s, "sin")))


def _heads_tables(b: Builder, ang, layout: str, pairs: bool, heads: int) -> tuple[str, str]:
    """Near miss: the angles vary over the heads (x's head axis), the same at every position."""
    per_head = ang[0, :1].repeat(heads, 0) * (1.0 + np.arange(heads))[:, None]    # [H, w]
    shape = [1, 1, 1, per_head.shape[-1]]
    shape[_HEAD_AXIS[layout]] = heads
    t = per_head.reshape(shape)
    t = t[..., None] if pairs else t
    return b.const(np.cos(t), stem="cos"), b.const(np.sin(t), stem="sin")


def _cut(b: Builder, buf: str, x: str, spare: int) -> str:
    """The buffer's rows [p, p + S) cut at run time (S read off the hidden state x, p a past length fed 0..spare,
    p and p + S shared by both tables, as exporters write them): rows no shape inference knows."""
    if not hasattr(b, "past_len"):
        b.past_len = b.input([1], dtype=I64, stem="past_len")
        b.feeds[b.past_len] = np.array([int(b.rng.integers(spare + 1))], np.int64)
        b.cut_end = b.op("Add", [b.past_len, b.op("Shape", [x], start=1, end=2)])
    return b.op("Slice", [buf, b.past_len, b.cut_end, b.ints([0])])


def _tables(b: Builder, x: str, bsz: Dim, seq: Dim, heads: int, w: int, layout: str, style: str, near: str):
    """cos and sin in ``layout``; w the angles a row holds (the rotated width / 2)."""
    pairs = style == "pairs"
    mode = b.pick(TABLES)
    static = isinstance(seq, int)
    if near == "heads":
        return _heads_tables(b, _widen(_angles(b, 1, 1, w), style, near), layout, pairs, heads)
    if mode == "const" and not static:
        mode = "computed"
    if near == "gptj-tables":
        mode = "const" if static else "gathered"
    per_batch = b.p(0.35) and (mode != "const" or isinstance(bsz, int))
    bt = b.rt(bsz) if per_batch else 1
    b.trap(f"tables-{mode}")
    if per_batch:
        b.trap("tables-per-batch")
    if mode == "const":
        ang = _widen(_angles(b, seq, bt, w), style, near)
        other = _widen(_angles(b, seq, bt, w) * 1.3 + 0.2, style, near) if near == "angles-differ" else ang
        c, s = _const_tables(b, ang, other, layout, pairs, heads)
    elif mode == "gathered":
        rows = b.rt(seq) + int(b.pick([0, 3]))
        ang = _widen(_angles(b, rows, 1, w)[0], style, near)
        other = _widen(_angles(b, rows, 1, w)[0] * 1.3 + 0.2, style, near) if near == "angles-differ" else ang
        if np.random.default_rng([getattr(b, "seed", 0), 0xC07]).random() < 0.4:   # a side stream: the draws stay
            b.trap("tables-cut")
            c, s = (_place_rows(b, _cut(b, b.const(t, stem=n), x, rows - b.rt(seq)), layout, pairs)
                    for t, n in ((np.cos(ang), "cos_cache"), (np.sin(other), "sin_cache")))
        else:
            pos = b.input([bsz, seq], dtype=I64, stem="position_ids", kind="position")
            if per_batch and b.rt(bsz) > 1:   # rows shifted per batch row (left padding)
                b.feeds[pos] = np.minimum(b.feeds[pos] + np.arange(b.rt(bsz))[:, None], rows - 1)
            c = _place(b, b.op("Gather", [b.const(np.cos(ang), stem="cos_cache"), pos]), layout, pairs)
            s = _place(b, b.op("Gather", [b.const(np.sin(other), stem="sin_cache"), pos]), layout, pairs)
    else:
        f = b.input([bsz if per_batch else 1, seq, w], stem="freqs", kind="normal")
        g = b.input([bsz if per_batch else 1, seq, w], stem="freqs_b") if near == "angles-differ" else f
        if style == "half":
            f, g = (b.op("Concat", [t, t], axis=-1) for t in (f, g))
        c, s = _place(b, b.op("Cos", [f]), layout, pairs), _place(b, b.op("Sin", [g]), layout, pairs)
    if b.p(0.15):   # both times one number (HF's attention_scaling)
        b.trap("tables-scaled")
        k = b.scalar(1.25)
        c, s = b.op("Mul", [c, k]), b.op("Mul", [k, s] if b.p(0.5) else [s, k])
    if near == "sin-negated":
        s = b.op("Neg", [s])
    elif near == "swapped":
        c, s = s, c
    elif near == "cos-scaled":
        c = b.op("Mul", [c, b.scalar(1.25)])
    return c, s


def _mul(b: Builder, a: str, t: str) -> str:
    return b.op("Mul", [a, t] if b.p(0.5) else [t, a])


def _complex(b: Builder, xr: str, c: str, s: str, rd: int, pairs: bool, near: str) -> str:
    """re = x0 c - x1 s, im = x0 s + x1 c of xr's column pairs, re-interleaved to [.., rd]."""
    if pairs:
        xp = b.op("Reshape", [xr, b.ints([0, 0, 0, rd // 2, 2])])
        x0 = b.op("Slice", [xp, b.ints([0]), b.ints([1]), b.ints([-1])])
        x1 = b.op("Slice", [xp, b.ints([1]), b.ints([2 if b.p(0.5) else BIG]), b.ints([-1])])
    else:
        x0 = b.op("Slice", [xr, b.ints([0]), b.ints([BIG if b.p(0.7) else rd]), b.ints([-1]), b.ints([2])])
        x1 = b.op("Slice", [xr, b.ints([1]), b.ints([BIG if b.p(0.7) else rd]), b.ints([-1]), b.ints([2])])
    c_im = b.op("Mul", [c, b.scalar(0.8)]) if near == "im-other-cos" else c
    re_op, im_op = ("Add", "Sub") if near == "reflection" else ("Sub", "Add")   # reflection: [[c, s], [s, -c]]
    re = b.op(re_op, [_mul(b, x1, s), _mul(b, x0, c)] if near == "re-negated" else [_mul(b, x0, c), _mul(b, x1, s)])
    im = b.op(im_op, [_mul(b, x0, s), _mul(b, x1, c_im)] if b.p(0.5) or im_op == "Sub" else
              [_mul(b, x1, c_im), _mul(b, x0, s)])
    if pairs:
        st = b.op("Concat", [re, im], axis=-1)
    elif near == "out-halves":   # the pairs' halves side by side: not x's column order
        return b.op("Concat", [re, im], axis=-1)
    else:
        st = b.op("Concat", [b.op("Unsqueeze", [t, b.ints([-1])]) for t in (re, im)], axis=-1)
    return b.op("Reshape", [st, b.ints([0, 0, 0, rd])])


def _half(b: Builder, xr: str, c: str, s: str, rd: int, near: str) -> str:
    """xr cos + rotate_half(xr) sin (rotate_half: cat(-x2, x1); the half-sign near miss: cat(x2, -x1))."""
    x1 = b.op("Slice", [xr, b.ints([0]), b.ints([rd // 2]), b.ints([-1])])
    x2 = b.op("Slice", [xr, b.ints([rd // 2]), b.ints([BIG if b.p(0.5) else rd]), b.ints([-1])])
    if near == "half-no-neg":   # [[c, s], [s, c]]: no rotation
        return b.op("Add", [_mul(b, xr, c), _mul(b, b.op("Concat", [x2, x1], axis=-1), s)])
    r = b.op("Concat", [x2, b.op("Neg", [x1])] if near == "half-sign" else [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [_mul(b, xr, c), _mul(b, r, s)])


def rotate_partial(b: Builder, x4: str, rd: int, dh: int, rotate) -> str:
    """``rotate`` of x4's first rd columns, the other dh - rd passed through (a partial rotary where rd < dh)."""
    xr = b.op("Slice", [x4, b.ints([0]), b.ints([rd]), b.ints([-1])]) if rd < dh else x4
    y = rotate(xr)
    if rd < dh:
        y = b.op("Concat", [y, b.op("Slice", [x4, b.ints([rd]), b.ints([BIG]), b.ints([-1])])], axis=-1)
    return y


def _heads(b: Builder, x: str, d: int, heads: int, dh: int, layout: str) -> str:
    x4 = b.op("Reshape", [b.op("MatMul", [x, b.weight([d, heads * dh])]), b.ints([0, 0, heads, dh])])
    if layout == "bhsd":
        return b.op("Transpose", [x4], perm=[0, 2, 1, 3])
    return b.op("Transpose", [x4], perm=[1, 0, 2, 3]) if layout == "sbhd" else x4


def _merge(b: Builder, y: str, heads: int, dh: int, layout: str) -> str:
    if layout != "bshd":
        y = b.op("Transpose", [y], perm=[0, 2, 1, 3] if layout == "bhsd" else [1, 0, 2, 3])
    return b.op("Reshape", [y, b.ints([0, 0, heads * dh])])


def motif_rotary(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, seq, d = shape
    layout, style = b.pick(LAYOUTS), b.pick(STYLES)
    dh = int(b.pick([4, 8, 16, 64]))
    heads = int(b.pick([1, 2, 3]))
    rd = dh // 2 if dh % 8 == 0 and b.p(0.25) else dh
    pool = TABLE_NEAR + (COMPLEX_NEAR if style == "complex" else HALF_NEAR if style == "half" else COMPLEX_NEAR[1:])
    near = b.pick(pool) if b.p(0.4) else "none"
    if near == "heads" and heads == 1:
        near = "none"
    for t in (f"rotary-{layout}", f"rotary-{style}", *(["rotary-partial"] if rd < dh else []),
              *([f"near-{near}"] if near != "none" else [])):
        b.trap(t)
    c, s = _tables(b, x, bsz, seq, heads, rd // 2, layout, style, near)
    b.maybe_expose(c, 0.04)
    outs = []
    for _ in range(1 if b.p(0.5) else 2):   # q, and k on the same tables
        y = rotate_partial(b, _heads(b, x, d, heads, dh, layout), rd, dh,
                           lambda xr: _half(b, xr, c, s, rd, near) if style == "half" else
                           _complex(b, xr, c, s, rd, style == "pairs", near))
        outs.append(_merge(b, y, heads, dh, layout))
    if len(outs) == 2:
        b.output(outs[1])
    return outs[0]


S34B = {"rotary": motif_rotary}


def build_s34b(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A rotary motif (drawn, or ``name``) on a fresh hidden state (fuzz_motifs.build_family)."""
    return build_family(b, opset, S34B, name)
