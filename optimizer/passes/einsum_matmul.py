"""Two-operand Einsums that are batched matrix products become Transpose -> MatMul -> Transpose.

Attention written with einsum (Funnel: "bind,bjnd->bnij" for the scores, "bnij,bjnd->bind" for the
output; PEGASUS-X's blocks against the global tokens: "BHNKF,BHGF->BHNKG") reaches the attention rules
as MatMuls on [.., S, D] x [.., D, T] operands, the form every exporter's matmul attention has.
Rewritten only when the equation is one batched product: exactly one letter is summed, each operand
has one free letter (in the output, not in the other operand: of those letters, the choice that
needs the fewest Transposes, then the fewest on the operands, then the last in the output's order),
every other output letter is a batch letter (in the output's order after the transposes);
a batch letter that one operand lacks gets a dim of 1 there (Unsqueeze), which MatMul broadcasts as
the einsum does. No letter repeats inside a term, and the batch dims both operands have must be equal
(MatMul would broadcast a 1 where Einsum refuses). An ellipsis (LongT5's blocks: "...qhd,...khd->...hqk")
is written out as letters once the operands' ranks are known, right-aligned as Einsum aligns it; those
dims broadcast in Einsum as in MatMul, so they need not be equal, and the output must keep them (an
ellipsis summed away is not one product). Exact: each output element is the same dot product.

Runs at O3 before the attention rules; Einsums of other forms stay as they are.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, reroute


def _spell_ellipsis(equation: str, rank_a: int | None, rank_b: int | None):
    """The equation with each '...' written as letters the equation does not use (right-aligned: the
    shorter operand's ellipsis is the trailing part of the longer one's), and those letters; the
    equation unchanged without an ellipsis; None where a rank is unknown or the output drops it."""
    eq = equation.replace(" ", "")
    if "..." not in eq:
        return eq, ""
    if "->" not in eq or rank_a is None or rank_b is None:
        return None
    ins, out = eq.split("->")
    terms = ins.split(",")
    if len(terms) != 2 or "..." not in out:
        return None
    lengths = [r - len(t.replace("...", "")) if "..." in t else 0 for t, r in zip(terms, (rank_a, rank_b))]
    if min(lengths) < 0:
        return None
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    ell = "".join(free[:max(lengths)])
    spelled = [t.replace("...", ell[len(ell) - n:]) for t, n in zip(terms, lengths)]
    return f"{spelled[0]},{spelled[1]}->{out.replace('...', ell)}", ell


def _plan(equation: str, broadcast: str = ""):
    """(perm of A, perm of B, perm of the product) for a batched-matmul equation, else None;
    broadcast: batch letters Einsum itself broadcasts (a spelled ellipsis), left out of `shared`."""
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
    summed = [c for c in a if c in b and c not in out]
    if len(summed) != 1 or not set(a) | set(b) <= set(out) | set(summed):
        return None
    # each operand's free letter: one output letter the other operand lacks (the rest are batch
    # letters); matrix-vector forms (no such letter on a side) are left alone
    only_a = [c for c in out if c in a and c not in b]
    only_b = [c for c in out if c in b and c not in a]
    if not only_a or not only_b:
        return None
    pairs = [(fa, fb) for fa in reversed(only_a) for fb in reversed(only_b)]
    return min((_layout(a, b, out, summed, [fa], [fb], broadcast) for fa, fb in pairs), key=_cost)


def _cost(plan) -> tuple[int, int]:
    """Fewest Transposes; on a tie, fewest on the operands: each MatMul operand stays the value its
    producer wrote (a hand-written grouped GQA's output 'bhgts,bshd->bthgd' reads the probabilities
    as the Softmax wrote them, [B, H, G, T, S], and transposes the product instead)."""
    operands = sum(not _identity(p) for p in plan[:2])
    return operands + (not _identity(plan[2])), operands


def _layout(a: str, b: str, out: str, summed: list[str], free_a: list[str], free_b: list[str], broadcast: str):
    """The plan for one choice of free letters (the first pair tried wins a tie: the last output letters)."""
    batch = [c for c in out if c not in free_a + free_b]
    # A as [batch..., free_a, summed], B as [batch..., summed, free_b] (a batch letter an operand lacks
    # is a new axis of 1 there): the product is [batch..., free_a, free_b]
    order_a = [c for c in batch if c in a] + free_a + summed
    order_b = [c for c in batch if c in b] + summed + free_b
    made = batch + free_a + free_b
    perm_a = [a.index(c) for c in order_a]
    perm_b = [b.index(c) for c in order_b]
    perm_o = [made.index(c) for c in out]
    new_a = [i for i, c in enumerate(batch) if c not in a]  # Unsqueeze axes
    new_b = [i for i, c in enumerate(batch) if c not in b]
    shared = [(a.index(c), b.index(c)) for c in batch if c in a and c in b and c not in broadcast]
    return perm_a, perm_b, perm_o, new_a, new_b, shared


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
        a, b = node.inputs
        if attr is None or a is None or b is None:
            return False
        spelled = _spell_ellipsis(attr.as_string(), *(None if x.shape is None else len(x.shape) for x in (a, b)))
        plan = _plan(*spelled) if spelled is not None else None
        if plan is None:
            return False
        perm_a, perm_b, perm_o, new_a, new_b, shared = plan
        if not _dims_equal(a, [i for i, _ in shared], b, [j for _, j in shared], len(shared)):
            return False  # MatMul would broadcast where Einsum refuses
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

        def unsqueezed(x: ir.Value, axes, tag: str) -> ir.Value:
            if not axes:
                return x
            shape = None
            if x.shape is not None:
                dims = list(x.shape)
                for ax in axes:
                    dims.insert(ax, 1)
                shape = ir.Shape(dims)
            y = ir.Value(name=f"{stem}_{tag}", type=x.type, shape=shape)
            idx = ir.Value(name=f"{stem}_{tag}_axes", const_value=ir.tensor(list(axes), dtype=ir.DataType.INT64))
            graph.register_initializer(idx)
            new_nodes.append(ir.Node("", "Unsqueeze", [x, idx], outputs=[y], name=f"{stem}_{tag}"))
            return y

        ta = unsqueezed(transposed(a, perm_a, "lhs"), new_a, "lhs_b")
        tb = unsqueezed(transposed(b, perm_b, "rhs"), new_b, "rhs_b")
        mm_out = ir.Value(name=f"{stem}_matmul", type=out.type, shape=out.shape if _identity(perm_o) else None)
        new_nodes.append(ir.Node("", "MatMul", [ta, tb], outputs=[mm_out], name=f"{stem}_matmul"))
        final = transposed(mm_out, perm_o, "out")  # [batch, free_a, free_b] -> the equation's order
        final.shape = out.shape
        graph.insert_before(node, new_nodes)
        reroute(out, final)
        graph.remove(node, safe=True)
        self.stats["Einsum"] += 1
        return True
