"""The array functions of the expression language: slice_axis, allclose, reshape (used by the
RoPE rules to check constant cos/sin tables by value and to build half-width caches)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.rewrite import _expr


class Ctx:
    def constant(self, v):
        return v.const_value.numpy() if v.const_value is not None else None

    def is_bound(self, name):
        return False

    def consumed(self, v):
        return False


def ev(text, **env):
    return _expr.parse(text).evaluate(env, Ctx())


def const(arr):
    v = ir.Value(name="c", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(arr.shape)))
    v.const_value = ir.tensor(np.asarray(arr, np.float32))
    return v


def test_slice_axis_matches_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(ev("slice_axis(a, -1, 0, 2)", a=a), a[..., :2])
    np.testing.assert_array_equal(ev("slice_axis(a, -1, 2)", a=a), a[..., 2:])
    np.testing.assert_array_equal(ev("slice_axis(a, -1, 1, None, 2)", a=a), a[..., 1::2])
    np.testing.assert_array_equal(ev("slice_axis(a, 1, 1, 3)", a=a), a[:, 1:3])


def test_equal_halves_and_unit_circle_on_a_constant():
    f = np.arange(6)[:, None] * np.array([1.0, 0.1])[None, :]
    emb = np.concatenate([f, f], axis=-1)
    c, s = const(np.cos(emb)), const(np.sin(emb))
    assert ev("allclose(slice_axis(value(c), -1, 0, 2), slice_axis(value(c), -1, 2))", c=c)
    assert ev("allclose(value(c) * value(c) + value(s) * value(s), 1.0, 0.0, 1e-4)", c=c, s=s)
    bad = const(np.cos(np.concatenate([f, 2 * f], axis=-1)))
    assert not ev("allclose(slice_axis(value(c), -1, 0, 2), slice_axis(value(c), -1, 2))", c=bad)


def test_allclose_is_false_for_shapes_that_do_not_broadcast():
    assert not ev("allclose(a, b)", a=np.zeros((2, 3)), b=np.zeros((4,)))
    assert ev("allclose(a, 0.0)", a=np.zeros((2, 3)))


def test_reshape_builds_a_cache_shape():
    a = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    out = ev("reshape(slice_axis(a, -1, 0, 2), [1, 4, 2])", a=a)
    assert out.shape == (1, 4, 2)
    np.testing.assert_array_equal(out[0], a[0, 0, :, :2])


@pytest.mark.parametrize("text", [
    "slice_axis(c, -1, 0, 2)",          # a graph value, not an array: value() first
    "slice_axis(a, 5, 0, 2)",           # axis out of range
    "reshape(a, [3, 5])",               # wrong element count
    "slice_axis(a, -1, 'x')",           # non-integer bound
])
def test_bad_arguments_fail_evaluation_not_the_optimizer(text):
    with pytest.raises(_expr.EvalFailure):
        ev(text, a=np.zeros((2, 4), np.float32), c=const(np.zeros((2, 4))))


def test_lowest_is_the_dtypes_lowest_finite_value():
    """Mask fills are compared with the scores' own floor: float16's is -65504, not float32's."""
    assert ev("lowest('float16')") == -65504.0
    assert ev("lowest('float')") == float(np.finfo(np.float32).min)
    assert ev("lowest('bfloat16')") == pytest.approx(-3.3895313892515355e38)
    assert ev("max(-1e30, lowest('float16') / 2)") == -32752.0
    with pytest.raises(_expr.EvalFailure):
        ev("lowest('int64')")


def test_mask_floor_is_precisions_float16_floor():
    """keep-masked-rows' floor: float16's is precision.FP16_MASK_FLOOR (read, not repeated),
    every other float's -1e30; a non-float dtype fails evaluation."""
    from onnx_fuse.passes.precision import FP16_MASK_FLOOR

    assert ev("mask_floor('float16')") == ev("mask_floor('fp16')") == FP16_MASK_FLOOR
    assert ev("mask_floor('float')") == ev("mask_floor('bfloat16')") == -1e30
    for bad in ("mask_floor('int64')", "mask_floor('nope')"):
        with pytest.raises(_expr.EvalFailure):
            ev(bad)
