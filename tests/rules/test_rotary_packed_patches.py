"""RoPE on packed patches x [S, H, D] (no batch axis: the vision towers' apply_rotary_pos_emb_vision, tables
[S, D] unsqueezed at -2) read by the general recognizers through table_layout's "shd" reading (session 38):
rotary-rotate-half-tables for computed tables (rotary-const-table for constant ones: tests/rules/
test_rotary_const_shd.py, rotary-const-table-shd until session 38) and rotary-halves for the halves form.
RotaryEmbedding-23's 3-D form on the [1, S, H*D] view, viewed back; numerics against the original in ORT."""

from __future__ import annotations

import numpy as np
import pytest

H, D = 3, 8
BIG = np.iinfo(np.int64).max
_NP = {1: np.float32, 10: np.float16}


def _graph(h, *, form="rotate_half", elem=1, per_head=False, seq="s"):
    """cos / sin of the patches' angles f [S, D/2] computed from their index (Range over x's rows);
    rotate_half: tables cos(concat(f, f)) [S, 1, D]; halves: cos(f) [S, 1, D/2] on x's even / odd lanes.
    per_head: one more factor [H, 1] per head, so the tables are [S, H, .]."""
    n = h.node
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax1": np.array([1], np.int64),
             "axm2": np.array([-2], np.int64), "inv_freq": inv, "i0": np.array([0], np.int64),
             "i1": np.array([1], np.int64), "ihalf": np.array([D // 2], np.int64), "iend": np.array([BIG], np.int64),
             "ilast": np.array([-1], np.int64), "two": np.array([2], np.int64),
             "per_head": np.arange(1, H + 1, dtype=np.float32)[:, None]}
    nodes = [n("Shape", ["x"], ["xs"], start=0, end=1), n("Squeeze", ["xs"], ["s0"]),
             n("Range", ["zero", "s0", "one_i"], ["pos"]), n("Unsqueeze", ["pos", "ax1"], ["pos2"]),
             n("Cast", ["pos2"], ["posf"], to=1), n("Mul", ["posf", "inv_freq"], ["f"])]        # [S, D/2]
    ang = "f"
    if form == "rotate_half":
        nodes.append(n("Concat", ["f", "f"], ["emb"], axis=-1))                                  # [S, D]
        ang = "emb"
    nodes += [n("Cos", [ang], ["c32"]), n("Sin", [ang], ["s32"]),
              n("Cast", ["c32"], ["ct"], to=elem), n("Cast", ["s32"], ["st"], to=elem),
              n("Unsqueeze", ["ct", "axm2"], ["cu0"]), n("Unsqueeze", ["st", "axm2"], ["su0"])]  # [S, 1, .]
    if per_head:
        nodes += [n("Cast", ["per_head"], ["ph"], to=elem),
                  n("Mul", ["cu0", "ph"], ["cu"]), n("Mul", ["su0", "ph"], ["su"])]            # [S, H, .]
    else:
        nodes += [n("Identity", ["cu0"], ["cu"]), n("Identity", ["su0"], ["su"])]
    if form == "rotate_half":
        nodes += [n("Mul", ["x", "cu"], ["c"]),
                  n("Slice", ["x", "i0", "ihalf", "ilast"], ["x1"]), n("Slice", ["x", "ihalf", "iend", "ilast"], ["x2"]),
                  n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
                  n("Mul", ["r", "su"], ["s"]), n("Add", ["c", "s"], ["y"])]
    else:
        nodes += [n("Slice", ["x", "i0", "iend", "ilast", "two"], ["a"]),
                  n("Slice", ["x", "i1", "iend", "ilast", "two"], ["b"]),
                  n("Mul", ["a", "cu"], ["m1"]), n("Mul", ["b", "su"], ["m2"]), n("Sub", ["m1", "m2"], ["lo"]),
                  n("Mul", ["b", "cu"], ["m3"]), n("Mul", ["a", "su"], ["m4"]), n("Add", ["m3", "m4"], ["hi"]),
                  n("Concat", ["lo", "hi"], ["y"], axis=-1)]
    return h.make_model(nodes, [h.vi("x", [seq, H, D], elem)], [h.vi("y", [seq, H, D], elem)], inits)


def _feeds(h, seq=7, elem=1):
    return {"x": h.rng.standard_normal((seq, H, D)).astype(_NP[elem])}


_RULE = {"rotate_half": "rotary-rotate-half-tables", "halves": "rotary-halves"}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["rotate_half", "halves"])
@pytest.mark.parametrize("elem", [1, 10])
def test_packed_patches_fuse(h, target, form, elem):
    model = _graph(h, form=form, elem=elem)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and not {"Neg", "Sub", "Transpose"} & set(ops), ops
    assert h.fired(out)[_RULE[form]], h.fired(out)
    tol = 1e-5 if elem == 1 else 4e-3
    h.assert_close(model, out, _feeds(h, elem=elem), atol=tol, rtol=max(tol, 1e-4))
    h.assert_close(model, out, _feeds(h, seq=2, elem=elem), atol=tol, rtol=max(tol, 1e-4))


@pytest.mark.parametrize("form", ["rotate_half", "halves"])
def test_tables_per_head_are_refused(h, form):
    """[S, H, .] tables differ per head: no [1, S, D/2] caches hold them."""
    model = _graph(h, form=form, per_head=True)
    assert any("not varying over the heads" in r for r in h.reasons(model, "onnx", _RULE[form]))
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))
