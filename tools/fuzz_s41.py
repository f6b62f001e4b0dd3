"""Fuzz motifs for session 39's rewrites, each with near misses drawn on purpose:

  twins       operand twins (rewrite/_operand_twins.py: duplicate producers of canonical ops' operands merged
              between fuse and lower): two layers' attention over one boolean causal + key padding mask
              (Attention-23 at opset 23, where attention-native-23 writes Where(mask, 0, -inf) per layer; the
              decomposed MatMul / Softmax form before), the second layer's operand a near twin of the first's:
              its mask biased with another fill (-1e4), the layer computed in float16 (its Where's constants
              another dtype), a Where whose branches are swapped (a bias that keeps the masked keys), the
              grid compared the other way round (Greater(q, k): another mask), a mask read elsewhere.
  unsq_chain  unsqueeze-of-unsqueeze (rules/layout/unsqueeze_chain.yaml): Unsqueeze(Unsqueeze(x, [a]), [b]) over a
              rank-0 .. 3 x, a and b drawn over every position, negative ones too, a third Unsqueeze sometimes.
              Near misses: the axes fed at run time, two axes in the inner Unsqueeze, the inner result read
              elsewhere, the outer axes a Constant node.
  norm_island the float16 norm islands (rules/norm/norm_island.yaml): Cast(x16 -> float32) -> RMSNormalization
              (opset 23) / LayerNormalization (with or without a bias) / the decomposed RMSNorm -> Cast(float16),
              a residual Add of two float16 values before it sometimes; the scale exact in float16 (float16
              values, subnormals, 8192; not 65504: a product past float16's max is inf in the float16 norm
              and in the island by the spec, but ORT's CPU drops the island's Cast down and the Cast up
              it inserts before a MatMul with no float16 kernel as a pair, so its original stays finite) or
              not: 1 + w, tiny (1e-9: no float16), huge (1e5: inf), a bias that is not exact. Near misses:
              the output Cast to bfloat16, the island in float64, the norm's float32 output read elsewhere, a
              bfloat16 input.
  seq_shapes  sequences whose elements differ in shape (passes/shape_inference.py: a SequenceAt keeps no invented
              dim name): SequenceConstruct of two tensors that differ in the last dim (or in rank), a
              SplitToSequence by sizes fed at run time, a SequenceInsert of a tensor of another shape, each read
              by two SequenceAt (negative indices too) whose results are computed on and joined; a
              ConcatFromSequence over the differing axis; a SequenceErase.

Not reached: net_nodes' thresholds (rewrite/_rebuild_cost.py) are decided inside the mask lowerings over an
export's whole mask cone; the twins motif's masks reach attention-trt's rebuild, nothing drawn here varies the
cone's size on purpose.

fuzz_motifs.make_case draws a case of this family for S41_SHARE of the seeds from a side stream of its own
(S41_SALT), checked after the other families.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

from fuzz_motifs import I64, Builder, build_one_motif

#: share of the motif-graph seeds that are session-41 cases (a side stream of the seed decides)
S41_SHARE = 0.05
#: the side stream that picks them: under it no seed a test names becomes one
S41_SALT = 0x4235
MOTIFS = ("twins", "unsq_chain", "norm_island", "seq_shapes")
TWIN_NEAR = ("fill-differs", "half-layer", "where-swapped", "grid-swapped", "mask-shared")
UNSQ_NEAR = ("axes-input", "inner-two-axes", "inner-shared", "outer-constant-node")
SCALES = ("exact", "subnormal", "fp16-large", "one-plus-w", "tiny", "huge", "bias-inexact")
#: the scales float16 holds exactly (the island rules may take them)
EXACT_SCALES = ("exact", "subnormal", "fp16-large")
ISLAND_NEAR = ("out-bf16", "float64", "norm-shared", "x-bf16")
SEQ_FORMS = ("construct", "construct-rank", "split-fed", "insert", "concat", "erase")
F32, F16, F64, BF16, BOOL = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16,
                              TensorProto.BOOL)


def _near(b: Builder, nears: tuple, plain: int) -> str:
    near = b.pick(["none"] * plain + list(nears))
    if near != "none":
        b.trap(f"near-{near}")
    return near


# --- twins --------------------------------------------------------------------------------------------------------

def _grid_mask(b: Builder, am: str, swapped: bool) -> str:
    """torch's opset-23 boolean mask [B, 1, S, S]: the causal grid k <= q And the key padding of ``am`` [B, S]
    (``swapped``: q <= k, keys from the query on)."""
    s = b.op("Squeeze", [b.op("Shape", [am], start=1, end=2)])
    r = b.op("Range", [b.ints(0), s, b.ints(1)])
    kj, qi = b.op("Unsqueeze", [r, b.ints([0])]), b.op("Unsqueeze", [r, b.ints([1])])
    grid = b.op("LessOrEqual", [qi, kj] if swapped else [kj, qi])
    g4 = b.op("Unsqueeze", [grid, b.ints([0, 1])])
    am4 = b.op("Unsqueeze", [b.op("Cast", [am], to=int(BOOL)), b.ints([1, 2])])
    return b.op("And", [g4, am4] if b.p(0.5) else [am4, g4])


def _attend(b: Builder, q: str, k: str, v: str, mask: str, is_bool: bool, opset: int, dh: int, dtype: int) -> str:
    """One layer's attention of q, k, v [B, H, S, dh] under ``mask`` (bool, or a float bias): Attention-23 at
    opset 23, the MatMul / Softmax form otherwise (a bool mask applied as Where(mask, 0, lowest))."""
    if opset >= 23 and b.p(0.8):
        return b.op("Attention", [q, k, v, mask])
    if is_bool:
        lowest = float(np.finfo(b.np_dtype(dtype)).min)
        mask = b.op("Where", [mask, b.const(np.array(0.0), dtype), b.const(np.array(lowest), dtype)])
    scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          b.const(np.array(1.0 / np.sqrt(dh)), dtype)])
    return b.op("MatMul", [b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1), v])


def motif_twins(b: Builder, opset: int) -> str:
    near = _near(b, TWIN_NEAR, 5)
    bsz, seq = b.dim("batch", (2,), 0.5), b.dim("seq", (3, 5), 0.6)
    heads, dh = int(b.pick([1, 2])), int(b.pick([4, 8]))
    am = b.input([bsz, seq], dtype=I64, stem="attention_mask")
    pad = np.ones((b.rt(bsz), b.rt(seq)), np.int64)
    pad[1, -1] = 0   # right padding: every query row keeps key 0 (left padding would leave rows with no key)
    if b.p(0.5):
        pad[0, -2:] = 0
    b.feeds[am] = pad
    mask = _grid_mask(b, am, False)
    outs = []
    for layer in range(int(b.pick([2, 2, 3]))):
        dtype = F16 if near == "half-layer" and layer == 1 else b.dtype
        q, k, v = (b.input([bsz, heads, seq, dh], stem=f"{n}{layer}") for n in "qkv")
        if dtype != b.dtype:
            q, k, v = (b.op("Cast", [t], to=int(dtype)) for t in (q, k, v))
        m, is_bool = mask, True
        if layer == 1 and near in ("fill-differs", "where-swapped"):
            a, c = (0.0, -1e4) if near == "fill-differs" else (-1.0, 0.0)   # swapped: keeps the masked keys
            m, is_bool = b.op("Where", [mask, b.const(np.array(a), dtype), b.const(np.array(c), dtype)]), False
        elif layer == 1 and near == "grid-swapped":
            # q <= k with right padding may leave the last query row no key: key S - 1 is kept for every row
            s = b.op("Squeeze", [b.op("Shape", [am], start=1, end=2)])
            last = b.op("Equal", [b.op("Range", [b.ints(0), s, b.ints(1)]), b.op("Sub", [s, b.ints(1)])])
            m = b.op("Or", [_grid_mask(b, am, True), b.op("Unsqueeze", [last, b.ints([0, 1, 2])])])
        o = _attend(b, q, k, v, m, is_bool, opset, dh, dtype)
        if dtype != b.dtype:
            o = b.op("Cast", [o], to=int(b.dtype))
        outs.append(o)
    if near == "mask-shared":
        b.output(b.op("Cast", [mask], to=int(b.dtype)))
    for o in outs[1:]:
        b.output(o)
    return outs[0]


# --- unsq_chain ---------------------------------------------------------------------------------------------------

def _axes(b: Builder, values: list[int], fed: bool, node: bool = False) -> str:
    if fed:
        name = b.input([len(values)], dtype=I64, stem="axes")
        b.feeds[name] = np.array(values, np.int64)
        return name
    if node:
        name = b.name("axes")
        b.nodes.append(oh.make_node("Constant", [], [name],
                                    value=numpy_helper.from_array(np.array(values, np.int64), name)))
        return name
    return b.ints(values, stem="axes")


def motif_unsq_chain(b: Builder, opset: int) -> str:
    near = _near(b, UNSQ_NEAR, 6)
    rank = int(b.pick([0, 1, 2, 3]))
    b.trap(f"unsq-rank{rank}")
    dims = [b.dim("d", (2, 3), 0.4) for _ in range(rank)]
    x = b.input(dims, stem="x")
    n_inner = 2 if near == "inner-two-axes" else 1
    inner = sorted(int(a) for a in b.rng.choice(np.arange(-(rank + n_inner), rank + n_inner), n_inner,
                                                replace=False))
    if len({a % (rank + n_inner) for a in inner}) < n_inner:   # two names of one position: draw positives
        inner = list(range(n_inner))
    a = int(b.rng.integers(-(rank + n_inner + 1), rank + n_inner + 1))
    if a < 0:
        b.trap("unsq-negative")
    u1 = b.op("Unsqueeze", [x, _axes(b, inner, near == "axes-input")])
    if near == "inner-shared":
        b.output(b.op("Neg", [u1]))
    y = b.op("Unsqueeze", [u1, _axes(b, [a], near == "axes-input" and b.p(0.5), near == "outer-constant-node")])
    r = rank + n_inner + 1
    if b.p(0.3):   # a third link
        b.trap("unsq-three")
        y = b.op("Unsqueeze", [y, b.ints([int(b.rng.integers(-(r + 1), r + 1))])])
        r += 1
    if near == "axes-input":   # no rank inferred past fed axes: Reshape(y, [0] * r), y as it is, states it
        y = b.op("Reshape", [y, b.ints([0] * r)])
    return b.op("Mul", [y, b.scalar(1.5)]) if b.p(0.5) else b.op("Neg", [y])


# --- norm_island --------------------------------------------------------------------------------------------------

def _scale(b: Builder, kind: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    """A float32 scale and bias of ``kind``: float16-exact ones, or ones float16 cannot hold."""
    w = b.rng.standard_normal(d) * 0.1
    exact = (1.0 + w).astype(np.float16).astype(np.float32)
    bias = (b.rng.standard_normal(d) * 0.1).astype(np.float16).astype(np.float32)
    if kind == "subnormal":   # float16 subnormals (2^-24 .. 2^-15), exact: the output is tiny but not 0
        exact = (b.rng.integers(1, 1023, d) * 2.0 ** -24).astype(np.float32)
        exact[::2] = 1.0
    elif kind == "fp16-large":   # 8192: exact, its products below 65504 (|normalized| <= sqrt(D - 1) < 8)
        exact[::3] = 8192.0
    elif kind == "one-plus-w":
        exact = (1.0 + w).astype(np.float32)
    elif kind == "tiny":
        exact[::2] = 1e-9
    elif kind == "huge":
        exact[::2] = 1e5
    elif kind == "bias-inexact":
        bias = bias + np.float32(1e-4)
    return exact.astype(np.float32), bias.astype(np.float32)


def _fconst(b: Builder, arr, dtype: int, stem: str = "c") -> str:
    """A float constant of ``dtype``, float64 too (the Builder's dtypes have no float64)."""
    if dtype != F64:
        return b.const(np.asarray(arr), dtype, stem=stem)
    name = b.name(stem)
    b.inits.append(numpy_helper.from_array(np.asarray(arr, np.float64), name))
    return name


def _rms_decomposed(b: Builder, x: str, scale: str, dtype: int) -> str:
    var = b.op("ReduceMean", [b.op("Pow", [x, _fconst(b, 2.0, dtype)]), b.ints([-1])], keepdims=1)   # opset >= 18
    den = b.op("Sqrt", [b.op("Add", [var, _fconst(b, 1e-6, dtype)])])
    return b.op("Mul", [b.op("Div", [x, den]), scale])


def motif_norm_island(b: Builder, opset: int) -> str:
    near = _near(b, ISLAND_NEAR, 6)
    kind = b.pick(SCALES)
    b.trap(f"scale-{kind}")
    forms = ["layer", "layer-no-bias", "rms-decomposed"] + (["rms23"] * 2 if opset >= 23 else [])
    form = b.pick(forms)
    b.trap(f"island-{form}")
    bsz, seq, d = b.dim("batch", (1, 2), 0.5), b.dim("seq", (1, 3), 0.5), int(b.pick([8, 16, 33]))
    xin = BF16 if near == "x-bf16" else F16
    x = b.input([bsz, seq, d], dtype=F32, stem="hidden")
    b.feeds[x] = (b.feeds[x] * float(b.pick([0.01, 1.0, 30.0]))).astype(np.float32)
    x = b.op("Cast", [x], to=int(xin))   # the float16 model's hidden state
    if b.p(0.4):   # a residual Add in float16 before the island
        b.trap("island-residual")
        x = b.op("Add", [x, b.op("Cast", [b.input([bsz, seq, d], dtype=F32, stem="residual")], to=int(xin))])
    mid = F64 if near == "float64" else F32
    g, beta = _scale(b, kind, d)
    xu = b.op("Cast", [x], to=int(mid))
    gv = _fconst(b, g, mid, stem="scale")
    if form == "rms23":
        n = b.op("RMSNormalization", [xu, gv], axis=-1, epsilon=1e-6)
    elif form == "rms-decomposed":
        n = _rms_decomposed(b, xu, gv, mid)
    else:
        ins = [xu, gv] + ([_fconst(b, beta, mid, stem="bias")] if form == "layer" else [])
        n = b.op("LayerNormalization", ins, axis=-1, epsilon=1e-5)
    if near == "norm-shared":   # the float32 norm also read in float32
        b.output(b.op("Mul", [n, _fconst(b, 2.0, mid)]))
    out = BF16 if near == "out-bf16" else xin
    y = b.op("Cast", [n], to=int(out))
    if out == F16:   # read in float16 (a MatMul of the model's next layer)
        y = b.op("MatMul", [y, b.const(b.rng.standard_normal((d, 4)) * 0.2, F16)])
    return b.op("Cast", [y], to=int(b.dtype))


# --- seq_shapes ---------------------------------------------------------------------------------------------------

def motif_seq_shapes(b: Builder, opset: int) -> str:
    form = b.pick(SEQ_FORMS)
    b.trap(f"seq-{form}")
    bsz, seq = b.dim("batch", (1, 2), 0.5), b.dim("seq", (2, 3), 0.5)
    d1, d2 = int(b.pick([3, 4])), int(b.pick([5, 6]))
    x = b.input([bsz, seq, d1 + d2], stem="hidden")
    if b.p(0.5):
        x = b.op("MatMul", [x, b.weight([d1 + d2, d1 + d2])])
    a = b.op("Slice", [x, b.ints([0]), b.ints([d1]), b.ints([-1])])
    c = b.op("Slice", [x, b.ints([d1]), b.ints([d1 + d2]), b.ints([-1])])
    sizes = [d1, d2]
    if form in ("construct", "concat", "erase"):
        sq = b.op("SequenceConstruct", [a, c])
    elif form == "construct-rank":   # elements of different rank: [B, S, d1] and [B, d2]
        c = b.op("ReduceSum", [c, b.ints([1])], keepdims=0)
        sq = b.op("SequenceConstruct", [a, c])
    elif form == "split-fed":
        split = b.input([2], dtype=I64, stem="sizes")
        b.feeds[split] = np.array(sizes, np.int64)
        sq = b.op("SplitToSequence", [x, split], axis=-1)
    else:   # insert: a one-element sequence and a tensor of another shape inserted (at the front sometimes)
        sq = b.op("SequenceConstruct", [a])
        if b.p(0.5):
            sq = b.op("SequenceInsert", [sq, c])
        else:
            sq = b.op("SequenceInsert", [sq, c, b.const(np.array(0, np.int64), I64, stem="at")])
            sizes = [d2, d1]
    if form == "concat":
        return b.op("Mul", [b.op("ConcatFromSequence", [sq], axis=-1), b.scalar(1.5)])
    if form == "erase":   # the first element erased (or the last): one of the two shapes remains
        pos = int(b.pick([0, -1]))
        sq = b.op("SequenceErase", [sq, b.const(np.array(pos, np.int64), I64, stem="at")])
        sizes = [sizes[1]] if pos == 0 else [sizes[0]]
    pieces = []
    for i in range(len(sizes)):
        idx = i - len(sizes) if b.p(0.4) else i
        if idx < 0:
            b.trap("seq-index-negative")
        p = b.op("SequenceAt", [sq, b.const(np.array(idx, np.int64), I64, stem="index")])
        if form == "construct-rank":   # the element's rank is no longer inferred: a Reshape to [B, S, d] states it
            tgt = b.op("Concat", [b.op("Shape", [x], start=0, end=2), b.ints([sizes[i]])], axis=0)
            if i == 1:   # [B, d2] -> [B, S, d2]
                p = b.op("Expand", [b.op("Unsqueeze", [p, b.ints([1])]), tgt])
            p = b.op("Reshape", [p, tgt])
        pieces.append(b.op("Softmax", [p], axis=-1) if b.p(0.5) else b.op("Mul", [p, b.scalar(0.5)]))
    if len(pieces) == 1:
        return pieces[0]
    if b.p(0.5):   # joined back over the differing axis
        return b.op("Concat", pieces, axis=-1)
    b.output(pieces[1])
    return pieces[0]


BUILDERS = {"twins": motif_twins, "unsq_chain": motif_unsq_chain, "norm_island": motif_norm_island,
            "seq_shapes": motif_seq_shapes}


def build_s41(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """One motif (``name``, or drawn), its output the graph's."""
    return build_one_motif(b, opset, BUILDERS, MOTIFS, name)
