"""Fuzz motifs for the exporter idioms the fourth hold-out sweep fixed (docs/holdout.md, "Fourth
sweep" root causes), so that a regression in their rules shows up in a fuzz pass:

  baddbmm        attention on [B*H, S, D] views whose scores are baddbmm(zeros(B*H, S, T), q, k^T):
                 zeros of a shape read at run time added to the scores (GPT-NeoX 4.38), sometimes
                 with the inverted causal select where(causal, scores, min) on the 4-D view before
                 the padding mask
  select_scale   the scale after the causal select, where(causal, q k^T, min) / scale (GPT-J 4.38)
  mask_scale     the mask added before the scale, softmax((q k^T + mask) / scale) (CodeGen 4.57)
  shared_mask    two layers whose masked_fill reads one Expand(mask, Shape(layer 0's scores))
                 (DistilBERT after CSE)
  key_view       K^T as a view of the permuted key, k.permute(0, 2, 3, 1).reshape(B*H, D, T)
                 (BLOOM 4.38)
  row_rope       rotary tables without a batch axis: cos/sin(concat(f, f)) of f [rows, rd/2],
                 lifted by Unsqueezes and cut to x's length (ESM 4.57)
  stack_rope     tables stacked and read back by Gather (torch.stack([cos, sin])[i]) on a
                 seq-first x [S, B, H, D] (wav2vec2-conformer 4.57)
  max_shift      softmax(t - max(t)) with the row maximum written out (MiMo-V2-Flash; session 32's
                 value-based softmax-max-shift): ReduceMax keepdims=1, or keepdims=0 re-expanded by
                 an Unsqueeze or a Reshape, through Identity / Expand; the maximum taken before the
                 monotone ops that made t (a positive scale, an offset, a float Cast); a power-of-two
                 Div / Mul after the shift, or CogView's PB-Relax (s / a - max(s / a)) * a. Near misses
                 the rule must refuse: a row minimum or mean, a maximum over another axis or re-inserted
                 on another axis, ops above the maximum that are not t's, a scale that is not a power of
                 two, and a scale up with no scale-down under t over a fill that it overflows (a row
                 with every key masked, its mask a -inf / lowest / large finite fill)

Each is a motif on the hidden state [B, S, D] (tools/fuzz_motifs.py's signature: builder, hidden,
shape, opset -> hidden), with the builder's dims (symbolic or not, often 1 at run time), dtype and
traps; the near misses a rule must refuse are drawn too (a finite fill, an Expand of the mask to
other dims), as traps. fuzz_motifs.make_case draws an idiom case for a share of the seeds
(IDIOM_SHARE) from a side stream, so the other seeds' graphs stay what they were.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import F16, F32, HEAD_SIZES, Builder, Dim, _proj, _reduce, _rope

BOOL = TensorProto.BOOL


# --- shared pieces ---------------------------------------------------------------------------


def _lowest(b: Builder) -> float:
    return float(np.finfo(b.np_dtype()).min)


def _heads(b: Builder) -> tuple[int, int]:
    return int(b.pick([1, 2, 4])), int(b.pick(HEAD_SIZES))


def _qkv(b: Builder, x: str, d: int, heads: int, dh: int) -> tuple[str, str, str]:
    """q, k, v [B, S, heads*dh] projected from the hidden state (sometimes with a bias)."""
    bias = b.p(0.5)
    return tuple(_proj(b, x, d, heads * dh, bias) for _ in range(3))


def _to_heads(b: Builder, t: str, heads: int, dh: int) -> str:
    """[B, S, H*dh] -> [B, H, S, dh]"""
    return b.op("Transpose", [b.op("Reshape", [t, b.ints([0, 0, heads, dh])])], perm=[0, 2, 1, 3])


def _merge(b: Builder, o4: str, d_model: int, d: int) -> str:
    """[B, H, S, dh] -> [B, S, d] (an output projection when the widths differ)."""
    y = b.op("Reshape", [b.op("Transpose", [o4], perm=[0, 2, 1, 3]), b.ints([0, 0, d_model])])
    return y if d == d_model else _proj(b, y, d_model, d, b.p(0.5))


def _run_dims(b: Builder, t: str, heads: int) -> tuple[str, str, str]:
    """TorchScript's shape arithmetic on t [B, S, ...]: (B, S, B*H) as [1] int64 vectors."""
    sh = b.op("Shape", [t])
    if b.p(0.5):
        bb, ss = b.op("Gather", [sh, b.ints([0])], axis=0), b.op("Gather", [sh, b.ints([1])], axis=0)
    else:
        bb = b.op("Slice", [sh, b.ints([0]), b.ints([1])])
        ss = b.op("Slice", [sh, b.ints([1]), b.ints([2])])
    return bb, ss, b.op("Mul", [bb, b.ints([heads])])


def _cat(b: Builder, parts: list) -> str:
    """A shape vector from [1] int64 values and literal ints."""
    return b.op("Concat", [p if isinstance(p, str) else b.ints([p]) for p in parts], axis=0)


def _causal(b: Builder, seq: Dim, src: str) -> str:
    """A bool [1, 1, S, S] lower triangle: a graph input, or a Trilu of ones sized at run time by
    src [B, S, ...]."""
    n = b.rt(seq)
    if b.p(0.5):
        name = b.name("causal")
        b.inputs.append(oh.make_tensor_value_info(name, BOOL, [1, 1, seq, seq]))
        b.feeds[name] = np.tril(np.ones((n, n), bool))[None, None]
        return name
    b.trap("causal-computed")
    s = b.op("Gather", [b.op("Shape", [src]), b.ints([1])], axis=0)
    ones = b.op("ConstantOfShape", [b.op("Concat", [s, s], axis=0)],
                value=oh.make_tensor("one", TensorProto.BOOL, [1], [True]))
    tri = b.op("Trilu", [b.op("Cast", [ones], to=TensorProto.INT64)], upper=0)
    return b.op("Cast", [b.op("Unsqueeze", [tri, b.ints([0, 1])])], to=BOOL)


def _pad_mask(b: Builder, bsz: Dim, seq: Dim) -> str:
    """An additive [B, 1, 1, S] mask from a 0/1 attention_mask (the last batch row half padded)."""
    am = b.input([bsz, seq], dtype=TensorProto.INT64, stem="attention_mask", kind="mask01")
    inv = b.op("Sub", [b.scalar(1.0), b.op("Cast", [am], to=b.dtype)])
    return b.op("Unsqueeze", [b.op("Mul", [inv, b.scalar(_lowest(b))]), b.ints([1, 2])])


def _fill(b: Builder) -> str:
    """The masked_fill value: the dtype's lowest; a finite -1 is a near miss (not a mask)."""
    if b.p(0.1):
        b.trap("finite-fill")
        return b.scalar(-1.0)
    return b.scalar(_lowest(b))


def _scale(b: Builder, sc: str, dh: int) -> str:
    if b.p(0.5):
        return b.op("Div", [sc, b.scalar(float(np.sqrt(dh)))])
    return b.op("Mul", [sc, b.scalar(float(dh ** -0.5))])


def _softmax_v(b: Builder, s: str, v4: str) -> str:
    b.maybe_expose(s, 0.05)
    return b.op("MatMul", [b.op("Softmax", [s], axis=-1), v4])


# --- the idioms ------------------------------------------------------------------------------


def idiom_baddbmm(b: Builder, x: str, shape: list[Dim], opset: int, key_view: bool = False) -> str:
    """Attention on [B*H, S, dh] views, the views' targets computed at run time; the scores
    baddbmm(zeros, q, k^T, alpha=scale) (or, key_view, BLOOM's K^T view of the permuted key)."""
    bsz, seq, d = shape
    heads, dh = _heads(b)
    q, k, v = _qkv(b, x, d, heads, dh)
    bb, ss, bh = _run_dims(b, q, heads)
    t3 = _cat(b, [bh, -1, dh])
    q3 = b.op("Reshape", [_to_heads(b, q, heads, dh), t3])
    v3 = b.op("Reshape", [_to_heads(b, v, heads, dh), t3])
    if key_view:
        kp = b.op("Transpose", [b.op("Reshape", [k, b.ints([0, 0, heads, dh])])], perm=[0, 2, 3, 1])
        kt = b.op("Reshape", [kp, _cat(b, [bh, dh, -1])])
    else:
        kt = b.op("Transpose", [b.op("Reshape", [_to_heads(b, k, heads, dh), t3])], perm=[0, 2, 1])
    sc = b.op("Mul", [b.op("MatMul", [q3, kt]), b.scalar(float(dh ** -0.5))])   # baddbmm's alpha
    if not key_view or b.p(0.3):
        zeros = b.op("ConstantOfShape", [_cat(b, [bh, ss, ss])],
                     **({"value": oh.make_tensor("z", b.dtype, [1], [0.0])} if b.p(0.5) or b.dtype == F16 else {}))
        sc = b.op("Add", [zeros, sc] if b.p(0.5) else [sc, zeros])
        b.trap("baddbmm-zeros")
    s4 = b.op("Reshape", [sc, _cat(b, [bb, heads, ss, -1])])
    if b.p(0.6):
        s4 = b.op("Where", [_causal(b, seq, q), s4, _fill(b)])
        b.trap("causal-select-4d")
    if b.p(0.7):
        s4 = b.op("Add", [s4, _pad_mask(b, bsz, seq)])
    p = b.op("Softmax", [s4], axis=-1)
    p3 = b.op("Reshape", [p, _cat(b, [bh, ss, -1])])
    o4 = b.op("Reshape", [b.op("MatMul", [p3, v3]), _cat(b, [bb, heads, ss, dh])])
    return _merge(b, o4, heads * dh, d)


def idiom_key_view(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    return idiom_baddbmm(b, x, shape, opset, key_view=True)


def _scores4(b: Builder, x: str, d: int, heads: int, dh: int) -> tuple[str, str]:
    """(q k^T [B, H, S, S], v [B, H, S, dh])"""
    q, k, v = _qkv(b, x, d, heads, dh)
    kt = b.op("Transpose", [_to_heads(b, k, heads, dh)], perm=[0, 1, 3, 2])
    return b.op("MatMul", [_to_heads(b, q, heads, dh), kt]), _to_heads(b, v, heads, dh)


def idiom_select_scale(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """where(causal, q k^T, min) / scale, then the padding mask (GPT-J 4.38)."""
    bsz, seq, d = shape
    heads, dh = _heads(b)
    sc, v4 = _scores4(b, x, d, heads, dh)
    s = _scale(b, b.op("Where", [_causal(b, seq, x), sc, _fill(b)]), dh)
    if b.p(0.7):
        s = b.op("Add", [s, _pad_mask(b, bsz, seq)])
    return _merge(b, _softmax_v(b, s, v4), heads * dh, d)


def idiom_mask_scale(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """softmax((q k^T + mask) / scale) (CodeGen 4.57): a causal [1, 1, S, S] and / or padding mask."""
    bsz, seq, d = shape
    heads, dh = _heads(b)
    sc, v4 = _scores4(b, x, d, heads, dh)
    kind = b.pick(["causal", "pad", "both"])
    mask = None
    if kind in ("causal", "both"):
        zero, low = b.scalar(0.0), b.scalar(_lowest(b))
        mask = b.op("Where", [_causal(b, seq, x), zero, low])
    if kind in ("pad", "both"):
        pad = _pad_mask(b, bsz, seq)
        mask = pad if mask is None else b.op("Add", [mask, pad])
    s = b.op("Add", [sc, mask] if b.p(0.7) else [mask, sc])
    return _merge(b, _softmax_v(b, _scale(b, s, dh), v4), heads * dh, d)


def idiom_shared_mask(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """Two layers, each masked_fill(Expand(mask, Shape(layer 0's scores)), min) (DistilBERT);
    near miss: the Expand sized by other dims than the scores' own ([B, H, S, 1])."""
    bsz, seq, d = shape
    heads, dh = _heads(b)
    am = b.input([bsz, seq], dtype=TensorProto.INT64, stem="attention_mask", kind="mask01")
    masked = b.op("Reshape", [b.op("Equal", [am, b.ints([0])]), _cat(b, [b.op("Shape", [am], end=1), 1, 1, -1])])
    expanded = None
    h = x
    for _layer in range(2):
        sc, v4 = _scores4(b, h, d, heads, dh)
        sd = _scale(b, sc, dh)
        if expanded is None:
            target = b.op("Shape", [sd])
            if b.p(0.1):   # other dims: [B, H, S, 1], which the rule must leave alone
                target = b.op("Concat", [b.op("Shape", [sd], end=3), b.ints([1])], axis=0)
                b.trap("expand-to-other-dims")
            expanded = b.op("Expand", [masked, target])
        w = b.op("Where", [expanded, b.scalar(_lowest(b)), sd])
        h = _merge(b, _softmax_v(b, w, v4), heads * dh, d)
    b.trap("mask-shared-by-layers")
    return h


def _row_tables(b: Builder, x4: str, axis: int, rd: int, lift: list[int]) -> tuple[str, str]:
    """cos / sin [rows, rd] of f [rows, rd/2] (outer(arange(S), inv_freq) at run time, or a
    constant of P >= S rows), lifted by ``lift`` Unsqueezes and cut to x4's length on ``axis``."""
    inv = (1.0 / 10000 ** (np.arange(0, rd, 2) / rd))
    if b.p(0.5):
        slen = b.op("Gather", [b.op("Shape", [x4]), b.const(np.array(axis, np.int64), stem="ax")], axis=0)
        t = b.op("Cast", [b.op("Range", [b.const(np.array(0, np.int64)), slen, b.const(np.array(1, np.int64))])],
                 to=b.dtype)
        if b.dtype != F16 and b.p(0.5):   # ORT's CPU Einsum has no float16
            f = b.op("Einsum", [t, b.const(inv, stem="inv_freq")], equation="i,j->ij")
        else:
            f = b.op("Mul", [b.op("Unsqueeze", [t, b.ints([1])]), b.const(inv[None], stem="inv_freq")])
        b.trap("rope-rows-at-run-time")
    else:
        rows = 8 + int(b.pick([0, 3]))
        f = b.const(np.arange(rows)[:, None] * inv[None], stem="freqs")
    cat = b.op("Concat", [f, f], axis=-1)
    tables = []
    for fn in ("Cos", "Sin"):
        t = b.op(fn, [cat])
        if b.p(0.5):
            t = b.op("Unsqueeze", [t, b.ints(lift)])
        else:
            for a in lift:
                t = b.op("Unsqueeze", [t, b.ints([a])])
        tables.append(t)
    return tables


def _cut(b: Builder, t: str, x4: str, axis_x: int, axis_t: int) -> str:
    end = b.op("Shape", [x4], start=axis_x, end=axis_x + 1)
    return b.op("Slice", [t, b.ints([0]), end, b.ints([axis_t])])


def idiom_row_rope(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """RoPE on x [B, H, S, dh] with [1, 1, rows, rd] tables without a batch axis (ESM)."""
    d = shape[-1]
    dh = int(b.pick([h for h in HEAD_SIZES if d % h == 0 and h % 2 == 0]))
    x4 = b.op("Transpose", [b.op("Reshape", [x, b.ints([0, 0, d // dh, dh])])], perm=[0, 2, 1, 3])
    rd = dh // 2 if dh % 4 == 0 and b.p(0.2) else dh
    cos, sin = (_cut(b, t, x4, 2, 2) for t in _row_tables(b, x4, 2, rd, [0, 1]))
    y = _rope(b, x4, (cos, sin), dh, rd, b.p(0.1))
    return b.op("Reshape", [b.op("Transpose", [y], perm=[0, 2, 1, 3]), b.ints([0, 0, d])])


def idiom_stack_rope(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """RoPE on a seq-first x [S, B, H, dh], tables [rows, 1, 1, rd] stacked and read back by
    Gather (wav2vec2-conformer); near miss: the stack read back swapped (not RoPE any more)."""
    d = shape[-1]
    dh = int(b.pick([h for h in HEAD_SIZES if d % h == 0 and h % 2 == 0]))
    xt = b.op("Transpose", [b.op("Reshape", [x, b.ints([0, 0, d // dh, dh])])], perm=[1, 0, 2, 3])
    rd = dh // 2 if dh % 4 == 0 and b.p(0.2) else dh
    cos, sin = _row_tables(b, xt, 0, rd, [1, 2])
    stack = b.op("Concat", [b.op("Unsqueeze", [cos, b.ints([0])]), b.op("Unsqueeze", [sin, b.ints([0])])], axis=0)
    pick = (0, 1) if not b.p(0.1) else (1, 0)
    if pick != (0, 1):
        b.trap("stack-read-swapped")
    cos, sin = (_cut(b, b.op("Gather", [stack, b.const(np.array(i, np.int64), stem="pick")], axis=0), xt, 0, 0)
                for i in pick)
    y = _rope(b, xt, (cos, sin), dh, rd, False)
    return b.op("Reshape", [b.op("Transpose", [y], perm=[1, 0, 2, 3]), b.ints([0, 0, d])])


def _row_keep(b: Builder, bsz: Dim, seq: Dim) -> str:
    """A bool [B, 1, 1, S] key mask: the last batch row half padded, or (a near miss for a scale up
    after the shift) every key of it masked."""
    am = b.input([bsz, seq], dtype=BOOL, stem="attention_mask", kind="mask01")
    if b.p(0.35):
        b.feeds[am][-1, :] = False
        b.trap("row-all-masked")
    return b.op("Unsqueeze", [am, b.ints([1, 2])])


def _shift_fill(b: Builder) -> str:
    """The fill of masked keys: the dtype's lowest, -inf, or a large finite number."""
    kind = b.pick(["lowest", "inf", "finite"])
    b.trap(f"fill-{kind}")
    return b.scalar({"lowest": _lowest(b), "inf": -np.inf, "finite": -1e4}[kind])


def _monotone_ops(b: Builder) -> list:
    """Non-decreasing ops with one constant (op, constant) that make t from the maximum's input."""
    ops = []
    for _ in range(int(b.pick([1, 1, 2]))):
        op = b.pick(["Mul", "Div", "Add", "Sub", "Cast"])
        value = None if op == "Cast" else \
            float(b.pick([0.125, 0.3, 3.0])) if op in ("Mul", "Div") else float(b.pick([-2.5, 0.75]))
        ops.append((op, value))
    return ops


def _apply(b: Builder, x: str, ops: list, shared: dict) -> str:
    """x through ``ops`` (their constants shared between t's and the maximum's chains, or drawn
    again with the same value; a Mul's or an Add's on either side)."""
    for i, (op, value) in enumerate(ops):
        if op == "Cast":
            x = b.op("Cast", [x], to=F32)
            continue
        if i not in shared or b.p(0.4):
            shared[i] = b.scalar(value, F32 if any(o[0] == "Cast" for o in ops[:i]) else None)
        x = b.op(op, [shared[i], x] if op in ("Mul", "Add") and b.p(0.5) else [x, shared[i]])
    return x


def idiom_max_shift(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """softmax(t - c) with c t's row maximum written out (softmax-max-shift); a third of the time
    with one near miss the rule must refuse."""
    bsz, seq, d = shape
    heads, dh = _heads(b)
    sc, v4 = _scores4(b, x, d, heads, dh)
    s = _scale(b, sc, dh)
    miss = b.pick(["min", "mean", "axis", "ops", "unsqueeze_other", "up", "up", "odd"]) if b.p(0.35) else None
    if miss is not None:
        b.trap(f"shift-{miss}")
    mask = b.pick(["none", "pad", "select", "select"] if miss != "up" else ["pad", "select", "select"])
    if mask == "pad":
        s = b.op("Add", [s, _pad_mask(b, bsz, seq)])
    elif mask == "select":
        s = b.op("Where", [_row_keep(b, bsz, seq), s, _shift_fill(b)])
    form = "chain" if miss == "ops" else b.pick(["plain", "plain", "chain", "pbrelax"])
    if miss in ("up", "odd") and form == "pbrelax":
        form = "plain"
    ops = _monotone_ops(b) if form == "chain" else []
    if form == "pbrelax":    # CogView: (s / a - max(s / a)) * a
        a = float(b.pick([8.0, 32.0]))
        ops = [("Div", a)] if b.p(0.5) else [("Mul", 1.0 / a)]
    shared: dict = {}
    t = _apply(b, s, ops, shared)
    # the maximum of s, then s's ops on it (f(max(s)) = max(f(s))), or the maximum of t
    base, top = (s, ops) if miss == "ops" or (form == "chain" and b.p(0.5)) else (t, [])
    red = {"min": "ReduceMin", "mean": "ReduceMean"}.get(miss, "ReduceMax")
    axis = -2 if miss == "axis" else -1
    keep = 0 if miss == "unsqueeze_other" or (axis == -1 and b.p(0.5)) else 1
    m = _reduce(b, red, base, axis, keep, opset)
    if not keep:
        view = "other" if miss == "unsqueeze_other" else b.pick(["unsqueeze", "unsqueeze", "reshape0", "reshape_shape"])
        if view == "unsqueeze":
            m = b.op("Unsqueeze", [m, b.ints([b.pick([-1, 3])])])
        elif view == "reshape0":
            m = b.op("Reshape", [m, b.ints([0, 0, 0, 1])])
        elif view == "reshape_shape":
            m = b.op("Reshape", [m, b.op("Concat", [b.op("Shape", [m]), b.ints([1])], axis=0)])
        else:                              # [B, H, 1, S]: the column maxima, not the row's
            m = b.op("Unsqueeze", [m, b.ints([2])])
    if miss == "ops":                      # other constants above the maximum than t's
        top, shared = [(op, value * 2.0 if value else value) for op, value in top], {}
        top = top if any(op != "Cast" for op, _ in top) else top + [("Add", 1.0)]
    m = _apply(b, m, top, shared)
    if b.p(0.15):
        m = b.op("Identity", [m])
    if b.p(0.2):
        m = b.op("Expand", [m, b.op("Shape", [t])])
    y = b.op("Sub", [t, m])
    cast = any(op == "Cast" for op, _ in ops)
    ydt = F32 if cast else None
    if form == "pbrelax":
        y = b.op("Mul", [y, b.scalar(a)])
    else:                                  # up: a scale up over t with no scale-down under it
        post = miss if miss in ("up", "odd") else b.pick(["none", "none", "div", "mul"])
        k = {"div": [2.0, 4.0], "mul": [0.5, 0.25], "up": [2.0, 4.0], "odd": [0.7, 3.0]}.get(post)
        if k is not None:
            y = b.op("Div" if post == "div" else "Mul", [y, b.scalar(float(b.pick(k)), ydt)])
    b.maybe_expose(y, 0.05)
    p = b.op("Softmax", [y], axis=-1)
    if cast and b.dtype != F32:
        p = b.op("Cast", [p], to=b.dtype)
    return _merge(b, b.op("MatMul", [p, v4]), heads * dh, d)


IDIOMS = {
    "baddbmm": idiom_baddbmm, "select_scale": idiom_select_scale, "mask_scale": idiom_mask_scale,
    "shared_mask": idiom_shared_mask, "key_view": idiom_key_view, "row_rope": idiom_row_rope,
    "stack_rope": idiom_stack_rope, "max_shift": idiom_max_shift,
}
#: the rules each idiom is there to exercise (the tests check that its plain form fires them)
IDIOM_RULES = {
    "baddbmm": ("attention-batched-heads",), "select_scale": ("scores-scale-before-mask",),
    # shared_mask's Expand is identity-elimination's (a broadcasting reader with an input of its dims reads the
    # mask; the where-expanded-mask rule until session 42): tests/tools/test_fuzz_idioms.py checks the outcome
    "mask_scale": ("scores-scale-before-mask",), "shared_mask": (),
    # row_rope's cut never reaches row-slice-above-cos now: a run-time table has x's own rows, so
    # identity-elimination drops the cut as a whole-axis Slice (5c0df4c), and a constant one folds its Cos
    # (tests/rules/test_row_slice.py covers that rule)
    "key_view": ("bmm-key-view",), "row_rope": ("rotary-rotate-half-tables",),
    "stack_rope": ("gather-of-stack", "rotary-rotate-half-tables"),
    "max_shift": ("softmax-max-shift",),
}
#: share of the motif-graph seeds that are idiom cases (a side stream of the seed decides)
IDIOM_SHARE = 0.15


def build_idiom(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """An idiom (drawn, or ``name``) on a fresh hidden state, sometimes after a norm or before a
    second idiom; returns the motif names. The graph's outputs are the builder's."""
    from fuzz_motifs import hidden_start

    h, shape, motifs = hidden_start(b, opset, (1, 1, 2, 3, 5, 8), [8, 16, 24, 32, 64], norm=name is None)
    names = [name] if name is not None else [b.pick(list(IDIOMS)) for _ in range(int(b.pick([1, 1, 1, 2])))]
    for n in names:
        motifs.append(n)
        h = IDIOMS[n](b, h, shape, opset)
    b.output(h)
    return motifs
