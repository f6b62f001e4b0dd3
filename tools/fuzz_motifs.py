"""Random valid ONNX graphs for the differential fuzzer (tools/fuzz_differential.py).

``make_case(seed)`` builds one graph with onnx.helper from 1-3 motifs (decomposed LayerNorm /
RMSNorm, GELU forms, skip + norm, MatMul + bias, RoPE rotate-half, MHA / GQA attention blocks),
each drawn as a fusable form, a near miss (one detail a rule must refuse) or with traps
(intermediates that are also graph outputs or feed other nodes, broadcasting constants that change
the output shape, masks with symbolic dims that are 1 at run time, odd head sizes, initializers
that are also graph inputs, fp16, scalar vs [1] constants, outputs of shape () vs (1,)). Symbolic
dims get a run-time value per graph (often 1: query length 1 is a trap of its own); a quarter of
the motif graphs also get an If (``add_control_flow``: an intermediate read inside a branch, a
motif built inside one), and some (``SPARSE_SHARE``) keep part of their weights as sparse
initializers (``add_sparse_initializers``); half of those with an If name its branch values as
onnx-ir names the values our passes add (``name_branches_like_ours``). The feeds are generated with the graph, so a case is fully determined
by its seed. A fifth of the seeds
(``DECODER_SHARE``) are KV-cache decoder steps instead (tools/fuzz_decoder.py), whose switches
(sliding window, attention sinks, fp16 upcasts, fp8 KV, ...) are ``Case.spec``; of the rest, a
share (fuzz_idioms.IDIOM_SHARE) are exporter idioms of the fourth hold-out sweep
(tools/fuzz_idioms.py: baddbmm zeros, causal selects, masks before the scale, ...), and of the
others a share (fuzz_sweeps.SWEEP_SHARE) the idioms of the later sweeps (tools/fuzz_sweeps.py:
run-time mask forms, partial / interleaved RoPE, parallel blocks, QK-norm, GQA forms, ALiBi and
relative biases, softcap, sinks, merged decoders checked on both branches), and of the others a
share (fuzz_forms.FORM_SHARE) session 16's forms (tools/fuzz_forms.py: GQA by Tile / Gather /
Concat and its h % Hkv near misses, DequantizeLinear weights, opsets 17..23); after those and the
contrib ops' (tools/fuzz_contrib.py), a share (fuzz_s25.S25_SHARE) session 25's idioms (tools/fuzz_s25.py:
a key mask from lengths, causal + padding over a past, ScatterND writes tiling an axis), then a share
(fuzz_s28.S28_SHARE) session 28's (tools/fuzz_s28.py: float32 softmax islands in half models, masked_fill,
masks on batch and length jointly, fed at other shapes too), then a share (fuzz_s34.S34_SHARE) session 34's
(tools/fuzz_s34.py: a fused q / k / v projection picked apart by slices, chunks and head views), then a share
(fuzz_s34b.S34B_SHARE) rotaries read by value (tools/fuzz_s34b.py: complex-product and rotate-half in three layouts),
then a share (fuzz_s35.S35_SHARE) gated MLPs (tools/fuzz_s35.py: SwiGLU / GeGLU, gate and up sliced or chunked),
then a share (fuzz_s36.S36_SHARE) GroupNorm as torch writes it (tools/fuzz_s36.py: view, InstanceNormalization, view back),
then a share (fuzz_s37.S37_SHARE) session 36's rewrites (tools/fuzz_s37.py: Pad into Conv, RepVGG Conv branches, BN folds,
x / Sqrt(moment), the scores' clamp onto the mask, erf GELU groupings), then a share (fuzz_s38.S38_SHARE) session 37's
(tools/fuzz_s38.py: a zero Pad of a value >= 0 into a MaxPool, tanh GELU spellings, Casts between views, Slices), then a
share (fuzz_s39.S39_SHARE) session 38's (tools/fuzz_s39.py: the rotary's halves form in four layouts, rotate-half over
packed patches, Cast(Where) of constants), then a share (fuzz_s40.S40_SHARE) their near misses (tools/fuzz_s40.py:
keep-masks value_range decides or must not, Cast chains, SplitToSequence's readers, rotary tables cut at run time), then a
share (fuzz_s41.S41_SHARE) session 39's rewrites with near misses (tools/fuzz_s41.py: operand twins of two layers'
masks, Unsqueeze chains, float16 norm islands, sequences of elements of different shapes), then a share
(fuzz_s42.S42_SHARE) session 40's rewrites with near misses (tools/fuzz_s42.py: per-dim scales on a projection's head
view, per-channel scales after a norm, channels-first one-head attention, a decode step's one-row table cut), then a
share (fuzz_s43.S43_SHARE) session 41's rewrites with near misses (tools/fuzz_s43.py: Unsqueeze chains composing any
constant axes, one-head attention's glue at ort, a single-number scale after a norm, a scaled K^T of a permuted key),
then a share (fuzz_s44.S44_SHARE) session 42's rewrites with near misses (tools/fuzz_s44.py: an Expand read by
broadcasting ops only, masks expanded to the scores, Squeeze / Unsqueeze / Reduce axes in every constant form,
a rotary table's first half taken below a row cut), then a share (fuzz_s45.S45_SHARE) session 43's rewrites with near
misses (tools/fuzz_s45.py: one-head attention written 4-D by Unsqueezes, scalar twins of Shape reads, interleaved
rotary tables behind Casts, rotary caches gathered by an index of rank 0 / 1 / 2), then a share (fuzz_s46.S46_SHARE)
session 44's rewrites and their neighbours (tools/fuzz_s46.py: Casts on head splits, Expands read through unary ops,
4-D key mask inputs of every dtype and polarity, ORT's contrib forms).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
NP = {F32: np.float32, F16: np.float16, I64: np.int64, TensorProto.INT32: np.int32,
      TensorProto.BOOL: np.bool_, TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}
HEAD_SIZES = (4, 8, 12, 16, 24, 64)

Dim = int | str


@dataclasses.dataclass
class Case:
    seed: int
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    motifs: list[str]
    traps: list[str]
    #: the switches of a decoder case (tools/fuzz_decoder.py); empty for the motif graphs
    spec: dict = dataclasses.field(default_factory=dict)
    #: more feed sets the case is checked on (an If's condition flipped, with the inputs its other
    #: branch reads): the fuzzer compares the optimized model with the original on each
    alt_feeds: list = dataclasses.field(default_factory=list)


class Builder:
    """Accumulates nodes, initializers, inputs and feeds; symbolic dims resolve through ``syms``."""

    def __init__(self, rng: np.random.Generator, dtype: int):
        self.rng = rng
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.syms: dict[str, int] = {}
        self.traps: list[str] = []
        self._n = 0

    # --- naming and randomness -------------------------------------------------------------
    def name(self, stem: str) -> str:
        self._n += 1
        return f"{stem}_{self._n}"

    def p(self, prob: float) -> bool:
        return bool(self.rng.random() < prob)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def trap(self, what: str) -> None:
        if what not in self.traps:
            self.traps.append(what)

    # --- dims ------------------------------------------------------------------------------
    def dim(self, stem: str, choices: tuple[int, ...], p_sym: float = 0.5) -> Dim:
        """A dim that is static or a fresh symbol, with a run-time value from ``choices``."""
        value = int(self.pick(choices))
        if self.p(p_sym):
            sym = f"{stem}{len(self.syms)}"
            self.syms[sym] = value
            return sym
        return value

    def rt(self, d: Dim) -> int:
        return self.syms[d] if isinstance(d, str) else d

    # --- values ----------------------------------------------------------------------------
    def np_dtype(self, dtype: int | None = None):
        return NP[self.dtype if dtype is None else dtype]

    def const(self, arr, dtype: int | None = None, stem: str = "c", as_input: bool = False) -> str:
        """An initializer (sometimes a Constant node); ``as_input`` also lists it as a graph input
        (an overridable default, which optimizers must not treat as a constant)."""
        arr = np.asarray(arr)
        if dtype is not None or arr.dtype.kind == "f":
            arr = arr.astype(self.np_dtype(dtype))
        name = self.name(stem)
        if not as_input and self.p(0.25):
            self.nodes.append(oh.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name)))
        else:
            self.inits.append(numpy_helper.from_array(arr, name))
            if as_input:
                self.inputs.append(oh.make_tensor_value_info(name, oh.np_dtype_to_tensor_dtype(arr.dtype),
                                                             list(arr.shape)))
                self.trap("initializer-is-input")
                if self.p(0.5):   # the user overrides the default: folding it would be wrong
                    with np.errstate(over="ignore"):   # a default of the dtype's lowest is overridden by -inf
                        self.feeds[name] = (arr * 1.5 + 0.01).astype(arr.dtype)
                    self.trap("initializer-overridden")
        return name

    def scalar(self, value: float, dtype: int | None = None, stem: str = "c") -> str:
        """A float constant of shape (), [1] or (rarely) [1, 1]: all are 'scalars' to a rule."""
        shape = self.pick([(), (), (1,), (1,), (1, 1)])
        return self.const(np.full(shape, value), dtype, stem)

    def ints(self, values, stem: str = "i") -> str:
        return self.const(np.asarray(values, dtype=np.int64), I64, stem)

    def weight(self, shape, stem: str = "w", scale: float | None = None) -> str:
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        arr = self.rng.standard_normal(shape) * scale
        return self.const(arr, stem=stem, as_input=self.p(0.04))

    def input(self, shape: list[Dim], dtype: int | None = None, stem: str = "x", kind: str = "normal") -> str:
        dtype = self.dtype if dtype is None else dtype
        name = self.name(stem)
        self.inputs.append(oh.make_tensor_value_info(name, dtype, shape))
        concrete = [self.rt(d) for d in shape]
        if kind == "mask01":
            arr = np.ones(concrete, dtype=NP[dtype])
            if arr.ndim == 2 and arr.shape[1] > 1:
                arr[-1, arr.shape[1] // 2:] = 0
        elif kind == "position":
            arr = np.broadcast_to(np.arange(concrete[-1], dtype=NP[dtype]), concrete).copy()
        elif kind == "positive":
            arr = (np.abs(self.rng.standard_normal(concrete)) + 0.5).astype(NP[dtype])
        else:
            arr = self.rng.standard_normal(concrete).astype(NP[dtype])
        self.feeds[name] = arr
        return name

    def op(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(oh.make_node(op, inputs, outs, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    def output(self, name: str) -> None:
        if name not in self.outputs:
            self.outputs.append(name)

    def maybe_expose(self, name: str, prob: float = 0.08) -> None:
        """Trap: an intermediate of a pattern is also a graph output. A weight is no intermediate: listed as an
        output (of no declared type) it fails the model's shape inference (fuzz_s34b's constant cos tables:
        make_s34b_case(33168)), so it is skipped after the draw, which the other seeds' graphs keep."""
        if self.p(prob) and not any(t.name == name for t in self.inits):
            self.output(name)
            self.trap("intermediate-is-output")

    def maybe_share(self, name: str, prob: float = 0.06) -> None:
        """Trap: an intermediate of a pattern has another consumer outside it."""
        if self.p(prob):
            self.output(self.op("Neg", [name]))
            self.trap("intermediate-multi-consumer")


# --- motifs on a hidden state [B, S, D] -----------------------------------------------------
# Each takes the builder and a hidden value (name, shape) and returns the next hidden value.


def _reduce(b: Builder, op: str, x: str, axis: int, keep: int, opset: int) -> str:
    """A Reduce* over one axis: axes as an input from opset 18, as an attribute before."""
    if opset >= 18:
        return b.op(op, [x, b.ints([axis])], keepdims=keep)
    return b.op(op, [x], axes=[axis], keepdims=keep)


def _reduce_mean(b: Builder, x: str, opset: int) -> str:
    return _reduce(b, "ReduceMean", x, -1, 1, opset)


def motif_layer_norm(b: Builder, x: str, shape: list[Dim], opset: int, standalone: bool = False) -> str:
    d = shape[-1]
    near = b.p(0.2)
    xin = x
    island = b.dtype == F16 and b.p(0.5)
    if island:
        x = b.op("Cast", [x], to=F32)
    cdt = F32 if island else None
    m = _reduce_mean(b, x, opset)
    diff = b.op("Sub", [x, m])
    b.maybe_share(m)
    sq = b.op("Pow", [diff, b.scalar(2.0, cdt)]) if b.p(0.5) else b.op("Mul", [diff, diff])
    v = _reduce_mean(b, sq, opset)
    # trap: an epsilon of a higher rank broadcasts the output up to its rank
    high_eps = near and b.p(0.3)
    eps = b.scalar(1e-5, cdt) if not high_eps else b.const(np.full((1, 1, 1, 1), 1e-5), cdt)
    sd = b.op("Sqrt", [b.op("Add", [v, eps])])
    n = b.op("Div", [diff, sd])
    b.maybe_expose(n)
    if island:
        n = b.op("Cast", [n], to=b.dtype)
    g_shape = [d] if not (near and b.p(0.5)) else [1, d]   # near miss: 2-D gamma
    if b.p(0.15):
        y = n   # no gamma: bias only, or no affine part at all
    else:
        g = b.const(1.0 + 0.1 * b.rng.standard_normal(g_shape), stem="gamma", as_input=b.p(0.05))
        y = b.op("Mul", [n, g] if b.p(0.5) else [g, n])
    if b.p(0.7):
        y = b.op("Add", [y, b.const(0.1 * b.rng.standard_normal([d]), stem="beta")])
    if high_eps:
        b.trap("rank-raising-constant")
        if len(shape) < 4 and not standalone:   # keep the hidden state's shape for the next motif
            y = b.op("Reshape", [y, b.op("Shape", [xin])])
    return y


def motif_rms_norm(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[-1]
    island = b.dtype == F16 and b.p(0.5)
    if island:
        x = b.op("Cast", [x], to=F32)
    cdt = F32 if island else None
    sq = b.op("Pow", [x, b.scalar(2.0, cdt)]) if b.p(0.5) else b.op("Mul", [x, x])
    ms = _reduce_mean(b, sq, opset)
    sd = b.op("Sqrt", [b.op("Add", [ms, b.scalar(1e-6, cdt)])])
    form = b.pick(["recip", "div1", "div"])
    if form == "recip":
        n = b.op("Mul", [x, b.op("Reciprocal", [sd])])
    elif form == "div1":
        n = b.op("Mul", [x, b.op("Div", [b.scalar(1.0, cdt), sd])])
    else:
        n = b.op("Div", [x, sd])
    b.maybe_expose(sd)
    scale = b.pick(["after", "after", "inside", "none"]) if island else "after"
    if scale == "inside":   # Gemma: the float32 island multiplies by the scale before casting back
        n = b.op("Mul", [n, b.const(1.0 + 0.1 * b.rng.standard_normal([d]), F32, stem="gamma")])
    if island:
        n = b.op("Cast", [n], to=b.dtype)
    if scale != "after":
        return n
    g = b.const(1.0 + 0.1 * b.rng.standard_normal([d]), stem="gamma", as_input=b.p(0.05))
    return b.op("Mul", [n, g] if b.p(0.5) else [g, n])


def _gelu_body(b: Builder, x: str, form: str, near: bool) -> str:
    half = b.scalar(0.5 if not near else 0.45)
    if form == "erf":
        t = b.op("Div", [x, b.scalar(1.4142135)]) if b.p(0.5) else b.op("Mul", [x, b.scalar(0.70710678)])
        a = b.op("Add", [b.op("Erf", [t]), b.scalar(1.0)])
        b.maybe_share(a)
        if b.p(0.5):
            return b.op("Mul", [b.op("Mul", [x, a]), half])
        return b.op("Mul", [b.op("Mul", [x, half]), a])
    if form == "tanh":
        p3 = b.op("Pow", [x, b.scalar(3.0)])
        a = b.op("Add", [x, b.op("Mul", [p3, b.scalar(0.044715)])])
        t = b.op("Tanh", [b.op("Mul", [a, b.scalar(0.7978845608)])])
        a1 = b.op("Add", [t, b.scalar(1.0)])
        b.maybe_expose(t)
        if b.p(0.5):
            return b.op("Mul", [b.op("Mul", [x, half]), a1])
        return b.op("Mul", [b.op("Mul", [x, a1]), half])
    # quick gelu
    return b.op("Mul", [x, b.op("Sigmoid", [b.op("Mul", [x, b.scalar(1.702)])])])


def motif_gelu(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    form = b.pick(["erf", "erf", "tanh", "quick"])
    if b.p(0.4):  # bias Add before (BiasGelu / FastGelu with bias)
        x = b.op("Add", [x, b.const(0.1 * b.rng.standard_normal([shape[-1]]), stem="bias")])
    return _gelu_body(b, x, form, b.p(0.1))


def motif_skip_norm(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    skip_shape = list(shape)
    if b.p(0.15):
        skip_shape[0] = 1      # near miss: skip broadcast over the batch
        b.trap("broadcast-skip")
    skip = b.input(skip_shape, stem="skip")
    if b.p(0.4):
        x = b.op("Add", [x, b.const(0.1 * b.rng.standard_normal([shape[-1]]), stem="bias")])
    s = b.op("Add", [x, skip] if b.p(0.5) else [skip, x])
    if b.p(0.3):
        b.output(s)   # the residual sum is also needed (next layer / graph output)
    if b.p(0.5) and opset >= 17:
        g = b.const(1.0 + 0.1 * b.rng.standard_normal([shape[-1]]), stem="gamma")
        ins = [s, g] + ([b.const(0.1 * b.rng.standard_normal([shape[-1]]), stem="beta")] if b.p(0.7) else [])
        y = b.op("LayerNormalization", ins, axis=-1, epsilon=1e-5)
    elif b.p(0.5):
        y = motif_layer_norm(b, s, shape, opset)
    else:
        y = motif_rms_norm(b, s, shape, opset)
    return y


def motif_gemm(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """x @ W + b with x flattened to 2-D (Gemm), then restored with Shape(x)."""
    d = shape[-1]
    x2 = b.op("Reshape", [x, b.ints([-1, d])])
    m = b.op("MatMul", [x2, b.weight([d, d])])
    bias_shape = b.pick([[d], [d], [1, d], [1]])
    y = b.op("Add", [m, b.const(0.1 * b.rng.standard_normal(bias_shape), stem="bias")])
    b.maybe_expose(m, 0.05)
    return b.op("Reshape", [y, b.op("Shape", [x])])


def motif_linear3d(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[-1]
    m = b.op("MatMul", [x, b.weight([d, d])])
    return b.op("Add", [m, b.const(0.1 * b.rng.standard_normal([d]), stem="bias")])


def _rope_tables(b: Builder, bsz: Dim, seq: Dim, rd: int) -> tuple[str, str]:
    """cos/sin [1|B, 1, S, rd]: computed from input frequencies f (cos(concat(f, f))), constant
    tables (static S), or rows of a constant [P, rd] table gathered by position ids."""
    mode = b.pick(["freqs", "freqs", "const", "gathered"])
    if mode == "const" and isinstance(seq, int):
        f = b.rng.standard_normal([b.pick([1, b.rt(bsz)]) if isinstance(bsz, int) else 1, seq, rd // 2])
        ang = np.concatenate([f, f], axis=-1)[:, None]
        b.trap("rope-const-table")
        return b.const(np.cos(ang), stem="cos"), b.const(np.sin(ang), stem="sin")
    if mode == "gathered":
        rows = b.rt(seq) + int(b.pick([0, 3]))
        f = b.rng.standard_normal([rows, rd // 2])
        ang = np.concatenate([f, f], axis=-1)
        pos = b.input([bsz, seq], dtype=I64, stem="position_ids", kind="position")
        b.trap("rope-gathered-table")
        cos = b.op("Gather", [b.const(np.cos(ang), stem="cos_table"), pos])
        sin = b.op("Gather", [b.const(np.sin(ang), stem="sin_table"), pos])
        return b.op("Unsqueeze", [cos, b.ints([1])]), b.op("Unsqueeze", [sin, b.ints([1])])
    freqs = b.input([b.pick([1, bsz]), seq, rd // 2], kind="normal", stem="freqs")
    cat = b.op("Concat", [freqs, freqs], axis=-1)
    co = b.op("Cos", [cat])
    si = b.op("Sin", [cat])
    if b.p(0.3):
        co = b.op("Mul", [co, b.scalar(1.0)])
        si = b.op("Mul", [si, b.scalar(1.0)])
    return b.op("Unsqueeze", [co, b.ints([1])]), b.op("Unsqueeze", [si, b.ints([1])])


def _rotary_dim(b: Builder, dh: int) -> int:
    """The whole head, or (partial rotary) its first half when that is still even."""
    return dh // 2 if dh % 4 == 0 and b.p(0.2) else dh


def _rope(b: Builder, x4: str, tables: tuple[str, str], dh: int, rd: int, near: bool) -> str:
    """x*cos + rotate_half(x)*sin over the first rd dims of the head (rd < dh: partial rotary,
    the rest passes through)."""
    cu, su = tables
    xr = x4
    if rd < dh:
        xr = b.op("Slice", [x4, b.ints([0]), b.ints([rd]), b.ints([-1])])
        b.trap("rope-partial")
    half = rd // 2
    split = half if not near else max(1, half - 1)
    x1 = b.op("Slice", [xr, b.ints([0]), b.ints([split]), b.ints([-1]), b.ints([1])])
    big = b.pick([rd, 2 ** 62])
    x2 = b.op("Slice", [xr, b.ints([split]), b.ints([big]), b.ints([-1])])
    r = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    c = b.op("Mul", [xr, cu])
    s = b.op("Mul", [r, su] if b.p(0.5) else [su, r])
    y = b.op("Add", [c, s])
    if rd < dh:
        y = b.op("Concat", [y, b.op("Slice", [x4, b.ints([rd]), b.ints([dh]), b.ints([-1])])], axis=-1)
    return y


def motif_rope(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """Standalone RoPE on x split into heads, then merged back."""
    bsz, seq, d = shape
    dh = b.pick([h for h in HEAD_SIZES if d % h == 0 and h % 2 == 0])
    x4 = b.op("Transpose", [b.op("Reshape", [x, b.ints([0, 0, d // dh, dh])])], perm=[0, 2, 1, 3])
    rd = _rotary_dim(b, dh)
    y = _rope(b, x4, _rope_tables(b, bsz, seq, rd), dh, rd, b.p(0.1))
    return b.op("Reshape", [b.op("Transpose", [y], perm=[0, 2, 1, 3]), b.ints([0, 0, d])])


def _mask(b: Builder, bsz: Dim, seq: Dim, kv: Dim, heads: int) -> str | None:
    kind = b.pick(["b1st", "b11t", "11st", "bhst", "111t", "sym", "sym", "bert", "none"])
    b.trap(f"mask-{kind}")
    if kind == "none":
        return None
    if kind == "bert":
        am = b.input([bsz, kv], dtype=I64, stem="attention_mask", kind="mask01")
        f = b.op("Cast", [am], to=b.dtype)
        inv = b.op("Sub", [b.scalar(1.0), f])
        m = b.op("Mul", [inv, b.scalar(-10000.0)])
        return b.op("Unsqueeze", [m, b.ints([1, 2])])
    if kind == "sym":
        # dims of the mask's own: at run time 1 (broadcast) or the full size, unknown to the rules
        def own(stem, full):
            value = int(b.pick([1, b.rt(full)]))
            if b.p(0.7):
                sym = f"{stem}{len(b.syms)}"
                b.syms[sym] = value
                return sym
            return value
        shape = [own("mb", bsz), 1 if b.p(0.7) else own("mh", heads), own("mq", seq), own("mk", kv)]
    else:
        shape = {"b1st": [bsz, 1, seq, kv], "b11t": [bsz, 1, 1, kv], "11st": [1, 1, seq, kv],
                 "bhst": [bsz, heads, seq, kv], "111t": [1, 1, 1, kv]}[kind]
    return b.input(shape, stem="mask")


def _split_heads(b: Builder, t: str, heads: int, dh: int, shape3: list[Dim]) -> str:
    form = b.pick(["zeros", "minus", "static"])
    if form == "static" and all(isinstance(d, int) for d in shape3[:2]):
        target = [shape3[0], shape3[1], heads, dh]
    elif form == "minus":
        target = [0, 0, -1, dh]
    else:
        target = [0, 0, heads, dh]
    return b.op("Reshape", [t, b.ints(target)])


def _proj(b: Builder, x: str, d_in: int, d_out: int, bias: bool) -> str:
    m = b.op("MatMul", [x, b.weight([d_in, d_out])])
    return b.op("Add", [m, b.const(0.1 * b.rng.standard_normal([d_out]), stem="bias")]) if bias else m


def motif_attention(b: Builder, x: str, shape: list[Dim], opset: int, gqa: bool = False) -> str:
    bsz, seq, d = shape
    dh = b.pick(HEAD_SIZES)
    heads = b.pick([1, 2, 4]) if not gqa else b.pick([2, 4])
    kv_heads = heads if not gqa else b.pick([h for h in (1, 2) if heads % h == 0 and h < heads])
    d_model = heads * dh
    if d != d_model:
        x = _proj(b, x, d, d_model, False)
    cross = b.p(0.15)
    if cross:
        kv_len = b.dim("kv", (1, 2, 3, 6), 0.6)
        src = b.input([bsz, kv_len, d_model], stem="memory")
        b.trap("cross-attention")
    else:
        kv_len, src = seq, x
    biased = b.p(0.6)
    if not cross and not gqa and all(isinstance(t, int) for t in (bsz, seq)) and b.p(0.6):
        # GPT-2 Conv1D: one Gemm on x flattened to [B*S, D], back to [B, S, 3D], split in thirds
        x2 = b.op("Reshape", [x, b.ints([-1, d_model])])
        g = b.op("Gemm", [x2, b.weight([d_model, 3 * d_model]),
                          b.const(0.1 * b.rng.standard_normal([3 * d_model]), stem="bias")])
        g3 = b.op("Reshape", [g, b.ints([bsz, seq, 3 * d_model])])
        q3, k3, v3 = b.op("Split", [g3, b.ints([d_model] * 3)], n_out=3, axis=2)
        b.trap("packed-gemm-qkv")
    else:
        q3 = _proj(b, x, d_model, d_model, biased)
        k3 = _proj(b, src, d_model, kv_heads * dh, biased)
        v3 = _proj(b, src, d_model, kv_heads * dh, biased)
    q4 = b.op("Transpose", [_split_heads(b, q3, heads, dh, [bsz, seq])], perm=[0, 2, 1, 3])
    kr = _split_heads(b, k3, kv_heads, dh, [bsz, kv_len])
    rope = (gqa or b.p(0.3)) and b.p(0.6) and not cross
    k4 = None
    kv_cache = not cross and b.p(0.2)
    if rope or gqa or kv_cache or b.p(0.5):
        k4 = b.op("Transpose", [kr], perm=[0, 2, 1, 3])
    if rope:
        rd = _rotary_dim(b, dh)
        tables = _rope_tables(b, bsz, seq, rd)
        q4 = _rope(b, q4, tables, dh, rd, False)
        k4 = _rope(b, k4, tables, dh, rd, False)
        b.trap("rope-in-attention")
    vr = _split_heads(b, v3, kv_heads, dh, [bsz, kv_len])
    v4 = b.op("Transpose", [vr], perm=[0, 2, 1, 3])
    if kv_cache:
        # decoder step with a KV cache: present = Concat(past, new) on the sequence axis, a graph output
        past = b.dim("past", (1, 3, 5), 0.6)
        if isinstance(past, int) and isinstance(seq, int):
            kv_len = past + seq
        else:
            kv_len = f"total{len(b.syms)}"
            b.syms[kv_len] = b.rt(past) + b.rt(seq)
        k4 = b.op("Concat", [b.input([bsz, kv_heads, past, dh], stem="past_key"), k4], axis=2)
        v4 = b.op("Concat", [b.input([bsz, kv_heads, past, dh], stem="past_value"), v4], axis=2)
        b.output(k4)
        b.output(v4)
        b.trap("kv-cache")
    if kv_heads != heads:
        n_rep = heads // kv_heads

        def repeat(t4):
            u = b.op("Unsqueeze", [t4, b.ints([2])])
            e = b.op("Expand", [u, b.ints([1, 1, n_rep, 1, 1])])
            return b.op("Reshape", [e, b.ints([0, heads, -1, dh])])
        k4, v4 = repeat(k4), repeat(v4)
    if k4 is None:
        kt = b.op("Transpose", [kr], perm=[0, 2, 3, 1])
    elif b.p(0.2) and all(isinstance(t, int) for t in (bsz, kv_len)):
        # the dynamo sdpa form of K^T: flatten, transpose, unflatten
        kf = b.op("Reshape", [k4, b.ints([-1, kv_len, dh])])
        kt = b.op("Reshape", [b.op("Transpose", [kf], perm=[0, 2, 1]), b.ints([bsz, heads, dh, kv_len])])
    else:
        kt = b.op("Transpose", [k4], perm=[0, 1, 3, 2])
    scale = 1.0 / np.sqrt(dh)
    where = b.pick(["mul", "div", "qk", "none"])
    if where == "qk":
        q4 = b.op("Mul", [q4, b.scalar(np.sqrt(scale))])
        kt = b.op("Mul", [kt, b.scalar(np.sqrt(scale))])
    sc = b.op("MatMul", [q4, kt])
    if where == "mul":
        sc = b.op("Mul", [sc, b.scalar(scale)])
    elif where == "div":
        near = b.p(0.1)   # near miss: a per-head scale
        c = b.const(np.full([heads, 1, 1], np.sqrt(dh)) * (1 + 0.1 * np.arange(heads)[:, None, None])) \
            if near else b.scalar(float(np.sqrt(dh)))
        sc = b.op("Div", [sc, c])
    mask = _mask(b, bsz, seq, kv_len, heads)
    if mask is not None:
        sc = b.op("Add", [sc, mask] if b.p(0.8) else [mask, sc])
    b.maybe_expose(sc, 0.05)
    p = b.op("Softmax", [sc], axis=b.pick([-1, -1, 3]) if not b.p(0.05) else 2)
    if b.p(0.2):
        p = b.op("Where", [b.op("IsNaN", [p]), b.scalar(0.0), p])
    o = b.op("MatMul", [p, v4])
    ot = b.op("Transpose", [o], perm=[0, 2, 1, 3])
    merge = b.pick(["zeros", "zeros", "static", "flat"])
    if merge == "flat":
        y = b.op("Reshape", [ot, b.ints([-1, d_model])])
        b.output(y)
        b.trap("attention-flat-output")
        y = b.op("Reshape", [y, b.op("Shape", [q3])])
    else:
        y = b.op("Reshape", [ot, b.ints([0, 0, d_model] if merge == "zeros" else [0, 0, -1])])
    return y if d == d_model else _proj(b, y, d_model, d, b.p(0.5))   # o_proj back to the hidden width


def motif_gqa(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    return motif_attention(b, x, shape, opset, gqa=True)


HIDDEN_MOTIFS = {
    "layer_norm": motif_layer_norm, "rms_norm": motif_rms_norm, "gelu": motif_gelu,
    "skip_norm": motif_skip_norm, "gemm": motif_gemm, "linear3d": motif_linear3d, "rope": motif_rope,
    "attention": motif_attention, "gqa": motif_gqa,
}
# attention and norms carry most rules: draw them more often
WEIGHTS = {"layer_norm": 2, "rms_norm": 2, "gelu": 2, "skip_norm": 2, "gemm": 1, "linear3d": 1,
           "rope": 1, "attention": 4, "gqa": 3}


def hidden_start(b: Builder, opset: int, seqs: tuple, widths: list, norm: bool) -> tuple[str, list[Dim], list[str]]:
    """The start of the idiom and sweep graphs: a fresh hidden state [B, S, d] input (S from
    ``seqs``, d from ``widths``: each family keeps its own sizes) and, when ``norm`` (nothing
    named) a fifth of the time, a layer / RMS norm over it. Returns (value, shape, motifs so far)."""
    bsz = b.dim("batch", (1, 2, 3), 0.6)
    seq = b.dim("seq", seqs, 0.6)
    shape = [bsz, seq, int(b.pick(widths))]
    h = b.input(shape, stem="hidden")
    if norm and b.p(0.2):
        pre = b.pick(["layer_norm", "rms_norm"])
        return HIDDEN_MOTIFS[pre](b, h, shape, opset), shape, [pre]
    return h, shape, []



def build_family(b: Builder, opset: int, family: dict, name: str | None = None) -> list[str]:
    """One motif of ``family`` (name -> motif; drawn, or ``name``) on a fresh hidden state [B, S, d] (S 1-8,
    d 16 / 32; a norm before it sometimes), its output the graph's. Returns the motif names."""
    name = name if name is not None else b.pick(list(family))
    h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 5, 8), [16, 32], norm=True)
    motifs.append(name)
    b.output(family[name](b, h, shape, opset))
    return motifs

# --- standalone motifs (own inputs; small or odd shapes) --------------------------------------


def standalone_gelu_small(b: Builder, opset: int) -> None:
    """GELU on a tensor of rank 0, 1 or 2 whose constants may have a higher rank: the output
    shape is the broadcast of both ((): a [1] constant makes it (1,))."""
    rank = b.pick([0, 0, 1, 1, 2])
    shape = [b.pick([1, 3])] * rank
    x = b.input(shape, stem="xs")
    b.trap(f"gelu-rank{rank}")
    y = _gelu_body(b, x, b.pick(["erf", "tanh", "quick"]), False)
    b.output(y)


def standalone_layer_norm_rank(b: Builder, opset: int) -> None:
    """LayerNorm over the last axis of a 2-D or 4-D tensor."""
    rank = b.pick([2, 4])
    d = b.pick([4, 8])
    shape = [b.dim("n", (1, 3))] + [b.pick([2, 3])] * (rank - 2) + [d]
    x = b.input(shape, stem="xr")
    y = motif_layer_norm(b, x, shape, opset, True) if b.p(0.5) else motif_rms_norm(b, x, shape, opset)
    b.output(y)


STANDALONE = {"gelu_small": standalone_gelu_small, "norm_rank": standalone_layer_norm_rank}


#: share of the cases that are KV-cache decoder steps (tools/fuzz_decoder.py). Drawn from a side
#: stream of the seed, so the motif graphs of the other seeds stay what they were.
DECODER_SHARE = 0.2
#: share of the motif graphs that also get control flow (an If on a scalar bool input, as in
#: Optimum's merged decoders), drawn and built from a side stream of their own: the rest of the
#: graph, and every graph without it, stays what it was for its seed.
CONTROL_FLOW_SHARE = 0.25


def _branch(b: Builder, name: str, nodes: list, out: str, dtype: int, shape) -> onnx.GraphProto:
    return oh.make_graph(nodes, b.name(name), [], [oh.make_tensor_value_info(out, dtype, shape)])


def add_control_flow(b: Builder, side: np.random.Generator, h: str, shape: list[Dim], opset: int,
                     first_node: int) -> list[str]:
    """Traps for rewrites that only look at the main graph: an intermediate of the motifs read
    from the outer scope inside an If branch (a fusion that deletes it breaks the branch), and a
    motif built inside a branch on the hidden state (the rewrite must reach into subgraphs and
    keep the outer-scope reads). Returns the motif names it adds."""
    rng, b.rng = b.rng, side    # the main stream stays as it was
    try:
        cond = b.name("cond")
        b.inputs.append(oh.make_tensor_value_info(cond, TensorProto.BOOL, []))
        b.feeds[cond] = np.array(b.p(0.5))
        added = []
        inner = [o for n in b.nodes[first_node:] for o in n.output if o]
        if inner and b.p(0.7):
            v = b.pick(inner)
            bodies = []
            for red in ("ReduceMax", "ReduceMin"):   # order-free reductions: exact on both sides
                f, r = b.name("cast"), b.name(red.lower())
                nodes = [oh.make_node("Cast", [v], [f], to=F32), oh.make_node(red, [f], [r], keepdims=0)]
                bodies.append(_branch(b, red.lower(), nodes, r, F32, []))
            b.output(b.op("If", [cond], then_branch=bodies[0], else_branch=bodies[1]))
            b.trap("intermediate-read-in-subgraph")
            added.append("if_reads")
        if not added or b.p(0.6):
            saved_nodes, saved_outputs = b.nodes, list(b.outputs)
            names = list(WEIGHTS)
            motif = b.pick(names)
            b.nodes = []
            y = HIDDEN_MOTIFS[motif](b, h, shape, opset)
            body = b.nodes
            b.nodes, b.outputs = saved_nodes, saved_outputs   # branch values cannot be graph outputs
            other = [oh.make_node("Identity", [h], [b.name("identity")])]
            then_g = _branch(b, "then", body, y, b.dtype, shape)
            else_g = _branch(b, "else", other, other[0].output[0], b.dtype, shape)
            if b.p(0.5):
                then_g, else_g = else_g, then_g
            b.output(b.op("If", [cond], then_branch=then_g, else_branch=else_g))
            b.trap("motif-in-subgraph")
            added.append(f"if_{motif}")
        return added
    finally:
        b.rng = rng


#: share of the motif and idiom graphs whose weights are partly stored as sparse initializers
#: (``add_sparse_initializers``); drawn from a side stream of the seed, so every other graph stays
#: what it was for its seed, and the main graph's nodes and feeds stay too.
SPARSE_SHARE = 0.15


def add_sparse_initializers(model: onnx.ModelProto, side: np.random.Generator) -> list[str]:
    """Move one to three float weights (never one that is also a graph input: an overridable
    default stays dense) into ``graph.sparse_initializer``, about half their entries zeroed, as
    [NNZ] linear indices or [NNZ, rank] coordinates. onnx-ir reads no sparse initializers; ONNX
    Runtime densifies them at load. Returns the traps it adds."""
    inputs = {vi.name for vi in model.graph.input}
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    cands = [t for t in model.graph.initializer if t.data_type in floats and t.name not in inputs
             and len(t.dims) >= 1 and int(np.prod(t.dims)) >= 4]
    if not cands:
        return []
    picked = side.choice(len(cands), size=min(len(cands), int(side.integers(1, 4))), replace=False)
    chosen = [cands[int(i)] for i in sorted(picked)]
    for t in chosen:
        arr = numpy_helper.to_array(t).copy()
        flat = arr.reshape(-1)
        flat[side.random(flat.size) < 0.5] = 0
        nz = np.flatnonzero(flat)
        coords = arr.ndim > 1 and side.random() < 0.5
        idx = np.stack(np.unravel_index(nz, arr.shape), 1) if coords else nz
        sparse = oh.make_sparse_tensor(numpy_helper.from_array(flat[nz], t.name),
                                       numpy_helper.from_array(idx.astype(np.int64), f"{t.name}__indices"),
                                       list(arr.shape))
        model.graph.initializer.remove(t)
        model.graph.sparse_initializer.append(sparse)
    return ["sparse-initializer"]


#: share of the graphs with an If whose branch values are named as onnx-ir names new values
#: (``val_0``, ``val_1``...: ``name_branches_like_ours``), from a side stream of the seed
INVENTED_NAMES_SHARE = 0.5


def name_branches_like_ours(model: onnx.ModelProto) -> list[str]:
    """Name the values each If branch of the main graph defines ``val_0``, ``val_1``... (both
    branches alike, as merged decoders share names): the names onnx-ir gives the values a pass
    adds to the main graph, which a body must not define (passes/_scoped_names.py)."""
    renamed = False
    for node in model.graph.node:
        if node.op_type != "If":
            continue
        for attr in node.attribute:
            names: dict[str, str] = {}
            for inner in attr.g.node:
                for i, o in enumerate(inner.output):
                    if o:
                        names[o] = inner.output[i] = f"val_{len(names)}"
            for inner in attr.g.node:
                inner.input[:] = [names.get(v, v) for v in inner.input]
            for out in attr.g.output:
                out.name = names.get(out.name, out.name)
            renamed |= bool(names)
    return ["branch-names-like-ours"] if renamed else []


def _with_sparse(case: Case) -> Case:
    side = np.random.default_rng([case.seed, 0x5A5])
    if side.random() < SPARSE_SHARE:
        case.traps += add_sparse_initializers(case.model, side)
    if np.random.default_rng([case.seed, 0x7A1]).random() < INVENTED_NAMES_SHARE:
        case.traps += name_branches_like_ours(case.model)
    return case


def make_case(seed: int) -> Case:
    side = np.random.default_rng([seed, 0xDF0])   # a salt under which the regression seeds of tests/tools stay motif graphs
    if side.random() < DECODER_SHARE:
        return make_decoder_case(seed, side)
    from fuzz_idioms import IDIOM_SHARE

    # a stream of its own (under this salt no regression seed of tests/tools becomes an idiom case)
    if np.random.default_rng([seed, 0x1D2]).random() < IDIOM_SHARE:
        return _with_sparse(make_idiom_case(seed))
    from fuzz_sweeps import SWEEP_SHARE

    # the sweeps' idioms (tools/fuzz_sweeps.py), a stream of their own too
    if np.random.default_rng([seed, SWEEP_SALT]).random() < SWEEP_SHARE:
        return _with_sparse(make_sweep_case(seed))
    from fuzz_forms import FORM_SHARE

    # session 16's forms (tools/fuzz_forms.py), a stream of their own (no seed a test names moves)
    if np.random.default_rng([seed, FORM_SALT]).random() < FORM_SHARE:
        return _with_sparse(make_form_case(seed))
    from fuzz_contrib import CONTRIB_SALT, CONTRIB_SHARE, make_contrib_case

    # session 18's contrib ops / int8 QDQ / Flatten layouts (tools/fuzz_contrib.py), a stream of their own
    if np.random.default_rng([seed, CONTRIB_SALT]).random() < CONTRIB_SHARE:
        return _with_sparse(make_contrib_case(seed))
    from fuzz_s25 import S25_SALT, S25_SHARE

    # session 25's idioms (tools/fuzz_s25.py), a stream of their own (no seed a test names moves)
    if np.random.default_rng([seed, S25_SALT]).random() < S25_SHARE:
        return _with_sparse(make_s25_case(seed))
    from fuzz_s28 import S28_SALT, S28_SHARE

    # session 28's forms (tools/fuzz_s28.py: float32 softmax islands, masked_fill, batch x length masks)
    if np.random.default_rng([seed, S28_SALT]).random() < S28_SHARE:
        return _with_sparse(make_s28_case(seed))
    from fuzz_s34 import S34_SALT, S34_SHARE

    # session 34's fused q / k / v projections picked apart (tools/fuzz_s34.py: slices, chunks, head views)
    if np.random.default_rng([seed, S34_SALT]).random() < S34_SHARE:
        return _with_sparse(make_s34_case(seed))
    from fuzz_s34b import S34B_SALT, S34B_SHARE

    # session 34's rotaries read by value (tools/fuzz_s34b.py: complex / pairs / rotate-half, three layouts)
    if np.random.default_rng([seed, S34B_SALT]).random() < S34B_SHARE:
        return _with_sparse(make_s34b_case(seed))
    from fuzz_s35 import S35_SALT, S35_SHARE

    # session 35's gated MLPs (tools/fuzz_s35.py: SwiGLU / GeGLU pairs from slices, chunks, two projections)
    if np.random.default_rng([seed, S35_SALT]).random() < S35_SHARE:
        return _with_sparse(make_s35_case(seed))
    from fuzz_s36 import S36_SALT, S36_SHARE

    # session 36's GroupNorm as torch writes it (tools/fuzz_s36.py: Reshape, InstanceNormalization, Reshape, affine)
    if np.random.default_rng([seed, S36_SALT]).random() < S36_SHARE:
        return _with_sparse(make_s36_case(seed))
    from fuzz_s37 import S37_SALT, S37_SHARE

    # session 36's rewrites (tools/fuzz_s37.py: Pad / Conv branches / BN folds, div-by-root, scores clamp, erf GELU)
    if np.random.default_rng([seed, S37_SALT]).random() < S37_SHARE:
        return _with_sparse(make_s37_case(seed))
    from fuzz_s38 import S38_SALT, S38_SHARE

    # session 37's rewrites (tools/fuzz_s38.py: Pad into MaxPool, tanh GELU spellings, Cast between views, Slice)
    if np.random.default_rng([seed, S38_SALT]).random() < S38_SHARE:
        return _with_sparse(make_s38_case(seed))
    from fuzz_s39 import S39_SALT, S39_SHARE

    # session 38's rewrites (tools/fuzz_s39.py: the rotary's halves form, packed patches, Cast of a Where of constants)
    if np.random.default_rng([seed, S39_SALT]).random() < S39_SHARE:
        return _with_sparse(make_s39_case(seed))
    from fuzz_s40 import S40_SALT, S40_SHARE

    # session 38's rewrites' near misses (tools/fuzz_s40.py: zero masks, Cast chains, SplitToSequence, cut tables)
    if np.random.default_rng([seed, S40_SALT]).random() < S40_SHARE:
        return _with_sparse(make_s40_case(seed))
    from fuzz_s41 import S41_SALT, S41_SHARE

    # session 39's rewrites (tools/fuzz_s41.py: operand twins, Unsqueeze chains, float16 norm islands, sequences)
    if np.random.default_rng([seed, S41_SALT]).random() < S41_SHARE:
        return _with_sparse(make_s41_case(seed))
    from fuzz_s42 import S42_SALT, S42_SHARE

    # session 40's rewrites (tools/fuzz_s42.py: head-view scales, channel scales, channels-first attention, row cuts)
    if np.random.default_rng([seed, S42_SALT]).random() < S42_SHARE:
        return _with_sparse(make_s42_case(seed))
    from fuzz_s43 import S43_SALT, S43_SHARE

    # session 41's rewrites (tools/fuzz_s43.py: Unsqueeze chains, one-head glue, scalar norm scales, permuted keys)
    if np.random.default_rng([seed, S43_SALT]).random() < S43_SHARE:
        return _with_sparse(make_s43_case(seed))
    from fuzz_s44 import S44_SALT, S44_SHARE

    # session 42's rewrites (tools/fuzz_s44.py: Expand drops, expanded masks, axes forms, half below row cuts)
    if np.random.default_rng([seed, S44_SALT]).random() < S44_SHARE:
        return _with_sparse(make_s44_case(seed))
    from fuzz_s45 import S45_SALT, S45_SHARE

    # session 43's rewrites (tools/fuzz_s45.py: one-head attention of Unsqueezes, scalar twins, tables cast, gathered rows)
    if np.random.default_rng([seed, S45_SALT]).random() < S45_SHARE:
        return _with_sparse(make_s45_case(seed))
    from fuzz_s46 import S46_SALT, S46_SHARE

    # session 44's rewrites (tools/fuzz_s46.py: Casts on head splits, Expands before unary readers, 4-D key masks
    # of every dtype, ORT's contrib forms)
    if np.random.default_rng([seed, S46_SALT]).random() < S46_SHARE:
        return _with_sparse(make_s46_case(seed))
    rng = np.random.default_rng(seed)
    dtype = F16 if rng.random() < 0.15 else F32
    b = Builder(rng, dtype)
    opset = int(b.pick([17, 18, 18, 20, 23]))
    if dtype == F16:
        b.trap("fp16")
    motifs: list[str] = []
    if b.p(0.85):
        bsz = b.dim("batch", (1, 2, 3), 0.6)
        seq = b.dim("seq", (1, 1, 2, 3, 5, 8), 0.6)
        d = int(b.pick([8, 16, 24, 32, 64]))
        shape = [bsz, seq, d]
        h = b.input(shape, stem="hidden")
        names = list(WEIGHTS)
        w = np.array([WEIGHTS[n] for n in names], dtype=float)
        n_motifs = int(b.pick([1, 1, 2, 2, 3]))
        first_node = len(b.nodes)
        for _ in range(n_motifs):
            name = names[int(rng.choice(len(names), p=w / w.sum()))]
            motifs.append(name)
            h = HIDDEN_MOTIFS[name](b, h, shape, opset)
            if b.p(0.15):
                b.output(h)
        b.output(h)
        side = np.random.default_rng([seed, 0xC0F])
        if side.random() < CONTROL_FLOW_SHARE:
            motifs += add_control_flow(b, side, h, shape, opset, first_node)
    for name, fn in STANDALONE.items():
        if not motifs or b.p(0.15):
            motifs.append(name)
            fn(b, opset)
    outputs = [oh.make_tensor_value_info(o, 0, None) for o in b.outputs]
    graph = oh.make_graph(b.nodes, f"fuzz_{seed}", b.inputs, outputs, initializer=b.inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=9)
    model = _declare_outputs(model, b)
    return _with_sparse(Case(seed, model, b.feeds, motifs, b.traps))


def make_idiom_case(seed: int, name: str | None = None) -> Case:
    """A graph of the exporter idioms the fourth hold-out sweep fixed (tools/fuzz_idioms.py);
    ``name`` picks one (tests)."""
    from fuzz_idioms import build_idiom

    return _built_case(seed, 0x1D1, build_idiom, name, "fuzz_idiom")


def build_one_motif(b: Builder, opset: int, builders: dict, motifs: tuple, name: str | None = None) -> list[str]:
    """A family's builder body (tools/fuzz_s37.py .. fuzz_s44.py): one motif of ``builders`` (``name``, or drawn
    from ``motifs`` in their order), its output the graph's."""
    name = name or b.pick(list(motifs))
    b.output(builders[name](b, opset))
    return [name]


def _built_case(seed: int, salt: int, build, name: str | None, graph_name: str,
                opsets: tuple = (17, 18, 20, 23), half_share: float = 0.1) -> Case:
    """A case of one family's builder (``build(b, opset, name)`` -> motifs): float16 ``half_share`` of the time,
    an opset of ``opsets``, outputs declared; a builder's ``b.alt_feeds`` (other feed sets) kept."""
    rng = np.random.default_rng([seed, salt])
    b = Builder(rng, F16 if rng.random() < half_share else F32)
    b.seed = seed   # for a builder's side streams (fuzz_forms.quant_after)
    opset = int(b.pick(list(opsets)))
    if b.dtype == F16:
        b.trap("fp16")
    motifs = build(b, opset, name)
    outputs = [oh.make_tensor_value_info(o, 0, None) for o in b.outputs]
    graph = oh.make_graph(b.nodes, f"{graph_name}_{seed}", b.inputs, outputs, initializer=b.inits)
    imports = [oh.make_opsetid("", opset)]
    if any(n.domain == "com.microsoft" for n in b.nodes):   # ORT's contrib ops (fuzz_s46's ort_forms)
        imports.append(oh.make_opsetid("com.microsoft", 1))
    model = oh.make_model(graph, opset_imports=imports, ir_version=9)
    return Case(seed, _declare_outputs(model, b), b.feeds, motifs, b.traps,
                alt_feeds=getattr(b, "alt_feeds", []))


#: the side stream that picks sweep cases (no regression seed of tests/tools becomes one under it)
SWEEP_SALT = 0x5E18
#: the side stream that picks form cases: under it no seed a test names, and no graph of the
#: tests' fuzz() runs (seeds 5, 11, 12, 21, 22, 23, 31), becomes one
FORM_SALT = 0xF063


def make_sweep_case(seed: int, name: str | None = None) -> Case:
    """A graph of the idioms the later hold-out sweeps found (tools/fuzz_sweeps.py); ``name``
    picks one (tests). A merged-decoder case carries its If's other branch as ``alt_feeds``."""
    from fuzz_sweeps import build_sweep

    return _built_case(seed, 0x5E16, build_sweep, name, "fuzz_sweep")


def make_s25_case(seed: int, name: str | None = None) -> Case:
    """A graph of the idioms session 25 taught the optimizer (tools/fuzz_s25.py: a key mask from
    lengths, causal + padding over a past, ScatterND writes tiling an axis); ``name`` picks one (tests)."""
    from fuzz_s25 import build_s25

    return _built_case(seed, 0x5251, build_s25, name, "fuzz_s25")


def make_s28_case(seed: int, name: str | None = None) -> Case:
    """A graph of the forms session 27/28's wrong-model bugs came from (tools/fuzz_s28.py: float32 softmax
    islands in half models, masked_fill, masks on batch and length jointly); ``name`` picks one (tests)."""
    from fuzz_s28 import build_s28

    return _built_case(seed, 0x5281, build_s28, name, "fuzz_s28")


def make_s34_case(seed: int, name: str | None = None) -> Case:
    """A graph of a fused q / k / v projection picked apart into q, k and v (tools/fuzz_s34.py: Phi-3's slices,
    chunks, GPT-NeoX / BLOOM / Falcon / ModernBERT head views); ``name`` picks one (tests)."""
    from fuzz_s34 import build_s34

    return _built_case(seed, 0x3435, build_s34, name, "fuzz_s34")


def make_s34b_case(seed: int, name: str | None = None) -> Case:
    """A graph of rotaries in three layouts, complex-product and rotate-half, with the tables' near misses
    (tools/fuzz_s34b.py); ``name`` picks one (tests)."""
    from fuzz_s34b import build_s34b

    return _built_case(seed, 0x3436, build_s34b, name, "fuzz_s34b")


def make_s35_case(seed: int, name: str | None = None) -> Case:
    """A graph of a gated MLP (tools/fuzz_s35.py: SwiGLU / GeGLU with gate and up from one projection's slices or
    chunks, or two projections), with its near misses; ``name`` picks one (tests)."""
    from fuzz_s35 import build_s35

    return _built_case(seed, 0x3537, build_s35, name, "fuzz_s35")


def make_s36_case(seed: int, name: str | None = None) -> Case:
    """A graph of GroupNorm as torch exports it (tools/fuzz_s36.py: [B, G, -1] view, InstanceNormalization, view
    back, per-channel affine, SiLU), with its near misses; ``name`` is accepted for the family API (one motif)."""
    from fuzz_s36 import build_s36

    return _built_case(seed, 0x3638, build_s36, name, "fuzz_s36")


def make_s37_case(seed: int, name: str | None = None) -> Case:
    """A graph of one of session 36's rewrites' fields (tools/fuzz_s37.py: a Pad before a Conv, summed Conv branches,
    BN folds, x / Sqrt(moment), the scores' clamp, erf GELU groupings) with its traps; ``name`` picks the motif."""
    from fuzz_s37 import build_s37

    return _built_case(seed, 0x3739, build_s37, name, "fuzz_s37")


def make_s38_case(seed: int, name: str | None = None) -> Case:
    """A graph of one of session 37's rewrites' fields (tools/fuzz_s38.py: a Pad of a value >= 0 before a MaxPool,
    the tanh GELU's spellings, a Cast between views, a whole-axis Slice to a symbolic end) with its traps."""
    from fuzz_s38 import build_s38

    return _built_case(seed, 0x3839, build_s38, name, "fuzz_s38")


def make_s39_case(seed: int, name: str | None = None) -> Case:
    """A graph of one of session 38's rewrites' fields (tools/fuzz_s39.py: the rotary written half by half, rotate-half
    over packed patches, a Cast of a Where of constants into the scores) with its traps; ``name`` picks the motif.
    Opset 23 (RotaryEmbedding) half the time; float16 a third of the time (the float16 masks are the Cast fold's)."""
    from fuzz_s39 import build_s39

    return _built_case(seed, 0x3940, build_s39, name, "fuzz_s39", (17, 18, 20, 23, 23, 23), 0.35)


def make_s40_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 38's rewrites with near misses drawn on purpose (tools/fuzz_s40.py: a keep-mask that
    value_range decides or must not, Cast chains around cast-of-select, SplitToSequence with its readers, rotary
    tables cut at run time) with its traps; ``name`` picks the motif. Float16 a quarter of the time."""
    from fuzz_s40 import build_s40

    return _built_case(seed, 0x4041, build_s40, name, "fuzz_s40", (17, 18, 20, 23), 0.25)


def make_s41_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 39's rewrites with near misses drawn on purpose (tools/fuzz_s41.py: two layers' masks whose
    operands are twins or near twins, Unsqueeze chains, float16 norm islands and their inexact scales, sequences of
    elements of different shapes) with its traps; ``name`` picks the motif. Float16 a quarter of the time."""
    from fuzz_s41 import build_s41

    return _built_case(seed, 0x4142, build_s41, name, "fuzz_s41", (18, 23, 23, 23), 0.25)


def make_s42_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 40's rewrites with near misses drawn on purpose (tools/fuzz_s42.py: a per-dim scale on a
    projection's head view, a per-channel scale after a norm, channels-first one-head attention, a decode step's
    rotary over one row of a table cut at run time) with its traps; ``name`` picks the motif. Float16 a quarter of
    the time."""
    from fuzz_s42 import build_s42

    return _built_case(seed, 0x4244, build_s42, name, "fuzz_s42", (18, 23, 23, 23), 0.25)


def make_s43_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 41's rewrites with near misses drawn on purpose (tools/fuzz_s43.py: an Unsqueeze chain
    composing any constant axes, one-head attention lowered at ort, a single-number scale after a norm, a scaled
    K^T of a key in a permuted layout) with its traps; ``name`` picks the motif. Float16 a quarter of the time."""
    from fuzz_s43 import build_s43

    return _built_case(seed, 0x4345, build_s43, name, "fuzz_s43", (18, 23, 23, 23), 0.25)


def make_s44_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 42's rewrites with near misses drawn on purpose (tools/fuzz_s44.py: an Expand read by
    broadcasting elementwise ops, a key mask expanded to the scores, Squeeze / Unsqueeze / Reduce axes as
    attributes, initializers or Constant nodes, a rotary table's first half taken below a row cut) with its traps;
    ``name`` picks the motif. Float16 a quarter of the time; opset 11 (axes attributes) to 23."""
    from fuzz_s44 import build_s44

    return _built_case(seed, 0x4446, build_s44, name, "fuzz_s44", (11, 13, 18, 23), 0.25)


def make_s45_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 43's rewrites with near misses drawn on purpose (tools/fuzz_s45.py: one-head attention
    written 4-D by Unsqueezes, a scalar Gather of a Shape beside its [1] twin, interleaved rotary tables cut through
    Casts, rotary caches gathered by an index of rank 0 / 1 / 2) with its traps; ``name`` picks the motif. Float16 a
    quarter of the time; opsets 15 to 23."""
    from fuzz_s45 import build_s45

    return _built_case(seed, 0x4547, build_s45, name, "fuzz_s45", (15, 18, 23, 23), 0.25)


def make_s46_case(seed: int, name: str | None = None) -> Case:
    """A graph of session 44's rewrites and their neighbours with near misses drawn on purpose (tools/fuzz_s46.py:
    a Cast on a head split, an Expand read through unary ops, 4-D key mask inputs of every dtype and polarity with
    keyless rows, ORT's SkipLayerNormalization / FusedMatMul forms) with its traps; ``name`` picks the motif.
    Float16 a quarter of the time; opset 23 mostly (cast-before-head-split's floor)."""
    from fuzz_s46 import build_s46

    return _built_case(seed, 0x4649, build_s46, name, "fuzz_s46", (18, 23, 23, 23), 0.25)


def make_form_case(seed: int, name: str | None = None) -> Case:
    """A graph of the session-16 forms (tools/fuzz_forms.py: Tile / Gather / Concat GQA and its near
    misses, quantized projections) at an opset of 17..23; ``name`` picks one (tests)."""
    from fuzz_forms import OPSETS, build_form

    return _built_case(seed, 0xF016, build_form, name, "fuzz_form", OPSETS)


def make_decoder_case(seed: int, rng: np.random.Generator | None = None, **overrides) -> Case:
    """A KV-cache decoder step (tools/fuzz_decoder.py); ``overrides`` fix spec switches (tests)."""
    from fuzz_decoder import (LOW_OPSET_SHARE, LOW_OPSETS, MERGED_SHARE, POS_SHIFT_SHARE, REPEAT_FORM_SHARE, REPEAT_FORMS,
                              as_merged, build_decoder, draw_spec)

    rng = rng if rng is not None else np.random.default_rng([seed, 0xDEC, 1])
    b = Builder(rng, F32)
    opset = int(b.pick([18, 20, 23]))
    low = np.random.default_rng([seed, 0xDEC, 5])   # opsets 15..17: a stream of their own (no seed a test names moves)
    if not overrides and low.random() < LOW_OPSET_SHARE:
        opset = int(low.choice(LOW_OPSETS))
    spec = {**draw_spec(b), **overrides}
    side = np.random.default_rng([seed, 0xDEC, 3])   # GQA's repeat forms: a stream of their own
    if not overrides and spec["heads"] != spec["kv_heads"] and side.random() < REPEAT_FORM_SHARE:
        spec["repeat"] = str(side.choice(REPEAT_FORMS))
    spec["kv_fp8"] = bool(spec["kv_fp8"])
    # RoPE positions shifted by a constant (PaliGemma's 1-based cache_position + 1): a stream of its own
    shift = np.random.default_rng([seed, 0xDEC, 1740])   # no decoder seed of the tests moves
    if not overrides and shift.random() < POS_SHIFT_SHARE:
        spec["pos_shift"] = int(shift.choice([1, 2]))
    b.dtype = F16 if spec["fp16"] else F32
    if spec["fp16"]:
        b.trap("fp16")
    build_decoder(b, opset, spec)
    outputs = [oh.make_tensor_value_info(o, 0, None) for o in b.outputs]
    graph = oh.make_graph(b.nodes, f"fuzz_decoder_{seed}", b.inputs, outputs, initializer=b.inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=9)
    model = _declare_outputs(model, b)
    present = spec.pop("_present")
    if spec["present_dims"]:   # as exporters declare them: [batch, Hkv, total, D]
        for out in model.graph.output:
            if out.name.startswith("present."):
                out.CopyFrom(oh.make_tensor_value_info(out.name, b.dtype, present))
    # Optimum's merged form, from a stream of its own (the steps that stay steps are unchanged); a
    # caller that fixes spec switches (a test) gets the plain step unless it asks for merged=True
    drawn = not overrides and np.random.default_rng([seed, 0xDEC, 2]).random() < MERGED_SHARE
    spec["merged"] = bool(overrides.get("merged", drawn))
    if spec["merged"]:
        model, feeds, alt = as_merged(model, b.feeds, next(i.name for i in model.graph.input))
        b.trap("merged-decoder")
        return Case(seed, model, feeds, ["decoder_kv"], b.traps, spec, alt_feeds=[alt])
    return Case(seed, model, b.feeds, ["decoder_kv"], b.traps, spec)


def _declare_outputs(model: onnx.ModelProto, b: Builder) -> onnx.ModelProto:
    """Give graph outputs the types shape inference finds; sometimes leave the shape off."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    by_name = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    del model.graph.output[:]
    for name in b.outputs:
        vi = by_name.get(name)
        out = onnx.ValueInfoProto()
        if name in getattr(b, "declared", {}):   # a builder's own type where inference stops (contrib ops)
            out = oh.make_tensor_value_info(name, *b.declared[name])
        elif vi is not None and vi.type.tensor_type.elem_type:
            out.CopyFrom(vi)
            if b.p(0.2):   # rank only: the dims unknown (the checker wants a shape field)
                for d in out.type.tensor_type.shape.dim:
                    d.Clear()
        else:
            out = oh.make_tensor_value_info(name, b.dtype, None)
        out.name = name
        model.graph.output.append(out)
    return model
