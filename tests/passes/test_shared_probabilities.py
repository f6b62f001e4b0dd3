"""MergeSharedProbabilitiesPass: softmax probabilities read by several P.V MatMuls become one MatMul
on the values side by side and a Split (DiffLlama's two attention calls, CSE'd by the exporter)."""

from __future__ import annotations

from pass_testing import apply, check_same, ops, parse

from onnx_fuse.passes.shared_probabilities import MergeSharedProbabilitiesPass

# q k^T / sqrt(8), softmax, the sdpa NaN guard, then two P.V MatMuls over two values; a reader of
# o1 (Transpose) comes before o2's values are computed, so the merged nodes must be re-sorted
SHARED = """
<ir_version: 9, opset_import: ["" : 18]>
g (float[B, 2, 4, 8] q, float[B, 2, 4, 8] k, float[B, 2, 4, 8] v1, float[B, 2, 4, 8] w2) => (float[B, 4, 2, 16] y)
{
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    sc = MatMul(q, kt)
    scale = Constant<value = float {0.35355339}>()
    ss = Mul(sc, scale)
    p = Softmax<axis = -1>(ss)
    nan = IsNaN(p)
    zero = Constant<value = float {0.0}>()
    z = Where(nan, zero, p)
    o1 = MatMul(z, v1)
    t1 = Transpose<perm = [0, 2, 1, 3]>(o1)
    v2 = Neg(w2)
    o2 = MatMul(z, v2)
    t2 = Transpose<perm = [0, 2, 1, 3]>(o2)
    y = Concat<axis = -1>(t1, t2)
}
"""


def test_shared_probabilities_become_one_matmul():
    proto = parse(SHARED)
    model, modified, p = apply(MergeSharedProbabilitiesPass, proto, shape_inference=True)
    assert modified and p.stats["MatMul"] == 2
    counts = ops(model)
    assert counts["MatMul"] == 2 and counts["Split"] == 1 and counts["Concat"] == 2, counts  # q k^T + P.V
    check_same(proto, model)


def test_one_reader_or_constant_values_are_left_alone():
    """A single P.V MatMul, or a second reader whose right operand is a constant weight: no change."""
    single = SHARED.replace("    o2 = MatMul(z, v2)\n", "    o2 = Relu(v2)\n")
    weight = SHARED.replace("    v2 = Neg(w2)\n", "    v2 = Constant<value = float[4, 8] {"
                            + ", ".join(["0.5"] * 32) + "}>()\n").replace("float[B, 2, 4, 8] w2", "float[B] w2")
    for text in (single, weight):
        model, modified, _ = apply(MergeSharedProbabilitiesPass, parse(text), shape_inference=True)
        assert not modified and ops(model)["MatMul"] == (2 if text is single else 3)


def test_not_probabilities_are_left_alone():
    """Two MatMuls sharing a left operand that is not a softmax (no attention) keep their form."""
    text = SHARED.replace("p = Softmax<axis = -1>(ss)", "p = Relu(ss)")
    model, modified, _ = apply(MergeSharedProbabilitiesPass, parse(text), shape_inference=True)
    assert not modified and ops(model)["MatMul"] == 3
