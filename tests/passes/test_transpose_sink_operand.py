"""transpose-sunk through an elementwise op whose other operand is computed outside the region
(passes/_transpose_region.py's operands, _transpose_sink.py).

Ministral 3 (llama_4_scaling_beta) multiplies the rotated queries, heads first [B, H, S, D], by a
per-position factor [1, 1, S, 1] computed from the positions (1 + beta * log(1 + floor(p / L))); the
Mul sat between the heads-first Transpose and the one back to [B, S, H, D], and the sink took constant
or all-ones operands only, so each layer kept the pair. The factor is now read under the permutation:
Transpose(f, p1's inverse), one node per factor value (shared by every layer), counted by the sink,
which runs only where fewer Transposes are left. Refused where that saves nothing."""

from __future__ import annotations

from pass_testing import check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops


def test_per_position_factor_between_head_transposes():
    # two layers' q [B, S, H, D] -> heads first -> times f [1, 1, S, 1] -> back; f from the positions
    proto, model, modified, p = fold_layout("""
        g (float[B, S, 2, 4] q, float[B, S, 2, 4] r, float[S] pos) => (float[B, S, 2, 4] y, float[B, S, 2, 4] z) {
            ax = Constant <value = int64[3] {0, 1, 3}> ()
            one = Constant <value = float {1.0}> ()
            beta = Constant <value = float {0.1}> ()
            ap = Abs (pos)
            lp = Add (ap, one)
            lg = Log (lp)
            bl = Mul (lg, beta)
            f3 = Add (bl, one)
            f = Unsqueeze (f3, ax)
            t = Transpose <perm = [0, 2, 1, 3]> (q)
            m = Mul (t, f)
            y = Transpose <perm = [0, 2, 1, 3]> (m)
            t2 = Transpose <perm = [0, 2, 1, 3]> (r)
            m2 = Mul (f, t2)
            z = Transpose <perm = [0, 2, 1, 3]> (m2)
        }""")
    assert modified and p.stats["transpose-sunk"] == 2
    # the four layer Transposes go; f read as [1, S, 1, 1] once (CSE shares the second copy)
    assert ops(model)["Transpose"] <= 2, ops(model)
    moved = [n for n in model.graph if n.op_type == "Transpose"]
    assert all(n.inputs[0].name == "f" and list(n.attributes["perm"].value) == [0, 2, 1, 3] for n in moved)
    check_same(proto, model, normal_feeds(3, q=(2, 5, 2, 4), r=(2, 5, 2, 4), pos=(5,)))


def test_factor_that_broadcasts_alike_is_read_as_it_is():
    # f [1, 1, 1, D] is the same in both layouts (only the last axis is > 1 and it stays): no copy
    proto, model, modified, _ = fold_layout("""
        g (float[B, S, 2, 4] q, float[4] w) => (float[B, S, 2, 4] y) {
            ax = Constant <value = int64[3] {0, 1, 2}> ()
            e = Exp (w)
            f = Unsqueeze (e, ax)
            t = Transpose <perm = [0, 2, 1, 3]> (q)
            m = Mul (t, f)
            y = Transpose <perm = [0, 2, 1, 3]> (m)
        }""")
    assert modified and "Transpose" not in ops(model), ops(model)
    check_same(proto, model, normal_feeds(4, q=(2, 3, 2, 4), w=(4,)))


def test_nothing_saved_is_refused():
    # one Transpose in, none out: permuting the factor would only move the Transpose
    proto, model, modified, _ = fold_layout("""
        g (float[B, S, 2, 4] q, float[1, 1, S, 1] f) => (float[B, 2, S, 4] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (q)
            y = Mul (t, f)
        }""")
    assert not modified and ops(model)["Transpose"] == 1


def test_lower_rank_operand_is_refused():
    # a computed [S, 1] operand would need its leading axes first: left to the constant / ones rules
    proto, model, modified, _ = fold_layout("""
        g (float[B, S, 2, 4] q, float[S, 1] f) => (float[B, S, 2, 4] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (q)
            m = Mul (t, f)
            y = Transpose <perm = [0, 2, 1, 3]> (m)
        }""")
    assert not modified and ops(model)["Transpose"] == 2
