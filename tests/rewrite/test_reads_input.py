"""reads_input(v): whether a value depends on an input's values, a Shape / Size read of one being
only its dims (where-causal-select-half needs a causal mask computed from shapes alone)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite import _expr

reads_input = _expr.FUNCTIONS["reads_input"]


def const(arr, name):
    v = ir.Value(name=name, type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(list(np.shape(arr))))
    v.const_value = ir.tensor(np.asarray(arr, np.int64))
    return v


def node(op, *inputs, **attrs):
    return ir.Node("", op, list(inputs), attributes=[ir.AttrInt64(k, v) for k, v in attrs.items()],
                   num_outputs=1).outputs[0]


def test_a_mask_sized_from_an_input_reads_only_its_shape():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["b", "s"]))
    s = node("Shape", x, start=1, end=2)
    tri = node("Trilu", node("ConstantOfShape", node("Concat", s, s, axis=0)), upper=0)
    assert reads_input(None, node("Unsqueeze", tri, const([0, 1], "ax"))) is False


def test_a_mask_combined_with_an_input_mask_reads_it():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["b", "s"]))
    am = ir.Value(name="attention_mask", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["b", "s"]))
    s = node("Shape", x, start=1, end=2)
    tri = node("Trilu", node("ConstantOfShape", node("Concat", s, s, axis=0)), upper=0)
    assert reads_input(None, node("And", tri, node("Cast", am, to=9))) is True
    assert reads_input(None, am) is True
