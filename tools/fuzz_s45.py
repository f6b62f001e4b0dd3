"""Fuzz motifs for session 43's rewrites, each with near misses drawn on purpose:

  head_unsq     one-head attention written 4-D by Unsqueezes (size_one_axes transpose-unsqueeze, 750f94b): q / k / v
                [B, S, D] projections unsqueezed at the heads axis (1 or -3), K^T a Transpose(Unsqueeze(k), [0, 1, 3,
                2]) or an Unsqueeze(Transpose(k, [0, 2, 1])) (the MatMul of two Unsqueezes), a key bias [B, 1, 1, T]
                sometimes, the output squeezed back (Squeeze 1 or Reshape [0, -1, D]). Near misses: q and k / v
                unsqueezed at different axes ([B, 1, S, D] against [1, B, T, D]: the scores broadcast to [B, B, S, T],
                summed over axis 1 after), k's Unsqueeze read elsewhere, the new axis among the last two (2: [B, S, 1,
                D] scores [B, S, 1, 1]; 3 / -1: [B, S, D, 1], scores [B, S, D, D]), k / v of rank 2 ([T, D]
                unsqueezed at [0, 1]: broadcast over the batch), K^T read elsewhere.
  scalar_twins  the scalar-twins stage (ScalarTwinReadsPass, 5e4ace9): a scalar Gather(Shape(x), j) (a Range's end)
                beside a [1] read of the same dim (Shape(x, j, j + 1), Slice(Shape(x), [j], [j + 1]) or a Gather of
                [j]) in a Reshape target; the index negative sometimes, x an intermediate sometimes. Near misses: the
                Slice reads another range ([j, j + 2): no twin), the [1] read is of another input (the same dim_param,
                or another name of the same run-time value), the scalar Gather is a graph output, the whole Shape is
                also read by a Gather of another dim / a ConstantOfShape, the twin is of another dim.
  cast_tables   rotary-interleaved-paired-tables cutting cos / sin tables before a Cast (eed9ab5): angles of fed or
                constant positions repeat_interleave'd (Unsqueeze, Expand to pairs, Reshape [-1, D]), Cos / Sin in
                float32, cast to float16 / bfloat16 / float32, the heads axes unsqueezed, cast to the compute dtype
                (float32, or float16 for a float16 x), x rotated by x * cos + rotate_every_two(x) * sin ([B, H, S, D]
                or [B, S, H, D]). Near misses: a table's last Cast read elsewhere (a graph output), its first Cast read
                elsewhere, the Unsqueezed table read elsewhere, the tables Concat(f, f) (halves, not pairs: the every-
                two rotation is no interleaved RoPE of them), cos and sin behind different Casts.
  gathered_rows rotary-caches-gathered-rows (rules/rope/rotary_gathered_caches.yaml, cbf37a2): rows of two tables
                [ROWS, D / 2] gathered by one index (Gather of a rank 0 / 1 / 2 index, GatherND of an index unsqueezed
                at its end, or of Unsqueeze(r, [0, 2])), shaped to [B, S, D / 2] (Unsqueeze / Expand to x's batch)
                for RotaryEmbedding-23 (opset 23), or rows [.., D] of cos / sin(Concat(a, a)) read by the decomposed
                rotate-half (cos[position_ids] as CLVP writes it; any opset). Near misses: cos and sin gathered by two
                indices, the gathered rows read elsewhere, the index read elsewhere, the tables overridable inputs, the
                index at the table's last row. (Not drawn: an index negative at run time, which Gather reads from the
                end and RotaryEmbedding's position_ids refuse: the rules read a gathered index as positions, a known
                limit, rules/rope/rotary_gathered_caches.yaml.)

  mask4d        a 4-D key mask given as a graph input (glue49, session 44: key padding read from it): [B, 1, 1, T] bool
                True = masked (Where(m, min, scores)) or True = kept (Where(m, scores, min)), or float additive
                0 / min / -1e4 (Add), over one- or two-layer self-attention; the last batch row's tail keys masked.
                Near misses: a per-query mask [B, 1, S, T] (no key padding), dim 2 declared symbolic (1 at run time,
                unproven), [B, 1, 1, 1] (one key flag broadcast), [B, H, 1, T] per head, a row with every key masked
                (min fill: uniform weights), the mask also read by a graph output.

fuzz_motifs.make_case draws a case of this family for S45_SHARE of the seeds from a side stream of its own
(S45_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import I64, Builder, build_one_motif
from fuzz_s43 import _near   # a near miss drawn beside `plain` plain cases, trapped as near-<name>
from fuzz_s44 import _attention, _declared, _unsq

#: share of the motif-graph seeds that are session-45 cases (a side stream of the seed decides)
S45_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119
S45_SALT = 0x6496
MOTIFS = ("head_unsq", "scalar_twins", "cast_tables", "gathered_rows", "mask4d")
HEAD_NEAR = ("axes-differ", "unsq-shared", "last-two", "kv-rank2", "kt-shared")
TWIN_NEAR = ("other-range", "other-input", "other-name", "gather-output", "whole-read", "other-dim")
CAST_NEAR = ("last-cast-shared", "first-cast-shared", "unsq-shared", "not-pairs", "mixed-casts")
ROWS_NEAR = ("two-indices", "rows-shared", "index-shared", "tables-overridable", "last-row")
MASK4_NEAR = ("per-query", "one-sym", "key-one", "per-head", "all-masked", "mask-shared")
F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


# --- head_unsq -----------------------------------------------------------------------------------------------------

def motif_head_unsq(b: Builder, opset: int) -> str:
    near = _near(b, HEAD_NEAR, 4)
    bsz, seq = b.dim("batch", (1, 2, 3), 0.5), b.dim("seq", (2, 3, 5), 0.5)
    d, c = int(b.pick([4, 8])), int(b.pick([8, 16]))
    x = b.input([bsz, seq, c], stem="hidden")
    q3 = b.op("MatMul", [x, b.weight([c, d], stem="wq")])
    cross = near not in ("last-two", "kv-rank2") and b.p(0.3)
    if near == "kv-rank2":   # k / v of a memory [T, D] shared by the batch
        tk = int(b.pick([2, 4]))
        mem = b.input([tk, c], stem="memory")
    elif cross:
        b.trap("hu-cross")
        tk = b.dim("mem", (2, 4), 0.5)
        mem = b.input([bsz, tk, c], stem="memory")
    else:
        tk, mem = seq, x
    k3 = b.op("MatMul", [mem, b.weight([c, d], stem="wk")])
    v3 = b.op("MatMul", [mem, b.weight([c, d], stem="wv")])
    qa = int(b.pick([1, -3]))
    if near == "last-two":
        qa = int(b.pick([2, 3, -1, -2]))
    ka = qa
    if near == "axes-differ":
        ka = 0
    q = _unsq(b, q3, [qa], opset)
    kform = b.pick(["transpose-of-unsq", "unsq-of-transpose"]) if near not in ("last-two", "kv-rank2") \
        else "transpose-of-unsq"
    b.trap(f"hu-{kform}")
    if near == "kv-rank2":
        k = _unsq(b, k3, [0, 1], opset)
        v = _unsq(b, v3, [0, 1], opset)
    else:
        k = _unsq(b, k3, [ka], opset)
        v = _unsq(b, v3, [ka], opset)
    if kform == "transpose-of-unsq":
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    else:   # Unsqueeze(Transpose(k3)): the scores a MatMul of two Unsqueezes
        kt = _unsq(b, b.op("Transpose", [k3], perm=[0, 2, 1]), [ka], opset)
    if near == "unsq-shared":
        b.output(b.op("Neg", [k if kform == "transpose-of-unsq" else q]))
    if near == "kt-shared":
        b.output(b.op("Neg", [kt]))
    s = b.op("MatMul", [q, kt])
    s = b.op("Mul", [s, b.scalar(float(d) ** -0.5)]) if b.p(0.6) else b.op("Div", [s, b.scalar(float(d) ** 0.5)])
    if near not in ("last-two", "axes-differ") and b.p(0.3):   # a key bias [B, 1, 1, T]
        b.trap("hu-bias")
        kb = [bsz if near != "kv-rank2" else 1, 1, 1, tk]
        s = b.op("Add", [s, b.input(kb, stem="key_bias")])
    p = b.op("Softmax", [s], axis=-1)
    o = b.op("MatMul", [p, v])
    if near == "axes-differ":   # [B, B, S, D]: summed over the second batch axis
        o = b.op("ReduceSum", [o, b.ints([1])], keepdims=0) if opset >= 13 else \
            b.op("ReduceSum", [o], axes=[1], keepdims=0)
    elif near == "last-two":
        o = b.op("Reshape", [o, b.ints([0, 0, -1])])
    elif b.p(0.5):
        o = b.op("Squeeze", [o, b.ints([1])]) if opset >= 13 else b.op("Squeeze", [o], axes=[1])
    else:
        o = b.op("Reshape", [o, b.ints([0, -1, d])])
    return b.op("MatMul", [o, b.weight([d, c], stem="wo")])


# --- scalar_twins --------------------------------------------------------------------------------------------------

def _dim_read(b: Builder, x: str, j: int, form: str, opset: int, hi: int | None = None) -> str:
    """Dims [j, hi) of x (hi j + 1 by default) as an int64 [n]: a Shape with start / end (opset 15), a Slice of
    the whole Shape, or (one dim) a Gather of the index [j]."""
    hi = j + 1 if hi is None else hi
    if form == "shape-attr" and opset >= 15:
        return b.op("Shape", [x], start=j, end=hi)
    if form == "gather-1d" and hi == j + 1:
        return b.op("Gather", [b.op("Shape", [x]), b.ints([j])], axis=0)
    return b.op("Slice", [b.op("Shape", [x]), b.ints([j]), b.ints([hi])])


def motif_scalar_twins(b: Builder, opset: int) -> str:
    near = _near(b, TWIN_NEAR, 5)
    bsz, seq, d = b.dim("batch", (2, 3), 0.7), b.dim("seq", (3, 4, 5), 0.7), int(b.pick([4, 8]))
    x = b.input([bsz, seq, d], stem="x")
    if b.p(0.3):   # the Shapes read an intermediate
        b.trap("st-intermediate")
        x = b.op("Mul", [x, b.scalar(1.5)])
    j = int(b.pick([0, 1, 1]))
    whole = b.op("Shape", [x])
    idx = j - 3 if b.p(0.3) else j
    if idx < 0:
        b.trap("st-negative-index")
    g = b.op("Gather", [whole, b.const(np.array(idx, np.int64), I64)], axis=0)   # the scalar read
    if near == "gather-output":
        b.output(g)
    form = b.pick(["shape-attr", "slice", "gather-1d"])
    b.trap(f"st-twin-{form}")
    src = x
    if near in ("other-input", "other-name"):
        dims = [bsz, seq, d] if near == "other-input" else ["ob", "os", d]
        if near == "other-name":
            b.syms["ob"], b.syms["os"] = b.rt(bsz), b.rt(seq)
        src = _declared(b, dims, [b.rt(bsz), b.rt(seq), d], b.dtype, "y")
    tj = 1 - j if near == "other-dim" else j
    if near == "other-range":
        twin = _dim_read(b, src, 0, form if form != "gather-1d" else "slice", opset, 2)   # [B, S]
        target = b.op("Concat", [twin, b.ints([2, d // 2])], axis=0)
    else:
        twin = _dim_read(b, src, tj, form, opset)
        target = b.op("Concat", [b.ints([-1]), twin, b.ints([2, d // 2])] if tj == 1 else
                      [twin, b.ints([-1, 2, d // 2])], axis=0)   # [B, S, 2, D / 2]: no identity Reshape
    # the scalar: a Range's end, added along its dim
    r = b.op("Cast", [b.op("Range", [b.const(np.array(0, np.int64), I64), g,
                                     b.const(np.array(1, np.int64), I64)])], to=b.dtype)
    r = _unsq(b, r, [1] if j == 1 else [1, 2], opset)
    y = b.op("Add", [x, r])
    if near == "whole-read":
        if b.p(0.5):
            other = b.op("Gather", [whole, b.const(np.array(2, np.int64), I64)], axis=0)   # D, no twin
            y = b.op("Mul", [y, b.op("Cast", [other], to=b.dtype)])
        else:
            y = b.op("Add", [y, b.op("ConstantOfShape", [whole],
                                     value=oh.make_tensor("v", b.dtype, [1], [0.5]))])
    return b.op("Reshape", [y, target])


# --- cast_tables ---------------------------------------------------------------------------------------------------

def _cast_chain(b: Builder, t: str, chain: str, cdt: int, axes: list[int], opset: int, near: str) -> str:
    """A float32 table t through ``chain`` to the compute dtype cdt, the heads axes unsqueezed in between."""
    first = {"f16": F16, "bf16": BF16, "f32": F32}[chain]
    mid = b.op("Cast", [t], to=first)
    if near == "first-cast-shared":
        b.output(b.op("Cast", [mid], to=F32))
    u = _unsq(b, mid, axes, opset)
    if near == "unsq-shared":
        b.output(b.op("Cast", [u], to=F32))
    out = b.op("Cast", [u], to=cdt) if first != cdt or b.p(0.5) else u
    if near == "last-cast-shared":
        b.output(out)
    return out


def motif_cast_tables(b: Builder, opset: int) -> str:
    near = _near(b, CAST_NEAR, 5)
    bsz, heads, seq = b.dim("batch", (1, 2), 0.5), int(b.pick([1, 2, 3])), b.dim("seq", (2, 3, 5), 0.5)
    d = int(b.pick([4, 8, 16]))
    half = d // 2
    layout = b.pick(["BHSD", "BSHD"])
    b.trap(f"ct-{layout}")
    shape = [bsz, heads, seq, d] if layout == "BHSD" else [bsz, seq, heads, d]
    x = b.input(shape, stem="q")
    cdt = F32 if b.dtype == F32 or b.p(0.5) else F16   # a float16 x rotated in float32 (cast up) or float16
    xc = b.op("Cast", [x], to=cdt) if cdt != b.dtype else x
    inv = (1.0 / 10000.0 ** (np.arange(half) / half)).astype(np.float32)
    if b.p(0.6):   # positions fed (int64 [S])
        b.trap("ct-positions-fed")
        pos = _declared(b, [seq], [b.rt(seq)], I64, "pos",
                        np.arange(3, 3 + b.rt(seq), dtype=np.int64))
        pf = _unsq(b, b.op("Cast", [pos], to=F32), [1], opset)
        f = b.op("Mul", [pf, b.const(inv[None, :], F32, stem="inv_freq")])   # [S, D/2]
    else:
        f = b.const(np.outer(np.arange(b.rt(seq)), inv), F32, stem="freqs")
    if near == "not-pairs":
        emb = b.op("Concat", [f, f], axis=-1)
    else:   # repeat_interleave(f, 2, -1)
        fu = _unsq(b, f, [-1], opset)
        if b.p(0.5):
            pairs = b.op("Expand", [fu, b.ints([1, 1, 2])])
        else:
            pairs = b.op("Concat", [fu, fu], axis=-1)
        emb = b.op("Reshape", [pairs, b.ints([-1, d])])
    axes = [0, 1] if layout == "BHSD" else [0, 2]
    tables = []
    chain = b.pick(["f16", "bf16", "f32"])
    b.trap(f"ct-via-{chain}")
    for fn in ("Cos", "Sin"):
        if near == "mixed-casts" and fn == "Sin":
            chain = {"f16": "bf16", "bf16": "f32", "f32": "f16"}[chain]
        tables.append(_cast_chain(b, b.op(fn, [emb]), chain, cdt, axes, opset, near if fn == "Cos" else "none"))
    cos, sin = tables
    # rotate_every_two(x): (-x[..., 1::2], x[..., ::2]) interleaved
    xe = b.op("Slice", [xc, b.ints([0]), b.ints([d]), b.ints([-1]), b.ints([2])])
    xo = b.op("Slice", [xc, b.ints([1]), b.ints([d]), b.ints([-1]), b.ints([2])])
    st = b.op("Concat", [_unsq(b, b.op("Neg", [xo]), [-1], opset), _unsq(b, xe, [-1], opset)], axis=-1)
    rot = b.op("Reshape", [st, b.op("Shape", [xc])] if b.p(0.5) else [st, b.ints([0, 0, 0, d])])
    y = b.op("Add", [b.op("Mul", [xc, cos]), b.op("Mul", [rot, sin])])
    return b.op("Cast", [y], to=b.dtype) if cdt != b.dtype else y


# --- gathered_rows -------------------------------------------------------------------------------------------------

def _rows(b: Builder, table: str, pos: str, how: str, opset: int) -> str:
    if how == "gathernd":
        return b.op("GatherND", [table, _unsq(b, pos, [-1], opset)])
    return b.op("Gather", [table, pos], axis=0)


def motif_gathered_rows(b: Builder, opset: int) -> str:
    near = _near(b, ROWS_NEAR, 5)
    node = opset >= 23 and b.p(0.6)
    b.trap("gr-node" if node else "gr-decomposed")
    rank = int(b.pick([0, 1, 2]))
    b.trap(f"gr-index-rank{rank}")
    bsz, heads = b.dim("batch", (1, 2), 0.5), int(b.pick([1, 2]))
    seq = 1 if rank == 0 else b.dim("seq", (2, 3, 5), 0.5)
    d = int(b.pick([4, 8]))
    half, rows = d // 2, int(b.pick([8, 12]))
    a = np.arange(rows)[:, None] * (1.0 / 100.0 ** (np.arange(half) / half))[None, :]
    if not node:
        a = np.concatenate([a, a], axis=-1)   # the rotate-half tables [ROWS, D]
    three_d = node and b.p(0.4)
    shape = [bsz, seq, heads * d] if three_d else [bsz, heads, seq, d]
    x = b.input(shape, stem="x")
    tdt = b.dtype
    if near == "tables-overridable":
        ct, st = (b.const(fn(a), tdt, stem=s, as_input=True) for fn, s in ((np.cos, "cos_t"), (np.sin, "sin_t")))
    else:
        ct, st = (b.const(fn(a), tdt, stem=s) for fn, s in ((np.cos, "cos_t"), (np.sin, "sin_t")))
    pb = 1 if rank < 2 or b.p(0.5) else bsz
    pshape = [] if rank == 0 else [seq] if rank == 1 else [pb, seq]
    concrete = [b.rt(v) for v in pshape]
    vals = np.asarray(b.rng.integers(0, rows, concrete))
    if near == "last-row":   # the table's last row read (the index at its bound; the first row too)
        vals.flat[0] = rows - 1
        vals.flat[-1] = 0 if vals.size > 1 else vals.flat[-1]
    pos = _declared(b, pshape, concrete, I64, "pos", np.asarray(vals, np.int64))
    pos2 = pos
    if near == "two-indices":
        pos2 = _declared(b, pshape, concrete, I64, "pos", b.rng.integers(0, rows, concrete).astype(np.int64))
    how = b.pick(["gather", "gathernd"]) if rank >= 1 else "gather"
    if how == "gathernd" and rank == 1 and b.p(0.5):   # arange(S)[None][:, :, None] as one Unsqueeze [0, 2]
        b.trap("gr-unsq02")
        idx = _unsq(b, pos, [0, 2], opset)
        cg, sg = b.op("GatherND", [ct, idx]), b.op("GatherND", [st, idx if pos2 is pos else _unsq(b, pos2, [0, 2],
                                                                                                   opset)])
        lead = 2   # [1, S, n]
        if near == "index-shared":
            b.output(b.op("Cast", [idx], to=F32))
    else:
        b.trap(f"gr-{how}")
        cg, sg = _rows(b, ct, pos, how, opset), _rows(b, st, pos2, how, opset)
        lead = rank   # the axes before the row's: rank 0: [n]; rank 1: [S, n]; rank 2: [pb, S, n]
        if near == "index-shared":
            b.output(b.op("Cast", [pos], to=F32))
    if near == "rows-shared":
        b.output(b.op("Neg", [cg]))
    if node:
        # to [B, S, D/2]: the index's axes first, x's batch expanded
        if lead == 0:
            cg, sg = (_unsq(b, t, [0, 1], opset) for t in (cg, sg))
        elif lead == 1:
            cg, sg = (_unsq(b, t, [0], opset) for t in (cg, sg))
        tgt = b.op("Concat", [b.op("Slice", [b.op("Shape", [x]), b.ints([0]), b.ints([1])]), b.ints([1, 1])], axis=0)
        cg, sg = b.op("Expand", [cg, tgt]), b.op("Expand", [sg, tgt])
        if three_d:
            return b.op("RotaryEmbedding", [x, cg, sg], num_heads=heads)
        return b.op("RotaryEmbedding", [x, cg, sg])
    # rotate-half: rows [.., D] broadcast over x [B, H, S, D]
    if lead == 2:
        cg, sg = (_unsq(b, t, [1], opset) for t in (cg, sg))   # [pb, 1, S, D]
    x1 = b.op("Slice", [x, b.ints([0]), b.ints([half]), b.ints([-1])])
    x2 = b.op("Slice", [x, b.ints([half]), b.ints([d]), b.ints([-1])])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cg]), b.op("Mul", [rot, sg])])


# --- mask4d --------------------------------------------------------------------------------------------------------

def motif_mask4d(b: Builder, opset: int) -> str:
    near = _near(b, MASK4_NEAR, 5)
    bsz, seq = b.dim("batch", (2, 3), 0.5), b.dim("seq", (3, 5), 0.5)
    heads, d = int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    if near == "per-head" and heads == 1:
        heads = 2
    c = heads * d
    x = b.input([bsz, seq, c], stem="hidden")
    nb, ns = b.rt(bsz), b.rt(seq)
    keep = np.ones((nb, ns), bool)
    keep[-1, ns // 2 + 1:] = False   # the last row's tail padded; every row keeps its first key
    if near == "all-masked":
        keep[0, :] = False
    form = b.pick(["bool-masked", "bool-keep", "additive"])
    b.trap(f"m4-{form}")
    low = float(np.finfo(b.np_dtype()).min) if b.p(0.5) or near == "all-masked" else -1e4
    if near == "per-query":
        decl, arr = [bsz, 1, seq, seq], np.broadcast_to(keep[:, None, None, :], (nb, 1, ns, ns)).copy()
        arr[:, :, 0, 1:] = False   # the first query sees its first key only
    elif near == "key-one":
        decl, arr = [bsz, 1, 1, 1], keep[:, :1, None, None].copy()
        arr[-1] = False if form == "additive" else arr[-1]
    elif near == "per-head":
        decl, arr = [bsz, heads, 1, seq], np.broadcast_to(keep[:, None, None, :], (nb, heads, 1, ns)).copy()
        arr[:, -1, 0, -1] = False
        arr[:, :, 0, 0] = True
    else:
        decl, arr = [bsz, 1, 1, seq], keep[:, None, None, :].copy()
    if near == "one-sym":
        decl = [bsz, 1, "one_q", seq]
        b.syms["one_q"] = 1
    if form == "bool-masked":
        m = _declared(b, decl, list(arr.shape), TensorProto.BOOL, "mask", ~arr)
    elif form == "bool-keep":
        m = _declared(b, decl, list(arr.shape), TensorProto.BOOL, "mask", arr)
    else:
        m = _declared(b, decl, list(arr.shape), b.dtype, "mask", np.where(arr, 0.0, low).astype(b.np_dtype()))
    if near == "mask-shared":
        b.output(b.op("Cast", [m], to=F32) if form != "additive" else b.op("Neg", [m]))

    def mask_of(sc: str) -> str:
        if form == "additive":
            return b.op("Add", [sc, m] if b.p(0.5) else [m, sc])
        fill = b.scalar(low)
        return b.op("Where", [m, fill, sc] if form == "bool-masked" else [m, sc, fill])

    h = _attention(b, x, heads, d, c, mask_of)
    if b.p(0.4):   # a second layer over the same mask
        b.trap("m4-two-layers")
        h = _attention(b, h, heads, d, c, mask_of)
    return h


BUILDERS = {"mask4d": motif_mask4d, "head_unsq": motif_head_unsq, "scalar_twins": motif_scalar_twins, "cast_tables": motif_cast_tables,
            "gathered_rows": motif_gathered_rows}


def build_s45(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
