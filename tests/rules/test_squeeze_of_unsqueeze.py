"""rules/layout/squeeze.yaml: Squeeze(Unsqueeze(x, axes), axes) is x, and Squeeze(Unsqueeze(x, [a, b]), [b])
is Unsqueeze(x, [a']) (the rotary recognizers squeeze a table's head axis; dynamo adds it together with the
batch axis in one Unsqueeze [0, 2]). Compared with the original in ONNX Runtime, output shapes included."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse


@pytest.mark.parametrize("ua,qa,rule,left", [
    ([1], [1], None, []),  # the cleanup before the rules folds it already
    ([0, 2], [2], "squeeze-of-unsqueeze-one-of-two", ["Unsqueeze"]),
    ([0, 2], [0], "squeeze-of-unsqueeze-one-of-two", ["Unsqueeze"]),
    ([-1, 1], [-1], "squeeze-of-unsqueeze-one-of-two", ["Unsqueeze"]),
    ([1, 3], [-3], "squeeze-of-unsqueeze-one-of-two", ["Unsqueeze"]),
])
def test_squeeze_takes_back_unsqueezed_axes(h, ua, qa, rule, left):
    n = h.node
    nodes = [n("Unsqueeze", ["x", "ua"], ["u"]), n("Squeeze", ["u", "qa"], ["s"]), n("Relu", ["s"], ["y"])]
    model = h.make_model(nodes,
                         [h.vi("x", [3, 4])], [h.vi("y", None)],
                         {"ua": np.array(ua, np.int64), "qa": np.array(qa, np.int64)})
    out = h.fuse(model, "onnx", 2)
    fires = onnx_fuse.optimize(model, level=2, target="onnx").report.rule_fires
    assert rule is None or fires.get(rule) == 1, fires
    ops = h.ops(out)
    assert sorted(k for k in ops if k != "Relu") == left, ops
    feeds = {"x": h.rng.standard_normal((3, 4)).astype(np.float32)}
    want, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
    assert want.shape == got.shape and np.array_equal(want, got)


def test_squeeze_of_an_axis_the_unsqueeze_did_not_add_stays(h):
    n = h.node
    model = h.make_model([n("Unsqueeze", ["x", "ua"], ["u"]), n("Squeeze", ["u", "qa"], ["y"])],
                         [h.vi("x", [1, 4])], [h.vi("y", None)],
                         {"ua": np.array([0, 3], np.int64), "qa": np.array([1], np.int64)})
    out = h.fuse(model, "onnx", 2)
    fires = onnx_fuse.optimize(model, level=2, target="onnx").report.rule_fires
    assert not any(r.startswith("squeeze-of-unsqueeze") for r in fires), fires
    feeds = {"x": h.rng.standard_normal((1, 4)).astype(np.float32)}
    want, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
    assert want.shape == got.shape and np.array_equal(want, got)


@pytest.mark.parametrize("x_shape,ua,qa,folds", [
    ([2, 1, 4], [2], [1], True),     # [2, 1, 1, 4]: either size-1 axis gives x back (a one-token table)
    ([2, 1, 1, 4], [1], [3], True),  # every axis between the two has size 1
    ([2, 1, 4], [3], [1], False),    # [2, 1, 4, 1] squeezed at 1 is [2, 4, 1], not x
])
def test_squeeze_of_another_size_one_axis(h, x_shape, ua, qa, folds):
    """Squeeze(Unsqueeze(x, [a]), [b]) is x when every axis of the Unsqueeze's output from a to b has
    size 1 (the same dims in the same order); otherwise the ops stay (session 37)."""
    n = h.node
    nodes = [n("Cos", ["x"], ["c"]), n("Unsqueeze", ["c", "ua"], ["u"]), n("Squeeze", ["u", "qa"], ["s"]),
             n("Relu", ["s"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", x_shape)], [h.vi("y", None)],
                         {"ua": np.array(ua, np.int64), "qa": np.array(qa, np.int64)})
    fires = onnx_fuse.optimize(model, level=2, target="onnx").report.rule_fires
    out = h.fuse(model, "onnx", 2)
    ops = h.ops(out)
    if folds:
        assert fires.get("squeeze-of-unsqueeze") == 1 and "Squeeze" not in ops and "Unsqueeze" not in ops, (fires, ops)
    else:
        assert "squeeze-of-unsqueeze" not in fires and ops["Squeeze"] == 1, (fires, ops)
    feeds = {"x": h.rng.standard_normal(x_shape).astype(np.float32)}
    want, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
    assert want.shape == got.shape and np.array_equal(want, got)
