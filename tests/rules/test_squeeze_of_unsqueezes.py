"""squeeze-of-two-unsqueezes and squeeze-above-row-slice (rules/layout/squeeze.yaml): a Squeeze that takes back
two single-axis Unsqueezes, directly or across a cut of leading rows (rotary-rotate-half-tables' caches of
wav2vec2-conformer's table x[:, None, None, :][:S]), leaves x, or x's rows; compared in ONNX Runtime.
Refused: a cut on an axis after the squeezed ones."""

from __future__ import annotations

import numpy as np
import pytest


def _chain(h, squeeze_axes, *, cut_axes=None):
    """x [R, D] -> Unsqueeze(1) -> Unsqueeze(1) [R, 1, 1, D] -> rows [0, n) (n from 'm') -> Squeeze(squeeze_axes)."""
    n = h.node
    nodes = [n("Unsqueeze", ["x", "one"], ["u1"]), n("Unsqueeze", ["u1", "one"], ["u2"])]
    inits = {"one": np.array([1], np.int64), "qa": np.array(squeeze_axes, np.int64), "z": np.array([0], np.int64)}
    src = "u2"
    if cut_axes is not None:
        nodes += [n("Shape", ["m"], ["ln"], start=0, end=1), n("Slice", ["u2", "z", "ln", "ca"], ["c"])]
        inits["ca"] = np.array(cut_axes, np.int64)
        src = "c"
    nodes += [n("Squeeze", [src, "qa"], ["s"]), n("Mul", ["s", "s"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["r", 8]), h.vi("m", ["n"])], [h.vi("y", None)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_two_unsqueezes_squeezed_together(h, target):
    model = _chain(h, [1, 2])
    out = h.fuse(model, target, 3)
    ops = h.ops(out)
    assert "Squeeze" not in ops and "Unsqueeze" not in ops, ops
    h.assert_close(model, out, {"x": h.rng.standard_normal((5, 8)).astype(np.float32),
                                "m": np.zeros(3, np.float32)})


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_squeeze_moved_above_a_row_cut(h, target):
    model = _chain(h, [1, 2], cut_axes=[0])
    out = h.fuse(model, target, 3)
    ops = h.ops(out)
    assert "Squeeze" not in ops and "Unsqueeze" not in ops and ops["Slice"] == 1, ops
    h.assert_close(model, out, {"x": h.rng.standard_normal((5, 8)).astype(np.float32),
                                "m": np.zeros(3, np.float32)})


def test_a_cut_after_the_squeezed_axes_stays(h):
    """The cut is on the last axis (3), after the squeezed 1 and 2: the Squeeze may not move above it."""
    model = _chain(h, [1, 2], cut_axes=[3])
    out = h.fuse(model, "ort", 3)
    assert "squeeze-above-row-slice" not in h.fired(out), h.fired(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((5, 8)).astype(np.float32),
                                "m": np.zeros(3, np.float32)})
