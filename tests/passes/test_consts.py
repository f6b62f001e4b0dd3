"""passes/_consts.py: the one reader of a Reduce* / Unsqueeze / Squeeze node's constant axes
(``raw_axes``: the opset 13 / 18 input or the older attribute) and its range-checked form
(``node_axes``) that view-chain, self-writes and size-one-axes (and the rank-aware readers) share."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx_fuse.passes._consts import node_axes, raw_axes


def _node(text: str, op: str = "Unsqueeze") -> ir.Node:
    """The first ``op`` node of a parsed model (Constant nodes stay producers: constant_tensor reads them)."""
    model = ir.serde.deserialize_model(onnx.parser.parse_model(text))
    return next(n for n in model.graph if n.op_type == op)


_OPSET13 = """<ir_version: 8, opset_import: ["" : 13]>
    g (float[2, 3] x, int64[{n}] dyn) => (float y) {{
        c = Constant <value = {axes}> ()
        y = {op} (x, {src})
    }}"""


@pytest.mark.parametrize(("axes", "want"), [
    ("int64[2] {0, -1}", [0, -1]),       # negative axes kept as written
    ("int64[1] {-3}", [-3]),
    ("int32[1] {1}", [1]),               # any integer type
    ("int64 {2}", [2]),                  # a scalar (rank 0) reads as one axis
    ("int64[0] {}", []),                 # an empty list stays empty (the op says what it means)
])
def test_input_form(axes, want):
    node = _node(_OPSET13.format(n=1, axes=axes, op="Unsqueeze", src="c"))
    assert raw_axes(node) == want


@pytest.mark.parametrize("axes", ["float[1] {1.0}", "int64[1, 2] {0, 1}"])
def test_input_not_an_axes_vector_is_unknown(axes):
    """A float constant, or one of rank 2 (no valid axes input): None, not its flattened values."""
    node = _node(_OPSET13.format(n=1, axes=axes, op="Unsqueeze", src="c"))
    assert raw_axes(node) is None
    assert node_axes(node, 4) is None


def test_non_constant_input_is_unknown():
    node = _node(_OPSET13.format(n=1, axes="int64[1] {0}", op="Squeeze", src="dyn"), "Squeeze")
    assert raw_axes(node) is None
    assert node_axes(node, 2) is None


def test_opset11_attribute_form():
    node = _node("""<ir_version: 6, opset_import: ["" : 11]>
        g (float[2, 1, 3] x) => (float y) {
            y = Squeeze <axes = [-2]> (x)
        }""", "Squeeze")
    assert raw_axes(node) == [-2]
    assert node_axes(node, 3) == [1]


def test_absent_axes_is_none():
    """A Squeeze without axes (every size-1 axis): no constant axes to read."""
    node = _node("""<ir_version: 8, opset_import: ["" : 13]>
        g (float[2, 1, 3] x) => (float y) {
            y = Squeeze (x)
        }""", "Squeeze")
    assert raw_axes(node) is None


def test_ref_attribute_is_unknown():
    """A function body's Squeeze whose axes refer to the function's attribute: not constant here
    (view-chain's and size-one-axes' own copies of this reading raised a TypeError on it)."""
    node = ir.Node("", "Squeeze", [ir.Value(name="x")],
                   attributes=[ir.RefAttr("axes", "ax", ir.AttributeType.INTS)])
    assert raw_axes(node) is None
    assert node_axes(node, 3) is None


def test_node_axes_range_checks_for_the_rank():
    """node_axes normalizes in [0, rank) (an Unsqueeze's rank is its output's), keeps the order
    unless sorted, and refuses an axis out of range."""
    node = _node(_OPSET13.format(n=1, axes="int64[2] {-1, 0}", op="Unsqueeze", src="c"))
    assert node_axes(node, 4) == [3, 0]
    assert node_axes(node, 4, sort=True) == [0, 3]
    out = _node(_OPSET13.format(n=1, axes="int64[1] {4}", op="Unsqueeze", src="c"))
    assert raw_axes(out) == [4]
    assert node_axes(out, 4) is None
    assert node_axes(out, 5) == [4]
