"""A Cast of a select between two constants: the select of the cast constants.

    Cast(Where(cond, c1, c2), to)  ==  Where(cond, Cast(c1, to), Cast(c2, to))

Where picks each element from c1 or c2 unchanged and Cast converts each element alone, so both orders give
the same Cast of the same constant element: one rounding either way (float32 -> float16 rounds to nearest
even; a finite float32 beyond float16's range, such as torch.finfo(float32).min, becomes -inf in both; inf and
NaN stay). The casts of the constants are computed here (NumPy's astype, the Cast constant folding writes),
so one Where is left for the Cast + Where.

The case: the additive mask ``Where(keep, 0, finfo(float32).min)`` (or -inf) of a float16 TorchScript or
Optimum decoder stays float32 until the attention rewrite casts it to q's dtype (the ``_mq`` Cast,
rules/attention): no export in the corpus or the float16 hold-outs has the form before the rules (measured,
docs/passes.md), and the mask rules read the export's own mask Casts, so the pass runs only in the cleanup
after the rules (levels.py).

Done only for float -> float Casts that the constant folder computes as ORT does: float32 -> float16 and the
exact widenings float16 -> float32 / double, float32 -> double (bfloat16 and integer / bool targets are left:
NumPy has no bfloat16, and a float -> int Cast of an out-of-range constant is implementation-defined). Both
branches must be true constants of at most ``MAX_OUTPUT_ELEMENTS`` entries (the folder's limit), and the Where
must have the Cast as its one reader (otherwise it stays and the rewrite adds a node).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes.constant_folding import MAX_OUTPUT_ELEMENTS, constant_tensor

_F16, _F32, _F64 = ir.DataType.FLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE
#: (from, to) pairs whose constant Cast NumPy computes bit for bit as ORT's Cast kernel does
_CASTS = frozenset({(_F32, _F16), (_F16, _F32), (_F16, _F64), (_F32, _F64)})
_SUFFIX = {_F16: "f16", _F32: "f32", _F64: "f64"}


def _castable(value: ir.Value | None, dtype: ir.DataType) -> bool:
    tensor = constant_tensor(value)
    return tensor is not None and tensor.dtype == dtype and tensor.size <= MAX_OUTPUT_ELEMENTS


def _cast_constant(graph: ir.Graph, value: ir.Value, to: ir.DataType, taken: set) -> ir.Value:
    tensor = constant_tensor(value)
    name = fresh_name(f"{value.name or 'const'}_{_SUFFIX[to]}", taken)
    with np.errstate(over="ignore"):   # a finite float32 beyond float16's range is inf, as Cast makes it
        array = np.array(tensor.numpy(), dtype=to.numpy())   # keeps a 0-d scalar 0-d
    out = ir.Value(name=name, type=ir.TensorType(to), shape=ir.Shape(list(array.shape)),
                   const_value=ir.tensor(array, dtype=to, name=name))
    graph.register_initializer(out)
    return out


def cast_of_select(graph: ir.Graph, cast: ir.Node, taken: set) -> bool:
    """Rewrite ``cast`` = Cast(Where(cond, c1, c2)) as Where(cond, c1', c2'); False where it does not apply."""
    sel = cast.inputs[0].producer() if cast.inputs and cast.inputs[0] is not None else None
    if not is_default_op(sel, "Where") or sel.graph is not graph or len(sel.inputs) != 3:
        return False
    mid = sel.outputs[0]
    if len(mid.uses()) != 1 or mid.is_graph_output():
        return False
    to = ir.DataType(attr_value(cast, "to", 0))
    if (mid.dtype, to) not in _CASTS or not all(_castable(v, mid.dtype) for v in sel.inputs[1:]):
        return False
    c1, c2 = (_cast_constant(graph, v, to, taken) for v in sel.inputs[1:])
    new = ir.Node("", "Where", [sel.inputs[0], c1, c2], version=sel.version,
                  name=f"{sel.name or 'Where'}_{_SUFFIX[to]}", num_outputs=1)
    graph.insert_before(cast, new)
    out = new.outputs[0]
    out.dtype, out.shape = to, cast.outputs[0].shape
    reroute(cast.outputs[0], out)
    return True


class CastOfSelectPass(FusePass):
    """Cast(Where(cond, c1, c2)) of constants c1, c2 -> Where(cond, Cast(c1), Cast(c2)), the casts computed."""

    name = "cast-of-select"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph  # the cast constants become initializers: main graph only
        taken = None
        for node in list(graph):
            if not is_default_op(node, "Cast") or node.graph is not graph:
                continue
            taken = graph_names(graph) if taken is None else taken
            if cast_of_select(graph, node, taken):
                self.stats["Cast"] += 1
                modified = True
        return ir.passes.PassResult(model, modified=modified)
