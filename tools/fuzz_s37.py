"""Fuzz motifs for session 36's rewrites, which no other family draws, each with the traps its field is known for:

  pad_conv       a Pad read by a Conv (fold-pad-into-conv): a constant zero Pad of the spatial axes folds into the
                 Conv's pads. Traps: a non-zero fill, a fill given as a graph input, a negative pad (a crop),
                 reflect / edge mode, a pad of the channel or batch axis, opset 18's axes input, a Conv with
                 auto_pad SAME_UPPER / VALID, strides or dilations, the Pad read elsewhere too, two Convs on one Pad.
  conv_branches  RepVGG / PP-LCNet blocks (merge-conv-branches): Conv branches of one x (k x k, 1 x 1, 1 x k, 5 x 5,
                 each with its own BatchNormalization sometimes) and an identity BatchNormalization summed by an Add
                 tree. Traps: a branch of another stride (the spatial dims 1, so the shapes agree), of dilation 2,
                 of another group count, with uncentered or even-kernel pads, auto_pad SAME_UPPER, a branch read
                 elsewhere, x itself or a Conv of another input as a leaf, BN stats far from identity (epsilon 1e-3,
                 mean, var).
  bn_fold        fold-batch-norm: Conv -> BN (any group / dilation / pads), BN -> Conv forward (pads 0 folds; pads
                 or SAME must not), Gemm -> BN (transB either way), MatMul -> BN; an intermediate read elsewhere.
  div_root       div-by-root: x / Sqrt(moment) of RMSNorm / LayerNorm forms (Pow or Mul squares, ReduceMean or
                 ReduceSumSquare / ReduceSum and a scale, an eps Add or a Max clamp, keepdims 0 + Unsqueeze). Traps:
                 a moment that is not a mean of squares (a max, a mean of |x|, a constant), the root read
                 elsewhere, a numerator other than the normalized value.
  scores_clamp   scores-clamp-onto-mask: Max(MatMul scores + mask, lowest) before a Softmax, as BART / OPT eager
                 code writes it. Traps: a bound that is not the dtype's lowest (-1e4, -1e9), the bound first,
                 float16 (refused by name), masks of rank 2 / 4 broadcasting on batch, heads or queries, built from a
                 0/1 mask or holding -inf, fully masked rows, a mask of higher rank than 3-D scores, the sum read
                 elsewhere.
  gelu_erf       gelu-erf in every grouping (optimizer/rewrite/_gelu_product.py): (x * h) * a, (x * a) * h,
                 x * (h * a), (a * h) * x, (x * a) / 2, x * (a / 2), 0.5 from two constants, t = x / sqrt 2 or
                 x * 0.7071 or from two constants. Traps: 0.45 for 0.5, erf(0.7 x), erf of another x, 2 / (x * a),
                 a constant that broadcasts x up a rank, 1 + erf or erf read elsewhere.

fuzz_motifs.make_case draws a case of this family for S37_SHARE of the seeds from a side stream of its own
(S37_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import Builder, Dim, build_one_motif

#: share of the motif-graph seeds that are session-37 cases (a side stream of the seed decides)
S37_SHARE = 0.06
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S37_SALT = 0x5380
MOTIFS = ("pad_conv", "conv_branches", "bn_fold", "div_root", "scores_clamp", "gelu_erf")
PAD_NEAR = ("value", "value-input", "negative", "reflect", "edge", "channel-axis", "conv-same", "pad-shared")
BRANCH_NEAR = ("stride", "dilation", "group", "uncentered", "even-kernel", "auto-pad", "shared", "residual",
               "other-input")
GELU_GROUPS = ("xh_a", "xa_h", "x_ha", "ah_x", "xa_div2", "x_adiv2", "h2", "hx_a")
GELU_NEAR = ("half", "erf-scale", "erf-other", "div-reversed", "broadcast", "a-shared")
ROOT_NEAR = ("max-moment", "abs-moment", "const-moment", "root-shared", "other-numerator")
CLAMP_NEAR = ("bound-1e4", "bound-1e9", "bound-first", "mask-wider", "sum-shared")
I64 = TensorProto.INT64


def _lowest(b: Builder) -> float:
    return float(np.finfo(b.np_dtype()).min)


def _conv(b: Builder, x: str, cin: int, cout: int, k: list[int], group: int = 1, strides=None, pads=None,
          dil=None, auto_pad: str | None = None, bias: bool = True) -> str:
    """A Conv with a constant [cout, cin / group, *k] weight (and bias); attributes left out when default."""
    ins = [x, b.weight([cout, cin // group, *k], scale=0.4)]
    if bias:
        ins.append(b.const(0.1 * b.rng.standard_normal([cout]), stem="bias"))
    attrs = {"kernel_shape": k}
    if group != 1:
        attrs["group"] = group
    if strides and any(s != 1 for s in strides):
        attrs["strides"] = strides
    if dil and any(d != 1 for d in dil):
        attrs["dilations"] = dil
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    elif pads and any(pads):
        attrs["pads"] = pads
    return b.op("Conv", ins, **attrs)


def _bn(b: Builder, x: str, c: int, identity_like: bool = False) -> str:
    """An inference BatchNormalization over channel axis 1; stats near identity or far from it."""
    r = b.rng
    if identity_like:
        scale, bias, mean, var = 1 + 0.1 * r.standard_normal(c), 0.05 * r.standard_normal(c), np.zeros(c), np.ones(c)
    else:
        scale, bias = 1 + 0.3 * r.standard_normal(c), 0.2 * r.standard_normal(c)
        mean, var = 0.3 * r.standard_normal(c), 0.5 + r.random(c)
    eps = b.pick([None, 1e-5, 1e-3])
    attrs = {} if eps is None else {"epsilon": float(eps)}
    if eps == 1e-3:
        b.trap("bn-eps-1e-3")
    ins = [x] + [b.const(a, stem=s) for a, s in ((scale, "bn_s"), (bias, "bn_b"), (mean, "bn_m"), (var, "bn_v"))]
    return b.op("BatchNormalization", ins, **attrs)


def motif_pad_conv(b: Builder, opset: int) -> str:
    rank = int(b.pick([3, 4, 4]))
    bsz, c = b.dim("batch", (1, 2), 0.5), int(b.pick([3, 4, 8]))
    spatial = [b.dim(f"s{i}_", (6, 7, 8), 0.4) for i in range(rank - 2)]
    x = b.input([bsz, c, *spatial], stem="image")
    near = b.pick(["none"] * 6 + list(PAD_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    sp = rank - 2
    begin = [int(b.pick([0, 1, 1, 2])) for _ in range(sp)]
    end = [int(b.pick([0, 1, 1, 2])) for _ in range(sp)]
    lead_b, lead_e = [0, 0], [0, 0]
    if near == "negative":
        end[-1] = -1
    if near == "channel-axis":
        lead_e[1] = 1
    pads = lead_b + begin + lead_e + end
    cin = c + (1 if near == "channel-axis" else 0)
    mode = {"reflect": "reflect", "edge": "edge"}.get(near, "constant")
    ins = [x]
    axes_form = opset >= 18 and near != "channel-axis" and b.p(0.4)
    if axes_form:   # opset 18: pads of the listed (spatial) axes only, axes maybe negative
        axes = [a - rank if b.p(0.5) else a for a in range(2, rank)]
        b.trap("pad-axes-input")
        ins.append(b.ints(begin + end))
    else:
        ins.append(b.ints(pads))
    fill = None
    if near == "value":
        fill = b.const(np.array(0.5))
    elif near == "value-input":
        fill = b.input([], stem="fill")
    elif mode == "constant" and b.p(0.5):
        fill = b.const(np.array(0.0))
    if fill is not None or axes_form:
        ins.append(fill if fill is not None else "")
    if axes_form:
        ins.append(b.ints(axes))
    attrs = {} if mode == "constant" and b.p(0.5) else {"mode": mode}
    p = b.op("Pad", ins, **attrs)
    if near == "pad-shared":
        b.output(b.op("Neg", [p]))
    b.maybe_expose(p, 0.04)
    cout = int(b.pick([4, 8]))
    k = [int(b.pick([1, 3, 3])) for _ in range(sp)]
    strides = [int(b.pick([1, 1, 2])) for _ in range(sp)]
    dil = [1 if near == "negative" else int(b.pick([1, 1, 2])) for _ in range(sp)]
    auto = {"conv-same": "SAME_UPPER"}.get(near) or (b.pick([None, None, None, "VALID"]))
    if auto == "SAME_UPPER":   # ORT's Conv takes no dilation with SAME pads
        dil = [1] * sp
    q = [int(b.pick([0, 0, 1])) for _ in range(2 * sp)]
    group = cin if cin == cout and b.p(0.3) else 1
    y = _conv(b, p, cin, cout, k, group, strides, q, dil, auto, bias=b.p(0.7))
    if b.p(0.2):   # a second Conv on the same Pad (each folds on its own)
        b.trap("pad-two-convs")
        y2 = _conv(b, p, cin, cout, k, 1, strides, q, dil, auto)
        y = b.op("Add", [y, y2])
    return b.op("Relu", [y]) if b.p(0.4) else y


def motif_conv_branches(b: Builder, opset: int) -> str:
    near = b.pick(["none"] * 5 + list(BRANCH_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    resid = near == "residual"
    tiny = near == "stride"   # another stride gives the same shape only on 1 x 1 maps
    bsz = b.dim("batch", (1, 2), 0.5)
    c = int(b.pick([4, 6, 8]))
    h = b.dim("h", (1,) if tiny else (3, 4, 5), 0.4)
    w = b.dim("w", (1,) if tiny else (3, 4, 6), 0.4)
    x = b.input([bsz, c, h, w], stem="feat")
    cout = c if b.p(0.7) or resid else 2 * c
    group = int(b.pick([1, 1, 2, c])) if c % 2 == 0 else 1
    if cout % group:
        group = 1
    stride = 1 if tiny or resid else int(b.pick([1, 1, 1, 2]))
    b.trap(f"branch-group-{'one' if group == 1 else 'dw' if group == c else 'some'}")
    kinds = ["3x3"] + [k for k in ("1x1", "1x3", "5x5", "3x3") if b.p(0.5)]
    if len(kinds) == 1:
        kinds.append("1x1")
    if near in ("dilation", "uncentered"):   # their near miss is a 3 x 3 branch's, the last one
        kinds.append("3x3")
    leaves = []
    for i, kind in enumerate(kinds):
        k = {"3x3": [3, 3], "1x1": [1, 1], "1x3": [1, 3], "5x5": [5, 5]}[kind]
        pads = [(d - 1) // 2 for d in k] * 2
        g, s, dil, auto = group, [stride] * 2, None, None
        odd = i == len(kinds) - 1   # the near miss goes on the last branch
        if odd and near == "stride":
            s = [2, 2] if stride == 1 else [1, 1]
        elif odd and near == "dilation" and k == [3, 3]:
            dil, pads = [2, 2], [2, 2, 2, 2]
        elif odd and near == "group":
            g = 1 if group != 1 else (c if cout % c == 0 else 1)
        elif odd and near == "uncentered" and k == [3, 3]:
            pads = [2, 0, 0, 2]
        elif odd and near == "even-kernel":
            k, pads = [2, 2], [1, 1, 0, 0]
        elif odd and near == "auto-pad":   # SAME_UPPER: the centered pads' shape, at stride 2 too
            auto = "SAME_UPPER"
        y = _conv(b, x, c, cout, k, g, s, pads, dil, auto, bias=b.p(0.5))
        if b.p(0.5):   # the branch's own BN (fold-batch-norm folds it first)
            y = _bn(b, y, cout)
        leaves.append(y)
    if cout == c and stride == 1 and b.p(0.6):
        b.trap("identity-bn")
        leaves.append(_bn(b, x, c, identity_like=b.p(0.3)))
    if resid:
        leaves.append(x)
    elif near == "other-input":
        x2 = b.input([bsz, c, h, w], stem="other")
        leaves.append(_conv(b, x2, c, cout, [1, 1], 1, [stride] * 2))
    if near == "shared":
        b.output(b.op("Neg", [leaves[0]]))
    order = list(b.rng.permutation(len(leaves)))
    leaves = [leaves[i] for i in order]
    if b.p(0.5):   # a left-deep chain
        y = leaves[0]
        for leaf in leaves[1:]:
            y = b.op("Add", [y, leaf] if b.p(0.5) else [leaf, y])
    else:          # a balanced tree
        while len(leaves) > 1:
            leaves = [b.op("Add", leaves[i:i + 2]) if i + 1 < len(leaves) else leaves[i]
                      for i in range(0, len(leaves), 2)]
        y = leaves[0]
    return b.op("Relu", [y]) if b.p(0.6) else y


def motif_bn_fold(b: Builder, opset: int) -> str:
    form = b.pick(["conv_bn", "conv_bn", "bn_conv", "gemm_bn", "matmul_bn"])
    b.trap(f"bn-{form}")
    bsz = b.dim("batch", (1, 2, 3), 0.5)
    if form in ("gemm_bn", "matmul_bn"):
        d, m = int(b.pick([4, 8])), int(b.pick([4, 6]))
        x = b.input([bsz, d], stem="rows")
        if form == "gemm_bn":
            trans = b.p(0.5)
            wshape = [m, d] if trans else [d, m]
            attrs = {"transB": 1} if trans else {}
            ins = [x, b.weight(wshape)] + ([b.const(0.1 * b.rng.standard_normal([m]), stem="c")] if b.p(0.6) else [])
            y = b.op("Gemm", ins, **attrs)
        else:
            y = b.op("MatMul", [x, b.weight([d, m])])
        b.maybe_share(y, 0.1)
        return _bn(b, y, m)
    c, cout = int(b.pick([3, 4])), int(b.pick([4, 8]))
    h, w = b.dim("h", (3, 5), 0.4), b.dim("w", (4, 6), 0.4)
    x = b.input([bsz, c, h, w], stem="image")
    if form == "conv_bn":
        k = int(b.pick([1, 3]))
        dil = int(b.pick([1, 1, 2])) if k == 3 else 1
        pad = int(b.pick([0, 1, 2])) if dil == 1 else int(b.pick([1, 2]))   # a dilated 3 x 3 spans 5 rows
        y = _conv(b, x, c, cout, [k, k], 1, [int(b.pick([1, 2]))] * 2, [pad] * 4, [dil] * 2,
                  bias=b.p(0.5))
        b.maybe_share(y, 0.1)
        return _bn(b, y, cout)
    n = _bn(b, x, c)
    b.maybe_share(n, 0.1)
    padded = b.pick(["none", "none", "pads", "same"])
    b.trap(f"bn-conv-{padded}")
    k = int(b.pick([1, 3]))
    return _conv(b, n, c, cout, [k, k], pads=[1] * 4 if padded == "pads" else None,
                 auto_pad="SAME_UPPER" if padded == "same" else None)


def _reduce(b: Builder, op: str, x: str, keep: int, opset: int) -> str:
    """A Reduce* over the last axis: axes an input from opset 18 (ReduceSum from 13), an attribute before."""
    if opset >= 18 or op == "ReduceSum":
        return b.op(op, [x, b.ints([-1])], keepdims=keep)
    return b.op(op, [x], axes=[-1], keepdims=keep)


def motif_div_root(b: Builder, opset: int) -> str:
    bsz, seq, d = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3, 5), 0.5), int(b.pick([8, 16, 32]))
    x = b.input([bsz, seq, d], stem="hidden")
    near = b.pick(["none"] * 5 + list(ROOT_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    layer = b.p(0.4)
    b.trap("root-layer" if layer else "root-rms")
    num = b.op("Sub", [x, _reduce(b, "ReduceMean", x, 1, opset)]) if layer else x
    sq = b.op("Pow", [num, b.scalar(2.0)]) if b.p(0.5) else b.op("Mul", [num, num])
    keep = 0 if b.p(0.2) else 1
    if near == "max-moment":
        v = _reduce(b, "ReduceMax", sq, keep, opset)
    elif near == "abs-moment":
        v = _reduce(b, "ReduceMean", b.op("Abs", [num]), keep, opset)
    else:
        how = b.pick(["mean", "mean", "sumsq", "sum"])
        b.trap(f"moment-{how}")
        if how == "mean":
            v = _reduce(b, "ReduceMean", sq, keep, opset)
        elif how == "sumsq":
            v = b.op("Mul", [_reduce(b, "ReduceSumSquare", num, keep, opset), b.scalar(1.0 / d)])
        else:
            v = b.op("Div", [_reduce(b, "ReduceSum", sq, keep, opset), b.scalar(float(d))])
    if not keep:
        b.trap("moment-keepdims0")
        v = b.op("Unsqueeze", [v, b.ints([-1])])
    v = b.op("Max", [v, b.scalar(1e-6)]) if b.p(0.2) else b.op("Add", [v, b.scalar(1e-5)])
    if near == "const-moment":
        v = b.const(np.full([1], float(d)))
    sd = b.op("Sqrt", [v])
    if near == "root-shared":
        b.output(b.op("Mul", [sd, b.scalar(2.0)]))
    if near == "other-numerator":
        num = b.input([bsz, seq, d], stem="other")
    y = b.op("Div", [num, sd])
    b.maybe_expose(y, 0.05)
    y = b.op("Mul", [y, b.const(1.0 + 0.1 * b.rng.standard_normal([d]), stem="gamma")])
    return b.op("Add", [y, b.const(0.1 * b.rng.standard_normal([d]), stem="beta")]) if layer else y


def _scores_mask(b: Builder, form: str, bsz: Dim, heads: int, sq: Dim, kv: Dim, rank3: bool) -> str:
    """The additive mask: an input of a broadcasting shape, one built from a 0/1 key mask, or a causal constant."""
    low = _lowest(b)
    if form == "from01":   # (1 - m) * lowest over [B, 1, 1, T] (or [B*H, 1, T] for 3-D scores)
        m01 = b.input([bsz, kv], kind="mask01", stem="attention_mask")
        shape = b.ints([-1, 1, b.rt(kv)] if rank3 else [0, 1, 1, -1])
        inv = b.op("Sub", [b.scalar(1.0), m01])
        m = b.op("Mul", [inv, b.scalar(low)])
        m = b.op("Reshape", [m, shape])
        return b.op("Tile", [m, b.ints([heads, 1, 1])]) if rank3 else m
    if form == "causal":   # a static [S, T] constant, -inf or lowest above the diagonal
        s, t = b.rt(sq), b.rt(kv)
        fill = -np.inf if b.p(0.3) else low
        if fill == -np.inf:
            b.trap("mask-inf")
        return b.const(np.triu(np.full((s, t), fill), k=1 + t - s))
    # an input mask, rows fully masked sometimes
    shape = {"b11t": [bsz, 1, 1, kv], "b1st": [bsz, 1, sq, kv], "11st": [1, 1, sq, kv], "st": [sq, kv]}[form]
    if rank3:
        shape = [1, sq, kv] if form in ("11st", "st") else [bsz * heads if isinstance(bsz, int) else 1, sq, kv]
    name = b.input(shape, stem="mask")
    arr = np.where(b.rng.random(b.feeds[name].shape) < 0.3, low, 0.0).astype(b.np_dtype())
    if b.p(0.3):
        b.trap("mask-row-all-masked")
        arr[..., 0, :] = low if b.p(0.5) else -np.inf
    b.feeds[name] = arr
    return name


def motif_scores_clamp(b: Builder, opset: int) -> str:
    near = b.pick(["none"] * 5 + list(CLAMP_NEAR))
    bsz, heads, dh = b.dim("batch", (1, 2), 0.5), int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    sq = b.dim("q", (1, 3, 4), 0.5)
    kv = sq if b.p(0.6) else b.dim("kv", (2, 5), 0.5)
    form = b.pick(["from01", "causal", "b11t", "b1st", "11st", "st"])
    if form == "causal" and (isinstance(sq, str) or isinstance(kv, str) or b.rt(kv) < b.rt(sq)):
        form = "b11t"
    rank3 = (near == "mask-wider" or b.p(0.25)) and isinstance(bsz, int)   # XGLM's [B*H, S, T] scores
    if near == "mask-wider" and not rank3:
        near = "none"
    if near != "none":
        b.trap(f"near-{near}")
    b.trap(f"clamp-mask-{form}" + ("-3d" if rank3 else ""))
    lead = [bsz * heads] if rank3 else [bsz, heads]
    q = b.input([*lead, sq, dh], stem="q")
    k = b.input([*lead, kv, dh], stem="k")
    v = b.input([*lead, kv, dh], stem="v")
    perm = [0, 2, 1] if rank3 else [0, 1, 3, 2]
    s = b.op("MatMul", [q, b.op("Transpose", [k], perm=perm)])
    scale = 1.0 / np.sqrt(dh)
    s = b.op("Mul", [s, b.scalar(scale)]) if b.p(0.5) else b.op("Div", [s, b.scalar(1 / scale)])
    mask = _scores_mask(b, form, bsz, heads, sq, kv, rank3)
    if near == "mask-wider" and rank3:
        mask = b.op("Unsqueeze", [mask, b.ints([0])])
    sm = b.op("Add", [s, mask] if b.p(0.7) else [mask, s])
    if near == "sum-shared":
        b.output(b.op("Neg", [sm]))
    bound = {"bound-1e4": -1e4, "bound-1e9": -1e9}.get(near, _lowest(b))
    if bound == -1e9 and b.dtype != TensorProto.FLOAT:
        bound = -1e4
    c = b.scalar(bound)
    mx = b.op("Max", [c, sm] if near == "bound-first" else [sm, c])
    p = b.op("Softmax", [mx], axis=-1)
    return b.op("MatMul", [p, v])


def _gelu_half(b: Builder, near: str) -> list[str]:
    """0.5 (0.45 for the near miss) as one constant or two multiplying to it."""
    half = 0.45 if near == "half" else 0.5
    if b.p(0.2):
        b.trap("gelu-half-folded")
        return [b.scalar(half * 4), b.scalar(0.25)]
    if near == "broadcast":
        return [b.const(np.full([1, 1, 1, 1], half))]
    return [b.scalar(half)]


def motif_gelu_erf(b: Builder, opset: int) -> str:
    bsz, seq, d = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3), 0.5), int(b.pick([8, 16]))
    x = b.input([bsz, seq, d], stem="hidden")
    if b.p(0.5):
        x = b.op("Add", [b.op("MatMul", [x, b.weight([d, d])]), b.const(0.1 * b.rng.standard_normal([d]))])
    near = b.pick(["none"] * 6 + list(GELU_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    src = b.input([bsz, seq, d], stem="other") if near == "erf-other" else x
    inv = 0.7 if near == "erf-scale" else 1 / np.sqrt(2)
    tf = b.pick(["div", "mul", "two"])
    if tf == "div":
        t = b.op("Div", [src, b.scalar(1 / inv)])
    elif tf == "mul":
        t = b.op("Mul", [src, b.scalar(inv)])
    else:
        t = b.op("Mul", [b.op("Mul", [src, b.scalar(2 * inv)]), b.scalar(0.5)])
    e = b.op("Erf", [t])
    a = b.op("Add", [e, b.scalar(1.0)] if b.p(0.6) else [b.scalar(1.0), e])
    if near == "a-shared":
        b.output(b.op("Neg", [a] if b.p(0.5) else [e]))
    group = b.pick(GELU_GROUPS)
    b.trap(f"gelu-{group}")
    if near == "div-reversed":
        return b.op("Div", [b.scalar(2.0), b.op("Mul", [x, a])])
    if group in ("xa_div2", "x_adiv2"):
        two = b.scalar(2.0 if near != "half" else 1 / 0.45)
        if near == "broadcast":
            two = b.const(np.full([1, 1, 1, 1], 2.0))
        if group == "xa_div2":
            return b.op("Div", [b.op("Mul", [x, a]), two])
        return b.op("Mul", [x, b.op("Div", [a, two])])
    hs = _gelu_half(b, near)
    h = hs[0] if len(hs) == 1 else b.op("Mul", hs)
    if group == "xh_a":
        return b.op("Mul", [b.op("Mul", [x, h]), a])
    if group == "hx_a":
        return b.op("Mul", [b.op("Mul", [h, x]), a])
    if group == "xa_h":
        return b.op("Mul", [b.op("Mul", [x, a]), h])
    if group == "x_ha":
        return b.op("Mul", [x, b.op("Mul", [h, a])])
    if group == "ah_x":
        return b.op("Mul", [b.op("Mul", [a, h]), x])
    # h2: the two constants apart, ((x * c1) * a) * c2
    c1, c2 = (hs if len(hs) == 2 else [hs[0], b.scalar(1.0)])
    return b.op("Mul", [b.op("Mul", [b.op("Mul", [x, c1]), a]), c2])


BUILDERS = {"pad_conv": motif_pad_conv, "conv_branches": motif_conv_branches, "bn_fold": motif_bn_fold,
            "div_root": motif_div_root, "scores_clamp": motif_scores_clamp, "gelu_erf": motif_gelu_erf}


def build_s37(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
