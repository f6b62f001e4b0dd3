"""rules/rope/rotary.yaml rotary-halves in every layout: RoPE written out half by half,
concat(a*cos - b*sin, b*cos + a*sin), read where the tables hold the positions (table_layout):
- heads-last x [B, S, H, D], tables unsqueezed at axis 2 (transformers 5's apply_rotary_pos_emb_interleave
  with unsqueeze_dim=2: the sparse-attention indexers of GLM-MoE-DSA, dots3-note, Mistral Large 4,
  HunYuan-V4-VL; rotary-halves-bshd until session 38) -> RotaryEmbedding-23 on the [B, S, H*D] view;
- seq-first x [S, B, H, D], tables [S, 1, 1, D/2] -> the same between two Transposes (new in session 38).
The identity holds for any tables that do not vary over the heads."""

from __future__ import annotations

import numpy as np
import pytest

D = 8
BIG = np.iinfo(np.int64).max
_NP = {1: np.float32, 10: np.float16}


def _graph(h, heads, *, layout="bshd", sign="-", folded=False, batch="b", seq="s", elem=1, per_head=False):
    """x: [B, S, heads, D] (bshd) or [S, B, heads, D] (sbhd); a, b its even and odd lanes; cos / sin of
    f [1, S, D/2] ([S, D/2] seq-first) computed from the positions, unsqueezed where x's heads (and,
    seq-first, batch) are, or folded constants of that shape."""
    n = h.node
    sax = 1 if layout == "bshd" else 0
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64), "ax1": np.array([1], np.int64),
             "ax02": np.array([0, 2], np.int64), "inv_freq": inv, "i0": np.array([0], np.int64),
             "i1": np.array([1], np.int64), "iend": np.array([BIG], np.int64), "ilast": np.array([-1], np.int64),
             "two": np.array([2], np.int64),
             "tax": np.array([2] if layout == "bshd" else [1, 2], np.int64)}
    nodes = [n("Slice", ["x", "i0", "iend", "ilast", "two"], ["a"]),
             n("Slice", ["x", "i1", "iend", "ilast", "two"], ["b"])]
    if folded:
        f = np.arange(seq, dtype=np.float32)[:, None] * inv[None, :]          # [S, D/2]
        shape = (1, seq, 1, D // 2) if layout == "bshd" else (seq, 1, 1, D // 2)
        cos, sin = np.cos(f).reshape(shape), np.sin(f).reshape(shape)
        if per_head:   # a different table per head: not one rotation of every head
            cos, sin = np.concatenate([cos, 0.5 * cos], axis=2), np.concatenate([sin, 0.5 * sin], axis=2)
        inits.update(cu=cos.astype(_NP[elem]), su=sin.astype(_NP[elem]))
    else:
        nodes += [
            n("Shape", ["x"], ["xs"], start=sax, end=sax + 1), n("Squeeze", ["xs"], ["s0"]),
            n("Range", ["zero", "s0", "one_i"], ["pos"]),
            n("Unsqueeze", ["pos", "ax02" if layout == "bshd" else "ax1"], ["pos3"]),   # [1, S, 1] / [S, 1]
            n("Cast", ["pos3"], ["posf"], to=1), n("Mul", ["posf", "inv_freq"], ["f"]),  # [1, S, D/2] / [S, D/2]
        ]
        nodes += [n("Cos", ["f"], ["c32"]), n("Sin", ["f"], ["s32"]),
                  n("Cast", ["c32"], ["ct"], to=elem), n("Cast", ["s32"], ["st"], to=elem),
                  n("Unsqueeze", ["ct", "tax"], ["cu"]), n("Unsqueeze", ["st", "tax"], ["su"])]
    nodes += [
        n("Mul", ["a", "cu"], ["m1"]), n("Mul", ["b", "su"], ["m2"]),
        n("Sub" if sign == "-" else "Add", ["m1", "m2"], ["lo"]),
        n("Mul", ["cu", "b"], ["m3"]), n("Mul", ["a", "su"], ["m4"]),   # inputs in either order
        n("Add", ["m3", "m4"], ["hi"]),
        n("Concat", ["lo", "hi"], ["y"], axis=-1),
    ]
    dims = [batch, seq, heads, D] if layout == "bshd" else [seq, batch, heads, D]
    return h.make_model(nodes, [h.vi("x", dims, elem)], [h.vi("y", dims, elem)], inits)


def _feeds(h, heads, layout="bshd", seq=5, elem=1):
    shape = (2, seq, heads, D) if layout == "bshd" else (seq, 2, heads, D)
    return {"x": h.rng.standard_normal(shape).astype(_NP[elem])}


def _fused(h, model, target, layout, heads):
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Sub" not in ops and "Neg" not in ops, ops
    assert h.fired(out)["rotary-halves"], h.fired(out)
    # the 3-D form on [B, S, H*D]; seq-first between two Transposes (one head: [S, B, 1, D] with
    # [S, 1, 1, D/2] tables is also the 4-D op's [batch, heads, seq, D], read so, no Transpose)
    assert ops["Transpose"] == (2 if layout == "sbhd" and heads > 1 else 0), ops
    return out


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads", [8, 1])  # the indexer's queries (8 heads) and its one-head keys
@pytest.mark.parametrize("layout", ["bshd", "sbhd"])
def test_halves_fuse_in_each_layout(h, target, heads, layout):
    model = _graph(h, heads, layout=layout)
    out = _fused(h, model, target, layout, heads)
    h.assert_close(model, out, _feeds(h, heads, layout))
    h.assert_close(model, out, _feeds(h, heads, layout, seq=3))


@pytest.mark.parametrize("layout", ["bshd", "sbhd"])
def test_folded_tables_fuse(h, layout):
    """A static export: the unsqueezed tables are constants [1, S, 1, D/2] / [S, 1, 1, D/2]."""
    model = _graph(h, 8, layout=layout, folded=True, batch=2, seq=5)
    out = _fused(h, model, "onnx", layout, 8)
    h.assert_close(model, out, _feeds(h, 8, layout))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("layout", ["bshd", "sbhd"])
def test_float16_halves_fuse(h, target, layout):
    model = _graph(h, 4, layout=layout, elem=10)
    out = _fused(h, model, target, layout, 4)
    h.assert_close(model, out, _feeds(h, 4, layout, elem=10), atol=4e-3, rtol=4e-3)


def test_per_head_tables_are_refused(h):
    """[1, S, H, D/2] tables on x [B, S, H, D]: a different row per head and position is no
    RotaryEmbedding's [B, S, D/2] caches in any reading."""
    model = _graph(h, 2, folded=True, batch=2, seq=5, per_head=True)
    assert any("not varying over the heads" in r for r in h.reasons(model, "onnx", "rotary-halves"))
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, 2))


def test_tables_varying_over_two_leading_axes_fuse_as_batch_and_rows(h):
    """[S, 1, H, D/2] tables on a seq-first x [S, B, H, D] vary over S and H but not B: the 4-D op on x
    read as [batch S, heads B, seq H, D] with [S, H, D/2] caches, exactly (the tables are read where
    they vary, not where an exporter put the positions)."""
    model = _graph(h, 2, layout="sbhd", folded=True, batch=2, seq=5, per_head=True)
    out = h.fuse(model, "onnx")
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Transpose" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, 2, "sbhd"))


@pytest.mark.parametrize("layout", ["bshd", "sbhd"])
def test_wrong_sign_is_not_a_rotation(h, layout):
    """concat(a*cos + b*sin, ...): not what RotaryEmbedding computes."""
    model = _graph(h, 8, layout=layout, sign="+")
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, 8, layout))


def test_dynamic_heads_are_refused(h):
    """The 3-D view needs H static: [B, S, h, D] with h symbolic keeps the graph, with the check's reason."""
    model = _graph(h, "h")
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    assert any("heads must be static" in r for r in h.reasons(model, "onnx", "rotary-halves"))
    h.assert_close(model, out, {"x": h.rng.standard_normal((2, 5, 3, D)).astype(np.float32)})
