"""Two-operand Einsums that are batched matrix products become Transpose -> MatMul -> Transpose.

Attention written with einsum (Funnel: "bind,bjnd->bnij" for the scores, "bnij,bjnd->bind" for the
output) reaches the attention rules as MatMuls on [.., S, D] x [.., D, T] operands, the form every
exporter's matmul attention has. Rewritten only when the equation is one batched product: the
letters of both operands and the output are the batch letters (in the same order in every term
after the transposes), at most one letter is free in each operand, exactly one is summed, no letter
repeats inside a term, no ellipsis, and neither operand broadcasts a batch dim (the batch dims of
the two operands must be equal). Exact: each output element is the same dot product.

Runs at O3 before the attention rules; Einsums of other forms stay as they are.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass


def _plan(equation: str):
    """(perm of A, perm of B, perm of the product) for a batched-matmul equation, else None."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    ins, out = eq.split("->")
    terms = ins.split(",")
    if len(terms) != 2:
        return None
    a, b = terms
    if any(len(set(t)) != len(t) or not t.isalpha() for t in (a, b, out)):
        return None
    batch = [c for c in out if c in a and c in b]
    free_a = [c for c in a if c in out and c not in b]
    free_b = [c for c in b if c in out and c not in a]
    summed = [c for c in a if c in b and c not in out]
    if len(free_a) > 1 or len(free_b) > 1 or len(summed) != 1 or set(out) != set(batch + free_a + free_b) \
            or set(a) != set(batch + free_a + summed) or set(b) != set(batch + free_b + summed):
        return None
    # A as [batch..., free_a, summed], B as [batch..., summed, free_b]: the product is
    # [batch..., free_a, free_b]; matrix-vector forms (no free letter on a side) are left alone
    if not free_a or not free_b:
        return None
    order_a = batch + free_a + summed
    order_b = batch + summed + free_b
    made = batch + free_a + free_b
    perm_a = [a.index(c) for c in order_a]
    perm_b = [b.index(c) for c in order_b]
    perm_o = [made.index(c) for c in out]
    return perm_a, perm_b, perm_o


def _identity(perm) -> bool:
    return list(perm) == list(range(len(perm)))


def _dims_equal(x: ir.Value, px, y: ir.Value, py, count: int) -> bool:
    """The first ``count`` dims of x permuted by px and y by py are provably equal."""
    if x.shape is None or y.shape is None:
        return False
    for i in range(count):
        dx, dy = x.shape[px[i]], y.shape[py[i]]
        if isinstance(dx, int) or isinstance(dy, int):
            if dx != dy:
                return False
        elif dx.value is None or dx.value != dy.value:
            return False
    return True


class EinsumToMatMulPass(FusePass):
    """Batched-matmul Einsums as Transpose -> MatMul -> Transpose (module docstring)."""

    name = "einsum-to-matmul"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type == "Einsum" and node.domain in ("", "ai.onnx") and len(node.inputs) == 2:
                    modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        attr = node.attributes.get("equation")
        plan = _plan(attr.as_string()) if attr is not None else None
        if plan is None:
            return False
        perm_a, perm_b, perm_o = plan
        a, b = node.inputs
        if a is None or b is None:
            return False
        nbatch = len(perm_a) - 2
        if not _dims_equal(a, perm_a, b, perm_b, nbatch):  # MatMul would broadcast where Einsum refuses
            return False
        out = node.outputs[0]
        new_nodes, stem = [], node.name or out.name or "einsum"

        def transposed(x: ir.Value, perm, tag: str) -> ir.Value:
            if _identity(perm):
                return x
            shape = None if x.shape is None else ir.Shape([x.shape[p] for p in perm])
            y = ir.Value(name=f"{stem}_{tag}", type=x.type, shape=shape)
            new_nodes.append(ir.Node("", "Transpose", [x], attributes=[ir.AttrInt64s("perm", perm)],
                                     outputs=[y], name=f"{stem}_{tag}"))
            return y

        ta, tb = transposed(a, perm_a, "lhs"), transposed(b, perm_b, "rhs")
        mm_out = ir.Value(name=f"{stem}_matmul", type=out.type, shape=out.shape if _identity(perm_o) else None)
        new_nodes.append(ir.Node("", "MatMul", [ta, tb], outputs=[mm_out], name=f"{stem}_matmul"))
        final = transposed(mm_out, perm_o, "out")  # [batch, free_a, free_b] -> the equation's order
        final.shape = out.shape
        graph.insert_before(node, new_nodes)
        name = out.name
        out.replace_all_uses_with(final, replace_graph_outputs=True)
        graph.remove(node, safe=True)
        if final.is_graph_output():  # the model's output keeps its name
            out.name, final.name = None, name
        self.stats["Einsum"] += 1
        return True
