"""Fuzz motifs for fused q / k / v projections picked apart by views and picks (passes/qkv_columns.py), which no
other family draws (the motif graphs only split GPT-2's Gemm in thirds with one Split):

  qkv_picks  one projection Y = x @ W (+ b) of width (H + 2 Hkv) * dh, then q, k and v picked from it as
             exporters write it:
               slices        Phi-3: Slice of the last axis at [0, H dh), [H dh, (H + Hkv) dh) and the rest (the
                             end INT64_MAX or the width; axes -1, 2 or none, then starts / ends on every axis)
               chunk         Split of the last axis (sizes as an input, or num_outputs=3 from opset 18 when equal)
               heads_slices  GPT-NeoX: Y viewed [B, S, H, 3 dh], a Slice of the last axis per tensor (no GQA)
               heads_gather  BLOOM / Falcon: Y viewed [B, S, H, 3, dh], then Gather(axis 3) of a scalar index, a
                             Slice and Squeeze, or Split and Squeeze (no GQA)
               groups        Falcon's new decoder architecture: Y viewed [B, S, Hkv, G + 2, dh], q = [..., :G, :]
                             viewed [B, S, H, dh], k = [..., G, :], v = [..., G + 1, :] (GQA, G = H / Hkv)
               heads_first   ModernBERT: Y viewed [B, S, 3, H, dh], Transpose(2, 0, 3, 1, 4), then Gather(axis 0)
                             of a scalar index (no GQA)
             then attention: q k^T scaled (Mul or Div), under no mask, a causal select or an additive padding
             mask, K / V heads repeated by repeat_kv's Unsqueeze -> Expand -> Reshape for GQA, the heads merged.

Near misses (traps) a rewrite must get right by value: v's columns reversed (a Slice with step -1: still a
permutation of the columns, so the pass may take it, and must then permute by it), q and k interleaved by column
(two Slices with step 2), k picked one head early (a column read twice: refused), a projection one head wider
than the picks (a column never read: refused), Y also a graph output (read whole), a pick also a graph output.

Each is a motif on the hidden state [B, S, d] (tools/fuzz_motifs.py's signature: builder, hidden, shape, opset
-> hidden). fuzz_motifs.make_case draws a case of this family for S34_SHARE of the seeds from a side stream of
its own (S34_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np

from fuzz_idioms import _causal, _lowest, _merge, _pad_mask, _scale
from fuzz_motifs import Builder, Dim, build_family

#: share of the motif-graph seeds that are session-34 cases (a side stream of the seed decides)
S34_SHARE = 0.08
#: the side stream that picks them (under it no seed a test names, and no graph of the tests' fuzz() runs, becomes one)
S34_SALT = 0x3933
#: the forms of qkv_picks; the first three and groups take GQA, the others need H == Hkv
FORMS = ("slices", "chunk", "heads_slices", "heads_gather", "groups", "heads_first")
BIG = np.iinfo(np.int64).max


def _slice(b: Builder, t: str, start: int, end: int, axis: int, rank: int, step: int = 1) -> str:
    """t[..., start:end:step] on ``axis`` (negative: from the last), its axes input written -1, rank - 1 or left
    out (starts / ends then on every axis)."""
    way = b.pick(["neg", "pos", "none"]) if step == 1 and axis == -1 else "neg"
    if way == "none":
        starts, ends = [0] * (rank - 1) + [start], [BIG] * (rank - 1) + [end]
        return b.op("Slice", [t, b.ints(starts), b.ints(ends)])
    ax = axis if way == "neg" else axis % rank
    ins = [t, b.ints([start]), b.ints([end]), b.ints([ax])]
    if step != 1 or b.p(0.3):
        ins.append(b.ints([step]))
    return b.op("Slice", ins)


def _end(b: Builder, end: int, width: int) -> int:
    """A slice's end at the axis' end: the width, or INT64_MAX as torch exports ``x[..., s:]``."""
    return BIG if end == width and b.p(0.5) else end


def _last_axis(b: Builder, y: str, form: str, heads: int, kv: int, dh: int, width: int) -> tuple[str, str, str]:
    """slices / chunk: q, k, v [B, S, *] picked from the last axis of Y [B, S, width]."""
    qw, kw = heads * dh, kv * dh
    if form == "chunk":
        if qw == kw and b.p(0.5) and b.opset >= 18:
            b.trap("split-num-outputs")
            return tuple(b.op("Split", [y], n_out=3, axis=-1, num_outputs=3))
        return tuple(b.op("Split", [y, b.ints([qw, kw, kw])], n_out=3, axis=2 if b.p(0.5) else -1))
    near = b.pick(["none"] * 6 + ["v-reversed", "k-early", "qk-interleaved"])
    if near == "qk-interleaved" and qw == kw:
        b.trap("near-qk-interleaved")
        q = _slice(b, y, 0, 2 * qw, -1, 3, step=2)
        k = _slice(b, y, 1, 2 * qw, -1, 3, step=2)
    else:
        q = _slice(b, y, 0, qw, -1, 3)
        k0 = qw - dh if near == "k-early" else qw
        if near == "k-early":
            b.trap("near-k-early")
        k = _slice(b, y, k0, k0 + kw, -1, 3)
    v0 = qw + kw
    if near == "v-reversed":
        b.trap("near-v-reversed")
        v = _slice(b, y, v0 + kw - 1, v0 - 1, -1, 3, step=-1)
    else:
        v = _slice(b, y, v0, _end(b, v0 + kw, width), -1, 3)
    return q, k, v


def _heads_slices(b: Builder, y: str, heads: int, dh: int) -> tuple[str, str, str]:
    """GPT-NeoX: Y viewed [B, S, H, 3 dh], q / k / v a Slice of the last axis each: [B, S, H, dh]."""
    y4 = b.op("Reshape", [y, b.ints([0, 0, heads, 3 * dh])])
    b.maybe_expose(y4, 0.05)
    return tuple(_slice(b, y4, i * dh, _end(b, (i + 1) * dh, 3 * dh), -1, 4) for i in range(3))


def _index(b: Builder, t: str, i: int, axis: int) -> str:
    """t's entry i on ``axis``, the axis dropped: Gather of a scalar, Slice + Squeeze, or Gather of [i] + Squeeze."""
    way = b.pick(["gather", "gather", "slice", "gather1"])
    if way == "gather":
        return b.op("Gather", [t, b.const(np.array(i, np.int64), stem="idx")], axis=axis)
    picked = b.op("Gather", [t, b.ints([i])], axis=axis) if way == "gather1" else \
        b.op("Slice", [t, b.ints([i]), b.ints([i + 1]), b.ints([axis])])
    return b.op("Squeeze", [picked, b.ints([axis])])


def _heads_gather(b: Builder, y: str, heads: int, dh: int) -> tuple[str, str, str]:
    """BLOOM / Falcon: Y viewed [B, S, H, 3, dh], q / k / v its entries 0 / 1 / 2 on axis 3: [B, S, H, dh]."""
    y5 = b.op("Reshape", [y, b.ints([0, 0, heads, 3, dh])])
    if b.p(0.3):   # torch.unbind / split(1, dim=3): one Split, each piece squeezed
        b.trap("unbind-split")
        parts = b.op("Split", [y5, b.ints([1, 1, 1])], n_out=3, axis=3)
        return tuple(b.op("Squeeze", [p, b.ints([3])]) for p in parts)
    return tuple(_index(b, y5, i, 3) for i in range(3))


def _groups(b: Builder, y: str, heads: int, kv: int, dh: int) -> tuple[str, str, str]:
    """Falcon's new architecture: Y viewed [B, S, Hkv, G + 2, dh]; q = [..., :G, :] viewed [B, S, H, dh],
    k = [..., G, :] and v = [..., G + 1, :]: [B, S, Hkv, dh]."""
    g = heads // kv
    y5 = b.op("Reshape", [y, b.ints([0, 0, kv, g + 2, dh])])
    q = b.op("Reshape", [b.op("Slice", [y5, b.ints([0]), b.ints([g]), b.ints([3])]), b.ints([0, 0, heads, dh])])
    if b.p(0.5):
        k, v = _index(b, y5, g, 3), _index(b, y5, g + 1, 3)
    else:   # Slice to the end, then one index each (Falcon's key_value[..., -2 / -1, :])
        kv5 = b.op("Slice", [y5, b.ints([g]), b.ints([_end(b, g + 2, g + 2)]), b.ints([3])])
        k, v = _index(b, kv5, 0, 3), _index(b, kv5, 1, 3)
    return q, k, v


def _heads_first(b: Builder, y: str, heads: int, dh: int) -> tuple[str, str, str]:
    """ModernBERT: Y viewed [B, S, 3, H, dh], transposed to [3, B, H, S, dh], unbound on axis 0: [B, H, S, dh]."""
    y5 = b.op("Reshape", [y, b.ints([0, 0, 3, heads, dh])])
    t = b.op("Transpose", [y5], perm=[2, 0, 3, 1, 4])
    return tuple(_index(b, t, i, 0) for i in range(3))


def _repeat(b: Builder, t4: str, heads: int, kv: int, dh: int) -> str:
    """repeat_kv: [B, Hkv, T, dh] -> [B, H, T, dh] by Unsqueeze -> Expand -> Reshape."""
    if kv == heads:
        return t4
    u = b.op("Unsqueeze", [t4, b.ints([2])])
    e = b.op("Expand", [u, b.ints([1, 1, heads // kv, 1, 1])])
    return b.op("Reshape", [e, b.ints([0, heads, -1, dh])])


def motif_qkv_picks(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, seq, d = shape
    form = b.pick(("slices", *FORMS))   # slices twice: its near misses
    b.opset = opset
    dh = int(b.pick([4, 8, 16]))
    gqa = form in ("slices", "chunk", "groups") and b.p(0.5 if form != "groups" else 1.0)
    kv = int(b.pick([1, 2])) if gqa else 0
    heads = kv * int(b.pick([2, 3])) if gqa else int(b.pick([1, 2, 4]))
    kv = kv or heads
    width = (heads + 2 * kv) * dh
    gap = form == "slices" and b.p(0.1)   # near miss: one head of columns no pick reads
    if gap:
        b.trap("near-unread-columns")
    w = b.weight([d, width + (dh if gap else 0)])
    y = b.op("MatMul", [x, w])
    if b.p(0.5):
        y = b.op("Add", [y, b.const(0.1 * b.rng.standard_normal([width + (dh if gap else 0)]), stem="bias")])
    if b.p(0.05):
        b.output(y)
        b.trap("projection-is-output")
    b.trap(f"picks-{form}")
    if form in ("slices", "chunk"):
        q, k, v = _last_axis(b, y, form, heads, kv, dh, width + (dh if gap else 0))
        q, k, v = (b.op("Reshape", [t, b.ints([0, 0, n, dh])]) for t, n in ((q, heads), (k, kv), (v, kv)))
    elif form == "heads_slices":
        q, k, v = _heads_slices(b, y, heads, dh)
    elif form == "heads_gather":
        q, k, v = _heads_gather(b, y, heads, dh)
    elif form == "groups":
        q, k, v = _groups(b, y, heads, kv, dh)
    if form == "heads_first":
        q4, k4, v4 = _heads_first(b, y, heads, dh)
        kt = b.op("Transpose", [k4], perm=[0, 1, 3, 2])
    else:
        q4, v4 = (b.op("Transpose", [t], perm=[0, 2, 1, 3]) for t in (q, v))
        if kv == heads and b.p(0.5):
            kt = b.op("Transpose", [k], perm=[0, 2, 3, 1])
        else:
            kt = b.op("Transpose", [_repeat(b, b.op("Transpose", [k], perm=[0, 2, 1, 3]), heads, kv, dh)],
                      perm=[0, 1, 3, 2])
    b.maybe_expose(v4, 0.04)
    v4 = _repeat(b, v4, heads, kv, dh)
    s = _scale(b, b.op("MatMul", [q4, kt]), dh)
    mask = b.pick(["none", "causal", "pad"])
    if mask == "causal":
        s = b.op("Where", [_causal(b, seq, x), s, b.scalar(_lowest(b) if b.p(0.5) else -np.inf)])
    elif mask == "pad":
        s = b.op("Add", [s, _pad_mask(b, bsz, seq)])
    o4 = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v4])
    return _merge(b, o4, heads * dh, d)


S34 = {"qkv_picks": motif_qkv_picks}


def build_s34(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A session-34 motif (drawn, or ``name``) on a fresh hidden state (fuzz_motifs.build_family)."""
    return build_family(b, opset, S34, name)
