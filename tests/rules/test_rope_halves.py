"""rules/rope/rotary.yaml rotary-halves: RoPE written out half by half,
concat(a*cos - b*sin, b*cos + a*sin), as transformers 5's DeepSeek-V3 writes it (a, b = the even and
odd lanes of x, cos/sin cut to their first half) -> RotaryEmbedding-23 of concat(a, b)."""

from __future__ import annotations

import numpy as np
import pytest

H, D = 2, 8
BIG = np.iinfo(np.int64).max


def _graph(h, *, strided=True, sign="-", table_cut=True):
    n = h.node
    nodes = [
        n("Shape", ["x"], ["xs"], start=2, end=3), n("Squeeze", ["xs"], ["s0"]),
        n("Range", ["zero", "s0", "one_i"], ["pos"]), n("Unsqueeze", ["pos", "ax02"], ["pos3"]),
        n("Cast", ["pos3"], ["posf"], to=1), n("Mul", ["posf", "inv_freq"], ["f"]),   # [1,S,D/2]
    ]
    if table_cut:  # cos(concat(f, f))[..., :D/2] (DeepSeek-V3)
        nodes += [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["cw"]), n("Sin", ["cat"], ["sw"]),
                  n("Slice", ["cw", "i0", "ihalf", "ilast"], ["ct"]), n("Slice", ["sw", "i0", "ihalf", "ilast"], ["st"])]
    else:
        nodes += [n("Cos", ["f"], ["ct"]), n("Sin", ["f"], ["st"])]
    if strided:  # even and odd lanes
        nodes += [n("Slice", ["x", "i0", "iend", "ilast", "two"], ["a"]),
                  n("Slice", ["x", "i1", "iend", "ilast", "two"], ["b"])]
    else:
        nodes += [n("Slice", ["x", "i0", "ihalf", "ilast"], ["a"]), n("Slice", ["x", "ihalf", "iend", "ilast"], ["b"])]
    nodes += [
        n("Unsqueeze", ["ct", "ax1"], ["cu"]), n("Unsqueeze", ["st", "ax1"], ["su"]),
        n("Mul", ["a", "cu"], ["m1"]), n("Mul", ["b", "su"], ["m2"]),
        n("Sub" if sign == "-" else "Add", ["m1", "m2"], ["lo"]),
        n("Mul", ["b", "cu"], ["m3"]), n("Mul", ["su", "a"], ["m4"]),   # inputs in either order
        n("Add", ["m3", "m4"], ["hi"]),
        n("Concat", ["lo", "hi"], ["y"], axis=-1),
    ]
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax02": np.array([0, 2], np.int64),
             "ax1": np.array([1], np.int64), "inv_freq": inv, "i0": np.array([0], np.int64),
             "i1": np.array([1], np.int64), "ihalf": np.array([D // 2], np.int64), "iend": np.array([BIG], np.int64),
             "ilast": np.array([-1], np.int64), "two": np.array([2], np.int64)}
    return h.make_model(nodes, [h.vi("x", ["b", H, "s", D])], [h.vi("y", ["b", H, "s", D])], inits)


def _feeds(h):
    return {"x": h.rng.standard_normal((2, H, 5, D)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("strided,table_cut", [(True, True), (False, False), (True, False)])
def test_rope_written_in_halves_fuses(h, target, strided, table_cut):
    model = _graph(h, strided=strided, table_cut=table_cut)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Sub" not in ops, ops
    assert "rotary-halves" in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_wrong_sign_is_not_a_rotation(h):
    """concat(a*cos + b*sin, ...): not what RotaryEmbedding computes."""
    model = _graph(h, sign="+")
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))
