"""unsqueeze-of-unsqueeze (rules/layout/unsqueeze_chain.yaml): two single-axis Unsqueezes as one of both
axes (torch's dynamo export with optimize=False: arange(S)[None] then [:, :, None], hold-out 43's
qwen3_omni_code_predictor noopt); compared in ONNX Runtime at every target. Refused: an inner Unsqueeze
read elsewhere too (merging would keep it and add a node), one that adds two axes."""

from __future__ import annotations

import numpy as np
import pytest


def _chain(h, a, b, *, inner_reader=False, inner_axes=None):
    """x [S, D] -> Unsqueeze([a]) -> Unsqueeze([b]) -> Mul by itself (the readers of the chain)."""
    n = h.node
    nodes = [n("Unsqueeze", ["x", "ua"], ["u1"]), n("Unsqueeze", ["u1", "ub"], ["u2"]), n("Mul", ["u2", "u2"], ["y"])]
    outputs = [h.vi("y", None)]
    if inner_reader:
        nodes.append(n("Neg", ["u1"], ["w"]))
        outputs.append(h.vi("w", None))
    inits = {"ua": np.array(inner_axes or [a], np.int64), "ub": np.array([b], np.int64)}
    return h.make_model(nodes, [h.vi("x", ["s", 8])], outputs, inits)


def _feeds(h):
    return {"x": h.rng.standard_normal((5, 8)).astype(np.float32)}


# (a, b): u1 adds a to [S, D], u2 adds b to u1: the result's two new axes
CASES = [(0, 2), (0, 0), (1, 0), (2, 1), (-1, -1), (0, -2), (-3, 3)]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("a, b", CASES)
def test_two_unsqueezes_merged(h, target, a, b):
    model = _chain(h, a, b)
    out = h.fuse(model, target, 3)
    ops = h.ops(out)
    assert ops["Unsqueeze"] == 1, ops
    assert h.fired(out)["unsqueeze-of-unsqueeze"] == 1
    h.assert_close(model, out, _feeds(h))   # same shape (assert_close checks it) and values


def test_inner_unsqueeze_read_elsewhere_stays(h):
    model = _chain(h, 0, 2, inner_reader=True)
    out = h.fuse(model, "ort", 3)
    assert h.ops(out)["Unsqueeze"] == 2 and "unsqueeze-of-unsqueeze" not in h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_inner_unsqueeze_of_two_axes_stays(h):
    h.stays(_chain(h, 0, 1, inner_axes=[0, 1]), "unsqueeze-of-unsqueeze", "one constant new axis each", _feeds(h),
            op="NoSuchOp", level=3)
    out = h.fuse(_chain(h, 0, 1, inner_axes=[0, 1]), "ort", 3)
    assert h.ops(out)["Unsqueeze"] == 2
