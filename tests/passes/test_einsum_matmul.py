"""EinsumToMatMulPass: two-operand Einsums that are one batched matrix product become
Transpose -> MatMul -> Transpose (Funnel's einsum attention); other equations stay."""

from __future__ import annotations

import numpy as np
import pytest
from pass_testing import apply, check_same, ops, parse

from onnx_fuse.passes.einsum_matmul import EinsumToMatMulPass


def _model(equation: str, a: str, b: str, out: str) -> str:
    return f"""
<ir_version: 9, opset_import: ["" : 18]>
g ({a} x, {b} y) => ({out} z)
{{
    e = Einsum<equation = "{equation}">(x, y)
    z = Relu(e)
}}
"""


@pytest.mark.parametrize("equation, a, b, out, transposes", [
    # Funnel's scores: q [b, i, n, d], k [b, j, n, d] -> [b, n, i, j] (both operands transposed)
    ("bind,bjnd->bnij", "float[B, 4, 2, 8]", "float[B, 5, 2, 8]", "float[B, 2, 4, 5]", 2),
    # Funnel's output: p [b, n, i, j], v [b, j, n, d] -> [b, i, n, d] (v and the product transposed)
    ("bnij,bjnd->bind", "float[B, 2, 4, 5]", "float[B, 5, 2, 8]", "float[B, 4, 2, 8]", 2),
    # already a MatMul: no Transpose at all
    ("bij,bjk->bik", "float[B, 4, 8]", "float[B, 8, 3]", "float[B, 4, 3]", 0),
])
def test_batched_matmul_einsums_become_matmuls(equation, a, b, out, transposes):
    proto = parse(_model(equation, a, b, out))
    model, modified, p = apply(EinsumToMatMulPass, proto, shape_inference=True)
    assert modified and p.stats["Einsum"] == 1
    counts = ops(model)
    assert "Einsum" not in counts and counts["MatMul"] == 1 and counts.get("Transpose", 0) == transposes, counts
    assert "Unsqueeze" not in counts, counts
    check_same(proto, model)


@pytest.mark.parametrize("equation, a, b, out, unsqueezed", [
    # PEGASUS-X: the blocks' queries against the global tokens' keys, which have no block axis N
    ("BHNKF,BHGF->BHNKG", "float[B, 2, 3, 4, 8]", "float[B, 2, 5, 8]", "float[B, 2, 3, 4, 5]", "rhs"),
    # ... and the blocks' probabilities over the global tokens times their values
    ("BHNKG,BHGF->BHNKF", "float[B, 2, 3, 4, 5]", "float[B, 2, 5, 8]", "float[B, 2, 3, 4, 8]", "rhs"),
    # the batch letter missing on the left, and not the leading one
    ("hsd,bhtd->bhst", "float[2, 4, 8]", "float[B, 2, 5, 8]", "float[B, 2, 4, 5]", "lhs"),
    # a free letter of A ahead of the output: b broadcast in B (Transposes around the product)
    ("binh,tnh->bnit", "float[B, 4, 2, 8]", "float[5, 2, 8]", "float[B, 2, 4, 5]", "rhs"),
])
def test_a_batch_letter_one_operand_lacks_is_broadcast(equation, a, b, out, unsqueezed):
    """A batch letter only one operand has (the other's dim is 1 by an Unsqueeze, which MatMul
    broadcasts as the einsum does); the output equals the Einsum's."""
    proto = parse(_model(equation, a, b, out))
    model, modified, p = apply(EinsumToMatMulPass, proto, shape_inference=True)
    assert modified and p.stats["Einsum"] == 1
    counts = ops(model)
    assert "Einsum" not in counts and counts["MatMul"] == 1 and counts["Unsqueeze"] == 1, counts
    mm = next(n for n in model.graph if n.op_type == "MatMul")
    lhs = mm.inputs[0].producer()
    assert ("lhs" if lhs is not None and lhs.op_type == "Unsqueeze" else "rhs") == unsqueezed
    check_same(proto, model)


@pytest.mark.parametrize("equation, a, b, out", [
    ("bij,bjk->bik", "float[1, 4, 8]", "float[B, 8, 3]", "float[B, 4, 3]"),  # a broadcast batch dim
    ("bij,bjk->bk", "float[B, 4, 8]", "float[B, 8, 3]", "float[B, 3]"),  # i summed away in A alone
    ("bij,bj->bi", "float[B, 4, 8]", "float[B, 8]", "float[B, 4]"),  # a matrix-vector product
    ("bii,bij->bj", "float[B, 4, 4]", "float[B, 4, 3]", "float[B, 3]"),  # a repeated letter (a trace)
])
def test_other_einsums_are_left_alone(equation, a, b, out):
    model, modified, _ = apply(EinsumToMatMulPass, parse(_model(equation, a, b, out)), shape_inference=True)
    assert not modified and ops(model)["Einsum"] == 1


@pytest.mark.parametrize("equation, a, b, out", [
    # LongT5's transient-global blocks: q [B, N, K, H, D] against the 3-block + global keys [B, N, L, H, D]
    # (the dims named apart, as TorchScript's export leaves them)
    ("...qhd,...khd->...hqk", "float[B, N, 3, 2, 8]", "float[B2, N2, 11, 2, 8]", "float[B, N, 2, 3, 11]"),
    # ... and the probabilities times the values
    ("...hqk,...khd->...qhd", "float[B, N, 2, 3, 11]", "float[B2, N2, 11, 2, 8]", "float[B, N, 3, 2, 8]"),
    # a dim of 1 inside the ellipsis broadcasts (Einsum broadcasts an ellipsis as MatMul does)
    ("...qd,...kd->...qk", "float[B, 1, 4, 8]", "float[B, 3, 5, 8]", "float[B, 3, 4, 5]"),
])
def test_an_ellipsis_is_spelled_out(equation, a, b, out):
    """An ellipsis becomes batch letters once the ranks are known; the dims it covers broadcast, so
    symbolic dims named apart (or a 1) do not stop it; numbers equal the Einsum's (fails before the
    ellipsis was read: the Einsum stayed)."""
    proto = parse(_model(equation, a, b, out))
    model, modified, p = apply(EinsumToMatMulPass, proto, shape_inference=True)
    assert modified and p.stats["Einsum"] == 1
    counts = ops(model)
    assert "Einsum" not in counts and counts["MatMul"] == 1, counts
    sizes = {"B": 2, "B2": 2, "N": 3, "N2": 3}  # named apart, equal when run
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal([sizes.get(d, d) if isinstance(d, str) else d for d in
                                         [int(x) if x.isdigit() else x for x in shape[6:-1].split(", ")]])
              .astype(np.float32) for name, shape in (("x", a), ("y", b))}
    check_same(proto, model, inputs=inputs)


@pytest.mark.parametrize("equation, a, b, out", [
    ("...ij,...jk->ik", "float[2, 4, 8]", "float[2, 8, 3]", "float[4, 3]"),  # the ellipsis summed away
    ("...ij,...kj->...i", "float[2, 4, 8]", "float[2, 3, 8]", "float[2, 4]"),  # k summed in B alone
])
def test_ellipses_that_are_not_one_product_are_left_alone(equation, a, b, out):
    model, modified, _ = apply(EinsumToMatMulPass, parse(_model(equation, a, b, out)), shape_inference=True)
    assert not modified and ops(model)["Einsum"] == 1


def test_spell_ellipsis_needs_ranks_and_a_kept_ellipsis():
    from onnx_fuse.passes.einsum_matmul import _spell_ellipsis

    assert _spell_ellipsis("bij,bjk->bik", None, None) == ("bij,bjk->bik", "")
    assert _spell_ellipsis("...ij,...jk->...ik", None, 3) is None  # a rank unknown
    assert _spell_ellipsis("...ij,...jk->ik", 3, 3) is None
    assert _spell_ellipsis("...ij,...jk,...kl->...il", 3, 3) is None
    assert _spell_ellipsis("...qd,...kd->...qk", 4, 3) == ("ABqd,Bkd->ABqk", "AB")


def test_a_tie_keeps_the_operand_as_its_producer_wrote_it():
    """Grouped GQA's output einsum 'bhgts,bshd->bthgd' (probabilities [B, H, G, T, S]): with T free,
    p is read as it is and the product is transposed; with G free (the last output letter A alone
    has, the old choice) p was transposed to [B, T, H, G, S] as well, and no attention rule saw its
    Softmax. Both need two Transposes; the one on the product wins the tie."""
    proto = parse(_model("bhgts,bshd->bthgd", "float[B, 2, 3, 4, 5]", "float[B, 5, 2, 8]", "float[B, 4, 2, 3, 8]"))
    model, modified, _ = apply(EinsumToMatMulPass, proto, shape_inference=True)
    assert modified
    mm = next(n for n in model.graph if n.op_type == "MatMul")
    assert mm.inputs[0].name == "x", [v.name for v in mm.inputs]  # p untransposed
    assert ops(model)["Transpose"] == 2
    check_same(proto, model)
