"""A float32 Cast of half-precision K or V after their views moved above the views (``cast-up-views``).

ONNX Runtime's offline optimizer on the CPU provider (ORT_ENABLE_BASIC and above) runs a float16 model's
ops without a float16 kernel in float32 between Casts it inserts. Where q was computed in float32 there
(its RoPE, the scale), the attention's K^T and V are float16 values cast up AFTER their views:
q k^T reads Mul?(Cast(Transpose(repeat(k)))), P v reads Cast(Reshape(Expand(Unsqueeze(v)))) (hold-out 50:
attention 0 in every float16 file through ort1 / ort2). Cast(view(x)) is view(Cast(x)) exactly (a Cast
converts each element on its own, a view only moves them), so the Cast moves to the top of the view
chain and the attention is one float32 attention of float32 q, k, v, as the recognizers take it.

Only a Cast from float16 / bfloat16 to float32 that P v reads as V, or its q k^T as K^T (past a scalar Mul),
found from P v back through the scale / mask / softmax / NaN guard, where q is float32 and no Cast's output:
where q is half or cast up (GPT-Neo's island, TorchScript sdpa's up-cast scores with V cast up) the Casts
stay where the recognizer reads them. Each view in the chain must be read by the next alone (nothing is
duplicated); the top of the chain (present = Concat(past, new)) keeps its other readers.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._chain_reads import one_reader
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op, reroute
from onnx_fuse.passes._new_values import fresh_name, graph_names

VIEWS = ("Transpose", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Flatten")
HALF = (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
# ops between q k^T and P v: scale, softcap, mask, softmax (ORT inlines a float16 one: Exp(s - max) / sum),
# NaN guard, their Casts
SCORE_OPS = ("Mul", "Div", "Add", "Sub", "Exp", "Where", "Softmax", "Tanh", "Cast")


def _is_scalar_const(v: ir.Value | None) -> bool:
    c = None if v is None else v.const_value
    return c is not None and int(c.size) == 1


def _unscaled(v: ir.Value | None) -> ir.Value | None:
    """``v`` past a Mul by a constant scalar."""
    p = v.producer() if v is not None else None
    return p.inputs[0] if is_default_op(p, "Mul") and _is_scalar_const(p.inputs[1]) else v


def _scores_matmul(p: ir.Value | None) -> ir.Node | None:
    """The q k^T MatMul the probabilities ``p`` come from (scale / mask / softmax / guard between)."""
    for _ in range(16):
        node = p.producer() if p is not None else None
        if is_default_op(node, "MatMul"):
            return node
        if not is_default_op(node, *SCORE_OPS):
            return None
        # the non-constant float operand: Where(c, a, b) reads its branches, Add(s, mask) its first
        ins = node.inputs[1:] if node.op_type == "Where" else node.inputs
        nxt = [v for v in ins if v is not None and v.const_value is None and v.dtype in (ir.DataType.FLOAT, *HALF)]
        if not nxt:
            return None
        p = nxt[0]
    return None


def float32_attention_casts(pv: ir.Node) -> list[ir.Node]:
    """The Casts of K^T (past a scalar Mul) and V that P v = ``pv`` and its q k^T read as B operands, where
    q is float32 and no Cast's output (module docstring); [] for any other MatMul."""
    scores = _scores_matmul(pv.inputs[0]) if len(pv.inputs) == 2 else None
    if scores is None or scores is pv or len(scores.inputs) != 2:
        return []
    q = _unscaled(scores.inputs[0])
    if q is None or q.dtype != ir.DataType.FLOAT or is_default_op(q.producer(), "Cast"):
        return []
    found = []
    for b in (_unscaled(scores.inputs[1]), pv.inputs[1]):
        cast = b.producer() if b is not None else None
        if is_default_op(cast, "Cast") and one_reader(b) is not None:
            found.append(cast)
    return found


def cast_up_views(graph: ir.Graph, cast: ir.Node, taken: set) -> bool:
    """Rewrite Cast(views(x)) as views(Cast(x)) for K / V of a float32 attention (module docstring)."""
    if (attr_value(cast, "to", None) != ir.DataType.FLOAT or len(cast.outputs) != 1 or not cast.inputs
            or cast.inputs[0] is None or cast.inputs[0].dtype not in HALF):
        return False
    chain, v, reader = [], cast.inputs[0], cast
    while True:
        p = v.producer()
        if (not is_default_op(p, *VIEWS) or p.graph is not graph or not p.inputs or p.inputs[0] is None
                or one_reader(v) is not reader):
            break
        chain.append(p)
        v, reader = p.inputs[0], p
    if not chain:
        return False
    y = cast.outputs[0]
    up = ir.Node("", "Cast", [v], attributes=list(cast.attributes.values()), num_outputs=1)
    u = up.outputs[0]
    u.name, u.dtype, u.shape = fresh_name(f"{y.name or 'y'}_src", taken), y.dtype, v.shape
    new, cur = [up], u
    for view in reversed(chain):
        moved = ir.Node("", view.op_type, [cur, *view.inputs[1:]], attributes=list(view.attributes.values()),
                        num_outputs=1)
        out, old = moved.outputs[0], view.outputs[0]
        out.name, out.dtype, out.shape = fresh_name(f"{old.name or 'v'}_up", taken), y.dtype, old.shape
        new.append(moved)
        cur = out
    graph.insert_before(cast, new)
    reroute(y, cur)
    return True


class CastUpViewsPass(FusePass):
    """Cast(views(k or v)) as views(Cast(k or v)) in a float32 attention (module docstring)."""

    name = "cast-up-views"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            taken = graph_names(graph)
            for node in list(graph):
                if node.graph is not graph or not is_default_op(node, "MatMul"):
                    continue
                for cast in float32_attention_casts(node):
                    if cast_up_views(graph, cast, taken):
                        self.stats["cast-up-view"] += 1
                        modified = True
        return ir.passes.PassResult(model, modified=modified)
