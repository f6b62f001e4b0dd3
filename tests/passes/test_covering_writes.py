"""CoveringWritesPass: ScatterND writes that fill a buffer's first axis in order are the Concat of their updates."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse
from onnx_fuse.passes.covering_writes import CoveringWritesPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def _idx(values) -> str:
    return ", ".join(str(v) for v in values)


def key_states(first=range(0, 6), second=range(6, 10), reduction: str = "none", read_mid: bool = False,
               back_and_forth: bool = False) -> str:
    """DeepSeek V3's key_states as dynamo writes it: an empty [B, H, S, 10] buffer, then
    ``k[..., :6] = k_nope`` and ``k[..., 6:] = k_pe`` (expanded over the heads) as ScatterND on the buffer
    transposed [3, 1, 2, 0], transposed back; ``first`` / ``second`` are the written indices."""
    first, second = list(first), list(second)
    mid_out = ", float[10, H, S, B] mid" if read_mid else ""
    mid = "\n        mid = Identity(w1)" if read_mid else ""
    # dynamo transposes the first write's result back and forth again before the second write
    pair = ("\n        wb = Transpose<perm = [3, 1, 2, 0]>(w1)\n        wf = Transpose<perm = [3, 1, 2, 0]>(wb)"
            if back_and_forth else "")
    data2 = "wf" if back_and_forth else "w1"
    return HEADER + f'''
    g (float[B, H, S, 6] nope, float[B, 1, S, {len(second)}] pe) => (float[B, H, S, 10] y{mid_out})
    <int64[{len(first)}, 1] i1 = {{{_idx(first)}}}, int64[{len(second)}, 1] i2 = {{{_idx(second)}}},
     int64[1] ten = {{10}}, float[10] scale = {{1.0, 0.9, 1.1, 1.2, 0.8, 1.05, 0.95, 1.3, 0.7, 1.15}}>
    {{
        zero_1 = Constant<value_ints = [0]>()
        three_1 = Constant<value_ints = [3]>()
        four_1 = Constant<value_ints = [{len(second)}]>()
        sn = Shape(nope)
        lead = Slice(sn, zero_1, three_1)
        full = Concat<axis = 0>(lead, ten)
        buf = ConstantOfShape<value = float[1] {{0.0}}>(full)
        sh4 = Concat<axis = 0>(lead, four_1)
        pe_e = Expand(pe, sh4)
        bt = Transpose<perm = [3, 1, 2, 0]>(buf)
        nt = Transpose<perm = [3, 1, 2, 0]>(nope)
        w1 = ScatterND<reduction = "{reduction}">(bt, i1, nt)
        pt = Transpose<perm = [3, 1, 2, 0]>(pe_e){pair}
        w2 = ScatterND({data2}, i2, pt){mid}
        k = Transpose<perm = [3, 1, 2, 0]>(w2)
        y = Mul(k, scale)
    }}'''


def feeds(b: int, h: int, s: int, pe: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(b * 100 + h * 10 + s)
    return {"nope": rng.standard_normal((b, h, s, 6)).astype(np.float32),
            "pe": rng.standard_normal((b, 1, s, pe)).astype(np.float32)}


def test_two_writes_covering_the_axis_are_one_concat():
    proto = parse(key_states())
    model, modified, p = apply(CoveringWritesPass, proto, shape_inference=True)
    assert modified and p.stats == {"writes": 2}
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

    DeadCodeEliminationPass()(model)
    counts = ops(model)
    assert "ScatterND" not in counts and "ConstantOfShape" not in counts and counts["Concat"] >= 1, counts
    for b, h, s in ((2, 3, 5), (1, 2, 7)):
        check_same(proto, model, inputs=feeds(b, h, s))


@pytest.mark.parametrize("target,level", [("ort", 1), ("ort", 2), ("ort", 3), ("onnx", 3), ("trt", 4)])
def test_optimize_leaves_a_last_axis_concat_without_transposes(target, level):
    proto = parse(key_states())
    result = onnx_fuse.optimize(proto, level=level, target=target, verify=True,
                                shapes={"nope": (2, 3, 5, 6), "pe": (2, 1, 5, 4)})
    counts = ops(result.model)
    assert "ScatterND" not in counts and "ConstantOfShape" not in counts, counts
    if level == 1:   # the Transposes around the Concat meet in fold-layout-chains (O2 on)
        assert counts["Transpose"] == 3, counts
        return
    assert "Transpose" not in counts, counts
    assert result.report.passed
    cat = [n for n in result.model.graph if n.op_type == "Concat" and len(n.inputs) == 2
           and n.inputs[0].name == "nope"]
    assert cat and cat[0].attributes["axis"].value in (3, -1)
    check_same(proto, result.model, inputs=feeds(3, 2, 4))


def test_writes_with_the_result_transposed_back_and_forth_between_them():
    # the form dynamo writes (DeepSeek V3): the second write's data is the first's output through a Transpose
    # pair that composes to the identity; taken in the first cleanup, before the rules
    proto = parse(key_states(back_and_forth=True))
    model, modified, p = apply(CoveringWritesPass, proto, shape_inference=True)
    assert modified and p.stats == {"writes": 2}
    check_same(proto, model, inputs=feeds(2, 3, 5))
    result = onnx_fuse.optimize(proto, level=1, target="ort", verify=True,
                                shapes={"nope": (2, 3, 5, 6), "pe": (2, 1, 5, 4)})
    assert "ScatterND" not in ops(result.model), ops(result.model)
    check_same(proto, result.model, inputs=feeds(1, 2, 3))


def test_writes_in_either_order_and_negative_indices():
    # the rope part written first, with indices counted from the end
    proto = parse(key_states(first=range(0, 6), second=range(-4, 0)))
    model, modified, p = apply(CoveringWritesPass, proto, shape_inference=True)
    assert modified and p.stats == {"writes": 2}
    check_same(proto, model, inputs=feeds(2, 3, 5))


@pytest.mark.parametrize("first,second,why", [
    (range(0, 6), range(7, 10), "a gap: column 6 keeps the buffer's zeros"),
    (range(0, 6), range(5, 9), "an overlap and column 9 unwritten"),
    ([1, 0, 2, 3, 4, 5], range(6, 10), "a run out of order (a permutation, not a Concat)"),
])
def test_writes_that_do_not_cover_in_order_stay(first, second, why):
    proto = parse(key_states(first=first, second=second))
    model, modified, p = apply(CoveringWritesPass, proto, shape_inference=True)
    assert not modified and ops(model)["ScatterND"] == 2, why
    check_same(proto, model, inputs=feeds(2, 3, 5, pe=len(list(second))))


def test_reduction_and_a_read_intermediate_write_stay():
    proto = parse(key_states(reduction="add"))
    model, modified, _ = apply(CoveringWritesPass, proto, shape_inference=True)
    assert not modified and ops(model)["ScatterND"] == 2
    check_same(proto, model, inputs=feeds(2, 3, 5))
    proto = parse(key_states(read_mid=True))   # the first write is also a graph output: its buffer is read
    model, modified, _ = apply(CoveringWritesPass, proto, shape_inference=True)
    assert not modified and ops(model)["ScatterND"] == 2
    check_same(proto, model, inputs=feeds(2, 3, 5))


@pytest.mark.parametrize("level", [1, 3])
def test_one_write_of_a_graph_input_as_the_graph_output(level):
    # the write covers everything: the output is the updates, a graph input, which cannot take the output's name
    proto = parse(HEADER + '''
    g (float[3, 4] x, float[3, 4] u) => (float[3, 4] y)
    <int64[3, 1] idx = {0, 1, 2}>
    {
        y = ScatterND(x, idx, u)
    }''')
    model, modified, p = apply(CoveringWritesPass, proto, shape_inference=True)
    assert modified and p.stats == {"writes": 1} and ops(model) == {"Identity": 1}
    rng = np.random.default_rng(level)
    feeds_ = {"x": rng.standard_normal((3, 4)).astype(np.float32), "u": rng.standard_normal((3, 4)).astype(np.float32)}
    check_same(proto, model, inputs=feeds_)
    result = onnx_fuse.optimize(proto, level=level, target="ort", verify=True)
    assert "ScatterND" not in ops(result.model) and [v.name for v in result.model.graph.outputs] == ["y"]
    check_same(proto, result.model, inputs=feeds_)


def test_a_branch_output_written_from_outer_values():
    # inside an If branch the covering write's updates are an outer computed value: the branch output stays a node of
    # the branch (an Identity), never the outer value itself
    proto = parse(HEADER + '''
    g (bool c, float[3, 4] x, float[3, 4] u) => (float[3, 4] y)
    <int64[3, 1] idx = {0, 1, 2}>
    {
        w = Relu(u)
        y = If(c) <then_branch = t () => (float[3, 4] t_out) {
            t_out = ScatterND(x, idx, w)
        }, else_branch = e () => (float[3, 4] e_out) {
            e_out = Neg(x)
        }>
    }''')
    rng = np.random.default_rng(7)
    feeds_ = {"x": rng.standard_normal((3, 4)).astype(np.float32), "u": rng.standard_normal((3, 4)).astype(np.float32)}
    for level in (1, 3):
        result = onnx_fuse.optimize(proto, level=level, target="ort", verify=False)
        for c in (True, False):
            check_same(proto, result.model, inputs={"c": np.array(c), **feeds_})
