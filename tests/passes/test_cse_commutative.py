"""CommonSubexpressionEliminationPass: a commutative two-input op with its operands swapped is a twin
(LiLT's attention: the text and layout streams each add the other's scaled scores, Add(a, b) and
Add(b, a), and softmax the one value twice)."""

from __future__ import annotations

import pytest

from pass_testing import check_same, ops
from test_cse import run  # the CSE pass on a parsed opset-18 graph


def test_swapped_scores_add_merges_and_the_softmaxes_cascade():
    proto, model, modified, p = run('''
    g (float[2, 4, 4] s1, float[2, 4, 4] s2, float[2, 4, 8] v, float[2, 4, 8] w) => (float[2, 4, 8] y, float[2, 4, 8] z)
    {
        a = Add(s1, s2)
        b = Add(s2, s1)
        pa = Softmax<axis = -1>(a)
        pb = Softmax<axis = -1>(b)
        y = MatMul(pa, v)
        z = MatMul(pb, w)
    }''')
    assert modified and p.stats == {"Add": 1, "Softmax": 1}
    assert ops(model) == {"Add": 1, "Softmax": 1, "MatMul": 2}
    check_same(proto, model)


@pytest.mark.parametrize("op,dtype", [("Mul", "float"), ("Equal", "int64"), ("And", "bool")])
def test_other_commutative_ops_merge(op, dtype):
    out = "bool" if op in ("Equal", "And") else dtype
    proto, model, modified, p = run(f'''
    g ({dtype}[3, 1] x, {dtype}[1, 5] z) => ({out}[6, 5] y)
    {{
        a = {op}(x, z)
        b = {op}(z, x)
        y = Concat<axis = 0>(a, b)
    }}''')
    assert modified and p.stats == {op: 1}
    assert ops(model) == {op: 1, "Concat": 1}
    check_same(proto, model)


def test_order_sensitive_ops_keep_both():
    """Sub / Div / MatMul depend on the order; Max / Min may pass a different NaN; Sum of three does
    not associate: none of them merges with its swapped twin."""
    proto, model, modified, _ = run('''
    g (float[4, 4] x, float[4, 4] z, float[4, 4] q) => (float[4, 4] y)
    {
        a = Sub(x, z)
        b = Sub(z, x)
        c = Div(x, z)
        d = Div(z, x)
        e = MatMul(x, z)
        f = MatMul(z, x)
        h = Max(x, z)
        i = Max(z, x)
        j = Sum(x, z, q)
        k = Sum(q, z, x)
        y = Sum(a, b, c, d, e, f, h, i, j, k)
    }''')
    assert not modified
    assert ops(model) == {"Sub": 2, "Div": 2, "MatMul": 2, "Max": 2, "Sum": 3}
