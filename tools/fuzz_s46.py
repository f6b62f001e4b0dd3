"""Fuzz motifs for session 44's rewrites and their neighbours, each with near misses drawn on purpose:

  cast_heads    cast-before-head-split (rules/layout/cast_heads.yaml, a5eeca1): q / k (and v sometimes) split into
                heads (Reshape [0, 0, H, D], Transpose [0, 2, 1, 3]) and cast float16 -> float32 or float32 -> float16
                (through bfloat16 sometimes: a rounding the rewrite must keep), rotated by rotate-half in the cast
                dtype sometimes, cast back before the attention or the attention run in the cast dtype and its
                output cast back; opset 23 mostly (the rule's floor). Near misses: the head split's Cast also read
                elsewhere (a Neg to an output), the Cast a graph output, the split (Transpose) read elsewhere, two
                Casts of one split (to float32 and float16), a K^T split (perm [0, 2, 3, 1]) cast, heads inferred
                (Reshape [0, 0, -1, D]).
  expand_unary  identity elimination's Expand drop through one-input readers (f66ee72): an Expand of a ([1, S, D],
                [B, 1, D], [S, D], [D], [B, S, 1]) to the full [B, S, D] read by a chain of 1-3 unary ops (float:
                Neg / Abs / Relu / Tanh / Sigmoid / Floor / Identity / Cast there and back; bool: Not / Identity /
                Cast to float) and then a broadcasting op whose other input has the full dims. Near misses (the
                Expand changes the shape a reader sees, so it must stay): the co-input smaller, the unary output a
                graph output, read by a ReduceSum / Softmax / MatMul / Shape, Add(Neg(e), Relu(e)) (the co-input is
                a read-through), one unary branch with a full co-input beside one with a smaller one, Pow(u, 2)
                (its only co-input a scalar).
  mask4d_every  4-D key masks given as graph inputs [B, 1, 1, T] in every dtype and polarity (f424588 reads bool
                ones; glue50 float ones): bool Where(m, min, s) / Where(m, s, min) / Where(Not(m), ..), uint8 / int32 /
                int64 / float 0-1 flags cast to bool, compared with 0 or made additive ((1 - m) * low or m * low),
                float additive 0 / low; low finfo.min / -1e4 / -inf; one- or two-layer self-attention, keys from a
                memory of another length sometimes, one query row sometimes. Keyless rows (a batch row with every
                key masked) a third of the time. Near misses: the second layer reads the mask the other way round
                (True = masked in one, True = kept in the other: two different paddings of one input), the mask
                [1, 1, 1, T] (one pattern broadcast over the batch), its key dim of another name than the keys'
                (equal at run time), the mask also a graph output.
  ort_forms     graphs as ORT's offline optimizer leaves them: SkipLayerNormalization (com.microsoft) before the
                projections, K^T and the scale folded into FusedMatMul(q, k, transB=1, alpha), the 4-D bool key mask
                sometimes, a float16 model computing these in float32 between Casts. Near misses: FusedMatMul with
                transA (q^T: no scores), alpha 1 with a Div after, the SkipLayerNormalization's sum output read too.

fuzz_motifs.make_case draws a case of this family for S46_SHARE of the seeds from a side stream of its own
(S46_SALT), checked after the other families. tools/fuzz_differential.py's --pretool slim / ort2 runs the graphs
as onnxslim / ORT leave them.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import I64, Builder, build_one_motif
from fuzz_s43 import _near   # a near miss drawn beside `plain` plain cases, trapped as near-<name>
from fuzz_s44 import _declared, _unsq

#: share of the motif-graph seeds that are session-46 cases (a side stream of the seed decides)
S46_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119
S46_SALT = 0x66AA
MOTIFS = ("cast_heads", "expand_unary", "mask4d_every", "ort_forms")
CAST_NEAR = ("cast-shared", "cast-output", "split-shared", "two-casts", "kt-split", "heads-inferred")
UNARY_NEAR = ("co-smaller", "unary-output", "unary-reduce", "unary-softmax", "unary-matmul", "unary-shape",
              "self-co", "mixed", "pow-scalar")
MASK_NEAR = ("inverse-layer", "batch-one", "other-name", "mask-output")
ORT_NEAR = ("trans-a", "alpha-one", "skip-sum-read")
F32, F16, BF16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.BOOL
U8, I32 = TensorProto.UINT8, TensorProto.INT32
_NP = {F32: np.float32, F16: np.float16, BOOL: np.bool_, U8: np.uint8, I32: np.int32, I64: np.int64}


def _split(b: Builder, t: str, heads: int, d: int, perm=(0, 2, 1, 3), inferred: bool = False) -> str:
    t = b.op("Reshape", [t, b.ints([0, 0, -1 if inferred else heads, d])])
    return b.op("Transpose", [t], perm=list(perm))


def _rotate_half(b: Builder, x: str, seq, d: int, dtype: int) -> str:
    """x [B, H, S, D] rotated by rotate-half with constant tables of dtype (x's)."""
    half = d // 2
    ang = np.outer(np.arange(b.rt(seq)), 1.0 / 100.0 ** (np.arange(half) / half))
    ang = np.concatenate([ang, ang], axis=-1)
    cos, sin = b.const(np.cos(ang), dtype, stem="cos"), b.const(np.sin(ang), dtype, stem="sin")
    x1 = b.op("Slice", [x, b.ints([0]), b.ints([half]), b.ints([-1])])
    x2 = b.op("Slice", [x, b.ints([half]), b.ints([d]), b.ints([-1])])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rot, sin])])


def _sdpa(b: Builder, q: str, k: str, v: str, d: int, dtype: int, mask_of=None) -> str:
    kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    s = b.op("Mul", [b.op("MatMul", [q, kt]), b.scalar(float(d) ** -0.5, dtype)])
    if mask_of is not None:
        s = mask_of(s)
    return b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])


def _merge(b: Builder, o: str, c: int) -> str:
    return b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]), b.ints([0, 0, c])])


# --- cast_heads ----------------------------------------------------------------------------------------------------

def motif_cast_heads(b: Builder, opset: int) -> str:
    near = _near(b, CAST_NEAR, 5)
    bsz, seq = b.dim("batch", (1, 2, 3), 0.5), b.dim("seq", (2, 4, 5), 0.5)
    heads, d = int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    c = heads * d
    x = b.input([bsz, seq, c], stem="hidden")
    mdt = b.dtype   # the model's dtype; the rotation / attention in cdt between Casts
    cdt = F32 if mdt == F16 else F16
    b.trap("ch-up" if cdt == F32 else "ch-down")
    via_bf16 = b.p(0.2)
    rope = b.p(0.5)
    attn_in_cdt = b.p(0.4)   # the attention itself in cdt, its output cast back
    if rope:
        b.trap("ch-rope")
    if attn_in_cdt:
        b.trap("ch-attn-cast")

    def split_cast(stem: str, perm=(0, 2, 1, 3), this_near: str = "none") -> str:
        t = _split(b, b.op("MatMul", [x, b.weight([c, c], stem=stem)]), heads, d, perm,
                   this_near == "heads-inferred")
        if this_near == "split-shared":
            b.output(b.op("Neg", [t]))
        if via_bf16:
            b.trap("ch-via-bf16")
            u = b.op("Cast", [b.op("Cast", [t], to=BF16)], to=cdt)
        else:
            u = b.op("Cast", [t], to=cdt)
        if this_near == "two-casts":   # a second Cast of the same split, to the model dtype and back out
            b.output(b.op("Cast", [t], to=F32 if mdt == F16 else F16))
        if this_near == "cast-shared":
            b.output(b.op("Neg", [u]))
        if this_near == "cast-output":
            b.output(u)
        return u

    which = b.pick(["q", "k"])   # the near miss on one of them
    q = split_cast("wq", this_near=near if which == "q" else "none")
    if near == "kt-split":   # K^T split straight from k3 ([B, H, D, T]) and cast
        kt = split_cast("wk", (0, 2, 3, 1))
        k = None
    else:
        k = split_cast("wk", this_near=near if which == "k" else "none")
    if rope:
        q = _rotate_half(b, q, seq, d, cdt)
        if k is not None:
            k = _rotate_half(b, k, seq, d, cdt)
    cast_v = b.p(0.5)
    v = split_cast("wv") if cast_v else _split(b, b.op("MatMul", [x, b.weight([c, c], stem="wv")]), heads, d)
    adt = cdt if attn_in_cdt else mdt
    if not attn_in_cdt:
        q = b.op("Cast", [q], to=mdt)
        k = b.op("Cast", [k], to=mdt) if k is not None else None
        kt = b.op("Cast", [kt], to=mdt) if k is None else None
        v = b.op("Cast", [v], to=mdt) if cast_v else v
    elif not cast_v:
        v = b.op("Cast", [v], to=cdt)
    if k is None:
        s = b.op("Mul", [b.op("MatMul", [q, kt]), b.scalar(float(d) ** -0.5, adt)])
        o = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
    else:
        o = _sdpa(b, q, k, v, d, adt)
    if attn_in_cdt:
        o = b.op("Cast", [o], to=mdt)
    return b.op("MatMul", [_merge(b, o, c), b.weight([c, c], stem="wo")])


# --- expand_unary --------------------------------------------------------------------------------------------------

def _unary_chain(b: Builder, e: str, kind: str) -> str:
    u = e
    for _ in range(int(b.pick([1, 1, 2, 3]))):
        if kind == "bool":
            op = b.pick(["Not", "Not", "Identity"])
            u = b.op(op, [u])
        else:
            op = b.pick(["Neg", "Abs", "Relu", "Tanh", "Sigmoid", "Floor", "Identity", "Cast"])
            if op == "Cast":   # there and back (a rounding when the model is float32)
                other = F16 if b.dtype == F32 else F32
                u = b.op("Cast", [b.op("Cast", [u], to=other)], to=b.dtype)
            else:
                u = b.op(op, [u])
        b.trap(f"eu-{op}")
    return u


def motif_expand_unary(b: Builder, opset: int) -> str:
    near = _near(b, UNARY_NEAR, 5)
    kind = "bool" if b.p(0.35) else "float"
    b.trap(f"eu-{kind}")
    dt = BOOL if kind == "bool" else b.dtype
    bsz, seq, d = b.dim("batch", (2, 3), 0.5), b.dim("seq", (3, 4), 0.5), int(b.pick([4, 8]))
    full = [bsz, seq, d]
    rt = [b.rt(v) for v in full]
    a_shape = b.pick([[1, seq, d], [bsz, 1, d], [seq, d], [d], [bsz, seq, 1]])
    a = _declared(b, a_shape, [b.rt(v) for v in a_shape], dt, "a")
    co = b.input(full, stem="co")   # float, the full dims
    const_target = b.p(0.4)   # the run-time dims as constants: no drop where co's dims are symbolic (by design)
    b.trap("eu-target-const" if const_target else "eu-target-shape")
    target = b.ints(rt, stem="target") if const_target else b.op("Shape", [co])
    e = b.op("Expand", [a, target])
    u = _unary_chain(b, e, kind)
    if kind == "bool":   # the mask picks between full floats (or a Cast to float read by a full Add)
        if b.p(0.5):
            y = b.op("Where", [u, co, b.scalar(-2.0)] if b.p(0.5) else [u, b.scalar(-2.0), co])
        else:
            y = b.op("Mul", [b.op("Cast", [u], to=b.dtype), co])
    else:
        y = b.op(b.pick(["Add", "Mul", "Sub", "Max"]), [u, co] if b.p(0.5) else [co, u])
    uf = u if kind == "float" or near in ("none", "co-smaller", "unary-output", "mixed") else \
        b.op("Cast", [u], to=b.dtype)
    if near == "co-smaller":   # a second reader whose co-input is smaller: the Expand widens for it
        small = b.pick([[d], [1, seq, d], [seq, 1]])
        y2 = b.op("Add", [uf if kind == "float" else b.op("Cast", [u], to=b.dtype), b.input(small, stem="s")])
        b.output(y2)
    elif near == "unary-output":
        b.output(u)
    elif near == "unary-reduce":
        b.output(b.op("ReduceSum", [uf, b.ints([-1])], keepdims=1) if opset >= 13
                 else b.op("ReduceSum", [uf], axes=[-1], keepdims=1))
    elif near == "unary-softmax":
        b.output(b.op("Softmax", [uf], axis=-1))
    elif near == "unary-matmul":
        b.output(b.op("MatMul", [uf, b.weight([d, 3], stem="wm")]))
    elif near == "unary-shape":   # the Shape of the read-through value sizes a ConstantOfShape
        b.output(b.op("Add", [b.op("ConstantOfShape", [b.op("Shape", [uf])],
                                   value=oh.make_tensor("v", b.dtype, [1], [0.5])), co]))
    elif near == "self-co":   # both inputs read through the Expand: no full co-input
        b.output(b.op("Add", [uf, b.op("Neg", [uf]) if kind == "float" else b.op("Relu", [uf])]))
    elif near == "mixed":   # the Expand read directly by a reader whose other input is smaller
        other = b.input(b.pick([[d], [1, 1, d]]), dtype=dt if kind == "float" else b.dtype, stem="s")
        ef = e if kind == "float" else b.op("Cast", [e], to=b.dtype)
        b.output(b.op("Mul", [ef, other]))
    elif near == "pow-scalar":
        b.output(b.op("Pow", [uf, b.scalar(2.0)]))
    return b.op("Mul", [y, b.scalar(1.5)])


# --- mask4d_every --------------------------------------------------------------------------------------------------

def _heads_attention(b: Builder, x: str, mem: str, heads: int, d: int, c: int, mask_of) -> str:
    q = _split(b, b.op("MatMul", [x, b.weight([c, c], stem="wq")]), heads, d)
    k = _split(b, b.op("MatMul", [mem, b.weight([c, c], stem="wk")]), heads, d)
    v = _split(b, b.op("MatMul", [mem, b.weight([c, c], stem="wv")]), heads, d)
    o = _sdpa(b, q, k, v, d, b.dtype, mask_of)
    return b.op("MatMul", [_merge(b, o, c), b.weight([c, c], stem="wo")])


def motif_mask4d_every(b: Builder, opset: int) -> str:
    near = _near(b, MASK_NEAR, 5)
    bsz = b.dim("batch", (2, 3), 0.5)
    seq = 1 if b.p(0.15) else b.dim("seq", (3, 5), 0.5)
    heads, d = int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    c = heads * d
    x = b.input([bsz, seq, c], stem="hidden")
    cross = b.p(0.3)
    if cross:
        b.trap("m6-cross")
        tk = b.dim("mem", (2, 4, 6), 0.5)
        mem = b.input([bsz, tk, c], stem="memory")
    else:
        tk, mem = seq, x
    nb, nt = b.rt(bsz), b.rt(tk)
    keep = np.ones((nb, nt), bool)
    keep[-1, nt // 2 + 1:] = False   # the last row's tail padded
    if b.p(0.33):   # a keyless row
        b.trap("m6-keyless")
        keep[0, :] = False
    if near == "batch-one":
        keep = np.broadcast_to(keep[-1:], (1, nt)).copy()
    mdt = b.pick([BOOL, BOOL, U8, I32, I64, F32, b.dtype])
    b.trap(f"m6-{TensorProto.DataType.Name(mdt).lower()}")
    polarity = b.pick(["masked", "kept"])   # what a 1 / True of the mask means
    b.trap(f"m6-true-{polarity}")
    low = b.pick([float(np.finfo(b.np_dtype()).min), -1e4, -np.inf]) if b.dtype == F32 else \
        b.pick([float(np.finfo(b.np_dtype()).min), -1e4])
    b.trap("m6-inf" if low == -np.inf else "m6-low-1e4" if low == -1e4 else "m6-low-min")
    flags = ~keep if polarity == "masked" else keep
    additive = mdt in (F32, F16) and b.p(0.4)   # the mask itself 0 / low
    arr = np.where(keep, 0.0, low) if additive else flags
    rows = 1 if near == "batch-one" else bsz
    keys = "mlen" if near == "other-name" else tk
    if near == "other-name":
        b.syms["mlen"] = nt
    decl = [rows, 1, 1, keys]
    m = _declared(b, decl, [arr.shape[0], 1, 1, nt], mdt, "mask",
                  np.asarray(arr)[:, None, None, :].astype(_NP[mdt]))
    if additive:
        b.trap("m6-additive")
        m = m if mdt == b.dtype else b.op("Cast", [m], to=b.dtype)
    if near == "mask-output":
        b.output(b.op("Cast", [m], to=F32) if mdt != F32 else b.op("Neg", [m]))
    form = "add" if additive else b.pick(["where", "where-not", "flag-additive", "equal-zero"] if mdt != BOOL
                                         else ["where", "where-not"])
    b.trap(f"m6-{form}")

    def masked_of(inverse: bool):
        """A bool [.., T] True = masked (the mask read the way its polarity says, or the other way round)."""
        if mdt == BOOL:
            t = m
        elif form == "equal-zero":
            t = b.op("Equal", [m, b.const(np.zeros((), _NP[mdt]), mdt)])   # True where the flag is 0
            return t if (polarity == "kept") != inverse else b.op("Not", [t])
        else:
            t = b.op("Cast", [m], to=BOOL)
        return t if (polarity == "masked") != inverse else b.op("Not", [t])

    def mask_fn(inverse: bool):
        def mask_of(s: str) -> str:
            if form == "add":
                return b.op("Add", [s, m] if b.p(0.5) else [m, s])
            if form == "flag-additive":   # (1 - keep) * low, or masked * low, in the model dtype
                f = b.op("Cast", [m], to=b.dtype)
                if (polarity == "kept") != inverse:
                    f = b.op("Sub", [b.scalar(1.0), f])
                lowc = b.scalar(low if np.isfinite(low) else float(np.finfo(b.np_dtype()).min))
                return b.op("Add", [s, b.op("Mul", [f, lowc])])
            t = masked_of(inverse)
            fill = b.scalar(low)
            if form == "where-not":   # Where(not masked, s, low)
                return b.op("Where", [b.op("Not", [t]), s, fill])
            return b.op("Where", [t, fill, s])
        return mask_of

    h = _heads_attention(b, x, mem, heads, d, c, mask_fn(False))
    if b.p(0.4) or near == "inverse-layer":   # a second layer over the same mask
        b.trap("m6-two-layers")
        inverse = near == "inverse-layer" and form != "add"
        h = _heads_attention(b, h, mem, heads, d, c, mask_fn(inverse))
    return h


# --- ort_forms -----------------------------------------------------------------------------------------------------

def motif_ort_forms(b: Builder, opset: int) -> str:
    near = _near(b, ORT_NEAR, 4)
    bsz, seq = b.dim("batch", (1, 2, 3), 0.5), b.dim("seq", (2, 3, 5), 0.5)
    heads, d = int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    c = heads * d
    x0 = b.input([bsz, seq, c], stem="hidden")
    skip = b.input([bsz, seq, c], stem="skip")
    if b.dtype == F16:   # the contrib ops in float32 between Casts
        b.trap("of-cast-up")
        x0, skip = b.op("Cast", [x0], to=F32), b.op("Cast", [skip], to=F32)
    gamma = b.const(1.0 + 0.1 * b.rng.standard_normal(c), F32, stem="gamma")
    beta = b.const(0.1 * b.rng.standard_normal(c), F32, stem="beta")
    x = b.name("skipln")
    outs = [x]
    if near == "skip-sum-read":   # the input + skip sum (output 3) read too; mean / inv_std_var not asked for
        summed = b.name("skipsum")
        outs += ["", "", summed]
        b.output(summed)
        b.declared = {summed: (F32, [bsz, seq, c])}
    b.nodes.append(oh.make_node("SkipLayerNormalization", [x0, skip, gamma, beta], outs, domain="com.microsoft",
                                epsilon=1e-5))

    def w(stem):
        return b.const(b.rng.standard_normal((c, c)) / np.sqrt(c), F32, stem=stem)

    q, k, v = (_split(b, b.op("MatMul", [x, w(s)]), heads, d) for s in ("wq", "wk", "wv"))
    scale = float(d) ** -0.5
    if near == "trans-a":   # q^T k^T^T: [B, H, D, D], no scores
        s = b.op("FusedMatMul", [q, k], domain="com.microsoft", transA=1, alpha=scale)
        o = b.op("MatMul", [v, b.op("Softmax", [s], axis=-1)])
    else:
        s = b.op("FusedMatMul", [q, k], domain="com.microsoft", transB=1,
                 alpha=1.0 if near == "alpha-one" else scale)
        if near == "alpha-one":
            s = b.op("Div", [s, b.scalar(float(d) ** 0.5, F32)])
        if b.p(0.4):   # a bool [B, 1, 1, T] key mask, True = masked
            b.trap("of-mask")
            keep = np.ones((b.rt(bsz), b.rt(seq)), bool)
            keep[-1, b.rt(seq) // 2 + 1:] = False
            m = _declared(b, [bsz, 1, 1, seq], [b.rt(bsz), 1, 1, b.rt(seq)], BOOL, "mask", ~keep[:, None, None, :])
            s = b.op("Where", [m, b.scalar(float(np.finfo(np.float32).min), F32), s])
        o = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
    y = b.op("MatMul", [_merge(b, o, c), w("wo")])
    y = b.op("Cast", [y], to=F16) if b.dtype == F16 else y
    b.declared = {**getattr(b, "declared", {}), y: (b.dtype, [bsz, seq, c])}
    return y


BUILDERS = {"cast_heads": motif_cast_heads, "expand_unary": motif_expand_unary, "mask4d_every": motif_mask4d_every,
            "ort_forms": motif_ort_forms}


def build_s46(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's. ort_forms needs the com.microsoft domain."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
