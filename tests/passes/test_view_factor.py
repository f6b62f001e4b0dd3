"""view-factor (passes/_view_factor.py, fold-layout-chains): Reshape(Mul(Reshape(x [B,S,N], [B,S,H,D]),
f), x's dims) with f 1 on both split axes is Mul(x, Squeeze(f, [-1])).

Ministral 3 scales the rotated queries by a per-position factor [1, S, 1, 1] (1 + beta * log(1 +
floor(p / L))) between RoPE's 3-D output viewed [B, S, H, D] and the view back: two Reshapes per
layer. Near misses: a factor that varies along a split axis, an outer Reshape to other dims, a view
read elsewhere; the change flag is false there."""

from __future__ import annotations

import pytest
from pass_testing import check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops

GRAPH = """
    g (float[B, S, 8] x, float[B, S, 8] w, float[S] pos) => (float[B, S, 8] y, float[B, S, 8] z{extra_out}) {{
        ax = Constant <value = int64[3] {{0, 2, 3}}> ()
        split = Constant <value = int64[4] {{0, 0, 2, 4}}> ()
        merge = Constant <value = int64[3] {{0, 0, {merge}}}> ()
        one = Constant <value = float {{1.0}}> ()
        beta = Constant <value = float {{0.1}}> ()
        ap = Abs (pos)
        lp = Add (ap, one)
        lg = Log (lp)
        bl = Mul (lg, beta)
        f3 = Add (bl, one)
        f = Unsqueeze (f3, ax)
        {factor}
        r = Reshape (x, split)
        m = Mul (r, {fname})
        y = Reshape (m, merge)
        r2 = Reshape (w, split)
        m2 = Mul ({fname}, r2)
        z = Reshape (m2, merge)
        {extra}
    }}"""


def _graph(merge="-1", factor="", fname="f", extra="", extra_out=""):
    return GRAPH.format(merge=merge, factor=factor, fname=fname, extra=extra, extra_out=extra_out)


@pytest.mark.parametrize("merge", ["-1", "8"])
def test_per_position_factor_on_a_head_view(merge):
    proto, model, modified, p = fold_layout(_graph(merge=merge))
    assert modified and p.stats["view-factor"] == 2
    assert "Reshape" not in ops(model) and ops(model)["Squeeze"] == 2, ops(model)
    check_same(proto, model, normal_feeds(5, x=(2, 3, 8), w=(2, 3, 8), pos=(3,)))


def test_factor_varying_along_a_split_axis_stays():
    # f [1, S, 2, 1]: one value per head, not per token: the views stay
    factor = "hv = Constant <value = float[2, 1] {1.0, 2.0}> ()\n        fh = Mul (f, hv)"
    proto, model, modified, _ = fold_layout(_graph(factor=factor, fname="fh"))
    assert not modified and ops(model)["Reshape"] == 4, ops(model)


def test_outer_reshape_to_other_dims_stays():
    # the merge gives [B, S*2, 4]: not x's dims
    graph = _graph().replace("merge = Constant <value = int64[3] {0, 0, -1}> ()",
                             "merge = Constant <value = int64[3] {0, -1, 4}> ()").replace(
        "float[B, S, 8] y, float[B, S, 8] z", "float[B, N, 4] y, float[B, N, 4] z")
    proto, model, modified, _ = fold_layout(graph)
    assert not modified and ops(model)["Reshape"] == 4, ops(model)


def test_view_read_elsewhere_stays():
    # the scaled view m is also an output: the rewrite would keep it and add a node
    proto, model, modified, p = fold_layout(_graph(extra_out=", float[B, S, 2, 4] m"))
    assert p.stats["view-factor"] == 1, p.stats   # the second layer only
    assert ops(model)["Reshape"] == 2, ops(model)
    check_same(proto, model, normal_feeds(6, x=(2, 3, 8), w=(2, 3, 8), pos=(3,)))


@pytest.mark.parametrize("opset", [9, 12])
def test_squeeze_axes_attribute_below_opset_13(opset):
    # Squeeze takes its axes as an input from opset 13 on: below it the new Squeeze carries an axes attribute
    # (a positive one: opsets before 11 take no negative axis); an input there fails the checker
    graph = _graph().replace("f = Unsqueeze (f3, ax)", "f = Unsqueeze <axes = [0, 2, 3]> (f3)")
    proto, model, modified, p = fold_layout(graph, opset=opset, ir_version=8)
    assert modified and p.stats["view-factor"] == 2
    assert "Reshape" not in ops(model) and ops(model)["Squeeze"] == 2, ops(model)
    check_same(proto, model, normal_feeds(7, x=(2, 3, 8), w=(2, 3, 8), pos=(3,)))
