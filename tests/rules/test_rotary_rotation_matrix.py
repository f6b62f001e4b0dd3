"""rules/rope/rotary_rotation_matrix.yaml: interleaved RoPE written as a 2 x 2 rotation matrix per pair of the
head dim, as Perception Encoder's apply_rotary_pos_emb writes it (PE-Audio / PE-Video / PE-Audio-Video:
freqs [.., S, D/2, 2, 2] = [[cos, -sin], [sin, cos]], x viewed [B, H, S, D/2, 1, 2], the product summed over
the last axis and flattened back; hold-out 27's pe_audio_encoder: RoPE 0 before). The static export folds the
matrix into a constant. Numerics against the original in ORT at every target."""

from __future__ import annotations


import numpy as np
import pytest

B, H, S, D = 2, 2, 6, 16


def _matrix(scale=1.0, batch=1):
    """F [batch, 1, S, D/2, 2, 2] = [[c, -s], [s, c]] with c, s = cos / sin of position * inv_freq (times scale)."""
    inv = 1.0 / 10000 ** (np.arange(0, D, 2, dtype=np.float64) / D)
    f = np.outer(np.arange(S), inv)  # [S, D/2]
    c, s = np.cos(f) * scale, np.sin(f) * scale
    m = np.stack([c, -s, s, c], -1).reshape(S, D // 2, 2, 2)
    return np.broadcast_to(m, (batch, 1, S, D // 2, 2, 2)).astype(np.float32).copy()


def _model(h, f, axis=5, flat=(B, H, S, D)):
    """q and k [B, H, S, D] rotated by the same matrix: sum(view(x, [B, H, S, D/2, 1, 2]) * F, -1) viewed back."""
    n = h.node
    nodes = []
    for x in ("q", "k"):
        nodes += [n("Reshape", [x, "s6"], [f"{x}6"]), n("Mul", [f"{x}6", "F"], [f"{x}m"]),
                  n("ReduceSum", [f"{x}m", "rax"], [f"{x}s"], keepdims=0), n("Reshape", [f"{x}s", "s4"], [f"{x}_rot"])]
    shape = [B, H, S, D]
    inits = {"F": f, "s6": np.array([B, H, S, D // 2, 1, 2], np.int64), "rax": np.array([axis], np.int64),
             "s4": np.array(flat, np.int64)}
    return h.make_model(nodes, [h.vi("q", shape), h.vi("k", shape)],
                        [h.vi("q_rot", list(flat)), h.vi("k_rot", list(flat))], inits)


def _feeds(h):
    return {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k")}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scale", [1.0, 0.8])  # a scaled rotation (attention_scaling folded into the tables)
def test_rotation_matrix_fuses(h, target, scale):
    model = _model(h, _matrix(scale))
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and not {"ReduceSum", "Mul"} & set(ops), ops
    assert h.fired(out)["rotary-rotation-matrix-const"], h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_matrix_per_batch_row_and_negative_axis(h):
    model = _model(h, _matrix(batch=B), axis=-1)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_flattened_into_another_view(h):
    """The flatten merged with the attention's view of k: [B*H, S, D] straight from the sums (PE-Audio's k)."""
    model = _model(h, _matrix(), flat=(B * H, S, D))
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2 and "ReduceSum" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_inverse_rotation_fuses(h):
    """[[c, s], [-s, c]] (the transposed blocks): a rotation by -angle, taken with sin = F[.., 1, 0] = -s."""
    model = _model(h, np.ascontiguousarray(np.swapaxes(_matrix(), -1, -2)))
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_unequal_diagonal_stays(h):
    """[[c, -s], [s, c / 2]]: the second component scaled apart; no rotation of the pair."""
    f = _matrix()
    f[..., 1, 1] *= 0.5
    model = _model(h, f)
    h.stays(model, "rotary-rotation-matrix-const", r"not \[\[c, -s\], \[s, c\]\]", _feeds(h), op="RotaryEmbedding")


def test_not_a_rotation_stays(h):
    """c^2 + s^2 varying by position: the blocks have the form, but no rotation."""
    f = _matrix() * np.linspace(0.2, 1.0, S, dtype=np.float32)[None, None, :, None, None, None]
    model = _model(h, f)
    h.stays(model, "rotary-rotation-matrix-const", r"not a \(scaled\) rotation", _feeds(h), op="RotaryEmbedding")


def test_sum_over_the_pair_index_stays(h):
    """Summed over axis 4 (the matrix's rows): y[j, k] = x[j, 0, k] (c + s) ..., no rotation of the pair."""
    model = _model(h, _matrix(), axis=4)
    h.stays(model, "rotary-rotation-matrix-const", "summed over the last axis", _feeds(h), op="RotaryEmbedding")
