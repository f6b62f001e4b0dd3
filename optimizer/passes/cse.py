"""Common subexpression elimination: a node that repeats an earlier one (same op, domain,
attributes and input values) reuses the earlier node's outputs.

Cases handled:
- nodes in the main graph and, separately, inside each subgraph (never across scopes);
- identical small initializers (same dtype, shape and bytes; not graph inputs, not graph
  outputs) are merged into the first one of their graph (a subgraph's own initializers too: the
  rules write their constants into the branch they rewrite, one per match), so that their
  consumers become twins too; tensors the
  optimizer computed itself (NumPy-backed ``ir.Tensor``: folded results, rule-made caches such as
  RoPE's per-layer half tables) are merged at any size, loaded weights only up to 64 KiB;
- Constant nodes compare by their tensor's dtype, shape and bytes;
- a commutative two-input op (COMMUTATIVE: Add, Mul, the logical and bitwise ones, Equal) is a twin of
  the same op with its operands swapped (LiLT's text and layout streams each add the other's scores:
  Add(a, b) and Add(b, a) feed two Softmaxes of one value);
- a reduction's axes compare as numbers in [0, rank) where its input's rank is known: ReduceMean(x, [-1]) and
  ReduceMean(x, [3]) of a rank-4 x are twins (torch's var decomposition spells the axis one way, the mean
  beside it the other; xLSTM's per-head LayerNorm);
- small integer values holding the same symbolic dims, read from different tensors (each layer's
  ``Shape(past_i)[2]`` is one ``past_sequence``): passes/shape_cse.py;
- before that, Shape / Size reads that alone read an op's output move to the tensor whose dims it
  has by the op's contract (a RoPE's, a unary op's, a Transpose's input), and the op is removed:
  passes/_shape_forward.py.

Never merged: nondeterministic ops (Random*, Multinomial, Bernoulli, Dropout), ops outside the
default domain (their purity is unknown; ours may write in place), nodes with subgraph attributes,
and pairs whose outputs are both graph outputs (each name must stay). When only the later output
is a graph output, the kept value takes its name.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.passes._shape_forward import forward_shape_reads
from onnx_fuse.passes.reduce_keepdims import REDUCE_OPS, reduce_axes
from onnx_fuse.passes.shape_cse import merge_equal_shape_values

NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout",
})
# two-input ops whose result does not depend on the operand order, bit for bit (IEEE a + b == b + a,
# a * b == b * a; broadcasting is symmetric). Not Max / Min (which NaN comes out may follow the order),
# nor Sum / Mean of more than two (float addition does not associate).
COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Xor", "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
MAX_DEDUP_BYTES = 1 << 16  # initializers and tensor attributes compared by content up to this
_UNHASHABLE = object()


def _tensor_key(t: ir.TensorProtocol | None):
    if t is None:
        return None
    if t.nbytes > MAX_DEDUP_BYTES:
        return _UNHASHABLE
    try:
        data = t.tobytes()
    except Exception:
        return _UNHASHABLE
    return (t.dtype, tuple(t.shape), hashlib.sha1(data).hexdigest(), data)


def _large_computed_key(value: ir.Value, seen: dict) -> object:
    """Key of a large tensor the optimizer computed (NumPy-backed ``ir.Tensor``), equal to an
    earlier one's key only when the contents are equal. A cheap probe (dtype, shape, first and last
    elements) finds candidates; only those are compared in full, so distinct weights converted in
    memory (precision) are never read whole here. Loaded weights are never keyed."""
    t = value.const_value
    if type(t) is not ir.Tensor:
        return _UNHASHABLE
    flat = np.ascontiguousarray(t.numpy()).reshape(-1)
    probe = ("large", t.dtype, tuple(t.shape), flat[:32].tobytes(), flat[-32:].tobytes())
    n = 0
    while (probe, n) in seen:   # bitwise equality (NaN payloads included), without copies
        other = np.ascontiguousarray(seen[(probe, n)].const_value.numpy()).reshape(-1)
        if np.array_equal(other.view(np.uint8), flat.view(np.uint8)):
            return (probe, n)
        n += 1
    return (probe, n)


def _attr_key(attr: ir.Attr):
    if attr.is_ref():
        return ("ref", attr.ref_attr_name)
    kind = attr.type
    if kind in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
        return _UNHASHABLE
    if kind == ir.AttributeType.TENSOR:
        return _tensor_key(attr.value)
    if kind == ir.AttributeType.TENSORS:
        keys = tuple(_tensor_key(t) for t in attr.value)
        return _UNHASHABLE if _UNHASHABLE in keys else keys
    if kind in (ir.AttributeType.SPARSE_TENSOR, ir.AttributeType.SPARSE_TENSORS,
                ir.AttributeType.TYPE_PROTO, ir.AttributeType.TYPE_PROTOS):
        return _UNHASHABLE
    value = attr.value
    if isinstance(value, (list, tuple)):
        # Floats compare by repr so that NaN attributes equal themselves and -0.0 != 0.0.
        return (kind, tuple(repr(v) if isinstance(v, float) else v for v in value))
    return (kind, repr(value) if isinstance(value, float) else value)


def _reduce_axes_key(node: ir.Node):
    """A reduction's axes normalized by its input's rank (None: not a reduction, or not provable)."""
    x = node.inputs[0] if node.inputs else None
    if node.op_type not in REDUCE_OPS or x is None or x.shape is None:
        return None
    axes = reduce_axes(node, len(x.shape))
    return None if axes is None else ("axes", tuple(axes))


def _attrs_key(node: ir.Node, axes=None) -> tuple | None:
    """The node's attributes as a sorted key (``axes``, where given, stands for an axes attribute);
    None where one of them cannot be hashed."""
    attrs = []
    for name in sorted(node.attributes):
        k = axes if name == "axes" and axes is not None else _attr_key(node.attributes[name])
        if k is _UNHASHABLE or (isinstance(k, tuple) and _UNHASHABLE in k):
            return None
        attrs.append((name, k))
    return tuple(attrs)


def _node_key(node: ir.Node):
    if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC:
        return None
    axes = _reduce_axes_key(node)
    attrs = _attrs_key(node, axes)
    if attrs is None:
        return None
    inputs = tuple(id(v) if v is not None else None for v in node.inputs)
    if axes is not None and len(inputs) > 1 and inputs[1] is not None:
        inputs = (inputs[0], axes, *inputs[2:])
    if node.op_type in COMMUTATIVE and len(inputs) == 2 and None not in inputs:
        inputs = tuple(sorted(inputs))   # Add(a, b) is Add(b, a), bit for bit
    return (node.op_type, node.overload, node.version, len(node.outputs), inputs, attrs)


def _merge_values(graph: ir.Graph, keep: list[ir.Value], drop: list[ir.Value]) -> bool:
    """Point every use of ``drop[i]`` at ``keep[i]``; False (nothing done) if names would clash."""
    for k, d in zip(keep, drop):
        if d.is_graph_output() and (k.is_graph_output() or k.is_graph_input() or k.is_initializer()):
            return False
    for k, d in zip(keep, drop):
        if d.is_graph_output():
            name = d.name
            d.replace_all_uses_with(k, replace_graph_outputs=True)
            d.name = None
            k.name = name
            if k.type is None:  # a graph output must carry its type
                k.type = d.type
            if k.shape is None:
                k.shape = d.shape
        else:
            d.replace_all_uses_with(k)
    return True


class CommonSubexpressionEliminationPass(FusePass):
    """Merge repeated computations and duplicate small initializers (see module docstring)."""

    name = "cse"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        for graph in model.graphs():   # the main graph first: its merges make twins in subgraphs
            modified |= self._dedupe_initializers(graph)
            forwarded = forward_shape_reads(graph, opset)
            if forwarded:
                self.stats["shape reads forwarded"] += forwarded
                modified = True
            modified |= self._cse_graph(graph)
        return ir.passes.PassResult(model, modified=modified)

    def _dedupe_initializers(self, graph: ir.Graph) -> bool:
        seen: dict[object, ir.Value] = {}
        modified = False
        for value in list(graph.initializers.values()):
            if value.is_graph_input() or value.is_graph_output() or value.const_value is None:
                continue
            key = _tensor_key(value.const_value)
            if key is _UNHASHABLE:
                key = _large_computed_key(value, seen)
            if key is _UNHASHABLE or key is None:
                continue
            first = seen.setdefault(key, value)
            if first is value:
                continue
            value.replace_all_uses_with(first)
            graph.initializers.pop(value.name)
            self.stats["initializers"] += 1
            modified = True
        return modified

    def _cse_graph(self, graph: ir.Graph) -> bool:
        seen: dict[object, ir.Node] = {}
        shapes = merge_equal_shape_values(graph, lambda keep, drop: _merge_values(graph, keep, drop))
        if shapes:
            self.stats["shape values"] += shapes
        modified = bool(shapes)
        for node in list(graph):
            if node.graph is not graph:
                continue
            key = _node_key(node)
            if key is None:
                continue
            first = seen.setdefault(key, node)
            if first is node:
                continue
            if _merge_values(graph, list(first.outputs), list(node.outputs)):
                graph.remove(node, safe=True)
                self.stats[node.op_type] += 1
                modified = True
        return modified
