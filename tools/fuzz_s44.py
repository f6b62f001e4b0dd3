"""Fuzz motifs for session 42's rewrites, each with near misses drawn on purpose:

  expand_reader identity elimination's Expand drop (passes/identity_elimination.py _unexpand_readers, df12a2b): an
                Expand of a float / bool / int64 a ([1, S, D], [B, 1, D], [S, D], [D], [B, S, 1], [1]) to the
                full [B, S, D] (its target Shape(co) as expand_as writes it, or a constant of the run-time dims)
                read by one or two broadcasting elementwise ops (Add / Sub / Mul / Div / Max / Min / Where / And /
                Or / Xor / Equal / Greater) whose other input co has the Expand's whole output dims (the same
                dim_param names). The Expand grows rank sometimes (a [S, D] or [D]). Near misses: the Expand also
                read by a MatMul, a Reshape, a Concat, or a graph output; read twice by one op (Add(e, e)); a
                second reader whose other input is smaller (the Expand does widen for it); co declared with
                unknown dims or another dim_param of the same run-time value (the full dims only at run time);
                co itself smaller than the Expand's output ([1, S, D], [S, D], [D]: the Expand widens).
  expand_mask   a key mask [B, T] (bool, 0 / 1 float, int64) unsqueezed to [B, 1, 1, T] and expanded to the
                scores' [B, H, S, T] (Expand(m, Shape(scores)), a Concat of the dims, or constant dims), read by
                Where(m, scores, min) / Where(not m, min, scores) / Add(scores, additive); DistilBERT's form shared
                by two layers sometimes. Near misses: the expanded mask also read by a Cast to a graph output, by a
                Not (no broadcasting co-input: the Expand stays), the mask expanded to [B, H, S, T] with one query
                row (S 1 in the mask, the scores [B, H, S, T]).
  axes_forms    Squeeze / Unsqueeze / ReduceMean / ReduceSum axes as attributes (opset 11; ReduceMean until 18),
                initializers, Constant nodes of a tensor, of value_ints, rank 0 ones (passes/_consts.raw_axes,
                22e60ce: every reader of axes reads it): Unsqueeze then Squeeze of the same axis, a Squeeze of a size-1
                input axis, negative axes, a reduce over an axis named negatively. Near misses: axes fed at run
                time, a Squeeze with no axes over a symbolic dim that is 1 at run time, Squeeze of another axis
                than the Unsqueeze added (a size-1 dim of x), the Unsqueeze read elsewhere.
  half_row      half-slice-below-row-slice (rules/rope/half_slice_sink.yaml, hold-out 47): a rotary table
                Cos / Sin(Concat(f, f)) [P, D] (unsqueezed to [1, P, D] sometimes, cast sometimes), rows cut by a
                Slice over the positions (axes given, or none: the leading ones; ends a constant or read off
                Shape(x)), the first half of the last axis taken after it, x's halves rotated by the half tables.
                Near misses: halves not equal (Concat(f, 1.5 f)), the row cut naming the last axis too, a row step
                of 2, a reader of the rows taking the second half, the rows read elsewhere, the row cut's starts
                fed at run time.

fuzz_motifs.make_case draws a case of this family for S44_SHARE of the seeds from a side stream of its own
(S44_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import I64, Builder, build_one_motif
from fuzz_s43 import _near   # a near miss drawn beside `plain` plain cases, trapped as near-<name>

#: share of the motif-graph seeds that are session-44 cases (a side stream of the seed decides)
S44_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119
S44_SALT = 0x4D8C
MOTIFS = ("expand_reader", "expand_mask", "axes_forms", "half_row")
EXPAND_NEAR = ("also-matmul", "also-reshape", "also-concat", "is-output", "read-twice", "mixed-readers",
               "co-unknown", "co-other-name", "co-smaller")
MASK_NEAR = ("mask-cast-out", "mask-not", "one-row")
AXES_NEAR = ("axes-fed", "squeeze-all", "other-axis", "unsq-shared")
HALF_NEAR = ("unequal-halves", "cuts-last", "row-step", "second-half", "rows-shared", "starts-fed")
F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL


def _declared(b: Builder, decl: list, concrete: list[int], dtype: int, stem: str, arr=None) -> str:
    """An input declared ``decl`` (None: an unknown dim) fed ``arr`` (or random values) of ``concrete`` shape."""
    name = b.name(stem)
    b.inputs.append(oh.make_tensor_value_info(name, dtype, decl))
    b.feeds[name] = arr if arr is not None else _values(b, concrete, dtype)
    return name


def _values(b: Builder, shape: list[int], dtype: int) -> np.ndarray:
    if dtype == BOOL:
        return b.rng.random(shape) < 0.5
    if dtype == I64:
        return b.rng.integers(-4, 5, shape).astype(np.int64)
    return b.rng.standard_normal(shape).astype(b.np_dtype(dtype))


def _unsq(b: Builder, x: str, axes: list[int], opset: int) -> str:
    return b.op("Unsqueeze", [x, b.ints(axes)]) if opset >= 13 else b.op("Unsqueeze", [x], axes=list(axes))


def _to_float(b: Builder, y: str, dtype: int) -> str:
    return y if dtype not in (BOOL, I64) else b.op("Cast", [y], to=b.dtype)


# --- expand_reader ------------------------------------------------------------------------------------------------

def _reader(b: Builder, kind: str, e: str, co: str, dt: int) -> str:
    """A broadcasting elementwise op of the Expand's output e and co (either order)."""
    if kind == "bool":
        op = b.pick(["And", "Or", "Xor", "Equal", "Where"])
        if op == "Where":   # the mask picks between co-shaped floats
            return b.op("Where", [e, b.op("Cast", [co], to=b.dtype), b.scalar(-2.0)])
    elif kind == "int64":
        op = b.pick(["Add", "Mul", "Max", "Equal", "Greater"])
    else:
        op = b.pick(["Add", "Sub", "Mul", "Div", "Max", "Min", "Where"])
        if op == "Where":
            cond = b.op("Greater", [co, b.scalar(0.0)])
            return b.op("Where", [cond, e, co] if b.p(0.5) else [cond, co, e])
        if op == "Div":   # a denominator away from 0: co / (|e| + 1) or e / (|co| + 1)
            if b.p(0.5):
                return b.op("Div", [co, b.op("Add", [b.op("Abs", [e]), b.scalar(1.0)])])
            return b.op("Div", [e, b.op("Add", [b.op("Abs", [co]), b.scalar(1.0)])])
    b.trap(f"er-{op}")
    y = b.op(op, [e, co] if b.p(0.5) else [co, e])
    return y


def motif_expand_reader(b: Builder, opset: int) -> str:
    near = _near(b, EXPAND_NEAR, 5)
    kind = b.pick(["float", "float", "bool", "int64"])
    b.trap(f"er-{kind}")
    dt = {"float": b.dtype, "bool": BOOL, "int64": I64}[kind]
    bsz, seq, d = b.dim("batch", (2, 3), 0.5), b.dim("seq", (3, 4), 0.5), int(b.pick([4, 8]))
    full = [bsz, seq, d]
    rt = [b.rt(x) for x in full]
    a_shape = b.pick([[1, seq, d], [bsz, 1, d], [seq, d], [d], [bsz, seq, 1], [1]])
    if len(a_shape) < 3:
        b.trap("er-grows-rank")
    a = b.input(a_shape, dtype=dt, stem="a") if kind == "float" else \
        _declared(b, a_shape, [b.rt(x) for x in a_shape], dt, "a")
    # co: the reader's other input, declared with the Expand's whole output dims (or not, near misses)
    if near == "co-unknown":
        decl = [None if isinstance(x, str) or b.p(0.5) else x for x in full]
        decl[int(b.rng.integers(3))] = None
        co = _declared(b, decl, rt, dt, "co")
    elif near == "co-other-name":
        co = _declared(b, [f"other{i}" if i < 2 else x for i, x in enumerate(full)], rt, dt, "co")
    elif near == "co-smaller":
        small = b.pick([[1, seq, d], [seq, d], [d], [bsz, 1, d]])
        co = _declared(b, small, [b.rt(x) for x in small], dt, "co")
    else:
        co = _declared(b, full, rt, dt, "co")
    target_of = _declared(b, full, rt, b.dtype, "like") if near in ("co-unknown", "co-other-name", "co-smaller") \
        else co
    form = b.pick(["shape-of", "shape-of", "const"])
    b.trap(f"er-target-{form}")
    target = b.op("Shape", [target_of]) if form == "shape-of" else b.ints(rt, stem="target")
    e = b.op("Expand", [a, target])
    outs = [_reader(b, kind, e, co, dt)]
    if b.p(0.4):   # a second broadcasting reader, its co-input full too
        b.trap("er-two-readers")
        outs.append(_reader(b, kind, e, co, dt))
    if near == "mixed-readers":   # a reader whose other input is smaller than the Expand's output
        small = b.pick([[d], [1, seq, d], [seq, 1]])
        other = _declared(b, small, [b.rt(x) for x in small], dt, "s")
        outs.append(b.op("Add" if kind != "bool" else "Or", [e, other]))
    elif near == "read-twice":
        outs.append(b.op("Add" if kind != "bool" else "And", [e, e]))
    elif near == "also-matmul":
        ef = _to_float(b, e, dt)
        outs.append(b.op("MatMul", [ef, b.weight([d, 3], stem="wm")]))
    elif near == "also-reshape":
        outs.append(_to_float(b, b.op("Reshape", [e, b.ints([0, -1])]), dt))
    elif near == "also-concat":
        outs.append(_to_float(b, b.op("Concat", [e, co], axis=-1), dt))
    elif near == "is-output":
        b.output(e)
    for extra in outs[1:]:
        b.output(_to_float(b, extra, dt))
    return b.op("Mul", [_to_float(b, outs[0], dt), b.scalar(1.5)])


# --- expand_mask ---------------------------------------------------------------------------------------------------

def _attention(b: Builder, x: str, heads: int, d: int, c: int, mask_of) -> str:
    """softmax(q k^T / sqrt(d) masked) v over [B, H, S, D] heads of x [B, S, c]; mask_of(scores) -> masked scores."""
    def heads_of(t: str) -> str:
        t = b.op("Reshape", [t, b.ints([0, 0, heads, d])])
        return b.op("Transpose", [t], perm=[0, 2, 1, 3])

    q = heads_of(b.op("MatMul", [x, b.weight([c, heads * d], stem="wq")]))
    k = heads_of(b.op("MatMul", [x, b.weight([c, heads * d], stem="wk")]))
    v = heads_of(b.op("MatMul", [x, b.weight([c, heads * d], stem="wv")]))
    sc = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), b.scalar(float(d) ** 0.5)])
    p = b.op("Softmax", [mask_of(sc)], axis=-1)
    o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    o = b.op("Reshape", [o, b.ints([0, 0, heads * d])])
    return b.op("MatMul", [o, b.weight([heads * d, c], stem="wo")])


def motif_expand_mask(b: Builder, opset: int) -> str:
    near = _near(b, MASK_NEAR, 4)
    bsz, seq = b.dim("batch", (2, 3), 0.5), b.dim("seq", (3, 5), 0.5)
    heads, d = int(b.pick([1, 2, 4])), int(b.pick([4, 8]))
    c = heads * d
    x = b.input([bsz, seq, c], stem="hidden")
    mk = b.pick(["bool", "float", "int64"])
    b.trap(f"em-{mk}")
    arr = np.ones((b.rt(bsz), b.rt(seq)))
    arr[-1, b.rt(seq) // 2 + 1:] = 0   # the last row padded; every row keeps its first key
    mdt = {"bool": BOOL, "float": b.dtype, "int64": I64}[mk]
    m = _declared(b, [bsz, seq], [b.rt(bsz), b.rt(seq)], mdt, "mask", arr.astype(b.np_dtype(mdt)))
    m4 = _unsq(b, m, [1, 2], opset)
    low = float(np.finfo(b.np_dtype()).min) if b.p(0.5) else -1e4
    form = b.pick(["where", "where-not", "additive"])
    b.trap(f"em-{form}")
    if form == "additive":
        mf = m4 if mk == "float" else b.op("Cast", [m4], to=b.dtype)
        m4 = b.op("Mul", [b.op("Sub", [b.scalar(1.0), mf]), b.scalar(low)])
    elif mk != "bool":
        m4 = b.op("Cast", [m4], to=BOOL)
    cache = {}

    def mask_of(sc: str) -> str:
        if "e" not in cache or not b.p(0.7):   # DistilBERT: one expanded mask shared by the layers (CSE too)
            tform = b.pick(["shape", "shape", "concat", "const"])
            b.trap(f"em-target-{tform}")
            if tform == "shape":
                t = b.op("Shape", [sc])
            elif tform == "concat":   # [B, H, S, T] gathered dim by dim
                s = b.op("Shape", [sc])
                parts = [_unsq(b, b.op("Gather", [s, b.const(np.array(i, np.int64), I64)], axis=0), [0], opset)
                         for i in (0, 1, 2, 3)]
                t = b.op("Concat", parts, axis=0)
            else:
                t = b.ints([b.rt(bsz), heads, b.rt(seq), b.rt(seq)])
            if near == "one-row":   # the mask's own query axis kept 1: Expand to [B, H, 1, T]
                t = b.op("Concat", [b.op("Slice", [t, b.ints([0]), b.ints([2])]), b.ints([1]),
                                    b.op("Slice", [t, b.ints([3]), b.ints([4])])], axis=0) if tform != "const" else \
                    b.ints([b.rt(bsz), heads, 1, b.rt(seq)])
            cache["e"] = b.op("Expand", [m4, t])
            if near == "mask-cast-out":
                b.output(b.op("Cast", [cache["e"]], to=b.dtype))
            elif near == "mask-not" and form != "additive":
                b.output(b.op("Cast", [b.op("Not", [cache["e"]])], to=b.dtype))
        e = cache["e"]
        if form == "additive":
            return b.op("Add", [sc, e] if b.p(0.5) else [e, sc])
        fill = b.scalar(low)
        if form == "where-not":
            return b.op("Where", [b.op("Not", [e]), fill, sc])
        return b.op("Where", [e, sc, fill])

    h = _attention(b, x, heads, d, c, mask_of)
    if b.p(0.4):   # a second layer over the same mask
        b.trap("em-two-layers")
        h = _attention(b, h, heads, d, c, mask_of)
    return h


# --- axes_forms ----------------------------------------------------------------------------------------------------

def _axes(b: Builder, node_op: str, ins: list[str], axes: list[int], opset: int, fed: bool = False, **attrs) -> str:
    """node_op(ins, axes) with the axes as the opset has them: an attribute (Squeeze / Unsqueeze below 13,
    ReduceMean below 18), or an input: an initializer, a Constant of a tensor or of value_ints (ONNX Runtime
    refuses a rank-0 axes tensor at run time: 'An axes tensor must be a vector tensor', so none is drawn)."""
    attr_below = 18 if node_op in ("ReduceMean", "ReduceMax") else 13
    if opset < attr_below:
        b.trap("ax-attr")
        return b.op(node_op, ins, axes=list(axes), **attrs)
    if fed:
        name = b.input([len(axes)], dtype=I64, stem="axes")
        b.feeds[name] = np.array(axes, np.int64)
        return b.op(node_op, [*ins, name], **attrs)
    form = b.pick(["init", "tensor", "value_ints"])
    b.trap(f"ax-{form}")
    if form == "init":
        name = b.name("axes")
        b.inits.append(oh.make_tensor(name, I64, [len(axes)], list(axes)))
    else:
        name = b.name("axes")
        if form == "tensor":
            b.nodes.append(oh.make_node("Constant", [], [name], value=oh.make_tensor(name, I64, [len(axes)], axes)))
        else:
            b.nodes.append(oh.make_node("Constant", [], [name], value_ints=list(axes)))
    return b.op(node_op, [*ins, name], **attrs)


def motif_axes_forms(b: Builder, opset: int) -> str:
    near = _near(b, AXES_NEAR, 4)
    if near == "axes-fed" and opset < 13:
        near = "none"
    bsz, seq, d = b.dim("batch", (1, 2, 3), 0.5), b.dim("seq", (2, 3), 0.5), int(b.pick([4, 6]))
    if near == "squeeze-all":   # a symbolic batch that is 1 at run time: Squeeze() takes it too
        bsz = "batch_one"
        b.syms[bsz] = 1
    x = b.input([bsz, 1, seq, d], stem="x")
    r = 4
    y = b.op("Mul", [x, b.scalar(1.5)])
    # Unsqueeze an axis, an elementwise op, Squeeze it back (or another size-1 axis: x's axis 1)
    a = int(b.pick([0, 2, 4, -1, -3]))
    u = _axes(b, "Unsqueeze", [y], [a], opset, fed=near == "axes-fed")
    if near == "axes-fed":   # no rank inferred past fed axes: Reshape(u, [0] * 5) states it
        u = b.op("Reshape", [u, b.ints([0] * (r + 1))])
    if near == "unsq-shared":
        b.output(b.op("Neg", [u]))
    u = b.op("Add", [u, b.scalar(0.5)])
    pos = a % (r + 1)
    if near == "other-axis":   # squeeze x's size-1 axis 1 (shifted past the new axis when it lands before it)
        sq = 2 if pos <= 1 else 1
        sq = sq - (r + 1) if b.p(0.5) else sq
    elif near == "squeeze-all":
        sq = None
    else:
        sq = pos - (r + 1) if b.p(0.5) else pos
    if sq is None:
        z = b.op("Squeeze", [u])
    else:
        z = _axes(b, "Squeeze", [u], [sq], opset)
    last = [1, -3]   # x's size-1 axis, where the last Squeeze finds it
    if near == "other-axis":   # z keeps the new axis: the last Squeeze takes it
        last = [pos if pos <= 1 else pos - 1]
    elif near == "squeeze-all":   # z lost the batch and both size-1 axes: viewed [1, 1, S, D] back (batch 1)
        z = b.op("Reshape", [z, b.ints([1, 1, -1, d])])
    # a reduce over an axis named negatively or not (keepdims), then a Squeeze of x's size-1 axis 1
    ra = int(b.pick([-1, 3]))
    red = _axes(b, b.pick(["ReduceMean", "ReduceSum"]), [z], [ra], opset, keepdims=1) if opset >= 13 else \
        b.op("ReduceMean", [z], axes=[ra], keepdims=1)
    out = b.op("Sub", [z, red])
    out = _axes(b, "Squeeze", [out], [b.pick(last)], opset)
    return b.op("Mul", [out, b.scalar(2.0)])


# --- half_row ------------------------------------------------------------------------------------------------------

def motif_half_row(b: Builder, opset: int) -> str:
    near = _near(b, HALF_NEAR, 5)
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (2, 3, 4), 0.5)
    d = int(b.pick([4, 8, 16]))
    half = d // 2
    npos = 8
    x = b.input([bsz, seq, d], stem="x")
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    f = np.outer(np.arange(npos), inv)   # [P, D/2]
    if b.p(0.4):   # the positions fed: the table computed at run time (positions [P] outer inv_freq [D/2])
        b.trap("hr-positions-fed")
        pos = b.input([npos], dtype=F32, stem="positions", kind="position")
        fv = b.op("Mul", [_unsq(b, pos, [1], opset), b.const(inv[None, :], F32, stem="inv_freq")])
    else:
        fv = b.const(f, F32, stem="freqs")
    g = b.op("Mul", [fv, b.const(np.array(1.5), F32)]) if near == "unequal-halves" else fv
    emb = b.op("Concat", [fv, g], axis=-1)   # [P, D]
    tables = []
    lead = b.p(0.5)   # the tables unsqueezed to [1, P, D]
    if lead:
        b.trap("hr-unsqueezed")
    for fn in ("Cos", "Sin"):
        t = b.op(fn, [emb])
        if b.dtype != F32 or b.p(0.3):
            t = b.op("Cast", [t], to=b.dtype)
        if lead:
            t = _unsq(b, t, [0], opset)
        tables.append(t)
    # the row cut: positions [start, start + S)
    if near == "starts-fed":
        start = b.input([1], dtype=I64, stem="past")
        b.feeds[start] = np.array([int(b.rng.integers(0, npos - b.rt(seq) + 1))], np.int64)
    else:
        start = b.ints([0])
    if isinstance(seq, str) or b.p(0.5):   # the end read off x's shape, as TorchScript writes it
        n = _unsq(b, b.op("Gather", [b.op("Shape", [x]), b.const(np.array(1, np.int64), I64)], axis=0), [0], opset)
        n = b.op("Mul", [n, b.ints([2])]) if near == "row-step" else n   # step 2 over 2 S rows: S rows
        end = n if near != "starts-fed" else b.op("Add", [start, n])
        b.trap("hr-end-shape")
    else:
        end = b.ints([b.rt(seq) * (2 if near == "row-step" else 1)])
    row_axis = 1 if lead else 0
    cuts = []
    for t in tables:
        form = b.pick(["axes", "axes-neg", "no-axes"]) if not lead else b.pick(["axes", "axes-neg"])
        if near == "cuts-last":   # the row cut names the last axis too (its whole length)
            rows = b.op("Slice", [t, b.op("Concat", [start, b.ints([0])], axis=0),
                                  b.op("Concat", [end, b.ints([d])], axis=0), b.ints([row_axis, -1])])
        elif near == "row-step":
            rows = b.op("Slice", [t, start, end, b.ints([row_axis]), b.ints([2])])
        elif form == "no-axes" and not lead:
            b.trap("hr-no-axes")
            rows = b.op("Slice", [t, start, end])
        else:
            ax = row_axis - (3 if lead else 2) if form == "axes-neg" else row_axis
            steps = [b.ints([1])] if b.p(0.3) else []
            rows = b.op("Slice", [t, start, end, b.ints([ax]), *steps])
        if near == "rows-shared":
            b.output(b.op("Neg", [rows]))
        if near == "second-half":
            b.output(b.op("Slice", [rows, b.ints([half]), b.ints([d]), b.ints([-1])]))
        cuts.append(b.op("Slice", [rows, b.ints([0]), b.ints([half]), b.ints([b.pick([-1, 2 if lead else 1])])]))
    ch, sh = cuts
    x1 = b.op("Slice", [x, b.ints([0]), b.ints([half]), b.ints([-1])])
    x2 = b.op("Slice", [x, b.ints([half]), b.ints([d]), b.ints([-1])])
    y1 = b.op("Sub", [b.op("Mul", [x1, ch]), b.op("Mul", [x2, sh])])
    y2 = b.op("Add", [b.op("Mul", [x2, ch]), b.op("Mul", [x1, sh])])
    return b.op("Concat", [y1, y2], axis=-1)


BUILDERS = {"expand_reader": motif_expand_reader, "expand_mask": motif_expand_mask, "axes_forms": motif_axes_forms,
            "half_row": motif_half_row}


def build_s44(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
