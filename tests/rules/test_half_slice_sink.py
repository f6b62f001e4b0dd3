"""half-slice-below-* (rules/rope/half_slice_sink.yaml): rotary-rotate-half-tables writes the first half of
its tables, Slice(t, 0:D/2), as the caches; the Slice moves down through the ops that keep the last axis
until half-of-doubled-table turns Slice(Concat(f, f)) into f, so the caches are Cos / Sin of the half
angles f, not of a table twice as wide. Built here: seq-first x [S, B, H, D] with Cos / Sin(concat(f, f))
moved by a Transpose and unsqueezed at the heads; wav2vec2-conformer's table (unsqueezed twice, rows cut at
run time); CLVP's (Cos of an unsqueezed table, squeezed, rows gathered by GatherND). Each is fused, compared
with the unfused graph in ONNX Runtime, and must keep no Concat(f, f) and no Cos / Sin of a full-width
table. Refused: a table also read whole elsewhere (a graph output) keeps its one Cos / Sin."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.test_rotary_rotate_half_tables import _angles, _model, _seq_first

TARGETS = ["ort", "onnx", "trt"]


def _lean(h, model, target, feeds, angles="f"):
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1, ops
    prod = {o: nd for nd in out.graph.node for o in nd.output}
    for nd in out.graph.node:
        if nd.op_type == "Concat":
            assert list(nd.input) != [angles, angles], "the doubled table is still built"
        if nd.op_type in ("Cos", "Sin"):
            p = prod.get(nd.input[0])
            assert p is None or p.op_type != "Concat", f"{nd.op_type} of a full-width table"
    h.assert_close(model, out, feeds, atol=1e-5, rtol=1e-4)
    return out


def _wav2vec2_conformer(h, with_output=False):
    """[S, D/2] angles -> Cos / Sin(concat(f, f)) [S, D] -> Unsqueeze(1) twice [S, 1, 1, D] -> rows [0, s)
    cut at run time (s = x's length), x [S, B, H, D]."""
    n = h.node
    nodes = [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"]),
             n("Unsqueeze", ["co", "one"], ["cu1"]), n("Unsqueeze", ["cu1", "one"], ["cu2"]),
             n("Unsqueeze", ["si", "one"], ["su1"]), n("Unsqueeze", ["su1", "one"], ["su2"]),
             n("Shape", ["x"], ["sx"], start=0, end=1),
             n("Slice", ["cu2", "z", "sx"], ["c"]), n("Slice", ["su2", "z", "sx"], ["s"])]
    return nodes, {"one": np.array([1], np.int64)}


@pytest.mark.parametrize("target", TARGETS)
def test_seq_first_computed_tables_cached_as_half_angles(h, target):
    S, B, H, D = 5, 2, 3, 8
    n = h.node
    lay, li = _seq_first(h)
    pre = [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["c0"]), n("Sin", ["cat"], ["s0"]), *lay]
    model = _model(h, ["s", B, H, D], pre, [h.vi("f", [1, "s", D // 2])], li)
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32), "f": _angles(S, D // 2)[None]}
    _lean(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_cut_from_a_twice_unsqueezed_table(h, target):
    S, B, H, D, rows = 4, 2, 2, 16, 9
    nodes, inits = _wav2vec2_conformer(h)
    model = _model(h, ["s", B, H, D], nodes, [h.vi("f", [rows, D // 2])], inits)
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32), "f": _angles(rows, D // 2)}
    _lean(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_gathered_from_a_squeezed_table(h, target):
    """CLVP: Cos / Sin(Unsqueeze(concat(f, f), 0)) squeezed back, rows gathered by GatherND(position_ids[..., None]),
    unsqueezed at the heads for x [B, H, S, D]."""
    B, H, S, D, rows = 2, 2, 4, 8, 7
    n = h.node
    nodes = [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Unsqueeze", ["cat", "z"], ["cu"]),
             n("Cos", ["cu"], ["co"]), n("Sin", ["cu"], ["si"]),
             n("Squeeze", ["co", "z"], ["cq"]), n("Squeeze", ["si", "z"], ["sq"]),
             n("Unsqueeze", ["pos", "m1"], ["idx"]),
             n("GatherND", ["cq", "idx"], ["cg"]), n("GatherND", ["sq", "idx"], ["sg"]),
             n("Unsqueeze", ["cg", "one"], ["c"]), n("Unsqueeze", ["sg", "one"], ["s"])]
    model = _model(h, [B, H, "s", D], nodes, [h.vi("f", [rows, D // 2]), h.vi("pos", [B, "s"], 7)],
                   {"one": np.array([1], np.int64)})
    feeds = {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32), "f": _angles(rows, D // 2),
             "pos": np.stack([np.arange(S) + b for b in range(B)]).astype(np.int64)}
    _lean(h, model, target, feeds)


def test_a_table_read_whole_elsewhere_is_not_split(h):
    """The unsqueezed full Cos table is also a graph output: moving the half Slice below it would compute Cos
    twice (half_readers refuses; half-of-doubled-table-cos, which takes Slice(Cos(Concat)) whatever reads
    the Cos, is not reached)."""
    S, B, H, D, rows = 4, 2, 2, 16, 9
    nodes, inits = _wav2vec2_conformer(h)
    model = _model(h, ["s", B, H, D], nodes, [h.vi("f", [rows, D // 2])], inits)
    model.graph.output.append(h.vi("cu2", [rows, 1, 1, D]))
    feeds = {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32), "f": _angles(rows, D // 2)}
    out = h.fuse(model, "ort", 3)
    ops = h.ops(out)
    assert ops["Cos"] == 1 and ops["Sin"] == 1, ops
    h.assert_close(model, out, feeds, atol=1e-5, rtol=1e-4)
