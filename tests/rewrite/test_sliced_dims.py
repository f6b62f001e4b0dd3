"""A new Slice's dims on the axes it does not cut are its input's (rewrite/_rewriter.py _sliced_dims).

ONNX inference leaves every dim of a Slice unknown when its starts / ends are not constants (a RoPE
table's rows cut to x's length); the rules that read the result (half_readers needs the table's last
dim) then refused. Only the cut axes may change."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite._rewriter import _sliced_dims

UNKNOWN = ir.Shape([None, None, None])


def _dims(shape):
    return [d if isinstance(d, int) else getattr(d, "value", None) for d in shape.dims]


def test_axes_not_cut_keep_the_input_dims():
    got = _sliced_dims(UNKNOWN, ir.Shape([1, "rows", 8]), np.array([1]), [1])
    assert _dims(got) == [1, None, 8]


def test_negative_axes_are_read_modulo_the_rank():
    got = _sliced_dims(UNKNOWN, ir.Shape([4, "rows", 8]), np.array([-2]), [1])
    assert _dims(got) == [4, None, 8]


def test_no_axes_cuts_the_leading_len_starts():
    got = _sliced_dims(UNKNOWN, ir.Shape(["rows", 3, 8]), None, [2])
    assert _dims(got) == [None, None, 8]


def test_known_inferred_dims_are_kept_and_bad_axes_change_nothing():
    got = _sliced_dims(ir.Shape([None, 5, None]), ir.Shape([2, 9, 8]), np.array([1]), [1])
    assert _dims(got) == [2, 5, 8]
    assert _dims(_sliced_dims(UNKNOWN, ir.Shape([2, 9, 8]), np.array([1, 1]), [2])) == [None] * 3
    assert _dims(_sliced_dims(UNKNOWN, ir.Shape([2, 9]), np.array([1]), [1])) == [None] * 3
