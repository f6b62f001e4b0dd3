"""Sizes of dims onnx's inference leaves unknown, proven from earlier values: ``name_known_dims``.

TorchScript and Optimum exports compute views from Shape reads (``bmm`` attention on
``[B*H,S,D]``, head merges sized by ``Shape(o3)[0] // H``), and a residual Add of a named and an
unknown batch is unknown to onnx; every rule that compares dims then fails, and reads of those
dims stay on intermediates. ``dim_path(v, i)`` follows dim ``i`` of ``v`` back through ops that
pass it on unchanged, nearest first; ``known_dim`` is the first size on it that is known (an int,
an exporter's symbol, or a view's target entry read symbolically: ``2*batch_size``), and
``name_known_dims`` writes it into the value's shape (shape inference calls it, then infers
again so the names spread). Steps, each exact for every input the model accepts:
- same-shape ops (Identity, Cast, unary math, Softmax, LayerNormalization's output...): dim i;
- Transpose: dim ``perm[i]``;
- broadcasting ops (Add, Mul, Where...): the operand whose dim survives, when every other operand
  lacks that axis or has it as a static 1 or as the same static size or exporter symbol;
- MatMul (both operands of rank >= 2): rows from the first operand, columns from the second,
  batch dims as broadcasting says; Gemm: rows from A, columns from B (transA / transB read);
- Gather: the data's dims around the gathered axis, the indices' dims in its place; ScatterND /
  ScatterElements: the data's dims;
- Concat: off its axis, the first input's dim; along it, the inputs' sizes added up in one
  canonical spelling (``past + seq``, passes/_dim_sums.py), where every input's size is known, or
  the sliced axis itself where it joins ``x[s:]`` and ``x[:s]`` (torch.roll: Swin's shifted windows);
- Reshape: the input dim an output dim is proven equal to (``reshape_out_dims``: ``0`` copies,
  the ``-1`` solved from the element count), only where every input dim is an int or an exporter
  symbol; a positive target entry read from known dims is the size itself.
- Slice (constant axes and steps; starts and ends may be computed from sizes): an axis it does
  not cut, one cut at [0, its own size), or one reversed whole (``x.flip(-1)``); a cut
  ``[s, s + n)`` with ``s`` a size holds at most n entries, which broadcasting against n settles
  (``_at_most``: GPT-NeoX's causal buffer ``bias[:, :, T - S : T]``), and so does ``[-n:]``;
  so does the last entry ``[-1:]`` of an axis of that size (one entry, or none where the size
  is 0: DETR's sine position embedding ``y / y[:, -1:]``). A strided cut ``[s::k]`` to the end
  (0 <= s < k) is ``(n+k-1-s)//k`` (Swin's patch merging, ``x[:, 0::2]``).
- Reduce ops (constant axes): the dims they do not reduce;
- Conv / ConvTranspose / pooling (ceil_mode too): batch (and a pool's channels) pass through; a
  spatial length is computed from the input's and named by its formula (``floor_div``: ``(L-5)//5``,
  a transposed conv's ``(2*L-1)//1``; an explicit output_shape is its int), so a length
  only computed (SEW-D's frames out of the conv feature extractor) is a fact, and the same size
  computed another way (``Shape(x)[1] // 2`` for AveragePool(2, 2)) gets the same name;
- ConstantOfShape: its shape's entries read as sizes (a mask of ones sized so);
- Resize given output sizes for every axis (no ``axes``, stretched): each entry of sizes (DINOv2's
  position table interpolated to the patch grid, ``height // p``);
- Flatten: an output dim that merges one input dim is that dim; one that merges several is their
  product where each is known (``Reshape(Flatten(q [B, H, S, D], axis=2), [0, -1, D])``'s merged
  ``2*B``, from which the view's ``-1`` is solved: S);
- Pad: an axis whose two pads are provably 0 (pads read in part through TorchScript's F.pad
  reversal, shape_vector) keeps its dim;
- a Slice whose length follows from sizes (``cut_length``): ``[:-k]`` of such a computed length
  ``(L+c)//s`` is ``(L+c-k*s)//s`` (``floor_plus``); ``[s:e]``, ``[-m:]``, ``[s:]`` of a length
  provably long enough are e - s, m, n - s (a causal conv's ``(S+3)//1`` cut back to S, a KV
  mask's ``past + S`` cut to its last S, a patch grid after its class token); "long enough" may
  rest on a lower bound from the graph's Convs (``conv_bounds``, passes/_dim_bounds.py: Swin's
  mask cuts ``[:-4]`` of a padded grid that the patch Conv makes at least 4).
Where a path ends unproven at a view's ``-1`` or at a broadcast of two different sizes, the dim is
named after the value that has it (``_unsolved``: ``dim__<value>_<axis>_<digest>``, one size per
run), so that the dims proven equal to it and the sizes read from it spell alike; shape inference
clears and derives such names again in each run (passes/shape_inference.py).
Dim names onnx's inference invents (``unk__N``) prove nothing: they are not stable across the
inference runs of one optimization (passes/shape_inference.py), so they never count as equal;
nor do the TorchScript exporter's placeholders (``Concatpresent.0.key_dim_2``), which the naming
replaces (a present's ``past + sequence``).
"""

from __future__ import annotations

import hashlib
import re

import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints, node_axes
from onnx_fuse.passes._dim_bounds import bounds_in, raise_bound
from onnx_fuse.passes._dim_lengths import (TO_END, WHOLE, clean, conv_least_input, cut_length, padded_length,
                                           window_length)
from onnx_fuse.passes._dim_products import Dim, floor_div, mul, reshape_out_dims, shape_vector, to_dim, value_dims
from onnx_fuse.passes._dim_sums import concat_axis, dim_diff, dim_sum
from onnx_fuse.passes._shape_values import _attr, constant_tensor, invented_name

_SAME_SHAPE = frozenset({
    "Identity", "Cast", "CastLike", "Neg", "Abs", "Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid",
    "HardSigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round",
    "Sign", "Not", "IsNaN", "IsInf", "Softplus", "Softsign", "Sin", "Cos", "Gelu", "Mish",
    "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization", "Dropout",
    "CumSum", "Clip",
})
_BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Where", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "Max", "Min", "Sum", "Mean", "PRelu",
})
_REDUCE = frozenset({
    "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
})
# windowed ops: output lengths computed from the input's (_window_step)
_WINDOWED = frozenset({"Conv", "ConvTranspose", "AveragePool", "MaxPool", "LpPool"})
_MAX_STEPS = 64
#: prefix of the names producer_dim_name gives a dim after the value that has it (_unsolved)
PRODUCER_DIM_PREFIX = "dim__"


def _rank(v: ir.Value | None) -> int | None:
    return None if v is None or v.shape is None else len(v.shape)


#: the TorchScript exporter's placeholder dim names (passes/shape_inference.py) during one
#: name_known_dims sweep: no facts, so a present's ``Concatpresent.0.key_dim_2`` is named
#: ``past + new`` from its Concat (empty outside a sweep)
_PLACEHOLDERS: frozenset[str] = frozenset()


def _fact(d) -> int | str | None:
    """A dim as a fact: an int, an exporter's symbol, or None (unknown, invented, a placeholder)."""
    if isinstance(d, int):
        return d
    name = getattr(d, "value", None)
    if name is None or invented_name(str(name)) or str(name) in _PLACEHOLDERS:
        return None
    return str(name)


def _broadcast_step(node: ir.Node, v: ir.Value, i: int) -> tuple[ir.Value, int] | None:
    r = _rank(v)
    ops = [x for x in node.inputs if x is not None]
    if r is None or any(_rank(x) is None for x in ops):
        return None
    present = [(x, i - (r - _rank(x))) for x in ops if i - (r - _rank(x)) >= 0]
    # operands whose dim is known come first: a static 1 against a cut of at most one entry (a
    # decode step's causal row, bias[:, :, T - 1 : T]) is 1, where the cut's own dim is unknown
    for x, a in sorted(present, key=lambda xa: _fact(xa[0].shape[xa[1]]) is None):
        mine = _fact(x.shape[a])
        others = [(_fact(y.shape[b]), y, b) for y, b in present if y is not x]
        if all(o == 1 or (o is not None and o == mine) or (o is None and _at_most(y, b, mine))
               for o, y, b in others):
            return x, a
    return None


def _at_most(y: ir.Value, b: int, size) -> bool:
    """Whether ``y``'s dim ``b`` is a slice ``[s, s + size)`` of something, ``s`` a size read from
    shapes (never negative): it holds ``min(s + size, n) - min(s, n) <= size`` entries, so
    broadcasting it against ``size`` gives ``size`` whenever the model runs (equal, or 1).
    BERT-family exports cut their position-id buffer so (``position_ids[:, :seq]``), GPT-NeoX its
    causal buffer at ``[T - S : T]`` (``s`` = T - S, read as a difference of the shapes' sizes); a cut
    ``[-m:]`` to the end holds at most m."""
    if size is None:
        return False
    want = to_dim(size)
    for u, j in dim_path(y, b):
        node = u.producer() if u is not None else None
        if node is None or node.op_type != "Slice" or node.domain not in ("", "ai.onnx"):
            continue
        cut = _slice_cut(node, _rank(u), j)
        if cut is None or cut is _UNCUT:
            continue
        start, end = cut
        if start == (0, ()) and end == want:
            return True
        if start == (-1, ()) and end is not None and clean(end) and not end[1] and end[0] >= TO_END \
                and _same_size(known_dim(node.inputs[0], j), want):
            # [-1:] of an axis of this very size (DETR's sine embedding, y / y[:, -1:]): one entry,
            # none only where the size is 0, so broadcasting against the size gives the size
            return True
        if start is not None and end is not None and start[0] >= 0 and clean(start) \
                and _same_size(dim_diff(end, start), want):
            return True
        if start is not None and end is not None and start[0] < 0 and start[1] and clean(end) \
                and not end[1] and end[0] >= TO_END and _same_size((-start[0], start[1]), want):
            # [-m:] of any length n holds min(m, n) entries, m a size read from shapes: XLM's
            # positions[:, :S][:, -S:] (its cache-free cut to the last S), broadcast against S
            return True
    return False


def _same_size(a: Dim | None, b: Dim | None) -> bool:
    """Equal Dims, sums compared in one spelling (an exporter's ``past + new`` is ``new + past``)."""
    if a is None or b is None:
        return False
    ca, cb = dim_sum([a]), dim_sum([b])
    return a == b or (ca is not None and ca == cb)


#: _slice_cut's answer for an axis the Slice leaves alone
_UNCUT = object()


def _axis_slot(axes: list[int], r: int, i: int) -> int | None:
    """Where axis ``i`` is in a Slice's ``axes`` of a rank-``r`` input: its index, -1 where it is not
    cut, None where an axis is out of range."""
    if not all(-r <= a < r for a in axes):
        return None
    axes = [a % r for a in axes]
    return axes.index(i) if i in axes else -1


def _slice_cut(node: ir.Node, r: int | None, i: int):
    """How a Slice with step 1 on axis ``i`` cuts: ``_UNCUT`` (not among its axes), ``(start,
    end)`` as Dims read from shape values (either None where unreadable), or None (axes not
    constant, or another step). Starts and ends may be computed (``T - S``, ``Shape(k)[2]``); only
    the axes (and steps) must be constants."""
    ins = list(node.inputs) + [None] * 5
    axes, steps = const_ints(ins[3], 16), const_ints(ins[4], 16)
    if r is None or (ins[3] is not None and axes is None) or (ins[4] is not None and steps is None):
        return None
    if axes is None:
        starts = shape_vector(ins[1], {}) if ins[1] is not None else None
        if starts is None or starts[1]:
            return None
        axes = list(range(len(starts[0])))
    k = _axis_slot(axes, r, i)
    if k is None or k < 0:
        return None if k is None else _UNCUT
    if steps is not None and (k >= len(steps) or steps[k] != 1):
        return None
    return _entry(ins[1], k, sums=True), _entry(ins[2], k, sums=True)


def _reshape_step(node: ir.Node, v: ir.Value, i: int) -> tuple[ir.Value, int] | None:
    x = node.inputs[0]
    ins = value_dims(x) if x is not None else None
    if ins is None or not all(clean(d) for d in ins):
        return None
    outs = reshape_out_dims(v)
    if outs is None or i >= len(outs) or not clean(outs[i]):
        return None
    if _attr(node, "allowzero", 0) == 0 and i < len(ins) and outs[i] == ins[i]:
        return x, i   # the same position first (a 0 entry copies it)
    return next(((x, j) for j, d in enumerate(ins) if d == outs[i]), None)


def _step(v: ir.Value, i: int) -> tuple[ir.Value, int] | None:
    node = v.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return None
    op, x = node.op_type, node.inputs[0]
    if op in _SAME_SHAPE:
        return (x, i) if v is node.outputs[0] and _rank(x) == _rank(v) else None
    if op == "Transpose":
        r = _rank(v)
        perm = _attr(node, "perm", None)
        perm = list(range(r - 1, -1, -1)) if perm is None and r is not None else perm
        if not isinstance(perm, (list, tuple)) or r is None or len(perm) != r:
            return None
        return x, int(perm[i])
    if op in _BROADCAST:
        return _broadcast_step(node, v, i)
    if op == "MatMul" and len(node.inputs) == 2:
        a, b, r = x, node.inputs[1], _rank(v)
        ra, rb = _rank(a), _rank(b)
        if r is None or ra is None or rb is None or min(ra, rb) < 2:
            return None
        if i == r - 1:
            return b, rb - 1
        if i == r - 2:
            return a, ra - 2
        # a batch dim broadcasts over the operands' leading dims
        lead = [(y, i - (r - 2 - (ry - 2))) for y, ry in ((a, ra), (b, rb))]
        present = [(y, k) for y, k in lead if k >= 0]
        if len(present) == 1:
            return present[0]
        (y0, k0), (y1, k1) = present
        f0, f1 = _fact(y0.shape[k0]), _fact(y1.shape[k1])
        if f1 == 1 or (f1 is not None and f1 == f0):
            return y0, k0
        return (y1, k1) if f0 == 1 else None
    if op == "Gemm" and len(node.inputs) >= 2 and node.inputs[1] is not None:
        # rows from A (its columns under transA), columns from B (its rows under transB); C only
        # broadcasts to [M, N] (GPT-OSS's MoE router: the tokens' B*S, which the experts' views read)
        ta, tb = _attr(node, "transA", 0), _attr(node, "transB", 0)
        if v is not node.outputs[0] or _rank(v) != 2 or _rank(x) != 2 or _rank(node.inputs[1]) != 2 \
                or ta not in (0, 1) or tb not in (0, 1):
            return None
        return (x, ta) if i == 0 else (node.inputs[1], 1 - tb)
    if op == "Gather" and len(node.inputs) == 2:
        axis, r_idx, r_data = _attr(node, "axis", 0), _rank(node.inputs[1]), _rank(x)
        if not isinstance(axis, int) or r_idx is None or r_data is None:
            return None
        axis %= r_data
        if i < axis:
            return x, i
        if i >= axis + r_idx:
            return x, i - r_idx + 1
        return node.inputs[1], i - axis
    if op == "Reshape" and len(node.inputs) >= 2:
        return _reshape_step(node, v, i)
    if op == "GatherElements" and len(node.inputs) == 2:
        return node.inputs[1], i   # the output has the indices' shape
    if op in ("ScatterND", "ScatterElements", "Scatter"):   # the output has the data's shape
        return (x, i) if v is node.outputs[0] and _rank(x) == _rank(v) else None
    if op in ("Unsqueeze", "Squeeze"):
        return _unsqueeze_step(node, v, i)
    if op == "Slice":
        return _slice_step(node, v, i)
    if op == "Expand" and len(node.inputs) == 2:
        return _expand_step(node, v, i)
    if op == "Range" and len(node.inputs) == 3:
        return _range_size(node)
    if op == "Concat":
        return _concat_step(node, v, i)
    if op in _WINDOWED:
        return _window_step(node, v, i)
    if op == "Pad":
        return _pad_step(node, v, i)
    if op == "Tile" and len(node.inputs) == 2:
        return _tile_step(node, v, i)
    if op == "OneHot" and len(node.inputs) == 3:
        return _one_hot_step(node, v, i)
    if op == "Split":
        return _split_step(node, v, i)
    if op == "Flatten":
        return _flatten_step(node, v, i)
    if op in _REDUCE:
        return _reduce_step(node, v, i)
    if op == "Resize" and len(node.inputs) >= 4 and node.inputs[3] is not None:
        # output sizes given (DINOv2's position table interpolated to the patch grid, sized height // p):
        # each entry is the size, where every axis is sized and stretched (no axes, no aspect policy)
        policy = _attr(node, "keep_aspect_ratio_policy", b"stretch")
        if _attr(node, "axes", None) is not None or policy not in (b"stretch", "stretch"):
            return None
        e = _entry(node.inputs[3], i)
        return (None, e) if e is not None and clean(e) and e[0] > 0 and v is node.outputs[0] else None
    if op == "ConstantOfShape":   # torch.ones(n_frames // squeeze_factor): the entries read as sizes
        e = _entry(x, i)
        return (None, e) if e is not None and clean(e) and e[0] > 0 else None
    return None


def _reduce_step(node: ir.Node, v: ir.Value, i: int):
    """A Reduce* op (constant axes): an axis it does not reduce keeps its dim (keepdims=0 drops the
    reduced ones: Hiera's query pooling, max over a [B, 4, S/4, C] view)."""
    x, r, rx = node.inputs[0], _rank(v), _rank(node.inputs[0])
    if r is None or rx is None or v is not node.outputs[0]:
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = const_ints(node.inputs[1], 16)
    else:
        attr = _attr(node, "axes", None)
        axes = list(attr) if isinstance(attr, (list, tuple)) else None
        if axes is None and _attr(node, "noop_with_empty_axes", 0) == 0:
            axes = list(range(rx))   # no axes: every axis is reduced
    if not axes or not all(-rx <= a < rx for a in axes):
        return None
    axes = sorted({a % rx for a in axes})
    keep = _attr(node, "keepdims", 1)
    if keep not in (0, 1):
        return None
    kept = list(range(rx)) if keep else [d for d in range(rx) if d not in axes]
    if len(kept) != r or not 0 <= i < r or kept[i] in axes:
        return None
    return x, kept[i]


def _flatten_step(node: ir.Node, v: ir.Value, i: int):
    """Flatten(x, axis): dim 0 is the product of x's dims before the axis, dim 1 of the rest."""
    x, rx = node.inputs[0], _rank(node.inputs[0])
    axis = _attr(node, "axis", 1)
    if rx is None or _rank(v) != 2 or not isinstance(axis, int) or not -rx <= axis <= rx:
        return None
    axis = axis + rx if axis < 0 else axis
    merged = range(0, axis) if i == 0 else range(axis, rx)
    if len(merged) == 1:
        return x, merged[0]
    size: Dim = (1, ())
    for j in merged:
        f = _fact(x.shape[j])
        if f is None:
            return None
        size = mul(size, to_dim(f))
    return None, size


def _pad_step(node: ir.Node, v: ir.Value, i: int):
    """Pad (any mode): an axis whose begin and end pads are both provably 0 keeps its dim. The pads
    may be computed, read in part (shape_vector: TorchScript's F.pad writes them as a Concat of
    zeros and a computed entry, reversed pairwise), so the other axes of LongT5's block padding keep
    their dims."""
    x, r = node.inputs[0], _rank(v)
    if r is None or _rank(x) != r:
        return None
    ins = list(node.inputs) + [None] * 4
    if ins[1] is None:   # opset < 11: an attribute
        pads = _attr(node, "pads", None)
        entries = [(int(p), ()) for p in pads] if isinstance(pads, (list, tuple)) else None
    else:
        got = shape_vector(ins[1], {})
        entries = got[0] if got is not None and not got[1] else None
    axes = const_ints(ins[3], 16) if ins[3] is not None else list(range(r))
    if entries is None or axes is None or len(entries) != 2 * len(axes) or not all(-r <= a < r for a in axes):
        return None
    axes = [a % r for a in axes]
    if i not in axes:
        return x, i
    k = axes.index(i)
    if entries[k] == (0, ()) and entries[k + len(axes)] == (0, ()):
        return x, i
    total = padded_length(known_dim(x, i), entries[k], entries[k + len(axes)])
    return (None, total) if total is not None and clean(total) and total[0] >= 0 else None


def _tile_step(node: ir.Node, v: ir.Value, i: int):
    """Tile: dim i is the input's times its repeat entry (read from sizes: LongT5 repeats its global
    keys once per block, ``repeat(1, N, 1, 1, 1)``; a repeat of 1 keeps the dim)."""
    x, r = node.inputs[0], _rank(v)
    got = shape_vector(node.inputs[1], {})
    if r is None or _rank(x) != r or got is None or got[1] or len(got[0]) != r:
        return None
    e = got[0][i]
    if e == (1, ()):
        return x, i
    n = known_dim(x, i) if e is not None and clean(e) and e[0] > 0 else None
    return (None, mul(n, e)) if n is not None and clean(n) and n[0] >= 0 else None


def _one_hot_step(node: ir.Node, v: ir.Value, i: int):
    """OneHot: the indices' dims with ``depth`` (a size read from shapes, a sum too: LongT5's
    ``one_hot(ids, G + 1)``) inserted at ``axis``."""
    idx, r = node.inputs[0], _rank(v)
    axis = _attr(node, "axis", -1)
    if r is None or _rank(idx) != r - 1 or not isinstance(axis, int) or not -r <= axis < r:
        return None
    axis %= r
    if i != axis:
        return idx, i - (i > axis)
    got = shape_vector(node.inputs[1], {}, sums=True)
    e = got[0][0] if got is not None and len(got[0]) == 1 else None
    return (None, e) if e is not None and clean(e) and e[0] > 0 else None


def _split_step(node: ir.Node, v: ir.Value, i: int):
    """Split: every output keeps the input's dims off the split axis."""
    x, r = node.inputs[0], _rank(v)
    axis = _attr(node, "axis", 0)
    if r is None or _rank(x) != r or not isinstance(axis, int) or not -r <= axis < r:
        return None
    return (x, i) if i != axis % r else None


def _window_step(node: ir.Node, v: ir.Value, i: int):
    """Conv / ConvTranspose / pooling: the batch (and a pool's channels) pass through; a spatial
    output length is computed from the input's (``window_length``) and named as ``floor_div``
    names it."""
    x, r = node.inputs[0], _rank(v)
    if r is None or _rank(x) != r or v is not node.outputs[0] or not 0 <= i < r:
        return None
    if i == 0 or (i == 1 and node.op_type not in ("Conv", "ConvTranspose")):
        return x, i
    if i == 1:
        return None
    got = window_length(node, r - 2, i - 2)
    if got is None:
        return None
    if isinstance(got, int):   # ConvTranspose's explicit output_shape
        return None, (got, ())
    s, c, scale = got
    n = known_dim(x, i)
    out = floor_div(None if n is None else (n[0] * scale, n[1]), s, c)
    return (None, out) if out is not None and clean(out) and out[0] >= 0 else None


def _concat_step(node: ir.Node, v: ir.Value, i: int):
    """Off the axis every input has the output's dim (the first is read); along it the output
    holds their sum (passes/_dim_sums.py), computed."""
    r = _rank(v)
    axis = concat_axis(node, r) if r is not None else None
    ins = list(node.inputs)
    if axis is None or not ins or any(x is None or _rank(x) != r for x in ins):
        return None
    if i != axis:
        return ins[0], i
    rolled = _rolled(ins, r, axis)
    if rolled is not None:
        return rolled, axis
    total = dim_sum([known_dim(x, axis) for x in ins])
    return (None, total) if total is not None and clean(total) and total[0] >= 0 else None


def _rolled(ins: list, r: int, axis: int) -> ir.Value | None:
    """``x`` where a Concat joins ``x[s:]`` and ``x[:s]`` (either order) along ``axis``: torch.roll
    (Swin's shifted windows, ``roll(x, -2, 1)``). ONNX clamps a bound the same way as a start and as
    an end, so the two cuts split the axis at one point whatever ``s`` is (negative, past the end):
    together they are the whole axis."""
    if len(ins) != 2:
        return None
    slices = [x.producer() for x in ins]
    if any(n is None or n.op_type != "Slice" or n.domain not in ("", "ai.onnx") or not n.inputs
           or n.inputs[0] is None for n in slices) or slices[0].inputs[0] is not slices[1].inputs[0]:
        return None
    x = slices[0].inputs[0]
    if _rank(x) != r:
        return None
    cuts = [_slice_cut(n, r, axis) for n in slices]
    if any(c is None or c is _UNCUT or None in c for c in cuts):
        return None
    zero = (0, ())
    for (s1, e1), (s2, e2) in (cuts, cuts[::-1]):
        if not e1[1] and e1[0] >= TO_END and s2 == zero and e2 == s1:
            return x
    return None


def _strided(node: ir.Node, r: int | None, i: int) -> Dim | None:
    """The length of ``x[s::k]`` on axis ``i`` (constant k > 1, 0 <= s < k, to the end): ceil((n - s) / k)
    entries, ``(n+k-1-s)//k``, which is 0 where n < s (Swin's patch merging, ``x[:, 0::2]`` and
    ``x[:, 1::2]``); None for any other Slice."""
    ins = list(node.inputs) + [None] * 5
    starts, ends = const_ints(ins[1], 16), const_ints(ins[2], 16)
    axes, steps = const_ints(ins[3], 16), const_ints(ins[4], 16)
    if r is None or starts is None or ends is None or steps is None or (ins[3] is not None and axes is None):
        return None
    axes = list(range(len(starts))) if axes is None else axes
    if not len(axes) == len(starts) == len(ends) == len(steps):
        return None
    k = _axis_slot(axes, r, i)
    if k is None or k < 0:
        return None
    step, start = steps[k], starts[k]
    if step <= 1 or not 0 <= start < step or ends[k] < TO_END:
        return None
    n = known_dim(node.inputs[0], i)
    return floor_div(n, step, step - 1 - start) if n is not None and clean(n) else None


def _unsqueeze_step(node: ir.Node, v: ir.Value, i: int):
    x, r, rx = node.inputs[0], _rank(v), _rank(node.inputs[0])
    if r is None or rx is None:
        return None
    if node.op_type == "Unsqueeze":
        axes = node_axes(node, r, sort=True)
        if axes is None or i in axes or len(axes) != r - rx:
            return None
        return x, i - sum(a < i for a in axes)
    axes = node_axes(node, rx, sort=True)
    if axes is None or len(axes) != rx - r:
        return None
    kept = [d for d in range(rx) if d not in axes]
    return x, kept[i]


def _slice_step(node: ir.Node, v: ir.Value, i: int):
    """A Slice (step 1) along axis ``i``: an axis it leaves alone, or cut to the whole axis, is the
    input's dim; a cut of a provable length is that length (``cut_length``)."""
    x = node.inputs[0]
    if _reverses(node, _rank(v), i):
        return x, i
    cut = _slice_cut(node, _rank(v), i)
    if cut is None:
        got = _strided(node, _rank(v), i)
        return (None, got) if got is not None and clean(got) and got[0] >= 0 else None
    if cut is _UNCUT:
        return x, i
    start, end = cut
    if start is None or end is None:
        return None
    if start == (0, ()) and not end[1] and end[0] >= TO_END:
        return x, i
    got = cut_length(start, end, known_dim(x, i))
    if got is WHOLE:
        return x, i
    return (None, got) if got is not None and clean(got) and got[0] >= 0 else None


def _reverses(node: ir.Node, r: int | None, i: int) -> bool:
    """Whether a Slice reverses all of axis ``i``: step -1 from the last entry (-1, or past the end)
    to before the first (an end at or below -n: ``x.flip(-1)``, TorchScript's ``[-1, -INT64_MAX]``),
    which keeps its length (Speech2Text's mask flip before a CumSum)."""
    ins = list(node.inputs) + [None] * 5
    axes, steps = const_ints(ins[3], 16), const_ints(ins[4], 16)
    starts, ends = const_ints(ins[1], 16), const_ints(ins[2], 16)
    if r is None or None in (axes, steps, starts, ends) \
            or not len(axes) == len(steps) == len(starts) == len(ends):
        return False
    k = _axis_slot(axes, r, i)
    if k is None or k < 0:
        return False
    return steps[k] == -1 and (starts[k] == -1 or starts[k] >= TO_END) and ends[k] <= -TO_END


def _expand_step(node: ir.Node, v: ir.Value, i: int):
    x, r, rx = node.inputs[0], _rank(v), _rank(node.inputs[0])
    got = shape_vector(node.inputs[1], {})
    if r is None or rx is None or got is None or got[1] or len(got[0]) > r:
        return None
    entries = got[0]
    e = entries[i - (r - len(entries))] if i - (r - len(entries)) >= 0 else None
    a = i - (r - rx)
    mine = known_dim(x, a) if a >= 0 else (1, ())
    if e == (1, ()) or (e is not None and e == mine):
        return (x, a) if a >= 0 else None
    if mine == (1, ()) and e is not None and clean(e) and e[0] > 0:
        return None, e
    if e is not None and clean(e) and e[0] > 0 and a >= 0 and _at_most(x, a, e):
        return None, e   # at most e entries broadcast to e (equal, or 1): keras-hub's position table [:S]
    return None


def _range_size(node: ir.Node):
    """Range(a, b, 1) has b - a elements: n for Range(0, n), S for Range(P, P + S). Float bounds too
    where they are integers (Keras' arange(float(S)): exact while S < 2**24, float32's integers)."""
    delta = const_ints(node.inputs[2], 16) or _float_ints(node.inputs[2])
    start, limit = (_int_bound(v) for v in node.inputs[:2])
    if delta != [1] or start is None or limit is None or len(start[0]) != 1 or len(limit[0]) != 1:
        return None
    n = dim_diff(limit[0][0], start[0][0])
    return (None, n) if n is not None and clean(n) and n[0] > 0 else None


def _float_ints(value) -> list[int] | None:
    """A small float constant all of whose entries are integers, as ints."""
    t = constant_tensor(value) if value is not None else None
    if t is None or not t.dtype.is_floating_point() or t.size > 16:
        return None
    got = t.numpy().reshape(-1).astype("float64")
    return [int(x) for x in got] if all(float(x).is_integer() for x in got) else None


def _int_bound(v: ir.Value | None):
    """A Range bound as shape entries: an int value, a float constant of integers, or an int value
    Cast to float (Keras' arange over a shape read)."""
    if v is None:
        return None
    node = v.producer()
    if node is not None and node.op_type == "Cast" and node.domain in ("", "ai.onnx") and node.inputs \
            and node.inputs[0] is not None and node.inputs[0].dtype is not None and node.inputs[0].dtype.is_integer():
        v = node.inputs[0]
    elif (ints := _float_ints(v)) is not None:
        return [(i, ()) for i in ints], True
    return shape_vector(v, {}, sums=True)


def _entry(vec, k: int, sums: bool = False) -> Dim | None:
    got = shape_vector(vec, {}, sums=sums) if vec is not None else None
    return got[0][k] if got is not None and k < len(got[0]) else None


#: dim_path results during one name_known_dims sweep (paths share their tails: a residual stream
#: is walked once, not once per layer); None outside a sweep
_PATHS: dict | None = None


def dim_path(v: ir.Value, i: int) -> list[tuple[ir.Value, int]]:
    """``(v, i)`` and every earlier ``(u, j)`` whose dim provably has the same size, nearest first."""
    if _PATHS is not None:
        key = (id(v), i)
        if key not in _PATHS:
            _PATHS[key] = [(v, i)]   # a cycle through this dim (none in a DAG) ends here
            _PATHS[key] = _dim_path(v, i)
        return _PATHS[key]
    return _dim_path(v, i)


def _dim_path(v: ir.Value, i: int) -> list[tuple[ir.Value, int]]:
    r = _rank(v)
    if r is None or not -r <= i < r:
        return [(v, i)]
    path = [(v, i % r)]
    for _ in range(_MAX_STEPS):
        nxt = _step(*path[-1])
        if nxt is not None and nxt[0] is None:   # a size computed, not read: (None, Dim)
            path.append(nxt)
            break
        if nxt is None or _rank(nxt[0]) is None or not 0 <= nxt[1] < _rank(nxt[0]):
            break
        path.append(nxt)
    return path


def _render(d: Dim) -> str | int | None:
    """A Dim as a dim: an int, or a name ``to_dim`` reads back as the same Dim."""
    coef, atoms = d
    if not atoms:
        return coef if coef >= 0 else None
    if coef == 1 and len(atoms) == 1:
        return atoms[0]
    if coef > 0 and all(to_dim(a) == (1, (a,)) for a in atoms):
        return "*".join(([str(coef)] if coef != 1 else []) + list(atoms))
    return None


def _view_dim(u: ir.Value, j: int) -> Dim | None:
    """What a Reshape outputs at dim j, where provable from its target (or element count) alone."""
    node = u.producer()
    if node is None or node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    got = shape_vector(node.inputs[1], {})
    if got is not None and not got[1] and j < len(got[0]):
        e = got[0][j]
        if e is not None and e[0] > 0 and clean(e):   # a size, read straight from the target
            return e
    ins = value_dims(node.inputs[0]) if node.inputs[0] is not None else None
    if ins is None or not all(clean(d) for d in ins):
        return None
    outs = reshape_out_dims(u)
    return outs[j] if outs is not None and j < len(outs) and clean(outs[j]) else None


def known_dim(v: ir.Value, i: int) -> Dim | None:
    """The size of ``v``'s dim ``i`` as a Dim of ints and exporter symbols, proven along its
    ``dim_path`` (a known dim there, or a view whose target gives it, or where the path ends at a
    view's unsolved ``-1`` or a broadcast of two sizes, that value's name: ``_unsolved``); None
    when not proven."""
    path = dim_path(v, i)
    for u, j in path:
        if u is None:
            return j if clean(j) else None
        f = _fact(u.shape[j])
        if f is not None:
            return to_dim(f)
        d = _view_dim(u, j)
        if d is not None:
            return d
    u, j = path[-1]
    name = _unsolved(u, j) if u is not None else None
    return (1, (name,)) if name is not None else None


def _unsolved(u: ir.Value, j: int) -> str | None:
    """A name for dim ``j`` of ``u``, where its dim_path ends at ``u`` unproven and ``u`` is
    - a Reshape output whose target entry ``j`` is the ``-1``, which the element count does not
      solve symbolically (Hiera's unroll, ``[64*B, h/64, w/64, C] -> [-1, (h/4)*(w/4), C]``: B only
      because earlier views force h/4 to a multiple of 16, a fact the dims do not keep), or
    - a broadcasting op's output whose operands' dims are two different sizes (a residual Add of
      the tokens in and the windows' tokens out, ``S`` and ``(S)//64*W``: equal at run time, not
      provably);
    so that every dim proven equal to it (dim_path) and every size read from it (Shape -> Div ...)
    spells alike: Hiera's q, K and V read their window count as ``(that)//64`` from one Shape.
    None for anything else."""
    node = u.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not u.name or _rank(u) is None:
        return None
    if node.op_type == "Reshape" and len(node.inputs) >= 2:
        got = shape_vector(node.inputs[1], {})
        if got is None or got[1] or len(got[0]) != _rank(u) or got[0][j] != (-1, ()):
            return None
        ins = value_dims(node.inputs[0]) if node.inputs[0] is not None else None
        if ins is None or not all(clean(d) for d in ins):
            # an input dim not known yet (OPT's cache Concat before onnx's data propagation names it):
            # a name now would stand for a size later runs can prove, and hide it from the views that
            # undo this one (the KV-cache rule then misses the Concat under the attention)
            return None
    elif node.op_type not in _BROADCAST or u is not node.outputs[0] or not _sizes_differ(node, u, j):
        return None
    return producer_dim_name(u.name, j)


def _sizes_differ(node: ir.Node, u: ir.Value, j: int) -> bool:
    """Whether every operand of a broadcasting op has dim ``j`` (aligned to the output's rank) as
    a known size, and two of them differ: an operand still unknown may be named later in the sweep
    (its producer further up), and the output then takes its name by broadcasting, not this one."""
    r = _rank(u)
    facts = []
    for x in node.inputs:
        if x is None or _rank(x) is None:
            return False
        a = j - (r - _rank(x))
        if a >= 0:
            f = _fact(x.shape[a])
            if f is None:
                return False
            facts.append(f)
    return len(set(facts)) > 1


def producer_dim_name(value_name: str, axis: int) -> str:
    """A dim name for axis ``axis`` of the value ``value_name``: the size it has at run time, one
    number per run, so the name states a fact, and unlike onnx's ``unk__N`` it is the same in every
    inference run while the value is there. An identifier (the local check binds it like any
    symbol), marked by PRODUCER_DIM_PREFIX; the digest of the exact value name keeps apart two
    names that spell alike once sanitized."""
    clean_name = re.sub(r"\W+", "_", value_name).strip("_")[-48:]
    digest = hashlib.sha1(f"{value_name}#{axis}".encode()).hexdigest()[:8]
    return f"{PRODUCER_DIM_PREFIX}{clean_name}_{axis}_{digest}"


def producer_dim(name) -> bool:
    """A dim name producer_dim_name made (shape inference clears it before each run, and lets an
    exporter's symbol inferred in the run replace it)."""
    return isinstance(name, str) and name.startswith(PRODUCER_DIM_PREFIX)


def name_known_dims(graph: ir.Graph, placeholders: frozenset[str] = frozenset()) -> int:
    """Give each unknown or invented dim (or exporter placeholder, ``placeholders``) the size
    ``known_dim`` proves (an int, an exporter symbol, or a product such as ``2*batch_size``);
    returns how many values gained."""
    global _PATHS, _PLACEHOLDERS
    _PATHS, _PLACEHOLDERS = {}, frozenset(placeholders)
    try:
        bounds = conv_bounds(graph)
        _PATHS = {}   # paths walked for the bounds cut no Slice with them
        with bounds_in(bounds):
            return _name_known_dims(graph)
    finally:
        _PATHS, _PLACEHOLDERS = None, frozenset()


def conv_bounds(graph: ir.Graph) -> dict[str, int]:
    """{atom: least value} from the graph's Convs (passes/_dim_bounds.py): each refuses an input
    length below ``conv_least_input``, so the size naming that length is at least that wherever the
    model runs. Only the graph's own nodes: a Conv in a branch need not run."""
    bounds: dict[str, int] = {}
    for node in graph:
        x = node.inputs[0] if node.op_type == "Conv" and node.domain in ("", "ai.onnx") and node.inputs else None
        r = _rank(x)
        if r is None or r < 3:
            continue
        for k in range(r - 2):
            least = conv_least_input(node, r - 2, k)
            if least is not None and least > 0:
                try:
                    d = known_dim(x, 2 + k)
                except RecursionError:
                    continue
                raise_bound(bounds, d if clean(d) else None, least)
    return bounds


def _name_known_dims(graph: ir.Graph) -> int:
    gained = 0
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for v in node.outputs:
            if v.shape is None or all(_fact(d) is not None for d in v.shape):
                continue
            dims, changed = list(v.shape), False
            for i, d in enumerate(dims):
                if _fact(d) is not None:
                    continue
                try:
                    k = known_dim(v, i)
                except RecursionError:   # a path too deep to follow: the dim stays unknown
                    k = None
                name = _render(k) if k is not None else None
                if name is not None:
                    dims[i] = name if isinstance(name, int) else ir.SymbolicDim(name)
                    changed = True
            if changed:
                v.shape = ir.Shape(dims)
                gained += 1
    return gained
