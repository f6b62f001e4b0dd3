"""SelfWriteEliminationPass: slice writes that put a tensor's own values back (interleaved M-RoPE tables)."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse
from onnx_fuse.passes.self_writes import SelfWriteEliminationPass, uniform_axes
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'
INV = ", ".join(f"{10000.0 ** (-k / 8):.6f}" for k in range(8))


def mrope(pos_type: str = "int64[1, 1, S] pos", first_idx: str = "1, 4", reduction: str = "none") -> str:
    """transformers 5's interleaved M-RoPE as dynamo writes it (Cosmos 3 / Qwen3-VL): the [3, B, S]
    positions Expand'ed from ``pos``, freqs [3, B, S, 8], then freqs[0][..., 1:6:3] = freqs[1][..., 1:6:3]
    and freqs[0][..., 2:6:3] = freqs[2][..., 2:6:3] as ScatterND on the transposed table and
    ScatterElements back into freqs along axis 0; the tables read freqs[0]."""
    return HEADER + f'''
    g ({pos_type}, float[B, S] ref) => (float[B, S, 8] cos_t, float[B, S, 8] sin_t)
    <float[8] inv = {{{INV}}}, int64 zero = {{0}}, int64 one = {{1}}, int64 two = {{2}}, int64[1] three = {{3}},
     int64[1] ax0 = {{0}}, int64[1] ax3 = {{3}}, int64[1] ax2 = {{2}}, int64[1] b1 = {{1}}, int64[1] b2 = {{2}},
     int64[1] e6 = {{6}}, int64[1] st3 = {{3}}, int64[2, 1] idx_a = {{{first_idx}}}, int64[2, 1] idx_b = {{2, 5}}>
    {{
        shp = Shape(ref)
        tgt = Concat<axis = 0>(three, shp)
        p3 = Expand(pos, tgt)
        p4 = Unsqueeze(p3, ax3)
        pf = Cast<to = 1>(p4)
        f = Mul(pf, inv)
        a1 = Gather<axis = 0>(f, one)
        a_s = Slice(a1, b1, e6, ax2, st3)
        a0 = Gather<axis = 0>(f, zero)
        a_st = Transpose<perm = [2, 1, 0]>(a_s)
        a0t = Transpose<perm = [2, 1, 0]>(a0)
        a_w = ScatterND<reduction = "{reduction}">(a0t, idx_a, a_st)
        a_n = Transpose<perm = [2, 1, 0]>(a_w)
        a_u = Unsqueeze(a_n, ax0)
        zs = Shape(a_u)
        zi = Expand(zero, zs)
        f_1 = ScatterElements<axis = 0>(f, zi, a_u)
        c2 = Gather<axis = 0>(f_1, two)
        c_s = Slice(c2, b2, e6, ax2, st3)
        c0 = Gather<axis = 0>(f_1, zero)
        c_st = Transpose<perm = [2, 1, 0]>(c_s)
        c0t = Transpose<perm = [2, 1, 0]>(c0)
        c_w = ScatterND(c0t, idx_b, c_st)
        c_n = Transpose<perm = [2, 1, 0]>(c_w)
        c_u = Unsqueeze(c_n, ax0)
        f_2 = ScatterElements<axis = 0>(f_1, zi, c_u)
        tab = Gather<axis = 0>(f_2, zero)
        cos_t = Cos(tab)
        sin_t = Sin(tab)
    }}'''


def feeds(b: int, s: int, rows: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(b * 10 + s)
    pos = np.arange(s, dtype=np.int64)[None, None, :] + rng.integers(0, 5, size=(rows, 1, 1))
    return {"pos": np.broadcast_to(pos, (rows, b, s)).copy() if rows == 3 else pos,
            "ref": rng.standard_normal((b, s)).astype(np.float32)}


def test_text_only_mrope_writes_vanish_and_tables_are_freqs_row_zero():
    proto = parse(mrope())
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert modified and p.stats == {"ScatterND": 2, "ScatterElements": 2}
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

    DeadCodeEliminationPass()(model)
    assert "ScatterND" not in ops(model) and "ScatterElements" not in ops(model)
    assert "Transpose" not in ops(model)
    tab = model.graph.outputs[0].producer().inputs[0].producer()
    assert tab.op_type == "Gather" and tab.inputs[0].producer().op_type == "Mul"   # Gather(freqs, 0)
    for b, s in ((2, 5), (1, 7)):
        check_same(proto, model, inputs=feeds(b, s))


@pytest.mark.parametrize("target,level", [("ort", 1), ("ort", 3), ("onnx", 3), ("trt", 4)])
def test_optimize_drops_the_writes_at_every_level(target, level):
    proto = parse(mrope())
    result = onnx_fuse.optimize(proto, level=level, target=target, verify=True, verify_inputs=None,
                                shapes={"pos": (1, 1, 6), "ref": (2, 6)})
    counts = ops(result.model)
    assert "ScatterND" not in counts and "ScatterElements" not in counts and "Transpose" not in counts, counts
    assert result.report.verify is not None and result.report.passed
    check_same(proto, result.model, inputs=feeds(3, 4))


def test_uniform_axes_of_the_expanded_positions():
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    model = apply(ShapeInferencePass, parse(mrope()))[0]
    values = {v.name: v for n in model.graph for v in n.outputs}
    assert uniform_axes(values["p3"]) == {0, 1}          # Expand of [1, 1, S]
    assert uniform_axes(values["f"]) == {0, 1}           # kept through Unsqueeze / Cast / Mul by [8]
    assert uniform_axes(values["a0"]) == {0}             # freqs[0]: the batch axis


def test_positions_per_section_keep_the_writes():
    # [3, B, S] positions fed as they are (images: the three sections differ): nothing is proven
    proto = parse(mrope("int64[3, B, S] pos"))
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert not modified and ops(model)["ScatterND"] == 2 and ops(model)["ScatterElements"] == 2
    check_same(proto, model, inputs=feeds(2, 5, rows=3))


def test_write_to_other_positions_is_kept():
    # the lanes 1, 4 of freqs[1] written to lanes 2, 4 of freqs[0]: a real change, even with equal rows
    proto = parse(mrope(first_idx="2, 4"))
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert ops(model)["ScatterND"] == 2       # the second write (lanes 2, 5 of a changed table) stays too
    assert p.stats.get("ScatterND", 0) == 0
    check_same(proto, model, inputs=feeds(2, 5))


def test_reduction_write_is_kept():
    proto = parse(mrope(reduction="add"))
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert ops(model)["ScatterND"] == 2
    check_same(proto, model, inputs=feeds(2, 5))


def test_no_write_no_change():
    proto = parse(HEADER + '''
    g (float[N, 4] x, float[2, 4] u) => (float[N, 4] y)
    <int64[2, 1] idx = {0, 1}>
    {
        y = ScatterND(x, idx, u)
    }''')
    model, modified, _ = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert not modified and ops(model) == {"ScatterND": 1}


def test_write_in_a_branch_of_an_outer_value_becomes_identity():
    # the then-branch writes rows 0 and 1 of the outer xr back as its output: the branch output cannot be
    # the outer value itself (the checker: "Graph output 'th_out' is not an output of any node"), so the write
    # becomes Identity(xr); both branches run
    proto = parse(HEADER + '''
    g (float[4, 3] x, bool c) => (float[4, 3] z, float[4, 3] y)
    <int64[1] s0 = {0}, int64[1] s1 = {2}, int64[1] sax = {0}>
    {
        xr = Relu(x)
        y = If(c) <then_branch = th () => (float[4, 3] th_out) <int64[2, 1] idx = {0, 1}> {
                upd = Slice(xr, s0, s1, sax)
                th_out = ScatterND(xr, idx, upd)
            }, else_branch = el () => (float[4, 3] el_out) {
                el_out = Neg(xr)
            }>
        z = Add(y, xr)
    }''')
    for level in (1, 3):
        result = onnx_fuse.optimize(proto, level=level, target="ort")
        counts = ops(result.model)
        assert "ScatterND" not in counts and "Slice" not in counts and counts["Identity"] == 1, counts
        rng = np.random.default_rng(level)
        for c in (True, False):
            check_same(proto, result.model, inputs={"x": rng.standard_normal((4, 3)).astype(np.float32),
                                                    "c": np.array(c)})


def test_write_of_a_graph_input_as_graph_output_becomes_identity():
    # y = x with rows 0 and 1 written back: y is Identity(x) (the input keeps its name, the output its own)
    proto = parse(HEADER + '''
    g (float[4, 3] x) => (float[4, 3] y)
    <int64[1] s0 = {0}, int64[1] s1 = {2}, int64[1] sax = {0}, int64[2, 1] idx = {0, 1}>
    {
        upd = Slice(x, s0, s1, sax)
        y = ScatterND(x, idx, upd)
    }''')
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass

    DeadCodeEliminationPass()(model)
    assert modified and p.stats == {"ScatterND": 1} and ops(model) == {"Identity": 1}, ops(model)
    check_same(proto, model, inputs={"x": np.arange(12, dtype=np.float32).reshape(4, 3)})


def test_a_negative_step_slice_from_before_the_start_reads_row_zero():
    # Slice(x, -100, -200, step -1) on 4 rows: the start clamps to 0 (a negative step's [0, d - 1]) and the
    # end to -1, so it is [x[0]], and writing it back to row 0 changes nothing (was mapped to row -1: kept)
    proto = parse(HEADER + '''
    g (float[4, 3] x) => (float[4, 3] y)
    <int64[1] b = {-100}, int64[1] e = {-200}, int64[1] ax = {0}, int64[1] st = {-1}, int64[1, 1] idx = {0}>
    {
        xr = Relu(x)
        upd = Slice(xr, b, e, ax, st)
        y = ScatterND(xr, idx, upd)
    }''')
    model, modified, p = apply(SelfWriteEliminationPass, proto, shape_inference=True)
    assert modified and p.stats == {"ScatterND": 1}
    check_same(proto, model, inputs={"x": np.arange(12, dtype=np.float32).reshape(4, 3) - 5})
