"""select-arith (rules/attention/select_arith.yaml) where the fill term Cast(Not(c)) * f is read by
several selects: tf2onnx writes Keras' causal mask once per layer and CSE merges the copies, so every
layer's SelectV2 reads one fill term (gpt_causal, docs/holdout.md part B); it stays for the others."""

from __future__ import annotations

import numpy as np
import pytest

LARGE_NEG = -2.3726709583555947e38   # Keras' masked softmax fill in float32


def _two_selects(h):
    """Two score tensors, one causal condition c [1, 1, S, S], one shared fill term."""
    n = h.node
    nodes = [n("Shape", ["s0"], ["shp"]), n("Gather", ["shp", "i2"], ["sl"]),
             n("Range", ["z", "sl", "one"], ["r"]), n("Unsqueeze", ["r", "ax1"], ["rows"]),
             n("Unsqueeze", ["r", "ax0"], ["cols"]), n("LessOrEqual", ["cols", "rows"], ["c2"]),
             n("Unsqueeze", ["c2", "ax01"], ["c"]),
             n("Not", ["c"], ["nc"]), n("Cast", ["nc"], ["nf"], to=1), n("Mul", ["nf", "fill"], ["f1"]),
             n("Cast", ["c"], ["cf"], to=1)]
    for i in (0, 1):
        nodes += [n("Mul", ["cf", f"s{i}"], [f"a{i}"]), n("Add", [f"a{i}", "f1"], [f"sel{i}"]),
                  n("Softmax", [f"sel{i}"], [f"y{i}"], axis=-1)]
    inits = {"i2": np.array(2, np.int64), "z": np.array(0, np.int64), "one": np.array(1, np.int64),
             "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "ax01": np.array([0, 1], np.int64),
             "fill": np.array(LARGE_NEG, np.float32)}
    shape = ["batch", 4, "seq", "seq"]
    return h.make_model(nodes, [h.vi("s0", shape), h.vi("s1", shape)],
                        [h.vi("y0", shape), h.vi("y1", shape)], inits, opset=17)


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_select_arith_with_a_shared_fill_term(h, target):
    model = _two_selects(h)
    out = h.fuse(model, target, level=3)
    assert h.fired(out)["select-arith"] == 2, h.fired(out)
    assert h.ops(out)["Where"] == 2 and "Add" not in h.ops(out), h.ops(out)
    feeds = {f"s{i}": h.rng.standard_normal((2, 4, 5, 5)).astype(np.float32) for i in (0, 1)}
    h.assert_close(model, out, feeds)
