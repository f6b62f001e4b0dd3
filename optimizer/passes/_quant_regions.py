"""What ``precision`` keeps in float32 so that a quantizer sees the values the original computes.

A QuantizeLinear rounds ``x / scale`` to an integer. Computed in 16 bits, ``x`` lands on the other
side of a rounding boundary for a share of its elements: the quantized activation is then a whole
step off (scale 0.02: 0.02, beyond float16's tolerance), and so is everything after it. So the
cone of each quantizer (QuantizeLinear of the default and the com.microsoft domain,
DynamicQuantizeLinear) stays float32, walking up from its float inputs:

- the quantizer itself and its scale;
- every producer on the way that is not a compute op (elementwise ops, data movement, norms), and
  the walk goes on above it;
- a compute op (``LOW_OPS``: MatMul, Gemm, Conv, attention ...) whose float inputs are all
  DequantizeLinear outputs (read directly or through views: a weight DQ -> Transpose, as exporters
  write W^T; the views stay float32 too) or constants: DQ -> MatMul -> Q is the int8 region an int8 backend runs
  in integers, exact up to the order of the sums, so float32 there is what the original computes and
  costs such a backend nothing. Its DequantizeLinear producers stay float32 too (a float16 scale
  changes the dequantized values) and the walk stops;
- a compute op fed by anything else stays in the low type and ends the walk (a quantizer after a
  float16 attention): keeping it would give up the conversion for the whole model above it, and
  its result carries 16-bit rounding either way.

Values that do not feed a quantizer (a weight-only DequantizeLinear before a MatMul, attention over
dequantized activations) are converted as usual.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from onnx_fuse.passes._consts import is_constant

__all__ = ["quantizer_cones"]

#: (domain, op) of the quantizers whose float inputs keep float32
QUANTIZERS = frozenset({("", "QuantizeLinear"), ("com.microsoft", "QuantizeLinear"),
                        ("", "DynamicQuantizeLinear")})
DEQUANTIZERS = frozenset({("", "DequantizeLinear"), ("com.microsoft", "DequantizeLinear")})


def _key(node: ir.Node) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


#: ops that move a dequantized value without computing on it: DQ -> view -> MatMul is still DQ-fed
VIEWS = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def _dequantized_inputs(node: ir.Node, graph: ir.Graph, is_float: Callable[[ir.Value], bool]) -> list[ir.Node] | None:
    """The DequantizeLinear producers of ``node``'s float inputs, with the views between (VIEWS: their one
    float input is the data, the others int64 shapes / axes), when every float input is one's output
    (directly or through views) or a constant; None otherwise."""
    found = []
    for v in node.inputs:
        if v is None or not is_float(v) or is_constant(v, dense=False):
            continue
        p = v.producer()
        chain = []
        while p is not None and p.graph is graph and _key(p) in {("", op) for op in VIEWS} \
                and p.inputs and p.inputs[0] is not None and is_float(p.inputs[0]):
            chain.append(p)
            p = p.inputs[0].producer()
        if p is None or p.graph is not graph or _key(p) not in DEQUANTIZERS:
            return None
        found += [*chain, p]
    return found


def quantizer_cones(graph: ir.Graph, is_compute: Callable[[ir.Node], bool],
                    is_float: Callable[[ir.Value], bool]) -> set[ir.Node]:
    """The nodes of ``graph`` kept in float32 for its quantizers (module docstring).
    ``is_compute``: the node is one the pass always lowers (LOW_OPS, plugin ops);
    ``is_float``: the value is float32."""
    found: set[ir.Node] = set()
    stack: list[ir.Value] = []
    for node in graph:
        if _key(node) in QUANTIZERS:
            found.add(node)
            stack.extend(v for v in node.inputs if v is not None)
    while stack:
        v = stack.pop()
        p = v.producer()
        if not is_float(v) or p is None or p in found or p.graph is not graph:
            continue
        if is_compute(p):
            dequantizers = _dequantized_inputs(p, graph, is_float)
            if dequantizers is not None:   # the int8 region: the op, its DequantizeLinears and views between
                found.add(p)
                found.update(dequantizers)
            continue
        found.add(p)
        if _key(p) not in DEQUANTIZERS:
            stack.extend(x for x in p.inputs if x is not None)
    return found
