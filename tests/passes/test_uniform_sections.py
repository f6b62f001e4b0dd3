"""UniformSectionsPass: XD-RoPE's per-section stream Gathers (HunYuan-VL's text model, hold-out 34) of positions
that are one Expand'ed stream become one Gather, so the tables are the concat(c, c) the RoPE rules read."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse
from onnx_fuse.passes.uniform_sections import UniformSectionsPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'
INV = ", ".join(f"{10000.0 ** (-k / 4):.6f}" for k in range(4))


def xd_tables(pos_type: str = "int64[1, B, S] pos", idx: tuple = (0, 1, 2, 3), order: tuple = (0, 1, 2, 3),
              cat_axis: int = -1) -> str:
    """HunYuan-VL's recomposition as dynamo writes it: positions [4, B, S] Expand'ed from ``pos``, freqs
    [4, B, S, 4], cos / sin of cat(freqs, freqs) split into four sections of 2 on the last axis, section i taken
    at stream idx[i] (Gather on axis 0), the pieces concatenated (in ``order``) on the last axis."""
    pieces = ", ".join(f"p{i}" for i in order)
    return HEADER + f'''
    g ({pos_type}, float[B, S] ref) => (float[B, S, 8] cos_t)
    <float[4] inv = {{{INV}}}, int64[1] four = {{4}}, int64[1] ax3 = {{3}}, int64[4] sz = {{2, 2, 2, 2}},
     int64 i0 = {{{idx[0]}}}, int64 i1 = {{{idx[1]}}}, int64 i2 = {{{idx[2]}}}, int64 i3 = {{{idx[3]}}}>
    {{
        shp = Shape(ref)
        tgt = Concat<axis = 0>(four, shp)
        p4 = Expand(pos, tgt)
        pu = Unsqueeze(p4, ax3)
        pf = Cast<to = 1>(pu)
        f = Mul(pf, inv)
        c = Cos(f)
        cc = Concat<axis = -1>(c, c)
        s0, s1, s2, s3 = Split<axis = -1>(cc, sz)
        p0 = Gather<axis = 0>(s0, i0)
        p1 = Gather<axis = 0>(s1, i1)
        p2 = Gather<axis = 0>(s2, i2)
        p3 = Gather<axis = 0>(s3, i3)
        cos_t = Concat<axis = {cat_axis}>({pieces})
    }}'''


def feeds(b: int, s: int, streams: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(b * 10 + s)
    pos = np.arange(s, dtype=np.int64)[None, None, :] + rng.integers(0, 5, size=(streams, 1, 1))
    return {"pos": np.broadcast_to(pos, (streams, b, s)).copy(), "ref": rng.standard_normal((b, s)).astype(np.float32)}


def test_text_only_sections_become_concat_of_one_gather():
    proto = parse(xd_tables())
    model, modified, p = apply(UniformSectionsPass, proto, shape_inference=True)
    assert modified and p.stats == {"Concat": 1}
    out = model.graph.outputs[0].producer()
    assert out.op_type == "Concat" and out.attributes["axis"].value == -1
    assert out.inputs[0] is out.inputs[1] and out.inputs[0].producer().op_type == "Gather"   # Concat(c0, c0)
    assert out.inputs[0].producer().inputs[0].producer().op_type == "Cos"
    for b, s in ((2, 5), (1, 7)):
        check_same(proto, model, inputs=feeds(b, s))


def test_sections_at_one_index_are_taken_too():
    # every section from stream 2 (any index of a uniform axis names the same values)
    proto = parse(xd_tables(idx=(2, 2, 2, 2)))
    model, modified, _ = apply(UniformSectionsPass, proto, shape_inference=True)
    assert modified
    check_same(proto, model, inputs=feeds(2, 5))


def test_streams_fed_apart_are_kept():
    # [4, B, S] positions as they are (an image's streams differ): the sections really mix streams
    proto = parse(xd_tables("int64[4, B, S] pos"))
    model, modified, _ = apply(UniformSectionsPass, proto, shape_inference=True)
    assert not modified and ops(model)["Split"] == 1 and ops(model)["Gather"] == 4
    check_same(proto, model, inputs=feeds(2, 5, streams=4))


def test_pieces_out_of_order_are_kept():
    proto = parse(xd_tables(order=(1, 0, 2, 3)))
    model, modified, _ = apply(UniformSectionsPass, proto, shape_inference=True)
    assert not modified
    check_same(proto, model, inputs=feeds(2, 5))


def test_concat_on_another_axis_is_kept():
    # split on the batch axis, pieces joined on the sequence axis: not the split undone
    proto = parse(HEADER + '''
    g (int64[1, B, S] pos, float[B, S] ref) => (float[N, M, 4] y)
    <int64[1] four = {4}, int64[1] ax3 = {3}, int64[2] sz = {2, 2}, int64 i0 = {0}, float[4] inv = {1, 0.5, 0.25, 0.125}>
    {
        shp = Shape(ref)
        tgt = Concat<axis = 0>(four, shp)
        p4 = Expand(pos, tgt)
        pu = Unsqueeze(p4, ax3)
        pf = Cast<to = 1>(pu)
        f = Mul(pf, inv)
        s0, s1 = Split<axis = 1>(f, sz)
        p0 = Gather<axis = 0>(s0, i0)
        p1 = Gather<axis = 0>(s1, i0)
        y = Concat<axis = 1>(p0, p1)
    }''')
    _, modified, _ = apply(UniformSectionsPass, proto, shape_inference=True)
    assert not modified


ROPE = HEADER.replace('"" : 18', '"" : 23') + '''
    g (int64[1, B, S] pos, float[B, H, S, 8] x) => (float[B, H, S, 8] y)
    <float[4] inv = {%s}, int64[1] four = {4}, int64[1] ax3 = {3}, int64[4] sz = {2, 2, 2, 2},
     int64 i0 = {0}, int64 i1 = {1}, int64 i2 = {2}, int64 i3 = {3}, int64[1] one = {1}, int64[1] z = {0},
     int64[1] h = {4}, int64[1] big = {99}, int64[1] last = {-1}, int64[2] bs = {0, 2}>
    {
        shp = Shape(pos)
        bsz = Gather(shp, bs)
        tgt = Concat<axis = 0>(four, bsz)
        p4 = Expand(pos, tgt)
        pu = Unsqueeze(p4, ax3)
        pf = Cast<to = 1>(pu)
        f = Mul(pf, inv)
        c = Cos(f)
        sn = Sin(f)
        cc = Concat<axis = -1>(c, c)
        sc = Concat<axis = -1>(sn, sn)
        c0, c1, c2, c3 = Split<axis = -1>(cc, sz)
        t0, t1, t2, t3 = Split<axis = -1>(sc, sz)
        g0 = Gather<axis = 0>(c0, i0)
        g1 = Gather<axis = 0>(c1, i1)
        g2 = Gather<axis = 0>(c2, i2)
        g3 = Gather<axis = 0>(c3, i3)
        e0 = Gather<axis = 0>(t0, i0)
        e1 = Gather<axis = 0>(t1, i1)
        e2 = Gather<axis = 0>(t2, i2)
        e3 = Gather<axis = 0>(t3, i3)
        ct = Concat<axis = -1>(g0, g1, g2, g3)
        st = Concat<axis = -1>(e0, e1, e2, e3)
        cu = Unsqueeze(ct, one)
        su = Unsqueeze(st, one)
        m1 = Mul(x, cu)
        x1 = Slice(x, z, h, last)
        x2 = Slice(x, h, big, last)
        n = Neg(x2)
        r = Concat<axis = -1>(n, x1)
        m2 = Mul(r, su)
        y = Add(m1, m2)
    }''' % INV


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_xd_rope_is_rotary_embedding(target, level):
    proto = parse(ROPE)
    result = onnx_fuse.optimize(proto, level=level, target=target, verify=True,
                                shapes={"pos": (1, 2, 6), "x": (2, 3, 6, 8)})
    counts = ops(result.model)
    assert "RotaryEmbedding" in counts or "com.microsoft::RotaryEmbedding" in counts, counts
    assert "Split" not in counts and "Sin" in counts, counts
    assert result.report.verify is not None and result.report.passed
    rng = np.random.default_rng(3)
    pos = (np.arange(5)[None, None] + 2).repeat(2, 1).astype(np.int64)
    check_same(proto, result.model, inputs={"pos": pos, "x": rng.standard_normal((2, 3, 5, 8)).astype(np.float32)})
