"""rules/rope/rotary_partial.yaml rotary-partial on a seq-first x [S, B, H, D] (session 38): partial rotary
concat(rope(x[..., :rd]), x[..., rd:]) whose inner rope the recognizers wrote in their sbhd form (x_rot
transposed to [B, S, H, rd], the 3-D RotaryEmbedding, transposed back) becomes one RotaryEmbedding with
rotary_embedding_dim=rd on x transposed alike. Found by the rotary fuzz family (make_s34b_case seed 494: the
complex product on sbhd, 38 -> 16 nodes); numerics against the original in ORT."""

from __future__ import annotations

import numpy as np
import pytest

H, D, RD = 2, 16, 8
BIG = np.iinfo(np.int64).max
_NP = {1: np.float32, 10: np.float16}


def _graph(h, *, elem=1, pass_cut=RD):
    """x [s, b, H, D]; tables cos / sin(concat(f, f)) [S, 1, 1, RD] of f = positions x inv_freq [S, RD/2];
    y = concat(x_rot * cos + rotate_half(x_rot) * sin, x[..., pass_cut:])."""
    n = h.node
    inv = (1.0 / (10000 ** (np.arange(0, RD, 2) / RD))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax1": np.array([1], np.int64),
             "ax12": np.array([1, 2], np.int64), "inv_freq": inv, "i0": np.array([0], np.int64),
             "ird": np.array([RD], np.int64), "irh": np.array([RD // 2], np.int64), "ipass": np.array([pass_cut], np.int64),
             "iend": np.array([BIG], np.int64), "ilast": np.array([-1], np.int64)}
    nodes = [n("Shape", ["x"], ["xs"], start=0, end=1), n("Squeeze", ["xs"], ["s0"]),
             n("Range", ["zero", "s0", "one_i"], ["pos"]), n("Unsqueeze", ["pos", "ax1"], ["pos2"]),
             n("Cast", ["pos2"], ["posf"], to=1), n("Mul", ["posf", "inv_freq"], ["f"]),          # [S, RD/2]
             n("Concat", ["f", "f"], ["emb"], axis=-1),
             n("Cos", ["emb"], ["c32"]), n("Sin", ["emb"], ["s32"]),
             n("Cast", ["c32"], ["ct"], to=elem), n("Cast", ["s32"], ["st"], to=elem),
             n("Unsqueeze", ["ct", "ax12"], ["cu"]), n("Unsqueeze", ["st", "ax12"], ["su"]),       # [S, 1, 1, RD]
             n("Slice", ["x", "i0", "ird", "ilast"], ["xr"]),
             n("Mul", ["xr", "cu"], ["c"]),
             n("Slice", ["xr", "i0", "irh", "ilast"], ["x1"]), n("Slice", ["xr", "irh", "iend", "ilast"], ["x2"]),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
             n("Mul", ["r", "su"], ["s"]), n("Add", ["c", "s"], ["ro"]),
             n("Slice", ["x", "ipass", "iend", "ilast"], ["xp"]),
             n("Concat", ["ro", "xp"], ["y"], axis=-1)]
    dims = ["s", "b", H, D]
    out = ["s", "b", H, RD + D - pass_cut] if pass_cut != RD else dims
    return h.make_model(nodes, [h.vi("x", dims, elem)], [h.vi("y", out, elem)], inits)


def _feeds(h, seq=5, elem=1):
    return {"x": h.rng.standard_normal((seq, 3, H, D)).astype(_NP[elem])}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("elem", [1, 10])
def test_seq_first_partial_rotary_is_one_op(h, target, elem):
    model = _graph(h, elem=elem)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and not {"Slice", "Neg"} & set(ops), ops
    assert ops["Transpose"] == 2 and ops["Concat"] == 1, ops   # the caches' Expand target, no pass-through Concat
    assert h.fired(out)["rotary-partial"], h.fired(out)
    tol = 1e-5 if elem == 1 else 4e-3
    h.assert_close(model, out, _feeds(h, elem=elem), atol=tol, rtol=max(tol, 1e-4))
    h.assert_close(model, out, _feeds(h, seq=2, elem=elem), atol=tol, rtol=max(tol, 1e-4))


def test_pass_through_not_the_rest_stays(h):
    """x[..., RD + 2:] passed through: not x's other columns, so not one partial rotation."""
    model = _graph(h, pass_cut=RD + 2)
    out = h.fuse(model, "onnx")
    assert "rotary-partial" not in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h))
