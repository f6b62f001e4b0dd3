"""Shape reads moved off values that nothing else reads, onto the tensor that has the same dims.

A rewrite that replaces an op leaves the old one alive when a Shape still reads its output: the
sinks lowering reads ``Shape(q)[0:3]`` of a RoPE that rotary-between-head-transposes then replaces
by a 3-D rotation, so q was rotated twice per layer (flint kv at trt-O4, docs/holdout.md).
shape-cse moves such a read to a graph input when one holds those dims side by side; where none
does, ``forward_shape_reads`` reads them from the op's input instead, when every reader of the
op's output is a Shape or Size (so the op dies; a value with a data reader is left as it is).
Steps, each exact by the op's contract, whatever the inputs:
- ops whose output has input 0's shape (Identity, Cast, unary math, Softmax, LayerNormalization's
  Y, RotaryEmbedding's Y, ...): the read moves to input 0 as it is;
- broadcasting ops (Add, Mul, Where, ...): to the operand every other operand broadcasts into
  without growing it (each of their dims a static 1, or the same static size or model-given name,
  the ONNX dim_param rule shape-cse rests on too); an operand that can grow the output stops it;
- Transpose (a constant perm, or none with a known rank): ``Shape(x)`` sliced where the picked
  dims are a run of x's axes in order, else ``Gather(Shape(x), picked)`` (passes/_transpose_sink.py);
  Size reads x as it is.
The walk goes from the last node back, so a read moved onto a value that now has only Shape
readers moves again (through the RoPE, then its Transpose); each op left without readers is
removed here, the rest of its cone by dead code.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._dim_source import _BROADCAST, _SAME_SHAPE
from onnx_fuse.passes._infra import is_default_op
from onnx_fuse.passes._shape_values import unknown_or_invented
from onnx_fuse.passes._transpose_sink import _shape_through

#: ops whose output 0 has input 0's shape, beyond _dim_source's: RotaryEmbedding (opset 23's and
#: ORT's contrib op: "same shape as input")
_ROTARY = "RotaryEmbedding"
_CONTRIB = ("com.microsoft",)


def _readers(y: ir.Value) -> list[ir.Node] | None:
    """The Shape / Size nodes that read ``y``, when they are all its readers; else None."""
    if y.is_graph_output():
        return None
    nodes = []
    for use in y.uses():
        node = use.node
        if not is_default_op(node, "Shape", "Size") or any(a.is_ref() for a in node.attributes.values()):
            return None
        nodes.append(node)
    return nodes or None


def _same_dims(a, b) -> bool:
    """Two ir dims provably equal: the same int, or the same name given by the model."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return not unknown_or_invented(a) and not unknown_or_invented(b) and str(a.value) == str(b.value)


def _absorbs(x: ir.Value, others: list[ir.Value]) -> bool:
    """Every value of ``others`` broadcasts into ``x``'s shape without growing it."""
    if x.shape is None:
        return False
    xd = list(x.shape)
    for o in others:
        if o.shape is None or len(o.shape) > len(xd):
            return False
        for a, b in zip(xd[len(xd) - len(o.shape):], o.shape):
            if not ((isinstance(b, int) and b == 1) or _same_dims(a, b)):
                return False
    return True


def _source(node: ir.Node) -> ir.Value | None:
    """The input whose shape ``node``'s output 0 has by contract (not Transpose); else None."""
    ins = list(node.inputs)
    if not ins or ins[0] is None:
        return None
    if is_default_op(node, *_SAME_SHAPE, _ROTARY) or (node.domain in _CONTRIB and node.op_type == _ROTARY):
        return ins[0]
    if is_default_op(node, *_BROADCAST) and None not in ins:
        return next((x for i, x in enumerate(ins) if _absorbs(x, ins[:i] + ins[i + 1:])), None)
    return None


def _perm(node: ir.Node) -> list[int] | None:
    attr = node.attributes.get("perm")
    if attr is not None:
        return None if attr.is_ref() else [int(p) for p in attr.value]
    x = node.inputs[0] if node.inputs else None
    return None if x is None or x.shape is None else list(range(len(x.shape)))[::-1]


def _move(read: ir.Node, x: ir.Value, perm: list[int] | None, opset: int) -> None:
    if perm is None or read.op_type == "Size":
        read.replace_input_with(0, x)
    else:
        _shape_through(read.graph, read, x, perm, opset)


def forward_shape_reads(graph: ir.Graph, opset: int) -> int:
    """Move Shape / Size reads of values they alone read onto the tensor with the same dims (module
    docstring); remove the ops so left unread. Returns how many ops were removed."""
    removed = 0
    for node in reversed(list(graph)):
        if node.graph is not graph or not node.outputs:
            continue
        y, rest = node.outputs[0], node.outputs[1:]
        if any(o.uses() or o.is_graph_output() for o in rest):
            continue
        reads = _readers(y)
        if reads is None:
            continue
        if is_default_op(node, "Transpose"):
            x, perm = node.inputs[0] if node.inputs else None, _perm(node)
            if x is None or perm is None or sorted(perm) != list(range(len(perm))) \
                    or (x.shape is not None and len(x.shape) != len(perm)):
                continue
        else:
            x, perm = _source(node), None
            if x is None:
                continue
        for read in reads:
            _move(read, x, perm, opset)
        graph.remove(node, safe=True)
        removed += 1
    return removed
