"""transpose-sunk through projections, Splits and Expands (passes/_transpose_region.py).

fairseq's time-first models (FSMT, old Marian / M2M / speech exports) transpose x [B, S, C] to
[T, B, C] once, run every layer time-first and transpose back at the end, while the fused attention
reads [B, S, C]: FSMT's encoder kept 10 Transposes (one in, one out, q / k / v and the output per
layer). A projection x @ W with a 2-D weight works on the last axis alone, a Split / an Expand take
their axis / target with the permutation, so the input Transpose now sinks through the whole stream
and meets the attention's own Transposes. MVP's prompts (Expand(P [1, H, L, D], [B, 1, 1, 1]) joined
to the heads-first keys) keep their Transposes no longer at trt. Refused where the layout matters."""

from __future__ import annotations

import pytest

from pass_testing import check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops

W8 = ", ".join(f"{(i * 37 % 17 - 8) / 9:.3f}" for i in range(8 * 24))
W88 = ", ".join(f"{(i * 29 % 13 - 6) / 7:.3f}" for i in range(64))
B24 = ", ".join(f"{(i % 5 - 2) / 10:.2f}" for i in range(24))


def _run(text: str, opset: int = 18):
    return fold_layout(text, opset=opset)


def _feeds(**shapes):
    return normal_feeds(9, **shapes)


def test_time_first_block_between_batch_first_transposes_cancels():
    # x [B, S, 8] -> time first -> packed projection + bias -> Split -> q scaled -> each part
    # transposed back for a [B, S, C] reader; the residual stream normed and projected -> back
    proto, model, modified, p = _run(f"""
        g (float[B, S, 8] x) => (float[B, S, 8] q, float[B, S, 8] k, float[B, S, 8] v, float[B, S, 8] y) {{
            w = Constant <value = float[8, 24] {{{W8}}}> ()
            b = Constant <value = float[24] {{{B24}}}> ()
            wo = Constant <value = float[8, 8] {{{W88}}}> ()
            s = Constant <value = float {{0.35}}> ()
            g1 = Constant <value = float[8] {{0.9, 1.1, 1.3, 0.7, 1.0, 0.8, 1.2, 0.95}}> ()
            sizes = Constant <value = int64[3] {{8, 8, 8}}> ()
            t = Transpose <perm = [1, 0, 2]> (x)
            m = MatMul (t, w)
            a = Add (m, b)
            q0, k0, v0 = Split <axis = 2> (a, sizes)
            qs = Mul (q0, s)
            q = Transpose <perm = [1, 0, 2]> (qs)
            k = Transpose <perm = [1, 0, 2]> (k0)
            v = Transpose <perm = [1, 0, 2]> (v0)
            r = Add (t, v0)
            n = LayerNormalization <axis = -1> (r, g1)
            f = MatMul (n, wo)
            e = Relu (f)
            y = Transpose <perm = [1, 0, 2]> (e)
        }}""")
    assert modified and p.stats["transpose-sunk"] == 1
    assert "Transpose" not in ops(model), ops(model)
    split = next(n for n in model.graph if n.op_type == "Split")
    assert split.attributes["axis"].value == 2   # the last axis stays where it is
    # the [24] bias broadcasts alike in both layouts: kept as it is, no permuted copy
    assert not any(v.name.endswith("_perm") for v in model.graph.initializers.values())
    check_same(proto, model, _feeds(x=(2, 5, 8)))


def test_split_axis_moves_with_the_permutation():
    proto, model, modified, _ = _run("""
        g (float[B, 6, 4] x) => (float[B, 3, 4] a, float[B, 3, 4] b) {
            t = Transpose <perm = [1, 0, 2]> (x)
            h0, h1 = Split <axis = 0, num_outputs = 2> (t)
            e0 = Exp (h0)
            a = Transpose <perm = [1, 0, 2]> (e0)
            b = Transpose <perm = [1, 0, 2]> (h1)
        }""")
    # the split over T is over axis 1 of x: both exits compose to the identity and go
    assert modified and "Transpose" not in ops(model)
    split = next(n for n in model.graph if n.op_type == "Split")
    assert split.attributes["axis"].value == 1
    check_same(proto, model, _feeds(x=(2, 6, 4)))


def test_projection_over_a_moved_last_axis_is_refused():
    # [0, 2, 1] moves the contracted axis: x^T @ W is not (x @ W)^T
    proto, model, modified, _ = _run(f"""
        g (float[B, 8, 8] x) => (float[B, 8, 8] y) {{
            wo = Constant <value = float[8, 8] {{{W88}}}> ()
            t = Transpose <perm = [0, 2, 1]> (x)
            m = MatMul (t, wo)
            y = Transpose <perm = [0, 2, 1]> (m)
        }}""")
    assert not modified and ops(model)["Transpose"] == 2


def test_batched_matmul_is_refused():
    # a 3-D right operand pairs batch rows: their order matters
    proto, model, modified, _ = _run("""
        g (float[B, S, 8] x, float[S, 8, 8] w) => (float[B, S, 8] y) {
            t = Transpose <perm = [1, 0, 2]> (x)
            m = MatMul (t, w)
            y = Transpose <perm = [1, 0, 2]> (m)
        }""")
    assert not modified and ops(model)["Transpose"] == 2


@pytest.mark.parametrize("target", ["ones", "moved"])
def test_prompts_expanded_over_the_batch_join_the_heads_first_keys(target):
    # MVP's prompts: P [1, 2, 3, 4] expanded to [B, 1, 1, 1] and joined over the keys in the
    # heads-first layout; the join read back as [B, S + 3, H, D] (the attention's own layout).
    # "moved": the target's head entry is 2, not 1, where the permutation moves it: not the same
    # target in the other layout, refused
    heads = "1" if target == "ones" else "2"
    proto, model, modified, _ = _run(f"""
        g (float[B, S, 2, 4] k) => (float[B, S3, 2, 4] y) {{
            pr = Constant <value = float[1, 2, 3, 4] {{{", ".join(f"{i / 7:.3f}" for i in range(24))}}}> ()
            one = Constant <value = int64[3] {{{heads}, 1, 1}}> ()
            bb = Shape <start = 0, end = 1> (k)
            tgt = Concat <axis = 0> (bb, one)
            pe = Expand (pr, tgt)
            t = Transpose <perm = [0, 2, 1, 3]> (k)
            c = Concat <axis = 2> (pe, t)
            y = Transpose <perm = [0, 2, 1, 3]> (c)
        }}""")
    if target == "ones":
        assert modified and "Transpose" not in ops(model), ops(model)
        check_same(proto, model, _feeds(k=(2, 5, 2, 4)))
    else:
        assert not modified and ops(model)["Transpose"] == 2
