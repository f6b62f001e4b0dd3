"""RotaryEmbedding-23 whose caches are rows gathered from two tables by one index (rotary-caches-gathered-rows,
rules/rope/rotary_gathered_caches.yaml): the tables become the caches and the index position_ids, whatever wrote
the node. Written directly (Gather / GatherND, expanded to x's batch or not, the 4-D op and the 3-D form), and
through the general rotary-rotate-half-tables over `cos[position_ids]` tables (CLVP's spelling in the bshd and
layout [B, S, H, D], which no single-spelling rule reads). Compared with the original in ONNX Runtime with
shuffled positions; caches gathered by two different indices are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D, ROWS = 2, 3, 5, 8, 9
I64 = TensorProto.INT64


def _angles(rows=ROWS, half=D // 2):
    inv = 1.0 / 100 ** (np.arange(half) / half)
    return (np.arange(rows)[:, None] * inv[None, :]).astype(np.float32)


def _gather(n, table, out, index, gather_nd):
    if gather_nd:
        return [n("GatherND", [table, f"{index}_nd"], [out])]
    return [n("Gather", [table, index], [out], axis=0)]


def _rotary_node_model(h, *, gather_nd, expand, three_d, other_index=False):
    """RotaryEmbedding(x, Expand?(Gather(ct, pos)), Expand?(Gather(st, pos))) with no position_ids."""
    n = h.node
    nodes = [n("Unsqueeze", ["pos", "last"], ["pos_nd"]), n("Unsqueeze", ["pos2", "last"], ["pos2_nd"])]
    nodes += _gather(n, "ct", "cg", "pos", gather_nd)
    nodes += _gather(n, "st", "sg", "pos2" if other_index else "pos", gather_nd)
    cc, sc = "cg", "sg"
    if expand:
        nodes += [n("Shape", ["x"], ["bd"], start=0, end=1), n("Concat", ["bd", "ones"], ["tgt"], axis=0),
                  n("Expand", ["cg", "tgt"], ["ce"]), n("Expand", ["sg", "tgt"], ["se"])]
        cc, sc = "ce", "se"
    if three_d:
        nodes.append(n("RotaryEmbedding", ["x", cc, sc], ["y"], num_heads=H))
        shape = [B, S, H * D]
    else:
        nodes.append(n("RotaryEmbedding", ["x", cc, sc], ["y"]))
        shape = [B, H, S, D]
    pb = 1 if expand else B
    inits = {"last": np.array([-1], np.int64), "ones": np.array([1, 1], np.int64)}
    inputs = [h.vi("x", shape), h.vi("ct", [ROWS, D // 2]), h.vi("st", [ROWS, D // 2]),
              h.vi("pos", [pb, S], I64), h.vi("pos2", [pb, S], I64)]
    return h.make_model(nodes, inputs, [h.vi("y", shape)], inits), shape, pb


def _feeds(h, shape, pb):
    a = _angles()
    r = h.rng
    return {"x": r.standard_normal(shape).astype(np.float32), "ct": np.cos(a), "st": np.sin(a),
            "pos": np.stack([r.permutation(ROWS)[:S] for _ in range(pb)]).astype(np.int64),
            "pos2": np.stack([r.permutation(ROWS)[:S] for _ in range(pb)]).astype(np.int64)}


def _position_ids_form(h, out):
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Gather" not in ops and "GatherND" not in ops, ops
    rot = next(nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    assert len(rot.input) == 4 and rot.input[3], rot.input
    assert "rotary-caches-gathered-rows" in h.fired(out), h.fired(out)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("gather_nd,expand,three_d", [(True, True, False), (False, True, False), (False, False, False),
                                                      (True, True, True), (False, False, True)])
def test_gathered_caches_become_position_ids(h, target, gather_nd, expand, three_d):
    model, shape, pb = _rotary_node_model(h, gather_nd=gather_nd, expand=expand, three_d=three_d)
    out = h.fuse(model, target)
    _position_ids_form(h, out)
    h.assert_close(model, out, _feeds(h, shape, pb))


def test_caches_gathered_by_two_indices_stay(h):
    """cos rows by pos, sin rows by pos2: no one position_ids reads both."""
    model, shape, pb = _rotary_node_model(h, gather_nd=True, expand=True, three_d=False, other_index=True)
    out = h.fuse(model, "ort")
    assert "rotary-caches-gathered-rows" not in h.fired(out), h.fired(out)
    assert h.ops(out)["GatherND"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h, shape, pb))


def _clvp_bshd(h, gather_nd):
    """CLVP's tables (emb = concat(f, f)[None]; cos, sin = emb.cos()[0], emb.sin()[0]; cos[position_ids]) with
    x [B, S, H, D]: the rows [1, S, D] unsqueezed at 2."""
    n = h.node
    nodes = [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Unsqueeze", ["cat", "zero"], ["emb"]),
             n("Cos", ["emb"], ["co"]), n("Sin", ["emb"], ["si"]),
             n("Squeeze", ["co", "zero"], ["cq"]), n("Squeeze", ["si", "zero"], ["sq"]),
             n("Unsqueeze", ["pos", "last"], ["pos_nd"])]
    nodes += _gather(n, "cq", "cg", "pos", gather_nd) + _gather(n, "sq", "sg", "pos", gather_nd)
    nodes += [n("Unsqueeze", ["cg", "two"], ["cu"]), n("Unsqueeze", ["sg", "two"], ["su"])]
    shape = [B, S, H, D]
    nodes += [n("Mul", ["x", "cu"], ["c"]),
              n("Slice", ["x", "s0", "sh", "ax"], ["x1"]), n("Slice", ["x", "sh", "big", "ax"], ["x2"]),
              n("Neg", ["x2"], ["nx"]), n("Concat", ["nx", "x1"], ["r"], axis=-1), n("Mul", ["r", "su"], ["s"]),
              n("Add", ["c", "s"], ["y"])]
    inits = {"zero": np.array([0], np.int64), "one": np.array([1], np.int64), "two": np.array([2], np.int64),
             "last": np.array([-1], np.int64), "s0": np.array([0], np.int64), "sh": np.array([D // 2], np.int64),
             "big": np.array([2 ** 62], np.int64), "ax": np.array([-1], np.int64)}
    inputs = [h.vi("x", shape), h.vi("f", [ROWS, D // 2]), h.vi("pos", [1, S], I64)]
    return h.make_model(nodes, inputs, [h.vi("y", shape)], inits), shape


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("gather_nd", [True, False])
def test_computed_tables_gathered_before_the_head_transpose(h, target, gather_nd):
    """The general rule fuses these; its caches (the gathered rows, halved) then take the position_ids form:
    Cos(f) / Sin(f) [rows, D/2] as caches, no gather, no Expand of the rows, no Squeeze left."""
    model, shape = _clvp_bshd(h, gather_nd)
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    _position_ids_form(h, out)
    assert "Squeeze" not in h.ops(out) and h.ops(out)["Cos"] == 1, h.ops(out)
    feeds = {"x": h.rng.standard_normal(shape).astype(np.float32), "f": _angles(),
             "pos": h.rng.permutation(ROWS)[:S][None].astype(np.int64)}
    h.assert_close(model, out, feeds)


def _row_cut_model(h, *, start=0, buffer4=False):
    """RotaryEmbedding(x, cut(ct), cut(st), position_ids), cut = the first rows up to S + past ([1, 1, P, D/2]
    buffers cut on axis 2 and squeezed back to [rows, D/2] when buffer4)."""
    n = h.node
    nodes = [n("Shape", ["pos"], ["plen"], start=1, end=2), n("Add", ["plen", "past"], ["pend"])]
    for t in ("ct", "st"):
        if buffer4:
            nodes += [n("Slice", [t, "i_start", "pend", "ax2"], [t + "c"]),
                      n("Squeeze", [t + "c", "ax1"], [t + "q"]), n("Squeeze", [t + "q", "ax0"], [t + "s"])]
        else:
            nodes.append(n("Slice", [t, "i_start", "pend", "ax0"], [t + "s"]))
    nodes.append(n("RotaryEmbedding", ["x", "cts", "sts", "pos"], ["y"]))
    table = [1, 1, ROWS, D // 2] if buffer4 else [ROWS, D // 2]
    inits = {"i_start": np.array([start], np.int64), "past": np.array([2], np.int64),
             "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64)}
    a = _angles()
    inits.update(ct=np.cos(a).reshape(table), st=np.sin(a).reshape(table))
    shape = ["b", H, "s", D]   # the cut's end read from the positions at run time
    model = h.make_model(nodes, [h.vi("x", shape), h.vi("pos", ["b", "s"], I64)], [h.vi("y", shape)], inits)
    feeds = {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32),
             "pos": np.stack([np.arange(S) + 1, np.arange(S)]).astype(np.int64)}   # below the cut's S + 2 - start rows
    return model, feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("buffer4", [False, True])
def test_position_caches_cut_to_first_rows_take_the_whole_tables(h, target, buffer4):
    model, feeds = _row_cut_model(h, buffer4=buffer4)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops == {"RotaryEmbedding": 1}, ops
    assert "rotary-position-caches-row-cut" in h.fired(out), h.fired(out)
    rot = next(nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    cache = next(i for i in out.graph.initializer if i.name == rot.input[1])
    assert list(cache.dims) == [ROWS, D // 2]
    h.assert_close(model, out, feeds)


def test_position_caches_cut_past_the_first_rows_stay(h):
    """rows 1.. of the tables: position p reads row p + 1 of the whole table, so the cut stays."""
    model, feeds = _row_cut_model(h, start=1)
    out = h.fuse(model, "ort")
    assert "rotary-position-caches-row-cut" not in h.fired(out) and h.ops(out)["Slice"] == 2, h.ops(out)
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_index_of_one_unsqueeze_of_two_axes_loses_its_last_axis_there(h, target):
    """GatherND's index arange(S)[None][:, :, None] written as one Unsqueeze(r, [0, 2]) (unsqueeze-of-unsqueeze
    merges the export's two; CLVP dyn_mask): the position_ids [1, S] are Unsqueeze(r, [0]), no Reshape of the
    [1, S, 1] index left (a Reshape(idx, [0, 0]) kept it and the merged Unsqueeze: one node more)."""
    n = h.node
    nodes = [n("Unsqueeze", ["r", "ax02"], ["pos_nd"])]
    nodes += _gather(n, "ct", "cg", "pos", True) + _gather(n, "st", "sg", "pos", True)
    nodes += [n("Shape", ["x"], ["bd"], start=0, end=1), n("Concat", ["bd", "ones"], ["tgt"], axis=0),
              n("Expand", ["cg", "tgt"], ["ce"]), n("Expand", ["sg", "tgt"], ["se"]),
              n("RotaryEmbedding", ["x", "ce", "se"], ["y"])]
    shape = [B, H, S, D]
    inits = {"ax02": np.array([0, 2], np.int64), "ones": np.array([1, 1], np.int64)}
    inputs = [h.vi("x", shape), h.vi("ct", [ROWS, D // 2]), h.vi("st", [ROWS, D // 2]), h.vi("r", [S], I64)]
    model = h.make_model(nodes, inputs, [h.vi("y", shape)], inits)
    out = h.fuse(model, target)
    _position_ids_form(h, out)
    ops = h.ops(out)
    assert "Reshape" not in ops and "Squeeze" not in ops and ops["Unsqueeze"] == 1, ops
    a = _angles()
    feeds = {"x": h.rng.standard_normal(shape).astype(np.float32), "ct": np.cos(a), "st": np.sin(a),
             "r": h.rng.permutation(ROWS)[:S].astype(np.int64)}
    h.assert_close(model, out, feeds)
