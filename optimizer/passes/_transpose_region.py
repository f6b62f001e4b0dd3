"""The region a Transpose can be sunk through (layout_chains' ``transpose-sunk``).

Start at a Transpose by p1 (an *entry*) and collect every node that computes the same whether its
operands are permuted by p1 or not (the *inner* nodes), following values both ways: the readers of a
value in the region, and the producers of an inner node's other operands. The region's edges are
  - entries: Transposes by p1 (their outputs are read from before them),
  - mixed entries: Transposes by another perm p' read once, by the region: they take p1's inverse in
    their own perm (DeepSeek's k at trt, a Concat of Transpose(k_nope [B, S, H, D], [3, 2, 1, 0]) and
    Transpose(k_pe [B, H, S, D], [3, 1, 2, 0]): one layout from two perms),
  - exits: Transposes of the region's values (they take p1 in their own perm),
  - Shape reads of the region's values (Shape(Transpose(v, p1)) = Gather(Shape(v), p1)),
  - Reshapes of the region's values where p1 moves only axes of size 1 (the same flat data),
  - constants and values whose dims are all 1 (constants are permuted, ones broadcast in any layout),
  - other operands of an elementwise op with the region's rank, computed outside it (Ministral 3's
    per-position query factor [1, 1, S, 1]): read through a Transpose by p1's inverse, which costs a
    node per value (the sink counts it; CSE shares it between layers).
Inner nodes: elementwise ops, last-axis norms (ORT's residual SkipLayerNormalization too, its sum an
output of the region), Concat / Softmax / Split with their axis moved, a projection by a 2-D weight
and ORT's biased activations where the last axis stays, an Expand whose target p1 leaves as it is, and a
4-D RotaryEmbedding where p1 swaps heads and sequence (rewritten as its 3-D form on [B, S, H*D]: a
q / k norm, a scalar or per-position factor between the head Transpose and the rotation sinks alike).
A region whose value is a graph output or is read by anything else is refused. Rewritten, the inner
nodes run on the entries' inputs, so a pair that was only apart because an elementwise op, a
last-axis norm or a Concat sat between two Transposes cancels: SD3's q / k are transposed to
[B, H, S, D], RMSNorm'd, concatenated over S and transposed back (three Transposes, none after);
fairseq's time-first models (FSMT) transpose x to [T, B, C] once and back at the end, around layers
whose fused attention reads [B, S, C]: the input Transpose sinks through every projection, norm and
FFN into the attention's Transposes and the output's (10 Transposes -> 0).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from onnx_fuse.passes._dim_products import shape_vector
from onnx_fuse.passes._infra import axis_attr, is_default_op
from onnx_fuse.passes._shape_values import shape_read_bounds
from onnx_fuse.passes.constant_folding import constant_tensor

UNARY = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Celu", "Cos", "Cosh",
    "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN",
    "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign",
    "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
})
# every input broadcasts elementwise (numpy rules); Clip's min / max are scalars, so they qualify
BROADCAST = frozenset({
    "Add", "And", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Clip", "Div", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "Sub",
    "Sum", "Where", "Xor",
})
# normalize over axes axis..rank-1 with a scale (and bias) of those trailing dims: unchanged when
# the permutation keeps each of those axes in place
_NORMS = {("", "LayerNormalization"), ("", "RMSNormalization"),
          ("com.microsoft", "LayerNormalization"), ("com.microsoft", "SimplifiedLayerNormalization")}
# ORT's residual norms: y = norm(x + skip (+ bias)) over the last axis, output 3 the sum; x and skip
# carry the layout (the same shape), outputs 1 / 2 (mean, inverse deviation) must be unread
_SKIP_NORMS = {("com.microsoft", "SkipLayerNormalization"), ("com.microsoft", "SkipSimplifiedLayerNormalization")}
# ORT's activations with a [C] bias on the last axis (input 1)
_BIAS_LAST = {("com.microsoft", "FastGelu"), ("com.microsoft", "BiasGelu"), ("com.microsoft", "Gelu"),
              ("com.microsoft", "QuickGelu")}
# one axis, moved with the permutation (opset 13 on: earlier Softmax flattens from the axis on)
ONE_AXIS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
HEADS = [0, 2, 1, 3]  # [B, H, S, D] <-> [B, S, H, D]: the one permutation a 4-D RotaryEmbedding passes
MAX_NODES = 256  # a region larger than this is left (the walk stays cheap)
MAX_CONSTANT = 1 << 22  # elements of a constant operand copied permuted


class Refused(Exception):
    """The region cannot be sunk."""


@dataclasses.dataclass
class Region:
    p1: list[int]
    entries: list[ir.Node] = dataclasses.field(default_factory=list)
    inner: list[ir.Node] = dataclasses.field(default_factory=list)
    exits: list[ir.Node] = dataclasses.field(default_factory=list)
    shape_reads: list[ir.Node] = dataclasses.field(default_factory=list)
    # Reshapes of region values whose elements p1 leaves in memory order: they read the entries' layout as it is
    view_reads: list[ir.Node] = dataclasses.field(default_factory=list)
    # (node, input index) of constant operands to permute
    constants: list[tuple[ir.Node, int]] = dataclasses.field(default_factory=list)
    # (node, input index) of computed operands of the region's rank from outside it (Ministral 3's
    # per-position query factor [1, 1, S, 1]): read through a Transpose by p1's inverse
    operands: list[tuple[ir.Node, int]] = dataclasses.field(default_factory=list)
    kept: set = dataclasses.field(default_factory=set)  # entries that other nodes still read
    # Transposes by another perm p' read once, by the region (DeepSeek's k at trt: Concat(Transpose(k_nope,
    # [3, 2, 1, 0]), Transpose(k_pe, [3, 1, 2, 0])), one layout from two perms): each takes p1's inverse in its
    # own perm, in place (read elsewhere: a computed operand, or refused, as before)
    mixed: list[ir.Node] = dataclasses.field(default_factory=list)
    # a 4-D RotaryEmbedding may be inner (the sink's own regions; attention-3d's walk does not pass one: its
    # two views cost what the Transposes it would meet save where Casts sit between, fp16 islands)
    rotary: bool = False

    @property
    def rank(self) -> int:
        return len(self.p1)

    def new_axis(self, axis: int) -> int:
        """Where the old layout's ``axis`` is in the entries' input layout."""
        return self.p1[axis + self.rank if axis < 0 else axis]


def perm_of(node: ir.Node) -> list[int] | None:
    a = node.attributes.get("perm")
    if a is None:  # default: reverse the axes
        x = node.inputs[0] if node.inputs else None
        return None if x is None or x.shape is None else list(range(len(x.shape)))[::-1]
    if a.is_ref():
        return None
    return [int(p) for p in a.value]


def all_ones(value: ir.Value) -> bool:
    return value.shape is not None and all(isinstance(d, int) and d == 1 for d in value.shape.dims)


def collect(start: ir.Node, opset: int) -> Region:
    """The region around the Transpose ``start`` (module docstring); raises Refused."""
    p1 = perm_of(start)
    if p1 is None or len(start.inputs) != 1 or start.inputs[0] is None:
        raise Refused
    region = Region(p1, rotary=True)
    values: list[ir.Value] = []  # region values whose readers are still to visit
    seen: set[int] = set()  # ids of nodes placed

    def add_entry(t: ir.Node) -> None:
        region.entries.append(t)
        seen.add(id(t))
        values.append(t.outputs[0])

    def add_inner(node: ir.Node) -> None:
        if len(region.inner) >= MAX_NODES:
            raise Refused
        _check_layout_op(node, region, opset)
        region.inner.append(node)
        seen.add(id(node))
        for j in layout_inputs(node):
            v = node.inputs[j]
            if v is None or _in_region(v, region, seen):
                continue
            producer = v.producer()
            # Concat's operands have the region's rank; broadcast operands at most that
            fits = v.shape is not None and (len(v.shape) == region.rank if node.op_type == "Concat"
                                            else len(v.shape) <= region.rank)
            if _is_entry(producer, region):
                add_entry(producer)
            elif _is_other_transpose(producer, region) and len(v.uses()) == 1 and not v.is_graph_output():
                region.mixed.append(producer)  # read here only: takes p1's inverse in its own perm
            elif all_ones(v) and fits:
                continue  # the same data in every layout
            elif (t := constant_tensor(v)) is not None:
                if not fits or t.size > MAX_CONSTANT:
                    raise Refused
                region.constants.append((node, j))
            elif producer is not None and id(producer) not in seen and _layout_op(producer, region, opset):
                add_inner(producer)
            elif node.op_type in BROADCAST and node.domain in ("", "ai.onnx") and _rank(v) == region.rank:
                region.operands.append((node, j))   # computed outside: read under the permutation
            else:
                raise Refused
        values.extend(node.outputs[j] for j in layout_outputs(node) if node.outputs[j] is not None)

    add_entry(start)
    while values:
        v = values.pop()
        if v.is_graph_output():
            raise Refused
        for use in list(v.uses()):
            node = use.node
            if node.graph is not start.graph:
                pass  # read inside a subgraph (an If branch): not rewritten from here
            elif node in region.inner:
                if use.idx in layout_inputs(node):
                    continue
            elif id(node) in seen:
                continue  # an exit or a Shape read placed already
            elif is_default_op(node, "Transpose"):
                p2 = perm_of(node)
                if p2 is None or len(p2) != region.rank:
                    raise Refused
                region.exits.append(node)
                seen.add(id(node))
                continue
            elif is_default_op(node, "Shape"):
                if shape_read_bounds(node, region.rank) is None:
                    raise Refused   # a reference start / end (function bodies): unknown axes
                region.shape_reads.append(node)
                seen.add(id(node))
                continue
            elif (is_default_op(node, "Reshape") and use.idx == 0 and keeps_memory_order(v, region.p1)
                  and _copies_no_dim(node)):
                region.view_reads.append(node)
                seen.add(id(node))
                continue
            elif use.idx in layout_inputs(node) and _layout_op(node, region, opset):
                add_inner(node)
                continue
            # read some other way (a MatMul, a norm's scale): only an entry may stay for such readers
            if v.producer() not in region.entries:
                raise Refused
            region.kept.add(id(v.producer()))
    if any(id(t) in {id(e) for e in region.exits} for t in region.entries + region.mixed):
        raise Refused  # a Transpose both reading and feeding the region: left to the next round
    return region


def keeps_memory_order(v: ir.Value, p1: list[int]) -> bool:
    """Whether v (a region value) and v in the entries' layout hold their elements in the same order:
    p1 moves only axes of size 1 past the others (torch MHA's probe query [B, 1, C] read time-first as
    [1, B, C]), so a Reshape reads the same flat data from either."""
    if v.shape is None or len(v.shape) != len(p1):
        return False
    big = [p1[i] for i, d in enumerate(v.shape.dims) if not (isinstance(d, int) and d == 1)]
    return big == sorted(big)


def _copies_no_dim(reshape: ir.Node) -> bool:
    """The Reshape's target copies (0) no dim of its input, which differs between the layouts."""
    a = reshape.attributes.get("allowzero")
    if a is not None and not a.is_ref() and a.value == 1:
        return True
    read = shape_vector(reshape.inputs[1], {}) if len(reshape.inputs) > 1 else None
    return read is not None and all(e is not None and e != (0, ()) for e in read[0])


def _in_region(v: ir.Value, region: Region, seen: set[int]) -> bool:
    return v.producer() is not None and id(v.producer()) in seen and (
        v.producer() in region.inner or v.producer() in region.entries)


def _is_other_transpose(node: ir.Node | None, region: Region) -> bool:
    """A Transpose of the region's rank by a perm other than p1 (a mixed entry)."""
    if not is_default_op(node, "Transpose") or len(node.inputs) != 1 or node.inputs[0] is None:
        return False
    perm = perm_of(node)
    return perm is not None and len(perm) == region.rank and perm != region.p1 and _rank(node.inputs[0]) == region.rank


def _is_entry(node: ir.Node | None, region: Region) -> bool:
    return (is_default_op(node, "Transpose") and len(node.inputs) == 1 and node.inputs[0] is not None
            and perm_of(node) == region.p1)


def layout_inputs(node: ir.Node) -> list[int]:
    """The inputs that carry the region's layout (the norms' scale / bias, a MatMul's weight, a
    Split's sizes do not)."""
    key = (node.domain or "", node.op_type)
    if key in _SKIP_NORMS:
        return [0, 1]
    if key in _NORMS or key in _BIAS_LAST or node.op_type in ONE_AXIS or key in (
            ("", "MatMul"), ("", "Split"), ("", "Expand"), ("", "RotaryEmbedding")):
        return [0]
    return list(range(len(node.inputs)))


def layout_outputs(node: ir.Node) -> list[int]:
    """The outputs in the region's layout (a Split's every part, a residual norm's sum); the others
    must be unread."""
    key = (node.domain or "", node.op_type)
    if key == ("", "Split"):
        return list(range(len(node.outputs)))
    if key in _SKIP_NORMS:
        return [0, 3]
    return [0]


def _rank(v: ir.Value | None) -> int | None:
    return None if v is None or v.shape is None else len(v.shape)


def _layout_op(node: ir.Node, region: Region, opset: int) -> bool:
    try:
        _check_layout_op(node, region, opset)
    except Refused:
        return False
    return True


def _check_layout_op(node: ir.Node, region: Region, opset: int) -> None:
    """Raises Refused unless ``node`` computes the same on operands permuted by the region's p1."""
    rank, out = region.rank, node.outputs[0] if node.outputs else None
    if out is None or out.shape is None or len(out.shape) != rank:
        raise Refused  # broadcasting must not add axes in front of the region's
    kept = layout_outputs(node)
    for j, o in enumerate(node.outputs):
        if j in kept:
            if o is not None and (o.uses() or o.is_graph_output()) and _rank(o) != rank:
                raise Refused
        elif o is not None and (o.uses() or o.is_graph_output()):
            raise Refused  # a norm's mean / inverse deviation: reduced shapes, not followed
    key = (node.domain or "", node.op_type)
    last_kept = region.p1[-1] == rank - 1
    if key in _SKIP_NORMS:
        # over the last axis; x and skip of one shape (ORT also broadcasts a lower-rank skip)
        x, skip = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
        if not last_kept or _rank(x) != rank or _rank(skip) != rank or x.shape.dims != skip.shape.dims:
            raise Refused
        return
    if key in _BIAS_LAST:
        if not last_kept or any(_rank(b) not in (None, 1) for b in node.inputs[1:2] if b is not None):
            raise Refused
        return
    if key == ("", "MatMul"):
        # x [.., K] @ w [K, N] works on the last axis alone: any order of the others gives the same rows
        if not last_kept or _rank(node.inputs[0]) != rank or _rank(node.inputs[1]) != 2:
            raise Refused
        return
    if key == ("", "Expand"):
        # the target shape is kept as it is: each entry must equal the one p1 moves to its place
        # (prompts Expand(P [1, H, L, D], [B, 1, 1, 1]) read in [B, L, H, D]); read symbolically
        read = shape_vector(node.inputs[1], {}) if len(node.inputs) > 1 else None
        entries = None if read is None else read[0]
        if entries is None or len(entries) != rank or any(
                i != j and (entries[i] is None or entries[i] != entries[j]) for i, j in enumerate(region.p1)):
            raise Refused
        return
    if key == ("", "Split"):
        if axis_attr(node, rank) is None:
            raise Refused
        return
    if key == ("", "RotaryEmbedding"):
        # 4-D RotaryEmbedding-23 rotates [B, H, S, D]; on the heads-last layout [B, S, H, D] it runs 3-D
        # (viewed [B, S, H*D], num_heads H; _transpose_sink.py rewrites it so): static H and D
        x = node.inputs[0] if node.inputs else None
        if not region.rotary or region.p1 != HEADS or _rank(x) != 4 or not all(
                isinstance(x.shape[a], int) for a in (1, 3)):
            raise Refused
        return
    if key in _NORMS:
        a = node.attributes.get("axis")
        axis = -1 if a is None else (None if a.is_ref() else int(a.value))
        if axis is None or not -rank <= axis < rank:
            raise Refused
        axis %= rank
        if region.p1[axis:] != list(range(axis, rank)):
            raise Refused  # the normalized axes must stay where they are, in order
        return
    if node.domain not in ("", "ai.onnx"):
        raise Refused
    if node.op_type in UNARY:
        if len(node.inputs) != 1:
            raise Refused
        return
    if node.op_type in BROADCAST:
        return
    if node.op_type in ONE_AXIS or node.op_type == "Concat":
        if node.op_type in ONE_AXIS and opset < 13:
            raise Refused
        a = node.attributes.get("axis")
        if a is None and node.op_type == "Concat" or a is not None and a.is_ref():
            raise Refused
        axis = -1 if a is None else int(a.value)
        if not -rank <= axis < rank:
            raise Refused
        return
    raise Refused
