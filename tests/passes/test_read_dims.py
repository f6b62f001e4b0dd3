"""passes/_shape_values.read_dims: the one dims reader, in each convention its callers compare in."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from onnx_fuse.passes._shape_values import read_dims


def value(dims) -> ir.Value:
    return ir.Value(name="v", type=ir.TensorType(ir.DataType.FLOAT), shape=None if dims is None else ir.Shape(dims))


DIMS = [2, "batch", "unk__r3_7", None]


@pytest.mark.parametrize("names, want", [("all", [2, "batch", "unk__r3_7", None]),     # shape_cse
                                          ("model", [2, "batch", None, None]),         # rewrite/_shape_reads
                                          ("none", [2, None, None, None])])            # self_writes
def test_names_kept_per_convention(names, want):
    got = read_dims(value(DIMS), names=names)
    assert got == want and all(type(g) is type(w) for g, w in zip(got, want))


def test_opaque_unknowns_equal_nothing():
    """unbind_pairs / rewrite/_paired (names kept) and _rotation_tables (model names): an unknown dim
    never matches another, not even the same value's."""
    v = value(DIMS)
    a, b = read_dims(v, unknown="opaque"), read_dims(v, unknown="opaque")
    assert a[:3] == [2, "batch", "unk__r3_7"] and a[3] != b[3] and a[3] is not None
    m = read_dims(v, names="model", unknown="opaque")
    assert m[:2] == [2, "batch"] and m[2] != m[3] and m[2] not in (None, "unk__r3_7")


def test_raw_keeps_the_ir_dims():
    """identity_elimination compares the ir dims themselves (_dim_matches)."""
    v = value(DIMS)
    assert read_dims(v, names="raw") == list(v.shape)
    assert isinstance(read_dims(v, names="raw")[1], ir.SymbolicDim)


def test_no_value_or_rank():
    assert read_dims(None) is None and read_dims(value(None)) is None
    assert read_dims(value([])) == []
