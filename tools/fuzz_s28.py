"""Fuzz motifs for the forms session 27/28's wrong-model bugs came from (trust28's review), which no other family
draws:

  fp32_island        attention in a half model whose scores are cast up to float32 around the softmax: Cast(scores,
                     float) (before or after the scale) -> masked_fill Where(masked, fill, s) or an additive
                     Where(keep, 0, fill) -> Softmax -> Cast back (MPT / dd42ea4's saturation); the fill is q's
                     lowest (-65504), float32's lowest or -inf; under a 0/1 padding mask, causal, or both
  masked_fill        Where(masked, fill, scores) in the model's own type, masked = a padding mask's zeros (Not /
                     Equal(m, 0)), the causal upper triangle, or either; sometimes scaled after the fill
  batch_length_mask  a causal and / or padding mask widened by a condition on the batch and the length read
                     from Shape of the input and compared with constants (B >= c and c2 <= S <= c3): at those
                     shapes every key is kept (for the whole batch or for the rows past a constant), or the causal
                     band holds only there; the mask proofs of 5c8d481 / 0a4e432 / 71d6cb4 must see it
  window_batch_mask  a sliding window of 2 or 3 keys dropped (every causal key) under such a condition, sometimes
                     And-ed with a padding mask; the window proofs of 3d4a75b must see it

Every case with symbolic batch / length also carries feed sets at other shapes (``alt_feeds``): for
batch_length_mask one inside and one just outside the condition's region, so a proof that misses it is wrong on a
feed set the fuzzer runs. fuzz_motifs.make_case draws a case of this family for S28_SHARE of the seeds from a side
stream of its own (S28_SALT), checked after the other families, so no seed a test names moves.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_idioms import _merge, _to_heads
from fuzz_motifs import F16, F32, I64, NP, Builder, Dim, _proj, hidden_start

BOOL = TensorProto.BOOL
#: share of the motif-graph seeds that are session-28 cases (a side stream of the seed decides)
S28_SHARE = 0.08
#: the side stream that picks them (under it no seed a test names, and no graph of the tests' fuzz() runs, becomes one)
S28_SALT = 0x2F45


def _dim_of(b: Builder, t: str, axis: int) -> str:
    return b.op("Shape", [t], start=axis, end=axis + 1)


def _pad_mask(b: Builder, bsz: Dim, seq: Dim) -> str:
    """A 0/1 attention_mask [B, S] input (int64 or bool); the last row right- or left-padded, row 0 sometimes
    fully padded. Returns the bool keep mask [B, 1, 1, S]."""
    dtype = b.pick([I64, I64, BOOL])
    name = b.name("attention_mask")
    b.inputs.append(oh.make_tensor_value_info(name, dtype, [bsz, seq]))
    b.feeds[name] = _mask_values(b, b.rt(bsz), b.rt(seq), dtype)
    keep = name if dtype == BOOL else b.op("Cast", [name], to=BOOL)
    return b.op("Unsqueeze", [keep, b.ints([1, 2])])


def _mask_values(b: Builder, n_b: int, n_s: int, dtype: int, rng=None) -> np.ndarray:
    rng = rng if rng is not None else b.rng
    keep = np.ones((n_b, n_s), bool)
    if n_s > 1:
        n = int(rng.integers(1, n_s))
        if rng.random() < 0.5:
            keep[-1, n_s - n:] = False
        else:
            keep[-1, :n] = False
    if n_b > 1 and rng.random() < 0.15:
        keep[0] = False
        b.trap("mask-fully-masked-row")
    return keep.astype(NP[dtype])


def _causal(b: Builder, x: str) -> str:
    """A bool [S, S] lower triangle computed from x's length at run time (Range compare or Trilu)."""
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    s = _dim_of(b, x, 1)
    if b.p(0.5):
        ar = b.op("Range", [zero, b.op("Squeeze", [s]), one])
        return b.op("LessOrEqual", [b.op("Unsqueeze", [ar, b.ints([0])]), b.op("Unsqueeze", [ar, b.ints([1])])])
    ones = b.op("ConstantOfShape", [b.op("Concat", [s, s], axis=0)],
                value=oh.make_tensor("one", TensorProto.INT64, [1], [1]))
    return b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=BOOL)


def _base_keep(b: Builder, x: str, shape: list[Dim]) -> str:
    """The mask's keep (True = attend): padding, causal or both, broadcastable to [B, H, S, S]."""
    form = b.pick(["pad", "causal", "both"])
    b.trap(f"mask-{form}")
    if form == "pad":
        return _pad_mask(b, shape[0], shape[1])
    if form == "causal":
        return _causal(b, x)
    return b.op("And", [_pad_mask(b, shape[0], shape[1]), _causal(b, x)])


def _scores(b: Builder, x: str, shape: list[Dim]) -> tuple[str, str, int, int]:
    """q k^T unscaled on [B, H, S, S], v4, heads, dh."""
    d = shape[2]
    heads, dh = int(b.pick([1, 2, 4])), int(b.pick([8, 16]))
    q4, k4, v4 = (_to_heads(b, _proj(b, x, d, heads * dh, b.p(0.5)), heads, dh) for _ in range(3))
    return b.op("MatMul", [q4, b.op("Transpose", [k4], perm=[0, 1, 3, 2])]), v4, heads, dh


def _select(b: Builder, keep: str, s: str, fill: str) -> str:
    """masked_fill(s, ~keep, fill), as exporters write it: Where(Not(keep), fill, s) or Where(keep, s, fill)."""
    if b.p(0.5):
        b.trap("masked-fill-not")
        return b.op("Where", [b.op("Not", [keep]), fill, s])
    return b.op("Where", [keep, s, fill])


def _fill_value(b: Builder, half: int, store: int | None = None) -> float:
    """q's lowest, float32's lowest or -inf; a fill stored in a half type (``store``) cannot hold float32's
    lowest, which casts to -inf there (so it is -inf, said so)."""
    kind = b.pick(["q-lowest", "f32-lowest", "-inf"])
    if kind == "f32-lowest" and store is not None and store != F32:
        kind = "-inf"
    b.trap(f"fill-{kind}")
    return {"q-lowest": float(np.finfo(NP[half]).min), "f32-lowest": float(np.finfo(np.float32).min),
            "-inf": -np.inf}[kind]


def _near_fill(b: Builder) -> float:
    """Near miss: a fill of -1e4 is no -inf (a select keeps the scores out, an Add would not), so the select
    must stay a select."""
    b.trap("fill--1e4")
    return -1e4


def motif_fp32_island(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[2]
    sc, v4, heads, dh = _scores(b, x, shape)
    scale = float(dh ** -0.5)
    before = b.p(0.5)   # the Cast before the scale (MPT's upcast of the raw scores) or after it
    if not before:
        sc = b.op("Mul", [sc, b.scalar(scale)])
    s32 = b.op("Cast", [sc], to=F32)
    if before:
        s32 = b.op("Mul", [s32, b.scalar(scale, F32)])
        b.trap("cast-before-scale")
    keep = _base_keep(b, x, shape)
    fill = _fill_value(b, b.dtype)
    if b.p(0.5):
        s32 = _select(b, keep, s32, b.scalar(fill, F32))
        b.trap("island-masked-fill")
    else:
        bias = b.op("Where", [keep, b.scalar(0.0, F32), b.scalar(fill, F32)])
        s32 = b.op("Add", [s32, bias] if b.p(0.7) else [bias, s32])
        b.trap("island-additive")
    p = b.op("Cast", [b.op("Softmax", [s32], axis=-1)], to=b.dtype)
    return _merge(b, b.op("MatMul", [p, v4]), heads * dh, d)


def motif_masked_fill(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[2]
    sc, v4, heads, dh = _scores(b, x, shape)
    scale = b.scalar(float(dh ** -0.5))
    after = b.p(0.2)   # select then scale (GPT-Neo's order) sometimes
    if not after:
        sc = b.op("Mul", [sc, scale])
    keep = _base_keep(b, x, shape)
    fill = b.scalar(_fill_value(b, b.dtype, b.dtype) if b.p(0.7) else _near_fill(b))
    s = _select(b, keep, sc, fill)
    if after:
        s = b.op("Mul", [s, scale])
        b.trap("fill-then-scale")
    p = b.op("Softmax", [s], axis=-1)
    return _merge(b, b.op("MatMul", [p, v4]), heads * dh, d)


def _in_range(b: Builder, v: str, lo: int, hi: int) -> str:
    """lo <= v <= hi on a [1] int64 (GreaterOrEqual / LessOrEqual, or Greater / Less one apart)."""
    if b.p(0.5):
        return b.op("And", [b.op("GreaterOrEqual", [v, b.ints([lo])]), b.op("LessOrEqual", [v, b.ints([hi])])])
    return b.op("And", [b.op("Greater", [v, b.ints([lo - 1])]), b.op("Less", [v, b.ints([hi + 1])])])


def _region_attention(b: Builder, keep: str, sc: str, fill: float, v4: str, hd: int, d: int,
                      region: tuple[int, int, int]) -> str:
    """softmax(scores masked by ``keep``: a masked_fill select or an additive Where(keep, 0, fill)) v, merged;
    the batch x length region (B >= c, lo <= S <= hi) noted for the other-shape feeds."""
    if b.p(0.5):
        s = _select(b, keep, sc, b.scalar(fill))
    else:
        s = b.op("Add", [sc, b.op("Where", [keep, b.scalar(0.0), b.scalar(fill)])])
    p = b.op("Softmax", [s], axis=-1)
    b.region = region
    b.trap("region-B>={}-S{}..{}".format(*region))
    return _merge(b, b.op("MatMul", [p, v4]), hd, d)


def motif_batch_length_mask(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[2]
    sc, v4, heads, dh = _scores(b, x, shape)
    sc = b.op("Mul", [sc, b.scalar(float(dh ** -0.5))])
    c_b, lo = int(b.pick([2, 3])), int(b.pick([2, 3, 5]))
    hi = lo + int(b.pick([0, 1, 2, 4]))
    bdim, sdim = _dim_of(b, x, 0), _dim_of(b, x, 1)
    form = b.pick(["all-keys", "rows-all-keys", "causal-only-there"])
    b.trap(f"joint-{form}")
    length = _in_range(b, sdim, lo, hi)
    if form == "rows-all-keys":   # the batch rows from c_b - 1 on keep every key at those lengths
        rows = b.op("Range", [b.const(np.array(0, np.int64)), b.op("Squeeze", [bdim]), b.const(np.array(1, np.int64))])
        rows = b.op("Unsqueeze", [b.op("GreaterOrEqual", [rows, b.const(np.array(c_b - 1, np.int64))]),
                                  b.ints([1, 2, 3])])
        cond = b.op("And", [rows, b.op("Reshape", [length, b.ints([1, 1, 1, 1])])])
    else:
        cond = b.op("And", [b.op("GreaterOrEqual", [bdim, b.ints([c_b])]), length])
        if b.p(0.5):
            cond = b.op("Reshape", [cond, b.ints([1, 1, 1, 1])])
    if form == "causal-only-there":   # causal at those shapes, every key elsewhere (under padding sometimes)
        keep = b.op("Or", [_causal(b, x), b.op("Not", [cond])])
        if b.p(0.5):
            keep = b.op("And", [keep, _pad_mask(b, shape[0], shape[1])])
            b.trap("mask-pad")
    else:
        keep = b.op("Or", [_base_keep(b, x, shape), cond])
    fill = _fill_value(b, b.dtype, b.dtype) if b.p(0.8) else _near_fill(b)
    return _region_attention(b, keep, sc, fill, v4, heads * dh, d, (c_b, lo, hi))


def motif_window_batch_mask(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """A sliding window of w keys (i - w < j <= i, from Range over x's length) that a condition on the batch
    and the length drops (B >= c and lo <= S <= hi, lo past w: every causal key there); the window proofs
    (sliding_window, cropped_window) probed a batch of 1 only before 3d4a75b."""
    d = shape[2]
    sc, v4, heads, dh = _scores(b, x, shape)
    sc = b.op("Mul", [sc, b.scalar(float(dh ** -0.5))])
    w, c_b = int(b.pick([2, 3])), int(b.pick([2, 3]))
    lo = w + int(b.pick([2, 3]))
    hi = lo + int(b.pick([0, 1, 2]))
    b.trap(f"window-{w}")
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    ar = b.op("Range", [zero, b.op("Squeeze", [_dim_of(b, x, 1)]), one])
    keys, rows = b.op("Unsqueeze", [ar, b.ints([0])]), b.op("Unsqueeze", [ar, b.ints([1])])
    band = b.op("Greater", [keys, b.op("Sub", [rows, b.const(np.array(w, np.int64))])])
    cond = b.op("And", [b.op("GreaterOrEqual", [_dim_of(b, x, 0), b.ints([c_b])]), _in_range(b, _dim_of(b, x, 1), lo, hi)])
    keep = b.op("And", [b.op("LessOrEqual", [keys, rows]), b.op("Or", [band, cond])])
    if b.p(0.3):
        keep = b.op("And", [keep, _pad_mask(b, shape[0], shape[1])])
        b.trap("mask-pad")
    return _region_attention(b, keep, sc, _fill_value(b, b.dtype, b.dtype), v4, heads * dh, d, (c_b, lo, hi))


S28 = {"fp32_island": motif_fp32_island, "masked_fill": motif_masked_fill,
       "batch_length_mask": motif_batch_length_mask, "window_batch_mask": motif_window_batch_mask}


def _shapes(b: Builder, name: str, bsz: Dim, seq: Dim) -> list[dict[str, int]]:
    """The other shapes (symbol -> size) a case is fed at: for the batch x length masks one inside the condition's
    region and one beside it (the length one past it, or the batch one under it); else one other shape."""
    syms = [s for s in (bsz, seq) if isinstance(s, str)]
    if not syms:
        return []
    if name in ("batch_length_mask", "window_batch_mask"):
        c_b, lo, hi = b.region
        inside = {bsz: c_b + int(b.rng.integers(0, 2))} if isinstance(bsz, str) else {}
        if isinstance(seq, str):
            inside[seq] = int(b.rng.integers(lo, hi + 1))
        beside = dict(inside)
        if isinstance(seq, str) and b.p(0.5):
            beside[seq] = hi + 1
        elif isinstance(bsz, str):
            beside[bsz] = c_b - 1
        else:
            beside[seq] = lo - 1
        return [inside, beside]
    return [{s: int(b.pick([1, 2, 3, 4] if s == bsz else [1, 2, 4, 6])) for s in syms}]


def _feeds_at(b: Builder, sizes: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every fed input again at other symbol sizes: floats normal, 0/1 masks padded as _mask_values does."""
    out = {}
    inputs = {vi.name: vi for vi in b.inputs}
    for name, arr in b.feeds.items():
        t = inputs[name].type.tensor_type
        dims = [sizes.get(d.dim_param, b.syms.get(d.dim_param)) if d.dim_param else d.dim_value for d in t.shape.dim]
        if arr.dtype.kind == "f":
            out[name] = rng.standard_normal(dims).astype(arr.dtype)
        else:
            out[name] = _mask_values(b, dims[0], dims[1], t.elem_type, rng)
    return out


def build_s28(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A session-28 motif (drawn, or ``name``) on a fresh hidden state [B, S, d]; a half model mostly for
    fp32_island; feed sets at other shapes where batch or length is symbolic. Returns the motif names."""
    name = name if name is not None else b.pick(list(S28))
    if name == "fp32_island" and b.dtype != F16 and b.p(0.8):
        b.dtype = F16
        b.trap("fp16")
    h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 4, 5, 6, 8), [16, 32], norm=True)
    motifs.append(name)
    b.output(S28[name](b, h, shape, opset))
    side = np.random.default_rng([getattr(b, "seed", 0), 0x2828])
    b.alt_feeds = [_feeds_at(b, sizes, side) for sizes in _shapes(b, name, shape[0], shape[1])]
    if b.alt_feeds:
        b.trap("other-shapes-fed")
    return motifs
