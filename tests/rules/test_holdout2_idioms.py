"""Idioms found on the second hold-out sweep (tools/holdout_specs.py HOLDOUT2, docs/holdout.md), each
as a tiny graph that failed before its fix; numerics against a reference."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8


def _rotate_half(x, cos, sin):
    """RotaryEmbedding-23's non-interleaved rotation, x [B, H, S, D], cos/sin [B|1, S, D/2]."""
    c, s = cos[:, None], sin[:, None]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("three_d", [False, True])
def test_rotary_caches_of_batch_one_are_expanded_to_the_batch(h, target, three_d):
    """torch's opset-23 export writes RotaryEmbedding-23 with cos/sin [1, S, D/2] for a batch of B;
    ONNX Runtime 1.32 refuses that node (cache batch != x batch). After optimize it runs, exactly."""
    n = h.node
    xshape = ["batch", S, H * D] if three_d else ["batch", H, S, D]
    attrs = dict(num_heads=H) if three_d else {}
    nodes = [n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=0, **attrs)]
    model = h.make_model(nodes, [h.vi("x", xshape), h.vi("cos", [1, S, D // 2]), h.vi("sin", [1, S, D // 2])],
                         [h.vi("y", xshape)])
    f = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(D // 2) * 2 / D))[None]
    x4 = h.rng.standard_normal((B, H, S, D)).astype(np.float32)
    feeds = {"x": x4.transpose(0, 2, 1, 3).reshape(B, S, H * D) if three_d else x4,
             "cos": np.cos(f).astype(np.float32), "sin": np.sin(f).astype(np.float32)}
    with pytest.raises(Exception, match="cos_cache"):  # the export as written does not run in ORT
        h.run(model, feeds)
    out = h.fuse(model, target)
    assert any(k.startswith("rotary-caches-to-batch") for k in h.fired(out)), h.fired(out)
    got = h.run(out, feeds)[0]
    want = _rotate_half(x4, feeds["cos"], feeds["sin"])
    if three_d:
        want = want.transpose(0, 2, 1, 3).reshape(B, S, H * D)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_rotary_caches_with_the_batch_are_left_alone(h):
    """Caches that already have x's batch (or an x of batch 1) are what the spec wants: no rewrite."""
    n = h.node
    nodes = [n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=0)]
    for xb, cb in ((1, 1), ("batch", "batch")):
        model = h.make_model(nodes, [h.vi("x", [xb, H, S, D]), h.vi("cos", [cb, S, D // 2]),
                                     h.vi("sin", [cb, S, D // 2])], [h.vi("y", [xb, H, S, D])])
        assert not any(k.startswith("rotary-caches-to-batch") for k in h.fired(h.fuse(model, "ort")))
