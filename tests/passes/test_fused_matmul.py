"""ExpandFusedMatMulPass: ORT's com.microsoft::FusedMatMul back into Transpose -> MatMul -> Mul
(a graph ORT optimized offline); the forms it cannot spell in standard ops stay fused."""

from __future__ import annotations

import pytest
from pass_testing import apply, check_same, ops, parse

from onnx_fuse.passes.fused_matmul import ExpandFusedMatMulPass

HEADER = '<ir_version: 9, opset_import: ["" : 18, "com.microsoft" : 1]>'


def _model(attrs: str, a: str, b: str, out: str) -> str:
    return HEADER + f"""
g ({a} x, {b} y) => ({out} z)
{{
    f = com.microsoft.FusedMatMul<{attrs}>(x, y)
    z = Relu(f)
}}
"""


@pytest.mark.parametrize("attrs, a, b, out, transposes, muls", [
    # BERT's scores as ORT writes them: q [B, H, S, D] @ k^T [B, H, D, T] * 0.25
    ("alpha = 0.25", "float[B, 2, 4, 8]", "float[B, 2, 8, 5]", "float[B, 2, 4, 5]", 0, 1),
    # k given as [B, H, T, D] with transB
    ("alpha = 0.125, transB = 1", "float[B, 2, 4, 8]", "float[B, 2, 5, 8]", "float[B, 2, 4, 5]", 1, 1),
    # both transposed, alpha 1: no Mul
    ("transA = 1, transB = 1", "float[3, 8, 4]", "float[5, 8]", "float[3, 4, 5]", 2, 0),
    # float16
    ("alpha = 0.5", "float16[2, 4, 8]", "float16[8, 3]", "float16[2, 4, 3]", 0, 1),
])
def test_fused_matmul_is_expanded(attrs, a, b, out, transposes, muls):
    proto = parse(_model(attrs, a, b, out))
    model, modified, p = apply(ExpandFusedMatMulPass, proto, shape_inference=True)
    assert modified and p.stats["FusedMatMul"] == 1
    counts = ops(model)
    assert "FusedMatMul" not in counts and counts["MatMul"] == 1, counts
    assert counts.get("Transpose", 0) == transposes and counts.get("Mul", 0) == muls, counts
    check_same(proto, model)


def test_graph_output_keeps_its_name():
    proto = parse(HEADER + """
g (float[2, 4, 8] x, float[2, 8, 3] y) => (float[2, 4, 3] z)
{
    z = com.microsoft.FusedMatMul<alpha = 0.5>(x, y)
}
""")
    model, modified, _ = apply(ExpandFusedMatMulPass, proto, shape_inference=True)
    assert modified and [n.op_type for n in model.graph] == ["MatMul", "Mul"]
    check_same(proto, model)


def test_moved_batch_axes_stay_fused():
    """transBatchA moves the batch axes next to the matrix axes: left to ORT."""
    model, modified, _ = apply(ExpandFusedMatMulPass, parse(_model(
        "transBatchA = 1", "float[2, 4, 8]", "float[4, 3]", "float[?, ?, ?]")), shape_inference=True)
    assert not modified and ops(model)["FusedMatMul"] == 1


def test_transposed_operand_of_unknown_rank_stays_fused():
    proto = parse(_model("transA = 1", "float[3, 8, 4]", "float[8, 5]", "float[3, 4, 5]"))
    proto.graph.input[0].type.tensor_type.ClearField("shape")  # the Transpose's perm needs the rank
    model, modified, _ = apply(ExpandFusedMatMulPass, proto)
    assert not modified and ops(model)["FusedMatMul"] == 1
