"""softmax-logsumexp (rules/attention/softmax_shift.yaml) under two masks of one row (review30, of 49db743).
flat_fill_rows accepted a large finite select fill under a constant mask that keeps a key in every row, but
walked the kept branch on as if its keys were scores: when that branch is itself masked by a second constant
mask with its own large fill, a row may keep no score at all, -1e9 at every key but one lower fill. There
logsumexp rounds to -1e9, every weight at it is 1 (p v sums those values) where a Softmax averages them:
9.0 / 13.1 off at every target before the fix. (An input -inf mask with a constant -1e9 one, either order, makes
such a row too, but ONNX Runtime's ReduceLogSumExp gives NaN on it: the nan-rows class, left to fire.)"""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8
UPPER = np.triu(np.ones((S, S), bool), 1)[None, None]           # masked_fill order: drop the future
CAUSAL = ~UPPER                                                   # keep order: keep the past
DROP0 = np.zeros((1, 1, S, S), bool)
DROP0[..., 0] = True                                              # drop key 0 in every row


def _model(h, masks, consts):
    """scores -> Where per (cond, fill, order) in masks, innermost first -> exp(s - logsumexp(s)) -> @ v."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["s0"])]
    inits = {"scale": np.array(D ** -0.5, np.float32), "ax": np.array([-1], np.int64), **consts}
    s = "s0"
    for i, (c, fill, order) in enumerate(masks):
        inits[f"f{i}"] = np.array(fill, np.float32)
        ins = [c, s, f"f{i}"] if order == "keep" else [c, f"f{i}", s]
        nodes.append(n("Where", ins, [f"w{i}"]))
        s = f"w{i}"
    nodes += [n("ReduceLogSumExp", [s, "ax"], ["l"], keepdims=1), n("Sub", [s, "l"], ["d"]),
              n("Exp", ["d"], ["p"]), n("MatMul", ["p", "v"], ["y"])]
    return h.make_model(nodes, [h.vi(x, [B, H, S, D]) for x in "qkv"], [h.vi("y", [B, H, S, D])], inits)


def _feeds(h):
    return {x: (3 * h.rng.standard_normal((B, H, S, D))).astype(np.float32) for x in "qkv"}


CASES = {
    # two constant masks, each keeping a key in every row; together row 0 keeps none (-1e10 at key 0, -1e9 after)
    "two-constant-masks": ([("c1", -1e9, "fill"), ("c2", -1e10, "fill")], {"c1": UPPER, "c2": DROP0}, 1),
    # one fill: row 0 is -1e9 at every key (each weighs 1)
    "two-constant-masks-one-fill": ([("c1", -1e9, "fill"), ("c2", -1e9, "fill")], {"c1": UPPER, "c2": DROP0}, 0),
    # the keep order outside, the second fill -1e20 (far below, still finite)
    "keep-order-outside": ([("c1", -1e20, "fill"), ("c2", -1e9, "keep")], {"c1": DROP0, "c2": CAUSAL}, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logsumexp_under_two_masks_stays(h, case):
    masks, consts, first = CASES[case]          # first: the first key at -1e9 on row 0
    model = _model(h, masks, consts)
    got = h.reasons(model, "ort", "softmax-logsumexp")
    assert any("large finite fill" in r for r in got), got
    f = _feeds(h)
    ref = h.run(model, f)[0]
    # the original weighs each of row 0's keys at -1e9 1: the sum of their values, not the mean
    np.testing.assert_allclose(ref[:, :, 0], f["v"][:, :, first:].sum(axis=2), rtol=1e-5, atol=1e-4)
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert "ReduceLogSumExp" in h.ops(out), h.ops(out)
        h.assert_close(model, out, f)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_one_constant_mask_and_a_small_second_fill_still_fire(h, target):
    """A constant -1e9 mask keeping a key in every row over a second select filling -100 (within the limit): the
    kept keys stay moderate, so softmax-logsumexp still fires."""
    model = _model(h, [("c1", -100.0, "fill"), ("c2", -1e9, "keep")], {"c1": UPPER, "c2": CAUSAL})
    out = h.fuse(model, target)
    assert "ReduceLogSumExp" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))
