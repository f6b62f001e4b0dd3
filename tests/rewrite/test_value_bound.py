"""value_bound(v): a magnitude bound proven from constants through layout, gather and simple
arithmetic ops, inf wherever a graph input or an unlisted op could hold anything."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite import _expr
from onnx_fuse.rewrite._value_bound import value_bound


class Ctx:
    def constant(self, v):
        return v.const_value.numpy() if v.const_value is not None else None


def const(arr, name):
    v = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(np.shape(arr))))
    v.const_value = ir.tensor(np.asarray(arr, np.float32))
    return v


def inp(name, dtype=ir.DataType.FLOAT):
    return ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape([4, 4]))


def node(op, *inputs, dtype=ir.DataType.FLOAT):
    n = ir.Node("", op, list(inputs), num_outputs=1)
    n.outputs[0].dtype = dtype
    return n.outputs[0]


def test_a_gathered_table_is_bounded_by_its_largest_entry():
    table = const(np.array([[1.5, -3.0], [0.25, 2.0]]), "table")
    g = node("Gather", table, inp("bucket", ir.DataType.INT64))   # the indices do not bound it
    t = node("Unsqueeze", node("Transpose", g), const(np.array([0]), "ax"))
    assert value_bound(Ctx(), t) == 3.0
    assert value_bound(Ctx(), node("Cast", t, dtype=ir.DataType.FLOAT16)) == 3.0


def test_arithmetic_combines_bounds():
    a, b = const(np.array([2.0, -1.0]), "a"), const(np.array([0.5]), "b")
    assert value_bound(Ctx(), node("Add", a, b)) == 2.5
    assert value_bound(Ctx(), node("Sub", a, b)) == 1.5   # [-1.5, 1.5]: intervals, not magnitudes
    assert value_bound(Ctx(), node("Mul", a, b)) == 1.0
    assert value_bound(Ctx(), node("Where", inp("c", ir.DataType.BOOL), a, node("Neg", b))) == 2.0


def test_inputs_activations_and_unlisted_ops_are_unbounded():
    table = const(np.array([1.0]), "table")
    assert value_bound(Ctx(), inp("x")) == math.inf
    assert value_bound(Ctx(), node("Add", table, inp("x"))) == math.inf
    assert value_bound(Ctx(), node("Exp", table)) == math.inf
    assert value_bound(Ctx(), node("Div", table, table)) == math.inf


def test_value_bound_in_rule_checks():
    table = const(np.array([-17.0, 4.0]), "table")
    b = node("Gather", table, inp("i", ir.DataType.INT64))
    assert _expr.parse("4 * value_bound(b) <= 65504").evaluate({"b": b}, Ctx()) is True
    assert _expr.parse("value_bound(x)").evaluate({"x": inp("x")}, Ctx()) == math.inf


def test_a_binary_buffer_mask_is_bounded_by_its_fill():
    """GPT-1's causal term (1 - b) * -1e4 of a 0/1 buffer b sliced at run time: within 1e4 (a magnitude
    bound gave 2e4: |1| + |b| <= 2), so the float16 key-mask rules take it beside finfo.min's quarter."""
    buf = const(np.tril(np.ones((8, 8))), "buf")
    b = node("Slice", buf, inp("start", ir.DataType.INT64), inp("end", ir.DataType.INT64))
    m = node("Mul", node("Sub", const(np.array(1.0), "one"), b), const(np.array(-1e4), "fill"))
    assert value_bound(Ctx(), m) == 1e4
    assert value_bound(Ctx(), node("Max", m, const(np.array([-5.0]), "lo"))) == 5.0   # [-5, 0]
    assert value_bound(Ctx(), node("Min", m, const(np.array([3.0]), "hi"))) == 1e4
    assert value_bound(Ctx(), node("Abs", node("Neg", m))) == 1e4
