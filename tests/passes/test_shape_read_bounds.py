"""``shape_read_bounds`` (passes/_shape_values.py): the one reader of a Shape node's start / end, clamped as ONNX
clamps them, used by shape_read_dims (shape_entries', the reshape-target fold's), the shape-read rewrites and the
transpose sink. A reference attribute (a function body's ``start: int = @s``) is unknown: the readers refuse it
instead of reading it as a number (the reshape-target fold's own copy raised a TypeError there)."""

from __future__ import annotations

import onnx_ir as ir
import pytest

from onnx_fuse.passes._shape_values import shape_read_bounds, shape_read_dims


def _shape_node(rank: int, **attrs) -> ir.Node:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["B", 4, 6, 1][:rank]))
    built = {}
    for name, v in attrs.items():
        built[name] = ir.RefAttr(name, v, ir.AttributeType.INT) if isinstance(v, str) else ir.AttrInt64(name, v)
    return ir.node("Shape", [x], attributes=built)


@pytest.mark.parametrize("attrs, want", [
    ({}, (0, 4)),
    ({"end": -1}, (0, 3)),
    ({"start": 1}, (1, 4)),
    ({"start": -2, "end": 10}, (2, 4)),     # end past the rank clamps to it
    ({"start": -9, "end": -7}, (0, 0)),     # both below -rank clamp to 0: an empty read
    ({"start": 3, "end": 1}, (3, 1)),       # start past end: the caller's range is empty
])
def test_bounds_clamp_as_onnx(attrs, want):
    assert shape_read_bounds(_shape_node(4, **attrs), 4) == want
    # the same run of axes a Python slice of the dims gives
    assert list(range(4))[want[0]:want[1]] == list(range(4))[slice(attrs.get("start"), attrs.get("end"))]


@pytest.mark.parametrize("ref", ["start", "end"])
def test_reference_attribute_is_unknown(ref):
    node = _shape_node(4, **{ref: "outer_" + ref})
    assert shape_read_bounds(node, 4) is None
    assert shape_read_dims(node, names="none") is None   # the reshape-target fold raised TypeError before


def test_reshape_target_reads_dims_of_the_run():
    # the reshape-target fold's convention (a symbolic dim unknown), then shape_entries' (its name)
    assert shape_read_dims(_shape_node(4, start=1, end=-1), names="none") == [4, 6]
    assert shape_read_dims(_shape_node(4), names="none") == [None, 4, 6, 1]
    assert shape_read_dims(_shape_node(4, end=2)) == ["B", 4]
