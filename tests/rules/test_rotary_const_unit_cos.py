"""rules/rope/rotary_const.yaml with the cos Mul absent: a static export of one token folds the rotation's
tables at position 0, cos all ones and sin all zeros, and identity-elimination drops x * ones before the
rules run, leaving x + rotate_half(x) * sin (hold-out 24's static_s1 files: RoPE 0/4 before). The rule's
cos Mul is optional; its cache is then ones like sin's table. Numerics against the original in ORT."""

from __future__ import annotations

import re

import numpy as np
import pytest

B, H, S, D = 2, 2, 1, 8
BIG = np.iinfo(np.int64).max


def _block(h, sin, *, other=False, heads_first=True):
    """x [B,H,S,D] (or [B,S,H,D]) + rotate_half(x) * sin, the cos product already folded away; other: the
    Add reads another value than x."""
    n = h.node
    shape = [B, H, S, D] if heads_first else [B, S, H, D]
    table = [1, 1, S, D] if heads_first else [1, S, 1, D]
    nodes = [n("Slice", ["x", "s_0", "s_half", "s_ax"], ["x1"]),
             n("Slice", ["x", "s_half", "s_end", "s_ax"], ["x2"]),
             n("Neg", ["x2"], ["xn"]), n("Concat", ["xn", "x1"], ["r"], axis=-1),
             n("Mul", ["r", "sin"], ["rs"]), n("Add", ["z" if other else "x", "rs"], ["y"])]
    inputs = [h.vi("x", shape)] + ([h.vi("z", shape)] if other else [])
    inits = {"sin": np.full(table, sin, np.float32), "s_0": np.array([0], np.int64),
             "s_half": np.array([D // 2], np.int64), "s_end": np.array([BIG], np.int64),
             "s_ax": np.array([3], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("y", shape)], inits)


@pytest.mark.parametrize("heads_first", [True, False])
@pytest.mark.parametrize("sin", [0.0, 0.5])  # position 0; a table with sin != 0 checks the caches' numbers
def test_rotation_without_its_cos_product_fuses(h, sin, heads_first):
    model = _block(h, sin, heads_first=heads_first)
    out = h.fuse(model, "ort", level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "Concat" not in ops, ops
    fired = h.fired(out)
    assert fired["rotary-const-table"], fired
    x = h.rng.standard_normal((B, H, S, D) if heads_first else (B, S, H, D)).astype(np.float32)
    h.assert_close(model, out, {"x": x})


def test_another_value_beside_the_rotated_half_stays(h):
    """y = z + rotate_half(x) * sin: no cos product of x was folded away, so it is not a rotation of x."""
    model = _block(h, 0.5, other=True)
    reasons = h.reasons(model, "ort", "rotary-const-table")
    assert reasons and all(re.search("^no match: ", r) for r in reasons), reasons
    out = h.fuse(model, "ort", level=2)
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    r = h.rng
    h.assert_close(model, out, {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
                                "z": r.standard_normal((B, H, S, D)).astype(np.float32)})
