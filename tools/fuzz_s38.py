"""Fuzz motifs for session 37's rewrites, which no other family draws, each with its traps:

  pad_maxpool   a constant zero Pad of a value >= 0 (Relu, Sigmoid, HardSigmoid, Clip with min >= 0) read by a
                MaxPool (fold-pad-into-conv, 658b8ee): the pads fold into the pool's. Traps: an input that can be
                negative (no activation, Tanh, Clip min < 0), a pad >= the kernel (a window of padding alone),
                ceil mode, strides, the Indices output, dilations, a non-zero fill, the Pad read elsewhere.
  gelu_tanh     x * 0.5 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in any grouping (gelu-tanh, dc7c884), the cubic
                as Pow(x, 3), x * (x * x), (x * x) * x, BLOOM's x * (c + c * 0.044715 x x), the expanded sum, 0.5
                as a Div by 2. Traps: 0.04 for 0.044715, a shared intermediate, another x inside the tanh, 0.45 for
                0.5 (float16 constants when the case is float16).
  cast_views    Reshape(Cast(view(x)), s2) (cast-between-views, 12f3151): heads merged or split, a 0 in s2 copying
                a dim the view kept. Traps: the view or the Cast with another reader, a 0 copying a dim the view
                changed, a Transpose between, a cast to int32.
  slice_dim     Slice(x, 0, Shape(x)[a], axis a) with a symbolic dim a (identity-elimination, 5c0df4c), the end
                read by Shape(start, end), Gather or Slice of the shape. Traps: the end from another tensor's
                other dim, another axis's dim, a non-zero start, a step, an end of dim - 1.

fuzz_motifs.make_case draws a case of this family for S38_SHARE of the seeds from a side stream of its own
(S38_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import Builder, build_one_motif

#: share of the motif-graph seeds that are session-38 cases (a side stream of the seed decides)
S38_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S38_SALT = 0x53A6
MOTIFS = ("pad_maxpool", "gelu_tanh", "cast_views", "slice_dim")
POOL_ACTS = ("relu", "sigmoid", "hardsigmoid", "clip")
POOL_NEAR = ("negative", "tanh", "clip-negative", "pad-ge-kernel", "ceil", "indices", "dilation", "value",
             "pad-shared")
CUBICS = ("pow", "x_xx", "xx_x", "bloom", "expanded")
TANH_GROUPS = ("xh_a", "xa_h", "x_ha", "ah_x", "xa_div2")
TANH_NEAR = ("cubic-const", "inner-shared", "tanh-other", "half")
VIEW_FORMS = ("merge", "split", "zero-kept")
VIEW_NEAR = ("view-shared", "cast-shared", "zero-changed", "transpose", "int-cast")
SLICE_NEAR = ("other-tensor", "other-axis", "start-1", "step-2", "end-minus-1")
I64 = TensorProto.INT64


def _nonneg(b: Builder, x: str, act: str) -> str:
    """x made >= 0 by ``act`` (or left signed by the near misses' activations)."""
    if act == "relu":
        return b.op("Relu", [x])
    if act == "sigmoid":
        return b.op("Sigmoid", [x])
    if act == "hardsigmoid":
        return b.op("HardSigmoid", [x], alpha=0.2, beta=0.5)
    if act == "tanh":
        return b.op("Tanh", [x])
    if act in ("clip", "clip-negative"):
        lo = -0.5 if act == "clip-negative" else float(b.pick([0.0, 0.0, 0.1]))
        return b.op("Clip", [x, b.const(np.array(lo)), b.const(np.array(6.0))])
    return x   # "negative": the raw input


def motif_pad_maxpool(b: Builder, opset: int) -> str:
    rank = int(b.pick([3, 4, 4]))
    sp = rank - 2
    bsz, c = b.dim("batch", (1, 2), 0.5), int(b.pick([2, 3, 4]))
    spatial = [b.dim(f"s{i}_", (6, 7, 8), 0.4) for i in range(sp)]
    x = b.input([bsz, c, *spatial], stem="image")
    near = b.pick(["none"] * 6 + list(POOL_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    act = {"negative": "negative", "tanh": "tanh", "clip-negative": "clip-negative"}.get(near) or b.pick(POOL_ACTS)
    b.trap(f"pool-{act}")
    y = _nonneg(b, x, act)
    k = [int(b.pick([2, 3, 3])) for _ in range(sp)]
    begin = [int(b.pick([0, 1, 1])) for _ in range(sp)]
    end = [int(b.pick([0, 1])) for _ in range(sp)]
    if near == "pad-ge-kernel":
        begin[-1] = k[-1]
    elif not any(begin + end):   # an all-zero Pad is an Identity, not this rewrite's
        begin[0] = 1
    pads = [0, 0] + begin + [0, 0] + end
    ins = [y, b.ints(pads)]
    if near == "value":
        ins.append(b.const(np.array(0.5)))
    elif b.p(0.5):
        ins.append(b.const(np.array(0.0)))
    p = b.op("Pad", ins, **({"mode": "constant"} if b.p(0.5) else {}))
    if near == "pad-shared":
        b.output(b.op("Neg", [p]))
    b.maybe_expose(p, 0.04)
    attrs = {"kernel_shape": k}
    strides = [int(b.pick([1, 1, 2])) for _ in range(sp)]
    if any(s != 1 for s in strides):
        b.trap("pool-strides")
        attrs["strides"] = strides
    if b.p(0.3):   # the pool's own pads add to the folded ones (each side < the kernel after the fold)
        own = [int(b.pick([0, 1])) if k[i % sp] > 2 and (begin + end)[i] == 0 else 0 for i in range(2 * sp)]
        if any(own):
            b.trap("pool-own-pads")
            attrs["pads"] = own
    if near == "ceil":
        attrs["ceil_mode"] = 1
    if near == "dilation":
        attrs["dilations"] = [2] * sp
    if near == "indices":
        out, idx = b.op("MaxPool", [p], n_out=2, **attrs)
        b.output(idx)
        return out
    return b.op("MaxPool", [p], **attrs)


def _cubic(b: Builder, x: str, form: str, coef: float) -> str:
    """x + coef x^3 in the spelling ``form`` (BLOOM's factored x * (1 + coef x x) for "bloom")."""
    if form == "bloom":
        xx = b.op("Mul", [x, x])
        return b.op("Mul", [x, b.op("Add", [b.scalar(1.0), b.op("Mul", [b.scalar(coef), xx])])])
    if form == "pow":
        cube = b.op("Pow", [x, b.scalar(3.0)])
    elif form == "x_xx":
        cube = b.op("Mul", [x, b.op("Mul", [x, x])])
    elif form == "xx_x":
        cube = b.op("Mul", [b.op("Mul", [x, x]), x])
    else:   # expanded: x + coef * x * x * x with the coefficient first
        cube = b.op("Mul", [b.op("Mul", [b.op("Mul", [b.scalar(coef), x]), x]), x])
        return b.op("Add", [x, cube])
    return b.op("Add", [x, b.op("Mul", [cube, b.scalar(coef)])] if b.p(0.5) else
                [b.op("Mul", [b.scalar(coef), cube]), x])


def motif_gelu_tanh(b: Builder, opset: int) -> str:
    bsz, seq, d = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3), 0.5), int(b.pick([8, 16]))
    x = b.input([bsz, seq, d], stem="hidden")
    if b.p(0.5):
        x = b.op("Add", [b.op("MatMul", [x, b.weight([d, d])]), b.const(0.1 * b.rng.standard_normal([d]))])
    near = b.pick(["none"] * 5 + list(TANH_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    src = b.input([bsz, seq, d], stem="other") if near == "tanh-other" else x
    form = b.pick(CUBICS)
    b.trap(f"cubic-{form}")
    inner = _cubic(b, src, form, 0.04 if near == "cubic-const" else 0.044715)
    root = float(np.sqrt(2 / np.pi))
    s = b.op("Mul", [inner, b.scalar(root)] if b.p(0.5) else [b.scalar(root), inner])
    t = b.op("Tanh", [s])
    a = b.op("Add", [t, b.scalar(1.0)] if b.p(0.6) else [b.scalar(1.0), t])
    if near == "inner-shared":
        b.output(b.op("Neg", [b.pick([inner, s, t, a])]))
    group = b.pick(TANH_GROUPS)
    b.trap(f"tanh-{group}")
    half = 0.45 if near == "half" else 0.5
    if group == "xa_div2":
        return b.op("Div", [b.op("Mul", [x, a]), b.scalar(1 / half)])
    h = b.scalar(half)
    if group == "xh_a":
        return b.op("Mul", [b.op("Mul", [x, h]), a])
    if group == "xa_h":
        return b.op("Mul", [b.op("Mul", [x, a]), h])
    if group == "x_ha":
        return b.op("Mul", [x, b.op("Mul", [h, a])])
    return b.op("Mul", [b.op("Mul", [a, h]), x])


def motif_cast_views(b: Builder, opset: int) -> str:
    bsz, seq = b.dim("batch", (1, 2), 0.6), int(b.pick([1, 3, 4]))
    heads, dh = int(b.pick([2, 4])), int(b.pick([4, 8]))
    near = b.pick(["none"] * 5 + list(VIEW_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    form = "merge" if near == "zero-changed" else b.pick(VIEW_FORMS)
    b.trap(f"view-{form}")
    # a float16 graph's cast up, a float32 graph's down (a same-type Cast is an Identity, not this rewrite's)
    to = TensorProto.INT32 if near == "int-cast" else (TensorProto.FLOAT if b.dtype != TensorProto.FLOAT
                                                       else TensorProto.FLOAT16)
    if form == "split":   # [B, S, E] -> [B, S, H, D] -> [B, S * H, D]
        x = b.input([bsz, seq, heads * dh], stem="hidden")
        view = b.op("Reshape", [x, b.ints([0, 0, heads, dh] if b.p(0.5) else [-1, seq, heads, dh])])
        s2 = [-1, seq * heads, dh]
    else:                 # [B, S, H, D] -> [B, S, H * D] -> [B, S * H * D] (or [0, -1]: the batch dim kept)
        x = b.input([bsz, seq, heads, dh], stem="attn")
        if near == "zero-changed":   # [B * S, H * D]: the 0 of s2 would copy x's B, not B * S
            view = b.op("Reshape", [x, b.ints([-1, heads * dh])])
            s2 = [0, heads * dh]
        else:
            view = b.op("Reshape", [x, b.ints([0, seq, heads * dh] if b.p(0.5) else [-1, seq, heads * dh])])
            s2 = [0, -1] if form == "zero-kept" else [-1, seq * heads * dh]
    if near == "view-shared":
        b.output(b.op("Neg", [view]))
    if near == "transpose":
        view = b.op("Transpose", [view], perm=[0, 2, 1, 3] if form == "split" else [0, 2, 1])
        s2 = [-1, dh] if form == "split" else [-1, heads * dh]
    c = b.op("Cast", [view], to=int(to))
    if near == "cast-shared":
        b.output(b.op("Identity", [c]))
    y = b.op("Reshape", [c, b.ints(s2)])
    if to == TensorProto.INT32:
        return b.op("Mul", [y, b.const(np.array(3, dtype=np.int32), TensorProto.INT32)])
    return b.op("Relu", [y])


def motif_slice_dim(b: Builder, opset: int) -> str:
    bsz, d = b.dim("batch", (1, 2), 0.5), int(b.pick([4, 8]))
    seq = b.dim("seq", (3, 5, 6), 1.0)
    x = b.input([bsz, seq, d], stem="hidden")
    near = b.pick(["none"] * 5 + list(SLICE_NEAR))
    if near != "none":
        b.trap(f"near-{near}")
    src, dim = x, 1
    if near == "other-tensor":   # another tensor's other symbolic dim (shorter: the slice cuts)
        src = b.input([bsz, b.dim("kv", (2,), 1.0), d], stem="other")
    elif near == "other-axis":
        dim = 2
    read = b.pick(["shape-range", "gather", "slice"]) if opset >= 15 else b.pick(["gather", "slice"])
    b.trap(f"end-{read}")
    if read == "shape-range":
        end = b.op("Shape", [src], start=dim, end=dim + 1)
    elif read == "gather":
        g = b.op("Gather", [b.op("Shape", [src]), b.ints(dim)], axis=0)
        end = b.op("Unsqueeze", [g, b.ints([0])])
    else:
        end = b.op("Slice", [b.op("Shape", [src]), b.ints([dim]), b.ints([dim + 1])])
    if near == "end-minus-1":
        end = b.op("Sub", [end, b.ints([1])])
    axis = b.pick([1, -2])
    ins = [x, b.ints([1 if near == "start-1" else 0]), end, b.ints([axis])]
    if near == "step-2":
        ins.append(b.ints([2]))
    elif b.p(0.3):
        ins.append(b.ints([1]))
    y = b.op("Slice", ins)
    return b.op("Mul", [y, b.scalar(2.0)])


BUILDERS = {"pad_maxpool": motif_pad_maxpool, "gelu_tanh": motif_gelu_tanh, "cast_views": motif_cast_views,
            "slice_dim": motif_slice_dim}


def build_s38(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
