"""Rotate-half RoPE whose tables are computed in the graph and gathered by position_ids (CLVP's text encoder under
torch.export, transformers 5.25, hold-out 33):

    emb = concat(f, f)[None];  cos, sin = emb.cos().squeeze(0), emb.sin().squeeze(0)
    cos, sin = cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)     # GatherND(t, position_ids[..., None])
    y = x * cos + rotate_half(x) * sin

is RotaryEmbedding-23 with Cos(f) / Sin(f) as caches and position_ids as its own (the general
rotary-rotate-half-tables, its caches' half Slice moved down to f, then rotary-caches-gathered-rows; until session 36
the single-spelling rotary-gathered-computed-table). Compared with the original in ONNX
Runtime with shuffled positions; tables whose angles are not shared by cos and sin are refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 3, 5, 8


def _clvp(h, *, gather_nd=True, lead=True, other_sin=False):
    n = h.node
    nodes = [n("Concat", ["f", "f"], ["cat"], axis=-1)]
    emb = "cat"
    if lead:
        nodes.append(n("Unsqueeze", ["cat", "zero"], ["emb"]))
        emb = "emb"
    nodes += [n("Cos", [emb], ["co"]), n("Sin", ["g2" if other_sin else emb], ["si"])]
    if other_sin:  # sin of other angles: no single rotation
        nodes.insert(0, n("Concat", ["g", "g"], ["gc"], axis=-1))
        nodes.insert(1, n("Unsqueeze", ["gc", "zero"], ["g2"]) if lead else n("Identity", ["gc"], ["g2"]))
    cq, sq = "co", "si"
    if lead:
        nodes += [n("Squeeze", ["co", "zero"], ["cq"]), n("Squeeze", ["si", "zero"], ["sq"])]
        cq, sq = "cq", "sq"
    if gather_nd:
        nodes += [n("Unsqueeze", ["pos", "last"], ["idx"]), n("GatherND", [cq, "idx"], ["cg"]),
                  n("GatherND", [sq, "idx"], ["sg"])]
    else:
        nodes += [n("Gather", [cq, "pos"], ["cg"], axis=0), n("Gather", [sq, "pos"], ["sg"], axis=0)]
    nodes += [n("Unsqueeze", ["cg", "one"], ["cu"]), n("Unsqueeze", ["sg", "one"], ["su"]),
              n("Mul", ["x", "cu"], ["c"]),
              n("Slice", ["x", "s0", "sh", "ax"], ["x1"]), n("Slice", ["x", "sh", "big", "ax"], ["x2"]),
              n("Neg", ["x2"], ["nx"]), n("Concat", ["nx", "x1"], ["r"], axis=-1), n("Mul", ["r", "su"], ["s"]),
              n("Add", ["c", "s"], ["y"])]
    inits = {"zero": np.array([0], np.int64), "one": np.array([1], np.int64), "last": np.array([-1], np.int64),
             "s0": np.array([0], np.int64), "sh": np.array([D // 2], np.int64), "big": np.array([2 ** 62], np.int64),
             "ax": np.array([-1], np.int64)}
    inputs = [h.vi("x", [B, H, S, D]), h.vi("f", [S, D // 2]), h.vi("pos", [1, S], TensorProto.INT64)]
    if other_sin:
        inputs.append(h.vi("g", [S, D // 2]))
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits)


def _feeds(h, other_sin=False):
    r = h.rng
    inv = 1.0 / 100 ** (np.arange(D // 2) / (D // 2))
    feeds = {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
             "f": (np.arange(S)[:, None] * inv[None, :]).astype(np.float32),
             "pos": r.permutation(S)[None].astype(np.int64)}
    if other_sin:
        feeds["g"] = (r.standard_normal((S, D // 2))).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("gather_nd,lead", [(True, True), (True, False), (False, False)])
def test_gathered_computed_tables_become_rotary_embedding(h, target, gather_nd, lead):
    model = _clvp(h, gather_nd=gather_nd, lead=lead)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "GatherND" not in ops and "Gather" not in ops, ops
    # the position_ids form: Cos(f) / Sin(f) as the caches, no Squeeze / Unsqueeze of the tables left
    rot = next(nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    assert len(rot.input) == 4 and rot.input[3], rot.input
    assert "Squeeze" not in ops and ops["Cos"] == 1 and ops["Sin"] == 1, ops
    h.assert_close(model, out, _feeds(h))


def test_sin_of_other_angles_is_refused(h):
    model = _clvp(h, other_sin=True)
    out = h.fuse(model, "ort")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, other_sin=True))
