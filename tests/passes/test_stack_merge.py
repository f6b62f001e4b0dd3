"""StackMergePass: Reshape(Concat(Unsqueeze(a, r), Unsqueeze(b, r), axis=r)) merging the new axis into
the last is Concat(a, b, axis=-1) (keras-hub's rotate_half and RoPE table through tf2onnx); a stack
at the last axis (GPT-J's interleaved rotate_every_two) and a view that does not merge stay."""

from __future__ import annotations

from pass_testing import apply, check_same, ops, parse

from onnx_fuse.passes.stack_merge import StackMergePass

HEAD = '<ir_version: 9, opset_import: ["" : 17]>'


def _stack(axis: int, target: str) -> str:
    return f"""{HEAD}
g (float[B, 5, 4, 8] a, float[B, 5, 4, 8] b) => (float[B, 5, 4, 16] y) {{
    ax = Constant<value = int64[1] {{{axis}}}>()
    n = Neg(b)
    ua = Unsqueeze(n, ax)
    ub = Unsqueeze(a, ax)
    c = Concat<axis = {axis}>(ua, ub)
    t = Constant<value = int64[4] {{{target}}}>()
    y = Reshape(c, t)
}}"""


def test_rotate_half_stack_becomes_concat():
    proto = parse(_stack(3, "0, 0, 4, 16"))
    model, modified, p = apply(StackMergePass, proto, shape_inference=True)
    assert modified and p.stats["stack"] == 1
    assert ops(model) == {"Neg": 1, "Concat": 1}, ops(model)
    check_same(proto, model)


def test_stack_at_the_last_axis_stays():
    """stack(.., axis=-1).flatten(-2) interleaves the two: no Concat on the last axis."""
    proto = parse(_stack(4, "0, 0, 4, 16"))
    model, modified, p = apply(StackMergePass, proto, shape_inference=True)
    assert not modified and ops(model)["Unsqueeze"] == 2


def test_view_that_does_not_merge_stays():
    """A view to [B, 5, 8, 8] keeps the stack (it is not the operands' dims with the last doubled)."""
    proto = parse(_stack(3, "0, 0, 8, 8").replace("float[B, 5, 4, 16] y", "float[B, 5, 8, 8] y"))
    model, modified, p = apply(StackMergePass, proto, shape_inference=True)
    assert not modified


def test_split_rotate_half_takes_an_equal_split_before_opset_18():
    """tf.split's Split at opset 17 names no sizes (equal parts, one per output): split-rotate-half
    reads them (ort_contrib.split_sizes); a symbolic dim (sizes unknown) stays."""
    from onnx_fuse.passes.split_rotate_half import SplitRotateHalfPass

    def model(d):
        return parse(f"""{HEAD}
g (float[2, 3, 4, {d}] x) => (float[2, 3, 4, {d}] y) {{
    a, b = Split<axis = -1>(x)
    n = Neg(b)
    y = Concat<axis = -1>(n, a)
}}""")

    proto = model(8)
    m, modified, p = apply(SplitRotateHalfPass, proto, shape_inference=True)
    assert modified and ops(m) == {"Slice": 2, "Neg": 1, "Concat": 1}, ops(m)
    check_same(proto, m)
    assert not apply(SplitRotateHalfPass, model("D"), shape_inference=True)[1]
