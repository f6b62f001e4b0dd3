"""transpose-sunk through a 4-D RotaryEmbedding (passes/_transpose_region.py, _transpose_sink.py).

RotaryEmbedding-23 rotates [B, H, S, D] (4-D) or [B, S, H*D] with num_heads (3-D): the same rotation.
A region entered by the head Transpose [0, 2, 1, 3] may now pass the rotation: it runs on the heads-last
layout as its 3-D form (viewed [B, S, H*D], num_heads H, viewed back), so a q / k norm, a scalar or a
per-position factor between the head Transpose and the rotation no longer keeps the pair (session 24:
what rules/layout/heads_3d.yaml norm-before-head-transpose did with copy-pasted operand checks)."""

from __future__ import annotations

import numpy as np

from pass_testing import check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops

H, D = 2, 8


def _region(heads: str = "2", factor: str = "computed", s: str = "S") -> str:
    """q [B, S, H, D] -> head Transpose -> RMSNorm -> * factor -> 4-D rotation -> Transpose back; factor:
    'computed' (per position, from the positions: [1, 1, S, 1]), 'const' (per position, [1, 1, 5, 1]),
    'scalar'."""
    use = {"computed": "f", "const": "fc", "scalar": "c"}[factor]
    return f"""
        g (float[B, {s}, {heads}, {D}] q, float[{D}] g, float[B, {s}, {D // 2}] cs, float[B, {s}, {D // 2}] sn,
           float[{s}] pos) => (float[B, {s}, {heads}, {D}] y) {{
            ax = Constant <value = int64[3] {{0, 1, 3}}> ()
            one = Constant <value = float {{1.0}}> ()
            c = Constant <value = float {{0.35}}> ()
            fc = Constant <value = float[1, 1, 5, 1] {{0.5, 0.8, 1.1, 1.3, 0.9}}> ()
            ap = Abs (pos)
            lp = Add (ap, one)
            f3 = Log (lp)
            f = Unsqueeze (f3, ax)
            t = Transpose <perm = [0, 2, 1, 3]> (q)
            n = RMSNormalization <epsilon = 0.000001> (t, g)
            m = Mul (n, {use})
            r = RotaryEmbedding (m, cs, sn)
            y = Transpose <perm = [0, 2, 1, 3]> (r)
        }}"""


def _feeds(s: int, seed: int) -> dict:
    f = normal_feeds(seed, q=(2, s, H, D), g=(D,), pos=(s,))
    ang = np.arange(s)[:, None] * (10000.0 ** (-np.arange(D // 2) / (D // 2)))[None, :]
    f["cs"], f["sn"] = (np.repeat(t[None], 2, 0).astype(np.float32) for t in (np.cos(ang), np.sin(ang)))
    return f


def test_norm_and_per_position_factor_sink_through_the_rotation():
    proto, model, modified, p = fold_layout(_region(factor="const", s="5"), opset=23)
    assert modified and p.stats["transpose-sunk"] == 1
    counts = ops(model)
    # the pair gone (the factor permuted as a constant); the rotation 3-D between two views
    assert "Transpose" not in counts and counts["Reshape"] == 2, counts
    rope = next(n for n in model.graph if n.op_type == "RotaryEmbedding")
    assert rope.attributes["num_heads"].value == H and len(rope.inputs[0].shape) == 3
    check_same(proto, model, _feeds(5, 0))


def test_scalar_factor_leaves_no_transpose():
    proto, model, modified, _ = fold_layout(_region(factor="scalar"), opset=23)
    assert modified and "Transpose" not in ops(model), ops(model)
    for s, seed in ((6, 2), (9, 3)):
        check_same(proto, model, _feeds(s, seed))


def test_computed_factor_saves_nothing_and_is_refused():
    # the factor read transposed (one Transpose) and the view into the rotation cost the pair it saves
    proto, model, modified, _ = fold_layout(_region(factor="computed"), opset=23)
    assert not modified and ops(model)["Transpose"] == 2, ops(model)


def test_symbolic_heads_are_refused():
    # the 3-D form needs num_heads: a symbolic head count keeps the region as it is
    proto, model, modified, _ = fold_layout(_region(heads="N", factor="scalar"), opset=23)
    assert not modified and ops(model)["Transpose"] == 2, ops(model)
    assert all(n.attributes.get("num_heads") is None for n in model.graph if n.op_type == "RotaryEmbedding")
