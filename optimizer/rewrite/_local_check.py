"""A numeric check of one rewrite before it is committed (``optimize(..., verify=True)``).

The matched subgraph and its planned replacement are each cut out into a small model whose inputs
are the pattern's boundary values and whose outputs are the pattern outputs; both run in ONNX
Runtime (CPU, its graph optimizations off) on the same random inputs and the outputs are compared
with verify's per-dtype tolerances. A replacement that differs, or that ORT refuses while the
original runs, is a failed check and the caller drops the rewrite.

Inputs are random but sensible: symbolic dims get the small values verify uses (2 for a leading
dim, 8 otherwise, or W + 3 past a sliding window W the cut-out holds, up to 256; a decoder's mask
length P + S (verify.length_ties) and a name shape inference gave a Concat's length the sum of its
parts (passes/_dim_sums.py), simple sums such as ``s0 + s1`` evaluated; a name the cones compute
takes their size), integer
values that index a table stay inside it, masks are mostly kept with the first key always kept,
position-like ints count up. A boundary value whose shape is not fully known, a node with a
subgraph, or an original that ORT cannot run on the random inputs makes the rewrite "unchecked":
counted, never failed.

Layers of one model repeat the same rewrite on the same shapes with different weights, so the
small models are built canonically (values and nodes renamed by position, constants larger than a
few elements fed as inputs) and their ORT sessions are cached by that canonical form.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import operator
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.rewrite._constants import const_array as _const_array
from onnx_fuse.rewrite._rule import CANONICAL_DOMAIN as _CANONICAL_DOMAIN

# Constants up to this many elements stay initializers (shapes, axes, epsilons: values a rule
# may have checked); larger ones become inputs fed their real values, so sessions are shared.
_INLINE_CONST = 16
_SHAPE_OPERANDS = {("Reshape", 1), ("Expand", 1), ("Tile", 1), ("ConstantOfShape", 0), ("Range", 0),
                   ("Range", 1), ("Range", 2), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4),
                   ("Squeeze", 1), ("Unsqueeze", 1), ("Split", 1), ("Pad", 1), ("TopK", 1),
                   ("OneHot", 1), ("Resize", 3), ("ReduceSum", 1), ("ReduceMean", 1)}


@dataclasses.dataclass
class CheckStats:
    """What the local checks did in one pass: counts, and the rewrites rolled back."""

    checked: int = 0
    unchecked: int = 0
    seconds: float = 0.0
    failed: list[dict[str, str]] = dataclasses.field(default_factory=list)
    unchecked_reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    def merge(self, other: CheckStats) -> None:
        self.checked += other.checked
        self.unchecked += other.unchecked
        self.seconds += other.seconds
        self.failed += other.failed
        for k, v in other.unchecked_reasons.items():
            self.unchecked_reasons[k] = self.unchecked_reasons.get(k, 0) + v

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "unchecked": self.unchecked,
                "rolled_back": sum(1 for f in self.failed if "kept" not in f),
                "failed": list(self.failed), "seconds": round(self.seconds, 6),
                "unchecked_reasons": dict(sorted(self.unchecked_reasons.items()))}


class Unchecked(Exception):
    """The rewrite cannot be checked locally (unknown shape, subgraph, inputs the original
    refuses): not a failure."""


# --- symbolic dims ------------------------------------------------------------------------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv}


def _eval_dim(text: str, env: Mapping[str, int]) -> int | None:
    """``s0 + s1``, ``2*s0``, ``past_sequence_length + 1`` with known symbols; None otherwise. A
    product with floor atoms is read as the shape facts read it (passes/_dim_products.py ``to_dim``:
    ``3*(S+2)//3`` is 3 * ((S + 2) // 3), a padded length, where Python would say S + 2)."""
    from onnx_fuse.passes._dim_products import parse_floor, to_dim

    d = to_dim(text)
    if d is not None and d[1] and (d[0] != 1 or len(d[1]) > 1):
        total = d[0]
        for atom in d[1]:
            v = _eval_dim(atom, env)
            if v is None:
                return None
            total *= v
        return total
    floor = parse_floor(text)
    if floor is not None:
        base = _eval_dim(floor[0], env)
        return None if base is None else (base + floor[1]) // floor[2]
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None

    def ev(n: ast.AST) -> int | None:
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return env.get(n.id)
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            a, b = ev(n.left), ev(n.right)
            return None if a is None or b is None else _BINOPS[type(n.op)](a, b)
        return None

    return ev(tree)


# The size of a non-leading symbolic dim (a sequence) in a cut-out...
_LENGTH = 8
# ... unless the cut-out holds a sliding window W (a band constant, a ``window`` attribute): then
# W + 3, so its last queries lose keys to the band, up to this length (scores grow as its square;
# a wider window, 4096 in real models, is left to the whole-model verification, docs/verify.md).
_MAX_LENGTH = 256


def _sequence_length(nodes: Sequence[ir.Node], new_nodes: Sequence[Any]) -> int:
    """_LENGTH, or W + 3 for the widest window W (_window) of the cut-out. At 8 positions a wrong
    rewrite of a window of 8 or more (the band dropped, W off by one) cannot show."""
    return max(_LENGTH, _window(nodes, new_nodes) + 3)


def _window(nodes: Sequence[ir.Node], new_nodes: Sequence[Any]) -> int:
    """The widest window W that the cut-out's nodes hold and that fits _MAX_LENGTH (0: none): an
    integer constant on its way from positions to a comparison (the band of a mask, ``kv > q - W``:
    verify.band_constant, as the whole-model check finds it) or a ``window`` attribute of either
    side."""
    from onnx_fuse.verify import band_constant

    scalars: dict[str, int] = {}
    index = []
    for n in nodes:
        for x in n.inputs:
            arr = _const_array(x) if x is not None else None
            if arr is not None and arr.size == 1 and arr.dtype in (np.int64, np.int32):
                scalars[str(id(x))] = int(arr.ravel()[0])
        index.append((n.op_type, [str(id(x)) if x is not None else "" for x in n.inputs],
                      [str(id(o)) for o in n.outputs]))
    windows = [band_constant(index, scalars)]
    windows += [int(n.attributes["window"].value) for n in nodes if "window" in n.attributes
                and n.attributes["window"].type == ir.AttributeType.INT]
    windows += [int(w) for nn in new_nodes
                if isinstance(w := getattr(nn, "attrs", {}).get("window"), (int, np.integer))]
    fitting = [w for w in windows if 0 < w <= _MAX_LENGTH - 3]
    return max(fitting, default=0)


class _Dims:
    """One consistent value per symbolic dim name within a check."""

    def __init__(self, sums: Mapping[str, str] = {}, ties: Mapping[str, tuple] = {},
                 length: int = _LENGTH) -> None:
        self.values: dict[str, int] = {}
        self.length = length   # a non-leading name's size (_sequence_length)
        self.sums = sums     # {name: "p + s"}: a Concat's length by its parts (passes/_dim_sums.py)
        self.ties = ties     # {dim: (dim or size, dim or size)} it is the sum of (verify.length_ties)

    def concrete(self, shape: ir.Shape | None) -> list[int]:
        if shape is None:
            raise Unchecked("boundary shape unknown")
        out = []
        for i, d in enumerate(shape.dims):
            if isinstance(d, int):
                out.append(d)
                continue
            name = getattr(d, "value", None)
            if not name:
                raise Unchecked("boundary shape has an unnamed dim")
            out.append(self.value(name, i))
        return out

    def value(self, name: str, axis: int) -> int:
        if name in self.values:
            return self.values[name]
        if name in self.ties:   # a decoder's mask length: past + new, whatever the names
            v = sum(x if isinstance(x, int) else self.value(x, 1) for x in self.ties[name])
        elif name in self.sums:   # a present's length, P + S, whatever the names
            v = self.value(self.sums[name], axis)
        elif name.isidentifier():
            v = 2 if axis == 0 else self.length
        else:
            v = _eval_dim(name, {k: x for k, x in self.values.items() if k.isidentifier()})
            if v is None:
                # bind the plain names inside the expression first, then evaluate
                try:
                    names = [n.id for n in ast.walk(ast.parse(name, mode="eval")) if isinstance(n, ast.Name)]
                except SyntaxError:
                    raise Unchecked(f"symbolic dim {name!r} not understood") from None
                for n in names:
                    self.value(n, 1)
                v = _eval_dim(name, self.values)
            if v is None or v < 0:
                raise Unchecked(f"symbolic dim {name!r} not understood")
        self.values[name] = v
        return v


# --- building the two small models --------------------------------------------------------------

def _np_dtype(dtype: ir.DataType | None) -> np.dtype:
    if dtype is None:
        raise Unchecked("boundary dtype unknown")
    try:
        return np.dtype(dtype.numpy())
    except Exception:
        raise Unchecked(f"dtype {dtype} not covered by random inputs") from None


def _random_value(v: ir.Value, shape: list[int], consumers: list[tuple[ir.Node, int]],
                  rng: np.random.Generator, dims: _Dims, pad: bool = True, window: int = 0) -> np.ndarray:
    """Random data for boundary value ``v``; ``window``: the half-precision cut-out's sliding window
    (0: none), which keeps a padded mask row's padding shorter than it, as verify's inputs do."""
    from onnx_fuse.verify import pad_start

    dtype = _np_dtype(v.dtype)
    lname = (v.name or "").lower()
    if dtype == np.bool_:
        arr = rng.random(shape) < 0.8
        if arr.ndim:
            arr[..., 0] = True   # every row keeps one key: an all-masked row is not a real input
        return arr
    if np.issubdtype(dtype, np.integer):
        for node, i in consumers:
            if (node.op_type, i) in _SHAPE_OPERANDS:
                raise Unchecked(f"integer input feeds {node.op_type} as a shape or axes")
        bound = None
        for node, i in consumers:
            data = node.inputs[0]
            if i != 1 or data is None or data.shape is None or len(data.shape) == 0:
                continue
            if node.op_type in ("Gather", "GatherElements"):
                axis = node.attributes["axis"].value if "axis" in node.attributes else 0
                axes = [axis % len(data.shape)]
            elif node.op_type == "GatherND" and shape:
                batch = node.attributes["batch_dims"].value if "batch_dims" in node.attributes else 0
                axes = list(range(batch, min(batch + shape[-1], len(data.shape))))
            else:
                continue
            for ax in axes:   # stay inside every axis the index reads (one bound for all)
                d = data.shape.dims[ax]
                n = d if isinstance(d, int) else dims.values.get(getattr(d, "value", None) or "")
                if n:
                    bound = n if bound is None else min(bound, n)
        if bound is not None:
            return rng.integers(0, max(bound, 1), size=shape, dtype=dtype)
        if "mask" in lname:
            arr = np.ones(shape, dtype)
            if pad and arr.ndim >= 2 and arr.shape[0] > 1 and arr.shape[-1] > 1:
                arr[-1, pad_start(arr.shape[-1], window):] = 0   # one padded row, as verify feeds
            return arr
        if ("position" in lname or "pos" in lname) and shape:
            return np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
        return rng.integers(0, 4, size=shape, dtype=dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    raise Unchecked(f"dtype {dtype} not covered by random inputs")


class _Canon:
    """Canonical value names (by first appearance) so identical subgraphs serialize identically."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def __call__(self, key: Any) -> str:
        k = id(key)
        if k not in self.names:
            self.names[k] = f"v{len(self.names)}"
        return self.names[k]


def _cast_to(elem: int | None, const: str, like: str) -> tuple[str, list[str], dict]:
    """(op, inputs, attributes) turning the float32 constant ``const`` into ``like``'s type: Cast to
    ``elem`` (any opset) where the type is known, else CastLike (opset 15+). The check graph runs at
    the model's own opsets, and TorchScript / tf2onnx exports at 13 / 14 have no CastLike."""
    return ("Cast", [const], {"to": int(elem)}) if elem else ("CastLike", [const, like], {})


def _expand_canonical_gelu(node: onnx.NodeProto, elem: int | None = None) -> list[onnx.NodeProto]:
    """Canonical Gelu as the plain ops of its formula (erf, or the tanh approximation), computed in
    the input's type (constants cast to it: ``_cast_to``), so the check needs no opset 20."""
    approx = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "approximate"), b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    (x,), (y,), tag = node.input, node.output, node.name or "gelu"
    nodes: list[onnx.NodeProto] = []

    def add(op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        name = out or f"{tag}_{len(nodes)}"
        nodes.append(onnx.helper.make_node(op, inputs, [name], name=f"{tag}_n{len(nodes)}", **attrs))
        return name

    def const(v: float) -> str:
        name = f"{tag}_c{len(nodes)}"
        nodes.append(onnx.helper.make_node("Constant", [], [name], name=name,
                                           value=onnx.numpy_helper.from_array(np.asarray([v], np.float32))))
        op, ins, attrs = _cast_to(elem, name, x)
        return add(op, ins, **attrs)

    half, one = const(0.5), const(1.0)
    if approx == "tanh":
        cube = add("Mul", [x, add("Mul", [x, x])])
        inner = add("Mul", [add("Add", [x, add("Mul", [cube, const(0.044715)])]), const(0.7978845608028654)])
        core = add("Add", [add("Tanh", [inner]), one])
    else:
        core = add("Add", [add("Erf", [add("Mul", [x, const(0.7071067811865476)])]), one])
    add("Mul", [add("Mul", [x, half]), core], y)
    return nodes


def _expand_canonical(node: onnx.NodeProto, mask_bool: bool, elem: int | None = None) -> list[onnx.NodeProto]:
    """Canonical Attention / AttentionKV (q, k, v [B,H,S,D], mask?, [past_k, past_v,] sinks?) as
    the plain ops of what it means: softmax(softcap(scale * q k^T) + mask) v, kv heads repeated for
    GQA, past concatenated before the new K/V, rows with every key at -inf giving zeros where
    nan_rows_zero says so (else NaN, as the unguarded export); sinks
    ([.., .., .., 1], broadcast to the rows) one more score per row with a zero value. Written
    out rather than run as Attention-23, which also zeroes rows whose mask is the finite minimum
    (sliding-window exports), where the exporters' graphs give the uniform average."""
    a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    ins = list(node.input) + [""] * (7 - len(node.input))
    q, k, v, mask = ins[:4]
    sinks = ins[6] if node.op_type == "AttentionKV" else ins[4]
    out = list(node.output) + [""] * (3 - len(node.output))
    tag = node.name
    nodes: list[onnx.NodeProto] = []

    def add(op: str, inputs: list[str], **attrs: Any) -> str:
        name = f"{tag}_{len(nodes)}"
        nodes.append(onnx.helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def const(vals: list[int] | float, dtype=np.int64) -> str:
        name = f"{tag}_c{len(nodes)}"
        nodes.append(onnx.helper.make_node("Constant", [], [name], name=name,
                                           value=onnx.numpy_helper.from_array(np.asarray(vals, dtype))))
        return name

    def like(vals: float, ref: str) -> str:   # a float32 constant in ref's type (q's, ``elem``)
        op, ins, attrs = _cast_to(elem, const(vals, np.float32), ref)
        return add(op, ins, **attrs)

    if node.op_type == "AttentionKV":
        k = add("Concat", [ins[4], k], axis=2) if ins[4] else k
        v = add("Concat", [ins[5], v], axis=2) if ins[5] else v
        for src, dst in ((k, out[1]), (v, out[2])):
            if dst:
                nodes.append(onnx.helper.make_node("Identity", [src], [dst], name=f"{tag}_{dst}"))
    hq, hkv = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
    if hq and hkv and hq != hkv:
        group = hq // hkv

        def repeat(x: str) -> str:
            shp = add("Shape", [x])
            lead, tail = add("Slice", [shp, const([0]), const([2])]), add("Slice", [shp, const([2]), const([4])])
            expanded = add("Expand", [add("Unsqueeze", [x, const([2])]),
                                      add("Concat", [lead, const([group]), tail], axis=0)])
            return add("Reshape", [expanded, add("Concat", [add("Slice", [shp, const([0]), const([1])]),
                                                             const([hq]), tail], axis=0)])

        k, v = repeat(k), repeat(v)
    scores = add("MatMul", [q, add("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = add("Mul", [scores, like(float(a.get("scale", 1.0)), scores)])
    cap = float(a.get("softcap", 0.0) or 0.0)
    if cap:
        c = like(cap, scores)
        scores = add("Mul", [add("Tanh", [add("Div", [scores, c])]), c])
    if mask:
        bias = mask
        if mask_bool:
            zero, ninf = like(0.0, scores), like(-np.inf, scores)
            bias = add("Where", [mask, zero, ninf])
        scores = add("Add", [scores, bias])
    if sinks:   # the sink column: softmax over [scores, sink], that column dropped
        bhs = add("Slice", [add("Shape", [scores]), const([0]), const([3])])
        col = add("Expand", [sinks, add("Concat", [bhs, const([1])], axis=0)])
        both = add("Softmax", [add("Concat", [scores, col], axis=-1)], axis=-1)
        probs = add("Slice", [both, const([0]), const([-1]), const([-1])])
    else:
        probs = add("Softmax", [scores], axis=-1)
    # A row whose keys are all masked (-inf) gives zeros where the export guarded it
    # (nan_rows_zero: Where(IsNaN(p), 0, p)); unguarded it is the export's 0/0 = NaN, a row
    # verify.compare_arrays takes as undefined (Attention-23 gives 0 there, ORT's contrib ops
    # NaN). A finite-min mask still averages.
    if int(a.get("nan_rows_zero", 0)):
        probs = add("Where", [add("IsNaN", [probs]), like(0.0, probs), probs])
    nodes.append(onnx.helper.make_node("MatMul", [probs, v], [out[0]], name=f"{tag}_out"))
    return nodes


def _node_proto(op: Any, canon: _Canon, idx: int, attrs_proto: Sequence[onnx.AttributeProto],
                inputs: Sequence[Any], outputs: Sequence[Any]) -> onnx.NodeProto:
    node = onnx.NodeProto()
    node.op_type = op.op_type
    node.domain = "" if op.domain in ("", "ai.onnx") else op.domain
    node.name = f"n{idx}"
    node.input.extend("" if v is None else canon(v) for v in inputs)
    node.output.extend("" if v is None or (isinstance(v, ir.Value) and not v.name) else canon(v)
                       for v in outputs)
    node.attribute.extend(attrs_proto)
    return node


def _old_node(node: ir.Node, canon: _Canon, idx: int) -> onnx.NodeProto:
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        raise Unchecked("a matched node holds a subgraph")
    attrs = [ir.serde.serialize_attribute(a) for a in node.attributes.values()]
    return _node_proto(node, canon, idx, attrs, list(node.inputs), list(node.outputs))


def _new_node(nn: Any, canon: _Canon, idx: int) -> onnx.NodeProto:
    attrs = []
    for k, v in nn.attrs.items():
        val = onnx.numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
        attrs.append(onnx.helper.make_attribute(k, val))
    return _node_proto(nn, canon, idx, attrs, nn.inputs, nn.outputs)


def _elem(value: Any) -> int | None:
    """The onnx element type of a matched or new value, None where it is not known."""
    dtype = getattr(value, "dtype", None)
    return int(dtype) if isinstance(dtype, ir.DataType) else None


@dataclasses.dataclass
class _Side:
    model: onnx.ModelProto
    key: bytes
    feeds: dict[str, np.ndarray]


def _build(nodes: list[tuple[str, Any]], outputs: Sequence[Any], out_types: Sequence[ir.DataType],
           new_inits: Mapping[int, np.ndarray], values: dict[int, np.ndarray],
           inline: set[int], opsets: Mapping[str, int], ir_version: int) -> _Side:
    """One side's model: ``nodes`` are ("old", ir.Node) or ("new", _NewNode) in order."""
    canon = _Canon()
    protos: list[onnx.NodeProto] = []
    for i, (kind, n) in enumerate(nodes):
        proto = _old_node(n, canon, i) if kind == "old" else _new_node(n, canon, i)
        if proto.domain == _CANONICAL_DOMAIN and proto.op_type in ("Attention", "AttentionKV"):
            mask = n.inputs[3] if len(n.inputs) > 3 else None
            dtype = getattr(mask, "dtype", None)
            if mask is not None and dtype is None:
                raise Unchecked("canonical attention mask of unknown dtype")
            protos += _expand_canonical(proto, dtype == ir.DataType.BOOL, _elem(n.inputs[0]))
        elif proto.domain == _CANONICAL_DOMAIN and proto.op_type == "Gelu":
            protos += _expand_canonical_gelu(proto, _elem(n.inputs[0]))
        else:
            protos.append(proto)
    out_names = [canon(o) for o in outputs]   # an output may be a boundary value itself (y = x)
    produced = {o for p in protos for o in p.output if o}
    graph_inputs, inits, feeds = [], [], {}
    for k, name in list(canon.names.items()):
        if name in produced:
            continue
        if k in new_inits:
            inits.append(onnx.numpy_helper.from_array(new_inits[k], name))
            continue
        arr = values[k]
        if k in inline:
            inits.append(onnx.numpy_helper.from_array(arr, name))
            continue
        graph_inputs.append(onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
        feeds[name] = arr
    outs, node_list = [], list(protos)
    for i, (o, t) in enumerate(zip(out_names, out_types)):
        node_list.append(onnx.helper.make_node("Identity", [o], [f"out{i}"], name=f"out{i}"))
        outs.append(onnx.helper.make_tensor_value_info(f"out{i}", int(t), None))
    opsets = {d: v for d, v in opsets.items() if d != _CANONICAL_DOMAIN}
    graph = onnx.helper.make_graph(node_list, "local_check", graph_inputs, outs, inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v)
                                                         for d, v in opsets.items()])
    model.ir_version = ir_version
    # Inline constants are part of the structure; fed inputs are not.
    key = hashlib.sha256(model.SerializeToString(deterministic=True)).digest()
    return _Side(model, key, feeds)


# --- running ------------------------------------------------------------------------------------

_SESSIONS: dict[bytes, Any] = {}
# Within one model a few distinct subgraphs per rule recur; a 256-session cache segfaulted
# inside ORT once in a 438-run corpus sweep (cause not isolated), 32 ran it clean.
_SESSION_CACHE_LIMIT = 32


def _session(side: _Side):
    sess = _SESSIONS.get(side.key)
    if sess is None:
        from onnx_fuse.verify import make_session

        sess = make_session(side.model, threads=1, quiet=True)
        if len(_SESSIONS) >= _SESSION_CACHE_LIMIT:
            _SESSIONS.pop(next(iter(_SESSIONS)))
        _SESSIONS[side.key] = sess
    return sess


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _boundary(old_nodes: Sequence[ir.Node], new_nodes: Sequence[Any], new_outputs: Sequence[Any]):
    """Values consumed by either side and produced by neither, with their old-side consumers."""
    produced = {id(o) for n in old_nodes for o in n.outputs}
    produced |= {id(o) for nn in new_nodes for o in nn.outputs if o is not None}
    boundary: dict[int, ir.Value] = {}
    consumers: dict[int, list[tuple[ir.Node, int]]] = {}
    for n in old_nodes:
        for i, v in enumerate(n.inputs):
            if v is not None and id(v) not in produced:
                boundary[id(v)] = v
                consumers.setdefault(id(v), []).append((n, i))
    for v in [*(x for nn in new_nodes for x in nn.inputs), *new_outputs]:
        if isinstance(v, ir.Value) and id(v) not in produced:
            boundary[id(v)] = v
    return boundary, consumers


_CONE_LIMIT = 64
# Ops that compute activations: a cone through them is the network itself, not mask or shape
# arithmetic, and would make every layer's check distinct (no shared session).
_HEAVY = {"MatMul", "Gemm", "Conv", "Einsum", "LayerNormalization", "RMSNormalization", "Softmax",
          "Attention", "SkipLayerNormalization", "MultiHeadAttention", "GroupQueryAttention",
          "SimplifiedLayerNormalization", "Gelu", "Erf", "Tanh", "Sigmoid"}


def _heavy(n: ir.Node) -> bool:
    """An activation op; an Einsum of vectors is an outer product building a table (TorchScript's
    RoPE angles, einsum("i,j->ij", positions, inv_freq)), not one, and so is a MatMul over a
    contracted axis of 1 (HF's rotary modules: inv_freq [B, D/2, 1] @ positions [B, 1, S])."""
    if n.op_type == "Einsum":
        return not all(i is not None and i.shape is not None and len(i.shape) <= 1 for i in n.inputs)
    if n.op_type == "MatMul" and len(n.inputs) == 2 and all(
            i is not None and i.shape is not None and len(i.shape) >= 2 for i in n.inputs):
        return not (n.inputs[0].shape[-1] == 1 and n.inputs[1].shape[-2] == 1)
    return n.op_type in _HEAVY


def _shape_cone(v: ir.Value, *, stop_at_known: bool = False) -> list[ir.Node]:
    """The nodes computing ``v`` back to constants, graph inputs and the inputs of
    Shape/Size (whose data does not matter); empty when that cone is large or holds subgraphs."""
    order: list[ir.Node] = []
    seen: set[int] = set()

    def visit(x: ir.Value) -> bool:
        n = x.producer()
        if n is None or _const_array(x) is not None or id(n) in seen:
            return True
        if stop_at_known and x is not v and _known_dims(x) and not (x.dtype and x.dtype.is_integer()):
            return True   # a leaf fed random data of its known shape
        if len(seen) >= _CONE_LIMIT or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                                           for a in n.attributes.values()):
            return False
        if not stop_at_known and (_heavy(n) or n.domain not in ("", "ai.onnx")):
            return False  # activations, not masks or shapes: random data of the known shape serves
        seen.add(id(n))
        if n.op_type not in ("Shape", "Size") or n.domain not in ("", "ai.onnx"):
            if not all(visit(i) for i in n.inputs if i is not None):
                return False
        order.append(n)
        return True

    return order if visit(v) else []


def _topo(nodes: list[ir.Node]) -> list[ir.Node]:
    """``nodes`` ordered so that each comes after the nodes of the list it reads."""
    made = {id(o): n for n in nodes for o in n.outputs}
    done: set[int] = set()
    out: list[ir.Node] = []

    def visit(n: ir.Node) -> None:
        if id(n) in done:
            return
        done.add(id(n))
        for x in n.inputs:
            if x is not None and id(x) in made:
                visit(made[id(x)])
        out.append(n)

    for n in nodes:
        visit(n)
    return out


def _known_dims(v: ir.Value) -> bool:
    return v.shape is not None and all(isinstance(d, int) or getattr(d, "value", None) for d in v.shape.dims)


def _plain_dims(v: ir.Value) -> bool:
    return v.shape is not None and all(isinstance(d, int) or str(getattr(d, "value", "")).isidentifier()
                                       for d in v.shape.dims)


def _bind_computed(pre: list[ir.Node], computed: list[ir.Value], values: dict[int, np.ndarray],
                   inline: set[int], dims: _Dims, opsets: Mapping[str, int], ir_version: int) -> None:
    """Give the dim names of the values the cones compute the sizes they come out with, so that
    random inputs sharing a name agree with them. A name is one size wherever it stands, but a
    made-up value (8 for a name no input fixes: shape inference's invented S of a decode step)
    need not be what a cone computes from the shapes (RoPE tables of Range(P, P + 1) hold 1 row):
    the original then broadcasts 1 against 8 and runs, and a replacement that wants the shapes
    equal (RotaryEmbedding's caches) fails, rolling back a right rewrite."""
    todo = [v for v in computed if v.shape is not None and v.dtype is not None
            and any(not isinstance(d, int) and getattr(d, "value", None) not in dims.values for d in v.shape.dims)]
    if not todo:
        return
    side = _build([("old", n) for n in pre], todo, [v.dtype for v in todo], {}, values, inline, opsets, ir_version)
    try:
        got = _session(side).run(None, side.feeds)
    except Exception:  # noqa: BLE001 - the check proper runs these nodes too and says why
        return
    for v, arr in zip(todo, got):
        if np.ndim(arr) != len(v.shape):
            continue
        for d, size in zip(v.shape.dims, np.shape(arr)):
            name = getattr(d, "value", None)
            if not isinstance(d, int) and name and name.isidentifier() and name not in dims.values:
                dims.values[name] = int(size)


def _compute_tied(nodes: list[ir.Node], tied: list[ir.Value], values: dict[int, np.ndarray],
                  inline: set[int], opsets: Mapping[str, int], ir_version: int) -> None:
    """The values of ``tied`` as the original's nodes compute them from the random inputs."""
    if any(v.dtype is None for v in tied):
        raise Unchecked("boundary dtype unknown")
    side = _build([("old", n) for n in nodes], tied, [v.dtype for v in tied], {}, values, inline, opsets, ir_version)
    try:
        got = _session(side).run(None, side.feeds)
    except Exception as exc:  # noqa: BLE001
        raise Unchecked(f"original refuses random inputs ({_first_line(exc)})") from None
    for v, arr in zip(tied, got):
        values[id(v)] = np.asarray(arr)


# ops that only move or copy elements: what a bridge (below) may pass
_MOVES = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile", "Concat", "Gather", "Identity",
          "Flatten"}
# ops computing a value from one other and constants, which a bridge passes too: a softmax's row
# maximum of scores the replacement reads (softmax-max-shift proves the shift on what it computes,
# row_max), a scale it undoes (Div / Mul by a constant); Erf / Tanh / Pow by a constant: the GELUs'
_ONE_INPUT = {"ReduceMax", "ReduceMin", "Mul", "Div", "Add", "Sub", "Cast", "Neg", "Erf", "Tanh", "Pow"}
# elementwise ops a bridge passes with several non-constant inputs when every one of them is
# bridged: gelu-erf / gelu-tanh read x, and the product each replaces is x times 1 + erf(x / sqrt 2)
# or 1 + tanh(polynomial of x), unmatched
_ALL_INPUTS = {"Mul", "Div", "Add", "Sub"}


def _bridge(old_nodes: Sequence[ir.Node], new_nodes: Sequence[Any], depth: int = 8) -> list[ir.Node]:
    """The nodes between a value the replacement reads and the match's inputs computed from it
    (attention-repeat-kv reads the K / V that the unmatched head repetition feeding the match
    reads; softmax-max-shift reads the scores whose row maximum, unmatched, the match subtracts),
    in order: they join the original's side, so both sides see the same data (random data fed to
    the two ends would not be related). A bridge passes moves, ops of one non-constant input, and
    elementwise ops whose non-constant inputs are all bridged."""
    produced = {id(o) for n in old_nodes for o in n.outputs}
    reads = {id(v) for nn in new_nodes for v in nn.inputs if isinstance(v, ir.Value) and id(v) not in produced}
    if not reads:
        return []
    found: dict[int, bool] = {}
    order: list[ir.Node] = []

    def passes(n: ir.Node) -> tuple[list[ir.Value], bool] | None:
        """The inputs a bridge may reach through ``n`` and whether it must reach all of them
        (None: it may not pass ``n``)."""
        if n.domain not in ("", "ai.onnx"):
            return None
        ins = [i for i in n.inputs if i is not None]
        if n.op_type in _MOVES:
            return ins, False
        live = [i for i in ins if _const_array(i) is None]
        if n.op_type in _ONE_INPUT and len(live) == 1:
            return live, False
        if n.op_type in _ALL_INPUTS and len(live) > 1:
            return live, True
        return None

    def reach(x: ir.Value, left: int) -> bool:
        if id(x) in reads:
            return True
        n = x.producer()
        way = passes(n) if n is not None and left > 0 else None
        if way is None:
            return False
        ins, every = way
        if id(n) not in found:
            found[id(n)] = False
            hit = [reach(i, left - 1) for i in ins]
            found[id(n)] = all(hit) if every else any(hit)
            if found[id(n)]:
                order.append(n)
        return found[id(n)]

    for v in [v for n in old_nodes for v in n.inputs if v is not None and id(v) not in produced and id(v) not in reads]:
        reach(v, depth)
    return order


def check_rewrite(old_nodes: Sequence[ir.Node], new_nodes: Sequence[Any],
                  new_inits: Mapping[Any, np.ndarray], old_outputs: Sequence[ir.Value],
                  new_outputs: Sequence[Any], opsets: Mapping[str, int], *, ir_version: int = 10,
                  seed: int = 0, ties: Mapping[str, tuple] = {}, sums: Mapping[str, str] = {}) -> str | None:
    """Run the matched nodes and their replacement on the same random inputs.

    ``new_nodes`` are the rewriter's planned nodes (op_type, domain, inputs, attrs, outputs),
    ``new_inits`` maps planned initializer values to their arrays, ``old_outputs`` are the pattern
    outputs and ``new_outputs`` what replaces each (a planned value or an existing one);
    ``ties``: the model's input dims that are sums of others (verify.length_ties); ``sums``: dim
    names shape inference related to a Concat's parts (passes/_dim_sums.py). Returns None when
    they agree, else the reason; raises Unchecked when it cannot tell.
    """
    from onnx_fuse.verify import DEFAULT_TOLERANCE, compare_arrays

    old_nodes = [*_bridge(old_nodes, new_nodes), *old_nodes]
    producer = {id(o): n for n in old_nodes for o in n.outputs}
    # The replacement may reuse values computed inside the match: keep the nodes computing them.
    stack = [v for nn in new_nodes for v in nn.inputs if isinstance(v, ir.Value)]
    stack += [v for v in new_outputs if isinstance(v, ir.Value)]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        n = producer.get(id(v))
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(x for x in n.inputs if x is not None)
    kept = [n for n in old_nodes if id(n) in seen]

    # Integer values computed outside the match (Shape -> Gather -> Concat feeding a Reshape)
    # are recomputed from the shapes of the random inputs, so they agree with them.
    boundary, consumers = _boundary(old_nodes, new_nodes, new_outputs)
    pre: list[ir.Node] = []
    # So is every other value whose cone is small (an attention mask built from attention_mask,
    # cos/sin computed from positions): random data there would not be a mask the model can make,
    # and rules may rely on what it computes (a causal mask) without matching it.
    old_ids = {id(n) for n in old_nodes}
    # a cone reading a value of the match (Shape of an intermediate) could not run on the
    # replacement's side, where the match's nodes are gone: such a value is fed at random
    old_made = {id(o) for n in old_nodes for o in n.outputs}
    # ... unless the replacement does not read it: then it is computed on the original's side
    # only, after the match's nodes (a mask part built from the match's own index ranges, which
    # the rule proved on its values: random data there is no mask the model can make)
    new_reads = {id(v) for nn in new_nodes for v in nn.inputs if isinstance(v, ir.Value)}
    new_reads |= {id(v) for v in new_outputs if isinstance(v, ir.Value)}
    new_reads |= {id(v) for n in kept for v in n.inputs if v is not None}
    old_only: list[ir.Node] = []
    computed: list[ir.Value] = []   # values the match reads that ``pre`` computes
    # ... and when the replacement reads it too but its shape has a dim shape inference left
    # unnamed (RoPE tables expanded to Shape(x4)[0] of the match's own head split), it is computed
    # before the check from the original's nodes and fed to both sides: its size is then the one
    # its structure gives (random data of a made-up size would be no table the model can make)
    tied: list[ir.Value] = []
    tied_nodes: list[ir.Node] = []
    for v in boundary.values():
        if v.producer() is None or _const_array(v) is not None:
            continue
        cone = _shape_cone(v) or (_shape_cone(v, stop_at_known=True) if not _known_dims(v) else [])
        if any(id(n) in old_ids or any(x is not None and id(x) in old_made for x in n.inputs) for n in cone):
            if id(v) not in new_reads:
                old_only += [n for n in cone if id(n) not in old_ids and n not in old_only]
            elif not _known_dims(v):
                tied.append(v)
                tied_nodes += [n for n in cone if id(n) not in old_ids and n not in tied_nodes]
            continue
        pre += [n for n in cone if n not in pre]
        if cone:
            computed.append(v)
    old_only = [n for n in old_only if n not in pre]
    tied_nodes = [n for n in tied_nodes if n not in pre and n not in old_only]
    if pre or old_only or tied_nodes:
        boundary, consumers = _boundary([*pre, *old_nodes, *old_only, *tied_nodes], new_nodes, new_outputs)
        boundary.update((id(v), v) for v in tied)   # fed to the sides, computed below
    # FusedAttention zeroes padded query rows by contract (values nobody reads): unpadded
    # masks, as the whole-model verification feeds for the same reason.
    pad = not any(getattr(n, "domain", "") == "onnx_fuse" and n.op_type == "FusedAttention"
                  for n in [*old_nodes, *new_nodes])
    opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}

    def run(length: int) -> str | None:
        rng = np.random.default_rng(seed)
        dims = _Dims(sums, ties, length)
        values: dict[int, np.ndarray] = {}
        inline: set[int] = set()
        for k, v in boundary.items():
            arr = _const_array(v)
            if arr is not None:
                values[k] = arr
                if arr.size <= _INLINE_CONST:
                    inline.add(k)
        # Plain symbols first, so that a dim such as ``s0 + s1`` sees the values of both terms.
        order = sorted(boundary.items(), key=lambda kv: not _plain_dims(kv[1]))
        # The cones' inputs first: what the cones compute then fixes the names of its dims (below).
        leaves = {id(x) for n in pre for x in n.inputs if x is not None}
        for k, v in order:
            if k not in values and k in leaves and all(k != id(t) for t in tied):
                values[k] = _random_value(v, dims.concrete(v.shape), consumers.get(k, []), rng, dims, pad, window)
        _bind_computed(pre, computed, values, inline, dims, opsets, ir_version)
        tied_ids = {id(v) for v in tied}
        for k, v in order:
            if k not in values and k not in tied_ids:
                values[k] = _random_value(v, dims.concrete(v.shape), consumers.get(k, []), rng, dims, pad, window)
        if tied:
            _compute_tied(_topo([*pre, *old_nodes, *old_only, *tied_nodes]), tied, values, inline, opsets, ir_version)

        out_types = [o.dtype for o in old_outputs]
        if any(t is None for t in out_types):
            raise Unchecked("pattern output dtype unknown")
        ids_new_inits = {id(k): a for k, a in new_inits.items()}
        old_order = _topo([*pre, *old_nodes, *old_only]) if old_only else [*pre, *old_nodes]
        old_side = _build([("old", n) for n in old_order], old_outputs, out_types, {}, values, inline,
                          opsets, ir_version)
        new_side = _build([("old", n) for n in (*pre, *kept)] + [("new", n) for n in new_nodes], new_outputs,
                          out_types, ids_new_inits, values, inline, opsets, ir_version)
        try:
            ref = _session(old_side).run(None, old_side.feeds)
        except Exception as exc:  # random inputs the original refuses: cannot tell
            raise Unchecked(f"original refuses random inputs ({_first_line(exc)})") from None
        try:
            got = _session(new_side).run(None, new_side.feeds)
        except Exception as exc:
            return f"ONNX Runtime fails on the replacement where the original runs: {_first_line(exc)}"
        for i, (r, g) in enumerate(zip(ref, got)):
            r, g = np.asarray(r), np.asarray(g)
            atol, rtol = DEFAULT_TOLERANCE.get(r.dtype, (1e-4, 1e-3))
            d = compare_arrays(f"out{i}", r, g, atol, rtol)
            if not d.passed:
                name = old_outputs[i].name or f"output {i}"
                detail = d.reason or f"max abs {d.max_abs:.3g}, max rel {d.max_rel:.3g}"
                return f"replacement changes {name!r} on random inputs ({detail})"
        return None

    length = _sequence_length([*pre, *old_nodes, *old_only, *tied_nodes], new_nodes)
    # In half precision a query row whose whole window is padding gives rounding noise in the
    # original (scores + the float16 minimum) and a runtime-defined row in a fused op: verify
    # never feeds such a row (verify.pad_start), nor do the checks.
    half = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    window = _window([*pre, *old_nodes, *old_only, *tied_nodes], new_nodes) if any(
        v.dtype in half for v in [*boundary.values(), *old_outputs]) else 0
    if length == _LENGTH:
        return run(length)
    try:
        return run(length)
    except Unchecked:   # the original cannot run that long (a static table shorter than the band)
        return run(_LENGTH)


class _ModelRecord:
    """What one checker knows of one model: a weak reference to it (a model's id is reused once
    it is collected, so a record is found by the live object, never by id alone), the checks'
    counts on it, and its verify.length_ties read once."""

    def __init__(self, model: ir.Model) -> None:
        self.ref = weakref.ref(model)
        self.stats = CheckStats()
        self.ties: dict[str, tuple] | None = None


class LocalChecker:
    """Called by RewritePass on each planned rewrite: None to commit, or why to drop it."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        # one record per model the pass ran on; a collected model's counts still add to ``stats``
        self._records: list[_ModelRecord] = []

    def _record(self, model: ir.Model, *, create: bool = True) -> _ModelRecord | None:
        for r in self._records:
            if r.ref() is model:
                return r
        if not create:
            return None
        self._records.append(_ModelRecord(model))
        return self._records[-1]

    @property
    def stats(self) -> CheckStats:
        """Everything checked, on every model the pass ran on."""
        total = CheckStats()
        for r in self._records:
            total.merge(r.stats)
        return total

    def stats_for(self, model: ir.Model) -> CheckStats:
        """The checks of the run on ``model`` itself when there was one: a pass that first tries
        its rules on a copy (the opset trial) and drops it then runs them again on the model."""
        r = self._record(model, create=False)
        return r.stats if r is not None else self.stats

    def _ties(self, model: ir.Model) -> dict[str, tuple]:
        """verify.length_ties of ``model``, read once per model (its inputs as the pass began)."""
        from onnx_fuse.verify import length_ties

        r = self._record(model)
        if r.ties is None:
            r.ties = length_ties(model)
        return r.ties

    @staticmethod
    def _sums(model: ir.Model, anchor: ir.Node) -> dict[str, str]:
        """The dim sums shape inference recorded on the model's graph and the match's own (an If
        branch reads values of the graph around it)."""
        from onnx_fuse.passes._dim_sums import dim_sums

        return {**dim_sums(model.graph), **dim_sums(anchor.graph)}

    def _unchecked(self, stats: CheckStats, rule: str, why: str) -> None:
        stats.unchecked += 1
        key = f"{rule}: {why}"
        stats.unchecked_reasons[key] = stats.unchecked_reasons.get(key, 0) + 1

    def __call__(self, plan: Any, model: ir.Model) -> str | None:
        import time

        t0 = time.perf_counter()
        stats = self._record(model).stats
        match = plan.match
        rule = match.rule
        opsets = dict(model.opset_imports.items())
        for nn in plan.nodes:
            if nn.domain not in ("", "ai.onnx") and nn.domain not in opsets:
                opsets[nn.domain] = rule.domains.get(nn.domain, 1)
        anchor = match.anchor.name or ""
        if rule.graph_io is not None:   # new graph inputs no cut-out has: the whole model's check
            self._unchecked(stats, rule.name, "changes the model's inputs and outputs (graph_io); "
                            "the whole-model check compares it")
            stats.seconds += time.perf_counter() - t0
            return None
        try:
            reason = check_rewrite(match.node_list(), plan.nodes,
                                   {nv: nv.initializer for nv in plan.initializers},
                                   [match.values[o] for o in rule.outputs],
                                   [plan.outputs[o] for o in rule.outputs], opsets,
                                   ir_version=model.ir_version or onnx.IR_VERSION, seed=self.seed,
                                   ties=self._ties(model), sums=self._sums(model, match.anchor))
        except Unchecked as exc:
            reason = None
            self._unchecked(stats, rule.name, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug of the check must not stop optimization
            reason = None
            self._unchecked(stats, rule.name, f"check crashed ({type(exc).__name__}: {_first_line(exc)})")
        else:
            stats.checked += 1
            if reason is not None:
                entry = {"rule": rule.name, "node": anchor, "reason": reason}
                if any(n.domain == _CANONICAL_DOMAIN for n in match.node_list()):
                    # Rolling back a lowering would leave a canonical op no rule lowers: keep
                    # it, named, and let the whole-model verification give the verdict.
                    entry["kept"] = "it lowers a canonical op, which cannot stay in the model"
                    reason = None
                stats.failed.append(entry)
        stats.seconds += time.perf_counter() - t0
        return reason
