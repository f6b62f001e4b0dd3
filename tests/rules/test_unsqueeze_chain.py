"""unsqueeze-of-unsqueeze (rules/layout/unsqueeze_chain.yaml): two Unsqueezes in a row as one of all their
axes (torch's dynamo export with optimize=False: arange(S)[None] then [:, :, None], hold-out 43's
qwen3_omni_code_predictor noopt), each with any number of constant axes, so a chain of three or four is one
Unsqueeze (the pair rule once refused a merged pair's two axes and left two); compared in ONNX Runtime at
every target, the result's shape and values the original's. Refused: an inner Unsqueeze read elsewhere too
(merging would keep it and add a node)."""

from __future__ import annotations

import numpy as np
import pytest


def _chain(h, *axes, inner_reader=False):
    """x [S, D] -> Unsqueeze(axes[0]) -> Unsqueeze(axes[1]) -> ... -> Mul by itself (the chain's reader)."""
    n = h.node
    nodes, inits, prev = [], {}, "x"
    for i, ax in enumerate(axes):
        inits[f"a{i}"] = np.array(ax, np.int64)
        nodes.append(n("Unsqueeze", [prev, f"a{i}"], [f"u{i}"]))
        prev = f"u{i}"
    nodes.append(n("Mul", [prev, prev], ["y"]))
    outputs = [h.vi("y", None)]
    if inner_reader:
        nodes.append(n("Neg", ["u0"], ["w"]))
        outputs.append(h.vi("w", None))
    return h.make_model(nodes, [h.vi("x", ["s", 8])], outputs, inits)


def _feeds(h):
    return {"x": h.rng.standard_normal((5, 8)).astype(np.float32)}


# (a, b): u1 adds a to [S, D], u2 adds b to u1: the result's two new axes
CASES = [(0, 2), (0, 0), (1, 0), (2, 1), (-1, -1), (0, -2), (-3, 3)]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("a, b", CASES)
def test_two_unsqueezes_merged(h, target, a, b):
    model = _chain(h, [a], [b])
    out = h.fuse(model, target, 3)
    ops = h.ops(out)
    assert ops["Unsqueeze"] == 1, ops
    assert h.fired(out)["unsqueeze-of-unsqueeze"] == 1
    h.assert_close(model, out, _feeds(h))   # same shape (assert_close checks it) and values


# chains of three and four (single axes, negative ones mixed in), and links of several axes each
CHAINS = [([0], [2], [1]), ([-1], [0], [-2]), ([1], [-1], [0], [-3]), ([0], [-1], [2], [4]),
          ([0, -1], [1]), ([2], [0, -1]), ([-1, 0], [-2, 1]), ([0, 2], [-1], [1, -5])]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("axes", CHAINS, ids=str)
def test_chain_of_unsqueezes_is_one(h, target, axes):
    model = _chain(h, *axes)
    out = h.fuse(model, target, 3)
    ops = h.ops(out)
    assert ops["Unsqueeze"] == 1, ops
    assert h.fired(out)["unsqueeze-of-unsqueeze"] >= 1
    h.assert_close(model, out, _feeds(h))


def test_composed_axes():
    from onnx_fuse.rewrite._expr import FUNCTIONS

    f = lambda *a: FUNCTIONS["unsqueeze_axes"](None, *a)  # noqa: E731
    assert f([0], [2], 2) == [0, 2] and f([1], [0], 2) == [0, 2] and f([-1], [-1], 2) == [2, 3]
    # x [S, D] -> [S, 1, 1, D] ([1, -2]) -> axis 0 and -1 more: [1, S, 1, 1, D, 1]
    assert f([1, -2], [0, -1], 2) == [0, 2, 3, 5]
    assert f([0, 0], [1], 2) is None and f([3], [0], 2) is None and f([0], [4], 2) is None


def test_inner_unsqueeze_read_elsewhere_stays(h):
    model = _chain(h, [0], [2], inner_reader=True)
    out = h.fuse(model, "ort", 3)
    assert h.ops(out)["Unsqueeze"] == 2 and "unsqueeze-of-unsqueeze" not in h.fired(out)
    h.assert_close(model, out, _feeds(h))
