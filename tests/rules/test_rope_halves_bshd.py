"""rules/rope/rotary_halves_bshd.yaml rotary-halves-bshd: RoPE written out half by half on heads-last
tensors, concat(a*cos - b*sin, b*cos + a*sin) with a, b [B, S, H, D/2] and the tables unsqueezed at
axis 2 (transformers 5's apply_rotary_pos_emb_interleave with unsqueeze_dim=2: the sparse-attention
indexers of GLM-MoE-DSA, dots3-note, Mistral Large 4) -> RotaryEmbedding-23 on the [B, S, H*D] view."""

from __future__ import annotations

import numpy as np
import pytest

D = 8
BIG = np.iinfo(np.int64).max


def _graph(h, heads, *, sign="-", folded=False, batch="b", seq="s"):
    """x [B, S, heads, D]: a, b its even and odd lanes; cos / sin of f [1, S, D/2] (computed from the
    positions, or folded constants [1, S, 1, D/2] when folded), unsqueezed at axis 2."""
    n = h.node
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax02": np.array([0, 2], np.int64),
             "ax2": np.array([2], np.int64), "inv_freq": inv, "i0": np.array([0], np.int64),
             "i1": np.array([1], np.int64), "iend": np.array([BIG], np.int64), "ilast": np.array([-1], np.int64),
             "two": np.array([2], np.int64)}
    nodes = [n("Slice", ["x", "i0", "iend", "ilast", "two"], ["a"]),
             n("Slice", ["x", "i1", "iend", "ilast", "two"], ["b"])]
    if folded:
        f = np.arange(seq, dtype=np.float32)[None, :, None, None] * inv[None, None, None, :]
        inits.update(cu=np.cos(f).astype(np.float32), su=np.sin(f).astype(np.float32))
    else:
        nodes += [
            n("Shape", ["x"], ["xs"], start=1, end=2), n("Squeeze", ["xs"], ["s0"]),
            n("Range", ["zero", "s0", "one_i"], ["pos"]), n("Unsqueeze", ["pos", "ax02"], ["pos3"]),
            n("Cast", ["pos3"], ["posf"], to=1), n("Mul", ["posf", "inv_freq"], ["f"]),   # [1, S, D/2]
            n("Cos", ["f"], ["ct"]), n("Sin", ["f"], ["st"]),
            n("Unsqueeze", ["ct", "ax2"], ["cu"]), n("Unsqueeze", ["st", "ax2"], ["su"]),
        ]
    nodes += [
        n("Mul", ["a", "cu"], ["m1"]), n("Mul", ["b", "su"], ["m2"]),
        n("Sub" if sign == "-" else "Add", ["m1", "m2"], ["lo"]),
        n("Mul", ["cu", "b"], ["m3"]), n("Mul", ["a", "su"], ["m4"]),   # inputs in either order
        n("Add", ["m3", "m4"], ["hi"]),
        n("Concat", ["lo", "hi"], ["y"], axis=-1),
    ]
    return h.make_model(nodes, [h.vi("x", [batch, seq, heads, D])], [h.vi("y", [batch, seq, heads, D])], inits)


def _feeds(h, heads, seq=5):
    return {"x": h.rng.standard_normal((2, seq, heads, D)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads", [8, 1])  # the indexer's queries (8 heads) and its one-head keys
def test_heads_last_halves_fuse(h, target, heads):
    model = _graph(h, heads)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Sub" not in ops and "Neg" not in ops, ops
    assert "rotary-halves-bshd" in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h, heads))


def test_folded_tables_fuse(h):
    """A static export: the unsqueezed tables are constants [1, S, 1, D/2]."""
    model = _graph(h, 8, folded=True, batch=2, seq=5)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Sub" not in h.ops(out), h.ops(out)
    assert "rotary-halves-bshd" in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h, 8))


def test_wrong_sign_is_not_a_rotation(h):
    """concat(a*cos + b*sin, ...): not what RotaryEmbedding computes."""
    model = _graph(h, 8, sign="+")
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, 8))


def test_dynamic_heads_are_refused(h):
    """The 3-D view needs H static: [B, S, h, D] with h symbolic keeps the graph, with the check's reason."""
    model = _graph(h, "h")
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    assert any("heads and the half width must be static" in r for r in h.reasons(model, "onnx", "rotary-halves-bshd"))
    h.assert_close(model, out, {"x": h.rng.standard_normal((2, 5, 3, D)).astype(np.float32)})
