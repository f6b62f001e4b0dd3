"""Fuzz motifs for session 40's rewrites, each with near misses drawn on purpose:

  head_scale  a per-dim constant scale on a projection's head view (passes/head_view_scales.py, TimesFM's query
              scale): Mul / Div(views(x @ W [+ b]), c) with views a Reshape to [B, S, H, D] (or [B, S * H, D]) and
              at most one Transpose keeping D last, c [D] / [1, 1, 1, D] varying along D, then the head's one-head-
              per-slice attention or the view merged back. Near misses: c along the heads ([H, 1]), c the same
              number everywhere (attention-q-scale's), c fed at run time, the view read elsewhere, the weight read
              by a second projection, c one axis wider than the view ([1, 1, 1, 1, D]: the product broadcasts up),
              a Transpose that moves D off the last axis, c over the batch ([2, 1, 1, D]).
  chan_scale  a per-channel constant after a norm (rules/norm/norm_channel_scale.yaml): LayerNormalization (with or
              without a bias) / RMSNormalization-23 of x [B, S, D] times c [D] / [1, D] / [1, 1, D] (Mul either
              order), trained-like gamma and beta; the float16 island's form (Cast up, norm, Mul, Cast down).
              Near misses: c along the sequence ([1, S, 1]), c fed at run time, the norm read elsewhere, the Mul
              after the island's Cast down (c float16), c one axis wider than the norm's output, a LayerNorm over
              the last two axes, gamma * c past the dtype's max (the product overflows where norm * gamma * c
              does not).
  attn_cf     one-head attention over channels-first [B, C, N] tensors (rules/attention/channels_first.yaml, the
              VQGAN AttnBlock): softmax(q^T @ k * C^-0.5) reaching v @ p^T, q / k / v from 1x1 Convs over a
              feature map or fed [B, C, N] / [B, C, T] (cross attention: T != N), the scale a Mul on q or on the
              scores or a Div, k / v a constant memory [1, C, T] broadcast over the batch sometimes. Near
              misses: the probabilities not transposed (v @ p, square), softmax over the queries, a mask added to
              the scores, a per-key scale, the probabilities read elsewhere, a symbolic channel count; and the
              Transposes moved (q as it is, k and v transposed: attention over the channels, XCiT's cross-covariance
              form, scores [B, C, C]: the same pattern with N as the head size, fused, exact).
  rope_row    a decode step's rotary over one row [p, p + 1) of a cos / sin buffer (rewrite/_rotation_tables.py
              table_dims): x one position (S = 1 static), p fed (0, the last row, a middle row), read off a past's
              shape, or counted from the buffer's end, the window's step 1 or 2, rotate-half or the halves form,
              bshd / bhsd / sbhd, partial rotary. Near misses: a window of two rows against the one position (the
              original broadcasts to two; of step 2 it is one row), sin cut one row after cos, a buffer whose row p
              is the identity (angle 0: cos 1, sin 0, the whole buffer one row of it too), the cut table read
              elsewhere. Not drawn: p past the buffer's end or p = -1 (an empty window: the original's output has
              no row, the RotaryEmbedding the rewrite makes refuses a cache of none; a known limit, docs/PERF.md).

fuzz_motifs.make_case draws a case of this family for S42_SHARE of the seeds from a side stream of its own
(S42_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import I64, Builder, build_one_motif
from fuzz_s34b import BIG, _half, _heads, _merge, _place_rows, rotate_partial
from fuzz_s39 import _halves, _rotate_halves

#: share of the motif-graph seeds that are session-42 cases (a side stream of the seed decides)
S42_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119
S42_SALT = 0x4411
MOTIFS = ("head_scale", "chan_scale", "attn_cf", "rope_row")
HEAD_NEAR = ("along-heads", "uniform", "fed", "view-shared", "weight-shared", "wider", "perm-moves-d", "batch")
CHAN_NEAR = ("along-seq", "fed", "norm-shared", "after-cast", "wider", "two-axes", "overflow")
CF_NEAR = ("p-not-transposed", "softmax-queries", "mask", "per-key-scale", "p-shared", "c-symbolic", "over-channels")
ROW_FROM = ("fed-zero", "fed-last", "fed-mid", "past-shape", "from-end")
ROW_NEAR = ("two-rows", "sin-next", "identity", "cut-shared")
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def _near(b: Builder, nears: tuple, plain: int) -> str:
    near = b.pick(["none"] * plain + list(nears))
    if near != "none":
        b.trap(f"near-{near}")
    return near


def _fed(b: Builder, arr: np.ndarray, stem: str) -> str:
    """A float input of arr's shape fed arr (a scale the graph only knows at run time)."""
    name = b.input(list(arr.shape), stem=stem)
    b.feeds[name] = arr.astype(b.np_dtype())
    return name


# --- head_scale ---------------------------------------------------------------------------------------------------

def motif_head_scale(b: Builder, opset: int) -> str:
    near = _near(b, HEAD_NEAR, 6)
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 4), 0.5)
    if near == "perm-moves-d":   # [B, H, D, S]: the scale's axis is the positions' (S static, c S entries)
        seq = 3
    heads, dh = int(b.pick([1, 2, 3])), int(b.pick([4, 8]))
    if near == "along-heads" and heads == 1:
        heads = 2
    d = int(b.pick([8, 16]))
    x = b.input([bsz, seq, d], stem="hidden")
    w = b.weight([d, heads * dh], stem="wq")
    t = b.op("MatMul", [x, w])
    if b.p(0.6):
        b.trap("head-bias")
        bias = b.const(b.rng.standard_normal(heads * dh) * 0.1, stem="bq")
        t = b.op("Add", [t, bias] if b.p(0.5) else [bias, t])
    if near == "weight-shared":   # a second projection of the same weight (merge-linear-branches' own check)
        b.output(b.op("MatMul", [b.input([bsz, seq, d], stem="other"), w]))
    flat = b.p(0.2) and near not in ("perm-moves-d", "along-heads")
    if flat:   # [B, S * H, D]: the view's last axis is D whatever its other axes are
        b.trap("head-flat")
        view = b.op("Reshape", [t, b.ints([0, -1, dh])])
    else:
        view = b.op("Reshape", [t, b.ints([0, 0, heads, dh])])
    layout = "bshd" if flat else b.pick(["bshd", "bhsd"])
    if near == "perm-moves-d":
        layout = "bhds"
    if layout == "bhsd":
        view = b.op("Transpose", [view], perm=[0, 2, 1, 3])
    elif layout == "bhds":
        view = b.op("Transpose", [view], perm=[0, 2, 3, 1])
    b.trap(f"head-{layout}")
    if near == "view-shared":
        b.output(b.op("Neg", [view]))
    n_c = 3 if layout == "bhds" else dh
    c = np.exp(b.rng.standard_normal(n_c) * 0.3) * float(b.pick([1.0, dh ** -0.5]))
    if near == "uniform":
        c = np.full(n_c, c[0])
    shape = [n_c] if b.p(0.5) else [1, 1, 1, n_c]
    if near == "along-heads":   # [H, 1] over [B, S, H, D] / [H, 1, 1] over [B, H, S, D]
        c = np.exp(b.rng.standard_normal(heads) * 0.3)
        shape = [heads, 1] if layout == "bshd" else [heads, 1, 1]
    elif near == "wider":
        shape = [1, 1, 1, 1, n_c]
    elif near == "batch":
        c = np.exp(b.rng.standard_normal(2 * n_c) * 0.3)
        shape = [2, 1, 1, n_c]   # the batch (1 or 2) broadcasts against 2
    c = np.asarray(c).reshape(shape)
    cv = _fed(b, c, "scale") if near == "fed" else b.const(c, stem="q_scale")
    div = b.p(0.3)
    if div:
        b.trap("head-div")
    q = b.op("Div", [view, cv]) if div else b.op("Mul", [view, cv] if b.p(0.7) else [cv, view])
    if near in ("wider", "batch", "perm-moves-d") or flat:
        return b.op("Mul", [q, b.scalar(1.5)])
    if b.p(0.5):   # the head's attention: q against k / v of the same layout
        b.trap("head-attention")
        k, v = (b.op("Reshape", [b.op("MatMul", [x, b.weight([d, heads * dh], stem=n)]), b.ints([0, 0, heads, dh])])
                for n in ("wk", "wv"))
        qh = q if layout == "bhsd" else b.op("Transpose", [q], perm=[0, 2, 1, 3])
        kt = b.op("Transpose", [k], perm=[0, 2, 3, 1])
        vh = b.op("Transpose", [v], perm=[0, 2, 1, 3])
        p = b.op("Softmax", [b.op("MatMul", [qh, kt])], axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [p, vh])], perm=[0, 2, 1, 3])
        return b.op("Reshape", [o, b.ints([0, 0, heads * dh])])
    if layout == "bhsd":
        q = b.op("Transpose", [q], perm=[0, 2, 1, 3])
    return b.op("Reshape", [q, b.ints([0, 0, heads * dh])])


# --- chan_scale ---------------------------------------------------------------------------------------------------

def motif_chan_scale(b: Builder, opset: int) -> str:
    near = _near(b, CHAN_NEAR, 6)
    forms = ["layer", "layer-no-bias"] + (["rms23"] * 2 if opset >= 23 else [])
    form = b.pick(forms)
    b.trap(f"chan-{form}")
    island = near == "after-cast" or b.p(0.25)   # float32 norm between the float16 model's Casts
    if island:
        b.trap("chan-island")
    bsz, d = b.dim("batch", (1, 2), 0.5), int(b.pick([8, 16, 33]))
    seq = 3 if near in ("along-seq", "two-axes") else b.dim("seq", (1, 3), 0.5)
    x = hidden = b.input([bsz, seq, d], stem="hidden")
    nd = F32 if island else b.dtype   # the norm's dtype
    if island:
        x = b.op("Cast", [b.op("Cast", [x], to=int(F16))], to=int(F32))
    g = 1.0 + b.rng.standard_normal(d) * 0.2
    beta = b.rng.standard_normal(d) * 0.1
    c = np.exp(b.rng.standard_normal(d) * 0.3)
    big = 300.0 if nd == F16 else 3e19
    if near == "overflow":   # gamma * c past the dtype's max at a few channels; norm * gamma * c is not (|n| < 0.3)
        g[::3], c[::3] = big, big
        b.feeds[hidden] = (b.feeds[hidden] * 0.1).astype(b.np_dtype())
    gv, bv = b.const(g, nd, stem="gamma"), b.const(beta, nd, stem="beta")
    if near == "two-axes":   # over [S, D]: gamma [S, D], c [D] still along the last axis
        g2 = b.const(g[None, :] * (1.0 + 0.1 * np.arange(3))[:, None], nd, stem="gamma")
        b2 = b.const(np.broadcast_to(beta, (3, d)), nd, stem="beta")
        if form == "rms23":
            n = b.op("RMSNormalization", [x, g2], axis=-2, epsilon=1e-6)
        else:
            n = b.op("LayerNormalization", [x, g2] + ([b2] if form == "layer" else []), axis=-2, epsilon=1e-5)
    elif form == "rms23":
        n = b.op("RMSNormalization", [x, gv], axis=-1, epsilon=1e-6)
    else:
        n = b.op("LayerNormalization", [x, gv] + ([bv] if form == "layer" else []), axis=-1, epsilon=1e-5)
    if near == "norm-shared":
        b.output(b.op("Neg", [n]))
    shape = b.pick([[d], [1, d], [1, 1, d]])
    if near == "along-seq":
        c, shape = np.exp(b.rng.standard_normal(3) * 0.3), [1, 3, 1]
    elif near == "wider":
        shape = [1, 1, 1, d]
    c = np.asarray(c).reshape(shape)
    cd = F16 if near == "after-cast" else nd
    if near == "after-cast":
        n = b.op("Cast", [n], to=int(F16))
    cv = b.input(list(c.shape), dtype=cd, stem="chan_scale") if near == "fed" else b.const(c, cd, stem="chan_scale")
    if near == "fed":
        b.feeds[cv] = c.astype(b.np_dtype(cd))
    y = b.op("Mul", [n, cv] if b.p(0.7) else [cv, n])
    if island and near != "after-cast":
        y = b.op("Cast", [y], to=int(F16))
    if island or near == "after-cast":
        y = b.op("Cast", [y], to=int(b.dtype))
    if b.p(0.4) and near not in ("wider", "along-seq", "two-axes"):   # read by the next layer's projection
        y = b.op("MatMul", [y, b.weight([d, 8])])
    return y


# --- attn_cf ------------------------------------------------------------------------------------------------------

def motif_attn_cf(b: Builder, opset: int) -> str:
    near = _near(b, CF_NEAR, 6)
    bsz = b.dim("batch", (1, 2), 0.5)
    c = int(b.pick([4, 8, 16]))
    cdim = b.dim("ch", (c,), 1.0) if near == "c-symbolic" else c
    src = b.pick(["conv", "fed", "memory"])
    square = near in ("p-not-transposed", "softmax-queries", "over-channels") or src == "conv"
    b.trap(f"cf-{src}")
    if src == "conv":   # 1x1 Convs over a feature map [B, C, H, W], viewed [B, C, N]
        hh, ww = int(b.pick([2, 3])), int(b.pick([2, 4]))
        fm = b.input([bsz, cdim, hh, ww], stem="fmap")
        flat = b.ints([0, c, -1])
        q, k, v = (b.op("Reshape", [b.op("Conv", [fm, b.const(b.rng.standard_normal((c, c, 1, 1)) * 0.4, stem=f"w{n}"),
                                                  b.const(b.rng.standard_normal(c) * 0.1, stem=f"b{n}")]), flat])
                   for n in "qkv")
        n_q = n_k = hh * ww
    else:
        n_q = int(b.pick([3, 5]))
        n_k = n_q if square else int(b.pick([2, 4, 6]))
        nq = b.dim("n", (n_q,), 0.5)
        q = b.input([bsz, cdim, nq], stem="q")
        if src == "memory" and near != "c-symbolic":   # a learned memory [1, C, T] broadcast over the batch
            k = b.const(b.rng.standard_normal((1, c, n_k)), stem="mem_k")
            v = b.const(b.rng.standard_normal((1, c, n_k)), stem="mem_v")
        else:
            nk = nq if n_k == n_q and b.p(0.5) else b.dim("t", (n_k,), 0.5)
            k, v = b.input([bsz, cdim, nk], stem="k"), b.input([bsz, cdim, nk], stem="v")
    scale = c ** -0.5
    where = b.pick(["q", "scores", "div", "none"])
    b.trap(f"cf-scale-{where}")
    if near == "over-channels":   # q as is, k transposed: [B, C, N] @ [B, N, C] scores over the channels
        q3, kc = q, b.op("Transpose", [k], perm=[0, 2, 1])
    else:
        q3, kc = b.op("Transpose", [q], perm=[0, 2, 1]), k
    if where == "q":
        q3 = b.op("Mul", [q3, b.scalar(scale)])
    sc = b.op("MatMul", [q3, kc])
    if where == "scores":
        sc = b.op("Mul", [sc, b.scalar(scale)] if b.p(0.7) else [b.scalar(scale), sc])
    elif where == "div":
        sc = b.op("Div", [sc, b.scalar(c ** 0.5)])
    if near == "per-key-scale":
        sc = b.op("Mul", [sc, b.const(np.exp(b.rng.standard_normal(n_k) * 0.3), stem="key_scale")])
    if near == "mask":   # an additive mask over the keys [1, T] (0 / -1e4: each query keeps a key)
        m = np.zeros((1, n_k))
        m[0, -1:] = -1e4 if n_k > 1 else 0.0
        sc = b.op("Add", [sc, b.const(m, stem="mask")])
    p = b.op("Softmax", [sc], axis=1 if near == "softmax-queries" else b.pick([2, -1]))
    if near == "p-shared":
        b.output(b.op("Neg", [p]))
    if near == "p-not-transposed":
        o = b.op("MatMul", [v, p])
    elif near == "over-channels":   # scores [B, C, C]: v^T's rows are the channels
        o = b.op("MatMul", [b.op("Transpose", [v], perm=[0, 2, 1]), b.op("Transpose", [p], perm=[0, 2, 1])])
    else:
        o = b.op("MatMul", [v, b.op("Transpose", [p], perm=[0, 2, 1])])
    if src == "conv" and b.p(0.6):   # viewed back and projected, the residual added
        o4 = b.op("Reshape", [o, b.op("Shape", [fm])])
        o4 = b.op("Conv", [o4, b.const(b.rng.standard_normal((c, c, 1, 1)) * 0.4, stem="wo")])
        return b.op("Add", [fm, o4])
    return b.op("Mul", [o, b.scalar(1.5)])


# --- rope_row -----------------------------------------------------------------------------------------------------

def motif_rope_row(b: Builder, opset: int) -> str:
    near = _near(b, ROW_NEAR, 6)
    bsz = b.dim("batch", (1, 2), 0.5)
    d = int(b.pick([16, 32]))
    layout = b.pick(("bhsd", "bshd", "sbhd"))
    form = "rotate-half" if near in ("two-rows", "sin-next") else b.pick(["rotate-half", "halves"])
    src = b.pick(ROW_FROM)
    for t in (f"row-{layout}", f"row-{form}", f"row-{src}"):
        b.trap(t)
    x = b.input([bsz, 1, d], stem="hidden")
    dh, heads = int(b.pick([8, 16])), int(b.pick([1, 2]))
    rd = dh // 2 if b.p(0.25) and near != "two-rows" else dh   # two rows of a partial rotary: no Concat
    rows = 1 if near == "identity" and b.p(0.5) else int(b.pick([4, 7]))
    step = int(b.pick([1, 1, 2]))
    p0 = {"fed-zero": 0, "fed-last": rows - 1, "fed-mid": rows // 2}.get(src, int(b.rng.integers(rows)))
    offset = 0.0 if near == "identity" else 0.1   # angle 0 at row 0 makes cos 1 and sin 0: no rotation there
    if near == "identity":
        p0 = 0 if src.startswith("fed") else p0
    pos = (np.arange(rows)[:, None] + offset) * (1.0 / 50.0 ** (np.arange(rd // 2) / (rd // 2)))[None, :]
    ang = pos if form == "halves" else np.concatenate([pos, pos], axis=-1)
    cb, sb = b.const(np.cos(ang), stem="cos_cache"), b.const(np.sin(ang), stem="sin_cache")
    one = b.ints([2 if near == "two-rows" else 1])
    if src.startswith("fed"):
        start = b.input([1], dtype=I64, stem="past_len")
        b.feeds[start] = np.array([p0], np.int64)
    elif src == "past-shape":
        past = b.input([1, 1, b.dim("past", (p0,), 1.0), 2], stem="past_key")
        start = b.op("Shape", [past], start=2, end=3)
    else:   # counted back from the buffer's end: R - (1 + k), k the rows left after the cut
        start = b.op("Sub", [b.op("Shape", [cb], start=0, end=1), b.ints([1 + rows - 1 - p0])])
    steps = [b.ints([0])] + ([b.ints([step])] if step > 1 else [])

    def cut(buf: str, st: str) -> str:
        return b.op("Slice", [buf, st, b.op("Add", [st, one] if b.p(0.5) else [one, st])] + steps)

    c = cut(cb, start)
    s = cut(sb, b.op("Add", [start, b.ints([1])]) if near == "sin-next" else start)
    if near == "cut-shared":
        b.output(b.op("Identity", [c]))
    c, s = _place_rows(b, c, layout, False), _place_rows(b, s, layout, False)

    def rotate(xr):
        if form == "halves":
            return _rotate_halves(b, *_halves(b, xr, rd, b.pick(["slices", "split"])), c, s, "none")
        return _half(b, xr, c, s, rd, "none")

    outs = [_merge(b, rotate_partial(b, _heads(b, x, d, heads, dh, layout), rd, dh, rotate), heads, dh, layout)
            for _ in range(1 if b.p(0.6) else 2)]   # q, and k on the same tables
    if len(outs) == 2:
        b.output(outs[1])
    return outs[0]


BUILDERS = {"head_scale": motif_head_scale, "chan_scale": motif_chan_scale, "attn_cf": motif_attn_cf,
            "rope_row": motif_rope_row}


def build_s42(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
