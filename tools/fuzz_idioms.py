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

from fuzz_motifs import F16, HEAD_SIZES, Builder, Dim, _proj, _rope

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


IDIOMS = {
    "baddbmm": idiom_baddbmm, "select_scale": idiom_select_scale, "mask_scale": idiom_mask_scale,
    "shared_mask": idiom_shared_mask, "key_view": idiom_key_view, "row_rope": idiom_row_rope,
    "stack_rope": idiom_stack_rope,
}
#: the rules each idiom is there to exercise (the tests check that its plain form fires them)
IDIOM_RULES = {
    "baddbmm": ("attention-batched-heads",), "select_scale": ("scores-scale-before-mask",),
    "mask_scale": ("scores-scale-before-mask",), "shared_mask": ("where-expanded-mask",),
    "key_view": ("bmm-key-view",), "row_rope": ("rotary-rotate-half-row-tables",),
    "stack_rope": ("gather-of-stack", "rotary-rotate-half-row-tables-sbhd"),
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
