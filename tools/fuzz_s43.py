"""Fuzz motifs for session 41's rewrites, each with near misses drawn on purpose:

  unsq_compose  unsqueeze-of-unsqueeze composing any constant axes (rules/layout/unsqueeze_chain.yaml, bec9828): a
                chain of 2 - 4 Unsqueezes of 1 - 3 axes each over a rank-0 .. 3 x (a float tensor, or an int64
                dim read off a Shape and built into a Reshape target, as exporters write it), each axis drawn over
                its own op's output, negative ones too, the outer axes the same numbers as the inner ones sometimes
                (a naive union of the two lists repeats them: the composition numbers them apart), a Squeeze of
                one of the new axes between two links (view-chain's Squeeze / Unsqueeze end, 74e5169). Near
                misses: a middle link read elsewhere (the chain merges around it only), a link's axes fed at run
                time, the result added to a tensor of its exact shape (a misplaced axis broadcasts to other dims).
  one_head      one-head attention at ort (passes/mha_kv_heads.py one-head-3d and view-chain's Squeeze end,
                74e5169): q / k / v [B, S, D] (projections of a hidden state; k / v of a memory [B, T, C]
                sometimes) unsqueezed at the heads axis ([B, 1, S, D] at 1 / -3, or [B, S, 1, D] at 2 / -2
                transposed heads-first), softmax(q k^T * D^-0.5 [+ mask]) v, the output squeezed back
                (Squeeze(1), Reshape [0, -1, D], or Transpose + the [0, 0, -1] merge); or the 3-D bmm form
                (attention-bmm-single-head). Near misses: the output Reshape not a pure squeeze ([B * S, D], or
                [B, D, S]: the same elements read as other rows), k / v unsqueezed at axis 0 (batch 1 with B as
                the heads), k's Unsqueeze read elsewhere, v fed 4-D (only k a 3-D value unsqueezed), k and v one
                value, the attention output read elsewhere.
  norm_scalar   rms-norm-channel-scale taking a single number (rules/norm/norm_channel_scale.yaml, 858ad89):
                RMSNormalization-23 of x [B, S, D] over the last axis (gamma [D]) or the last two (gamma [S, D],
                [D] or [1]) times c of shape (), [1], [1, 1], [1, 1, 1], negative or 0 sometimes, c a folded Cast
                of a float64 constant sometimes; LayerNormalization and the decomposed RMSNorm (opset 18) times
                one number too (not taken: checked for values only). Near misses: c along the sequence
                ([1, S, 1]), c fed at run time, the norm read elsewhere, the Mul after a Cast of the norm to
                float16 (c float16), c one axis wider than the output ([1, 1, 1, 1]), gamma * c past the dtype's
                max.
  key_perm      scores-key-permuted with a scaled K^T (rules/attention/key_perm.yaml, 6e985a7): q, k, v in one
                batch-first layout other than [B, H, T, D] / [B, T, H, D] ([B, D, H, T]: Florence-2's channel
                attention, the tokens the head size; [B, T, D, H]; [B, D, T, H]), read fed or as a Reshape of a
                projection, K^T = Transpose(k, p) to [B, H, D, T], the scale split over q and K^T (TorchScript's
                SDPA), on K^T only, on q only, or after the scores; Mul(K^T, s) either order. Near misses: the K^T
                scale per channel ([1, 1, D, 1]) or per key ([T]), fed at run time, a Div, a layout that is not
                batch-first ([H, B, T, D], [T, B, H, D]; B and H may be the same size), K^T or the scaled K^T read
                elsewhere.

fuzz_motifs.make_case draws a case of this family for S43_SHARE of the seeds from a side stream of its own
(S43_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from fuzz_motifs import I64, Builder, build_one_motif

#: share of the motif-graph seeds that are session-43 cases (a side stream of the seed decides)
S43_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119
S43_SALT = 0x4C1B
MOTIFS = ("unsq_compose", "one_head", "norm_scalar", "key_perm")
UNSQ_NEAR = ("middle-shared", "axes-fed", "exact-shape")
HEAD_NEAR = ("out-not-squeeze", "kv-axis0", "k-shared", "v-4d", "kv-same", "out-shared")
SCALAR_NEAR = ("along-seq", "fed", "norm-shared", "after-cast", "wider", "overflow")
KEY_NEAR = ("per-channel", "per-key", "fed", "div", "not-batch-first", "kt-shared", "ks-shared")
#: the key's batch-first layouts scores-key-permuted takes (the K^T perm is none of the two standard ones)
KEY_LAYOUTS = ("BDHT", "BTDH", "BDTH")
#: layouts whose batch is not the first axis (near misses)
KEY_LAYOUTS_NOT_BATCH_FIRST = ("HBTD", "TBHD")
F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE


def _near(b: Builder, nears: tuple, plain: int) -> str:
    near = b.pick(["none"] * plain + list(nears))
    if near != "none":
        b.trap(f"near-{near}")
    return near


def _fed(b: Builder, arr: np.ndarray, stem: str, dtype: int | None = None) -> str:
    """A float input of arr's shape fed arr (a value the graph only knows at run time)."""
    name = b.input(list(arr.shape), dtype=dtype, stem=stem)
    b.feeds[name] = np.asarray(arr).astype(b.np_dtype(dtype))
    return name


def _perm_to(src: str, dst: str) -> list[int]:
    """The Transpose perm taking axes named by the letters ``src`` to the order ``dst``."""
    return [src.index(a) for a in dst]


# --- unsq_compose -------------------------------------------------------------------------------------------------

def _link_axes(b: Builder, r_in: int, prev: list[int] | None) -> list[int]:
    """1 - 3 distinct axes of an Unsqueeze of a rank-r_in input, numbered in its output (negative sometimes);
    the previous link's numbers again where they fit (a naive union would repeat them)."""
    n = int(b.pick([1, 1, 2, 3]))
    r_out = r_in + n
    r_same = r_in + len(prev or [])
    if prev is not None and b.p(0.3) and all(-r_same <= a < r_same for a in prev) \
            and len({a % r_same for a in prev}) == len(prev):
        b.trap("unsq-same-numbers")
        return list(prev)
    pos = sorted(int(a) for a in b.rng.choice(r_out, n, replace=False))
    out = []
    for a in pos:
        if b.p(0.4):
            b.trap("unsq-negative")
            out.append(a - r_out)
        else:
            out.append(a)
    return [out[i] for i in b.rng.permutation(len(out))]   # the axes in any order


def motif_unsq_compose(b: Builder, opset: int) -> str:
    near = _near(b, UNSQ_NEAR, 6)
    data = b.pick(["float", "float", "shape"])
    b.trap(f"unsq-{data}")
    if data == "shape":   # a dim of a hidden state (rank 0) built up and flattened into a Reshape target
        hidden = b.input([b.dim("b", (2, 3), 0.5), b.dim("s", (3, 4), 0.5), 4], stem="hidden")
        dims = []
        x, rank = b.op("Gather", [b.op("Shape", [hidden]), b.const(np.array(int(b.pick([0, 1])), np.int64), I64)],
                       axis=0), 0
    else:
        rank = int(b.pick([0, 1, 2, 3]))
        dims = [b.dim("d", (2, 3), 0.3) if i == 0 else int(b.pick([2, 3, 5])) for i in range(rank)]
        x = b.input(dims, stem="x")
    b.trap(f"unsq-rank{rank}")
    links = int(b.pick([2, 2, 3, 4]))
    shared = int(b.rng.integers(links - 1)) if near == "middle-shared" else -1
    fed = int(b.rng.integers(links)) if near == "axes-fed" else -1
    squeeze_at = int(b.rng.integers(1, links)) if b.p(0.2) else -1
    y, r, prev = x, rank, None
    for i in range(links):
        if i == squeeze_at:   # a Squeeze of one size-1 axis between two links
            b.trap("unsq-squeeze-between")
            a = int(b.rng.choice([a % r for a in prev]))
            y = b.op("Squeeze", [y, b.ints([a - r if b.p(0.5) else a])])
            r -= 1
            dims.pop(a)
        axes = _link_axes(b, r, prev)
        if i == fed:
            name = b.input([len(axes)], dtype=I64, stem="axes")
            b.feeds[name] = np.array(axes, np.int64)
            y = b.op("Unsqueeze", [y, name])
        else:
            y = b.op("Unsqueeze", [y, b.ints(axes, stem="axes")])
        r += len(axes)
        prev = axes
        for a in sorted(a % r for a in axes):
            dims.insert(a, 1)
        if i == shared:
            b.output(b.op("Identity", [y]) if data == "shape" else b.op("Neg", [y]))
    if near == "axes-fed":   # no rank inferred past fed axes: Reshape(y, [0] * r) states it
        y = b.op("Reshape", [y, b.ints([0] * r)])
    if data == "shape":   # [n] -> a Reshape target [n, -1]: the hidden state viewed [dim, rest]
        flat = b.op("Reshape", [y, b.ints([1])])
        target = b.op("Concat", [flat, b.ints([-1])], axis=0)
        return b.op("Mul", [b.op("Reshape", [hidden, target]), b.scalar(1.5)])
    if near == "exact-shape":   # a tensor of y's shape: a misplaced axis broadcasts to other dims
        return b.op("Add", [y, b.input(list(dims), stem="z")])
    return b.op("Mul", [y, b.scalar(1.5)]) if b.p(0.5) else b.op("Neg", [y])


# --- one_head -----------------------------------------------------------------------------------------------------

def motif_one_head(b: Builder, opset: int) -> str:
    near = _near(b, HEAD_NEAR, 6)
    form = "4d" if near in ("kv-axis0", "k-shared", "v-4d") else b.pick(["4d", "bmm", "bmm"])
    b.trap(f"oh-{form}")
    bsz = b.dim("batch", (1, 2), 0.5)
    c, d = int(b.pick([8, 16])), int(b.pick([4, 8]))
    seq = 3 if near == "out-not-squeeze" else b.dim("seq", (3, 4), 0.5)
    x = b.input([bsz, seq, c], stem="hidden")
    cross = b.p(0.3)
    if cross:
        b.trap("oh-cross")
    tk = b.dim("t", (2, 5), 0.5) if cross else seq   # the keys' length
    mem = b.input([bsz, tk, c], stem="memory") if cross else x
    q3 = b.op("MatMul", [x, b.weight([c, d], stem="wq")])
    k3 = b.op("MatMul", [mem, b.weight([c, d], stem="wk")])
    v3 = k3 if near == "kv-same" else b.op("MatMul", [mem, b.weight([c, d], stem="wv")])
    scale = d ** -0.5
    if form == "bmm":   # [N, S, D] @ [N, D, T]: one head
        sc = b.op("MatMul", [q3, b.op("Transpose", [k3], perm=[0, 2, 1])])
        p = b.op("Softmax", [b.op("Mul", [sc, b.scalar(scale)])], axis=-1)
        o = b.op("MatMul", [p, v3])
        if near == "out-shared":
            b.output(b.op("Neg", [o]))
        if near == "out-not-squeeze":
            o = b.op("Reshape", [o, b.ints([0, d, -1])])   # [B, D, S]: other rows
            return b.op("MatMul", [o, b.weight([3, 4], stem="wo")])
        return b.op("MatMul", [o, b.weight([d, c], stem="wo")])
    layout = "bhsd" if near == "kv-axis0" else b.pick(["bhsd", "bshd"])
    b.trap(f"oh-{layout}")
    if near == "kv-axis0":   # [1, B, S, D]: batch 1, B the heads
        ax = [0]
    elif layout == "bhsd":
        ax = [b.pick([1, -3])]
    else:
        ax = [b.pick([2, -2])]

    def four(t: str) -> str:
        u = b.op("Unsqueeze", [t, b.ints(ax, stem="axes")])
        return b.op("Transpose", [u], perm=[0, 2, 1, 3]) if layout == "bshd" else u

    q4 = four(q3)
    k4 = four(k3)
    if near == "k-shared":
        b.output(b.op("Neg", [k4]))
    if near == "v-4d":   # v fed [B, 1, T, D]: only k a 3-D value unsqueezed
        v4 = b.input([bsz, 1, tk, d], stem="v4")
    else:
        v4 = k4 if near == "kv-same" else four(v3)
    kt = b.op("Transpose", [k4], perm=[0, 1, 3, 2])
    sc = b.op("MatMul", [q4, kt])
    sc = b.op("Mul", [sc, b.scalar(scale)]) if b.p(0.7) else b.op("Div", [sc, b.scalar(d ** 0.5)])
    if b.p(0.3):   # an additive key mask [1, 1, 1, T] (0 / -1e4: each query keeps a key)
        b.trap("oh-mask")
        arr = np.zeros((1, 1, 1, b.rt(tk)))
        arr[..., -1] = -1e4 if b.rt(tk) > 1 else 0.0
        if isinstance(tk, str):   # fed [1, 1, 1, T] beside a memory of T symbolic
            m = b.input([1, 1, 1, tk], stem="mask")
            b.feeds[m] = arr.astype(b.np_dtype())
        else:
            m = b.const(arr, stem="mask")
        sc = b.op("Add", [sc, m])
    p = b.op("Softmax", [sc], axis=-1)
    o = b.op("MatMul", [p, v4])   # [B, 1, S, D] ([1, B, S, D] at axis 0)
    if near == "out-shared":
        b.output(b.op("Neg", [o]))
    if near == "out-not-squeeze":
        o = b.op("Reshape", [o, b.ints(b.pick([[-1, d], [0, d, -1]]))])   # [B * S, D] / [B, D, S]
        return b.op("Mul", [o, b.scalar(1.5)])
    if near == "kv-axis0":
        o = b.op("Squeeze", [o, b.ints([0])])
    else:
        end = b.pick(["squeeze", "reshape", "merge"])
        b.trap(f"oh-end-{end}")
        if end == "squeeze":
            o = b.op("Squeeze", [o, b.ints([1])])
        elif end == "reshape":
            o = b.op("Reshape", [o, b.ints([0, -1, d])])
        else:
            o = b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]), b.ints([0, 0, -1])])
    return b.op("MatMul", [o, b.weight([d, c], stem="wo")])


# --- norm_scalar --------------------------------------------------------------------------------------------------

def motif_norm_scalar(b: Builder, opset: int) -> str:
    near = _near(b, SCALAR_NEAR, 6)
    forms = ["rms23", "rms23", "rms23-two-axes"] if opset >= 23 else []
    form = b.pick(forms + ["layer", "rms-decomposed"])
    if near in ("along-seq", "wider", "overflow", "after-cast", "norm-shared", "fed") and opset >= 23:
        form = b.pick(["rms23", "rms23-two-axes"])
    b.trap(f"ns-{form}")
    bsz, d = b.dim("batch", (1, 2), 0.5), int(b.pick([8, 16, 33]))
    seq = 3 if form == "rms23-two-axes" or near == "along-seq" else b.dim("seq", (1, 3), 0.5)
    x = b.input([bsz, seq, d], stem="hidden")
    nd = b.dtype
    value = float(b.pick([np.exp(b.rng.standard_normal() * 0.5), d ** -0.5, -0.75, 0.0, 2.0]))
    big = 300.0 if nd == F16 else 3e19
    if form == "rms23-two-axes":
        gshape = b.pick([[seq, d], [d], [1]])
    else:
        gshape = [d]
    g = 1.0 + b.rng.standard_normal(gshape) * 0.2
    if near == "overflow":   # gamma * c past the dtype's max at every third channel, where x (so n) is small:
        g = 1.0 + b.rng.standard_normal([seq, d] if form == "rms23-two-axes" else [d]) * 0.2
        g[..., ::3] = big     # n * gamma * c stays finite there, gamma * c folded does not
        value = big
        xs = b.feeds[x].astype(np.float64)
        xs[..., ::3] *= 0.01
        b.feeds[x] = xs.astype(b.np_dtype())
    gv = b.const(g, nd, stem="gamma")
    if form == "rms23":
        n = b.op("RMSNormalization", [x, gv], axis=-1, epsilon=1e-6)
    elif form == "rms23-two-axes":
        n = b.op("RMSNormalization", [x, gv], axis=b.pick([1, -2]), epsilon=1e-6)
    elif form == "layer":
        n = b.op("LayerNormalization", [x, gv, b.const(b.rng.standard_normal(d) * 0.1, nd, stem="beta")], axis=-1,
                 epsilon=1e-5)
    else:   # x / sqrt(mean(x^2) + eps) * gamma
        var = b.op("ReduceMean", [b.op("Mul", [x, x]), b.ints([-1])], keepdims=1)
        n = b.op("Mul", [b.op("Div", [x, b.op("Sqrt", [b.op("Add", [var, b.scalar(1e-6)])])]), gv])
    if near == "norm-shared":
        b.output(b.op("Neg", [n]))
    shape = b.pick([[], [1], [1, 1], [1, 1, 1]])
    c = np.full(shape, value)
    if near == "along-seq":
        c, shape = np.exp(b.rng.standard_normal((1, seq, 1)) * 0.3), [1, seq, 1]
    elif near == "wider":
        c = np.full([1, 1, 1, 1], value)
    cd = nd
    if near == "after-cast":   # the float32 norm cast to float16, then scaled
        n = b.op("Cast", [n], to=int(F16))
        cd = F16
    if near == "fed":
        cv = _fed(b, c, "scale", cd)
    elif b.p(0.2) and near != "after-cast":   # a Cast of a float64 constant, folded
        b.trap("ns-cast-const")
        name = b.name("c64")
        b.inits.append(numpy_helper.from_array(np.asarray(c, np.float64), name))
        cv = b.op("Cast", [name], to=int(cd))
    else:
        cv = b.const(c, cd, stem="scale")
    y = b.op("Mul", [n, cv] if b.p(0.7) else [cv, n])
    if near == "after-cast":
        y = b.op("Cast", [y], to=int(nd))
    if b.p(0.4) and near not in ("wider", "along-seq"):   # read by the next layer's projection
        y = b.op("MatMul", [y, b.weight([d, 8])])
    return y


# --- key_perm -----------------------------------------------------------------------------------------------------

def motif_key_perm(b: Builder, opset: int) -> str:
    near = _near(b, KEY_NEAR, 6)
    layout = b.pick(KEY_LAYOUTS_NOT_BATCH_FIRST if near == "not-batch-first" else KEY_LAYOUTS)
    b.trap(f"kp-{layout}")
    bsz = b.dim("batch", (1, 2), 0.5)
    heads, d, t = int(b.pick([1, 2, 3])), int(b.pick([4, 6, 8])), int(b.pick([3, 5]))
    if near == "not-batch-first" and b.p(0.5):   # B and H of one size: the MatMul does not tell them apart
        bsz = heads = 2
        b.trap("kp-b-equals-h")
    sizes = {"B": bsz, "H": heads, "D": d, "T": t}
    src = b.pick(["fed", "reshape"]) if layout[0] == "B" else "fed"
    b.trap(f"kp-src-{src}")

    def tensor(stem: str) -> str:
        if src == "fed":
            return b.input([sizes[a] for a in layout], stem=stem)
        # [B, A1, A2 * A3] projected and viewed [B, A1, A2, A3]
        a1, a2, a3 = (sizes[a] for a in layout[1:])
        h = b.input([bsz, a1, 8], stem=f"{stem}_hidden")
        pr = b.op("MatMul", [h, b.weight([8, a2 * a3], stem=f"w{stem}")])
        return b.op("Reshape", [pr, b.ints([0, a1, a2, a3])])

    q, k, v = tensor("q"), tensor("k"), tensor("v")
    qh = b.op("Transpose", [q], perm=_perm_to(layout, "BHTD"))   # [B, H, S, D] (S = T: self-attention)
    vh = b.op("Transpose", [v], perm=_perm_to(layout, "BHTD"))
    kt = b.op("Transpose", [k], perm=_perm_to(layout, "BHDT"))   # K^T [B, H, D, T]
    if near == "kt-shared":
        b.output(b.op("Neg", [kt]))
    where = b.pick(["split", "k", "q", "scores"])
    if near in ("per-channel", "per-key", "fed", "div", "ks-shared"):
        where = b.pick(["split", "k"])
    b.trap(f"kp-scale-{where}")
    full = d ** -0.5
    s_k = full ** 0.5 if where == "split" else full
    if where in ("split", "q"):
        qh = b.op("Mul", [qh, b.scalar(full ** 0.5 if where == "split" else full)])
    if where in ("split", "k"):
        if near == "per-channel":
            sv = b.const(np.exp(b.rng.standard_normal((1, 1, d, 1)) * 0.3) * s_k, stem="k_scale")
        elif near == "per-key":
            sv = b.const(np.exp(b.rng.standard_normal(t) * 0.3) * s_k, stem="k_scale")
        elif near == "fed":
            sv = _fed(b, np.full([1], s_k), "k_scale")
        else:
            sv = b.scalar(s_k if near != "div" else 1.0 / s_k, stem="k_scale")
        if near == "div":
            kt = b.op("Div", [kt, sv])
        else:
            kt = b.op("Mul", [kt, sv] if b.p(0.7) else [sv, kt])
        if near == "ks-shared":
            b.output(b.op("Neg", [kt]))
    sc = b.op("MatMul", [qh, kt])
    if where == "scores":
        sc = b.op("Mul", [sc, b.scalar(full)])
    p = b.op("Softmax", [sc], axis=-1)
    o = b.op("Transpose", [b.op("MatMul", [p, vh])], perm=[0, 2, 1, 3])   # [B, T, H, D]
    o = b.op("Reshape", [o, b.ints([0, 0, heads * d])])
    return b.op("MatMul", [o, b.weight([heads * d, 8], stem="wo")]) if b.p(0.5) else b.op("Mul", [o, b.scalar(1.5)])


BUILDERS = {"unsq_compose": motif_unsq_compose, "one_head": motif_one_head, "norm_scalar": motif_norm_scalar,
            "key_perm": motif_key_perm}


def build_s43(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
