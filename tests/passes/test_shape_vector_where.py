"""TorchScript's expand(b, -1, -1) guard read before folding (passes/_dim_products.shape_vector).

TorchScript writes ``probe.expand(B, -1, -1)`` as Expand(probe, Where(Equal(t, -1s), ones, t)) with
t = [B, -1, -1] and the -1s as ConstantOfShape([3]) * -1: shape_vector now reads a ConstantOfShape of
known length with an int fill, and a Where whose condition's entries are known picks entry by entry
([0, 1, 1]: B, 1, 1). So the first shape inference names the expanded probe [batch, 1, C] and the
views sized from it (torch MHA's probe keys / values, B*H read from the query) are proven; before,
onnx named that batch apart until folding had written the views' targets with -1s. A condition with an
unknown entry reads nothing (the old read of the guard, every entry of t a size, stays)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import shape_vector
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import check_same, parse

HEADER = '<ir_version: 9, opset_import: ["" : 17]>'


def _guard(fill: str, second: str) -> str:
    """x [B, S, 4]; probe [1, 1, 4] expanded to [B, ``second``, -1] through the guard; y = probe + mean(x)."""
    return HEADER + f'''
g (float[B, S, 4] x) => (float[B, 1, 4] y)
{{
    probe = Constant<value = float[1, 1, 4] {{0.5, -1.0, 2.0, 0.25}}>()
    b = Shape<start = 0, end = 1>(x)
    mid = Constant<value = int64[1] {{{second}}}>()
    m1 = Constant<value = int64[1] {{-1}}>()
    t = Concat<axis = 0>(b, mid, m1)
    n = Shape(t)
    ones = ConstantOfShape<value = int64[1] {{{fill}}}>(n)
    neg = Constant<value = int64 {{-1}}>()
    minus = Mul(ones, neg)
    eq = Equal(t, minus)
    fixed = Where(eq, ones, t)
    pb = Expand(probe, fixed)
    mx = ReduceMean<axes = [1], keepdims = 1>(x)
    y = Add(pb, mx)
}}'''


def _model(text):
    proto = parse(text)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    return proto, model


def _value(model, name):
    return next(o for n in model.graph for o in n.outputs if o.name == name)


def test_guard_reads_as_the_expanded_shape():
    proto, model = _model(_guard("1", "-1"))
    assert shape_vector(_value(model, "fixed"), {}) == ([(1, ("B",)), (1, ()), (1, ())], False)
    assert [str(d) for d in _value(model, "pb").shape] == ["B", "1", "4"]
    check_same(proto, model, {"x": np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)})


def test_only_the_minus_ones_are_replaced():
    # [B, 1, -1]: only the last entry is replaced
    _, model = _model(_guard("1", "1"))
    assert shape_vector(_value(model, "fixed"), {}) == ([(1, ("B",)), (1, ()), (1, ())], False)


def test_unknown_condition_entry_reads_nothing():
    # a condition read from a value of unknown entries (x's data) picks nothing
    proto = parse(HEADER + '''
g (int64[3] c, float[B, 1, 4] x) => (float[B, 1, 4] y)
{
    b = Shape<start = 0, end = 1>(x)
    rest = Constant<value = int64[2] {1, 4}>()
    t = Concat<axis = 0>(b, rest)
    z = Constant<value = int64 {0}>()
    eq = Equal(c, z)
    ones = Constant<value = int64[3] {1, 1, 1}>()
    fixed = Where(eq, ones, t)
    y = Expand(x, fixed)
}''')
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    assert shape_vector(_value(model, "fixed"), {}) is None
