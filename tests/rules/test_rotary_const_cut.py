"""Constant rotary tables without a batch axis, cut to x's length by a Slice whose end is read from
x's shape (tools/fuzz_idioms.py's row_rope motif with a constant f, once constant folding has made
cos/sin(concat(f, f)) initializers): rotary-const-row-tables-cut (rules/rope/rotary_row_tables.yaml); the
seq-first form [rows, 1, 1, D] through rotary-rotate-half-tables (rules/rope/rotary_rotate_half_tables.yaml).
Numerics against the original in ONNX Runtime, for several batch and sequence lengths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, D, ROWS = 2, 8, 11


def _tables(rows=ROWS, bad_halves=False):
    f = np.arange(rows)[:, None] * (1.0 / 10000 ** (np.arange(0, D, 2) / D))[None]
    cat = np.concatenate([f, f + (0.5 if bad_halves else 0.0)], axis=-1)
    return np.cos(cat).astype(np.float32), np.sin(cat).astype(np.float32)


def _graph(h, *, lead=(1, 1), dtype=np.float32, cast=False, sin_end="send", bad_halves=False, steps=False):
    """x [B, H, S, D] (dynamic B, S) rotated by constant tables [*lead, ROWS, D] cut to S rows."""
    n = h.node
    cos, sin = _tables(bad_halves=bad_halves)
    cos, sin = cos.reshape(*lead, ROWS, D), sin.reshape(*lead, ROWS, D)
    if not cast:
        cos, sin = cos.astype(dtype), sin.astype(dtype)
    row_axis = len(lead)
    cut = ["zero", "send", "cut"] + (["step"] if steps else [])
    nodes = [n("Shape", ["x"], ["send"], start=2, end=3),
             n("Slice", ["cos_t"] + cut, ["cs"]),
             n("Slice", ["sin_t", "zero", sin_end, "cut"] + (["step"] if steps else []), ["ss"])]
    cn, sn = "cs", "ss"
    if cast:
        to = TensorProto.FLOAT16 if dtype == np.float16 else h.F32
        nodes += [n("Cast", ["cs"], ["csc"], to=to), n("Cast", ["ss"], ["ssc"], to=to)]
        cn, sn = "csc", "ssc"
    nodes += [n("Slice", ["x", "zero", "ih", "last"], ["x1"]), n("Slice", ["x", "ih", "big", "last"], ["x2"]),
              n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
              n("Mul", ["x", cn], ["c"]), n("Mul", ["r", sn], ["s"]), n("Add", ["c", "s"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"cos_t": cos, "sin_t": sin, "zero": i64(0), "cut": i64(row_axis), "step": i64(1),
             "ih": i64(D // 2), "last": i64(-1), "big": i64(2 ** 62), "sfix": i64(3)}
    shape = ["batch", H, "seq", D]
    elem = TensorProto.FLOAT16 if dtype == np.float16 else h.F32
    return h.make_model(nodes, [h.vi("x", shape, elem)], [h.vi("y", shape, elem)], inits)


def _check(h, model, target, dtype=np.float32):
    tol = dict(atol=2e-3, rtol=2e-3) if dtype == np.float16 else {}
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["RotaryEmbedding"] == 1 and "Neg" not in counts, counts
    assert h.fired(out)["rotary-const-row-tables-cut"] >= 1
    for batch, seq in ((2, 5), (1, ROWS), (3, 1)):
        h.assert_close(model, out, {"x": h.rng.standard_normal((batch, H, seq, D)).astype(dtype)}, **tol)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("lead", [(1, 1), (1,), ()])
def test_constant_row_tables_cut_to_the_sequence_fuse(h, target, lead):
    """Before: RoPE left as Slice / Neg / Concat / Mul / Add (the row-table rule reads Cos(Concat(f,
    f)), which folding removed; the constant-table rules need tables of x's own length)."""
    _check(h, _graph(h, lead=lead), target)


def test_constant_row_tables_with_steps_fuse(h):
    _check(h, _graph(h, steps=True), "ort")


@pytest.mark.parametrize("cast", [False, True])
def test_float16_constant_row_tables_fuse(h, cast):
    """float16 x: tables stored in float16, or in float32 and cast after the cut (exact either way)."""
    _check(h, _graph(h, dtype=np.float16, cast=cast), "ort", np.float16)


@pytest.mark.parametrize("kw, why", [
    (dict(sin_end="sfix"), "cut alike"),
    (dict(bad_halves=True), "halves differ"),
])
def test_constant_row_tables_near_misses(h, kw, why):
    model = _graph(h, **kw)
    reasons = h.reasons(model, "ort", "rotary-const-row-tables-cut")
    assert any(why in r for r in reasons), reasons
    assert "RotaryEmbedding" not in h.ops(h.fuse(model, "ort"))


def _seq_first(h, *, cut_axis=0):
    """x [S, B, H, D] (seq-first, wav2vec2-conformer) rotated by constant tables [ROWS, 1, 1, D]
    cut by [:S] on their rows."""
    n = h.node
    cos, sin = (t.reshape(ROWS, 1, 1, D) for t in _tables())
    nodes = [n("Shape", ["x"], ["send"], start=0, end=1),
             n("Slice", ["cos_t", "zero", "send", "cut"], ["cs"]),
             n("Slice", ["sin_t", "zero", "send", "cut"], ["ss"]),
             n("Slice", ["x", "zero", "ih", "last"], ["x1"]), n("Slice", ["x", "ih", "big", "last"], ["x2"]),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
             n("Mul", ["x", "cs"], ["c"]), n("Mul", ["r", "ss"], ["s"]), n("Add", ["c", "s"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"cos_t": cos, "sin_t": sin, "zero": i64(0), "cut": i64(cut_axis), "ih": i64(D // 2),
             "last": i64(-1), "big": i64(2 ** 62)}
    shape = ["seq", "batch", H, D]
    return h.make_model(nodes, [h.vi("x", shape)], [h.vi("y", shape)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_seq_first_constant_row_tables_cut_fuse(h, target):
    """The fuzz stack_rope motif with constant tables (the stack and its Gathers fold away): the tables
    read as values by rotary-rotate-half-tables (session 35; rotary-const-row-tables-cut-sbhd before)."""
    model = _seq_first(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["RotaryEmbedding"] == 1 and "Neg" not in counts, counts
    assert h.fired(out)["rotary-rotate-half-tables"] >= 1
    for seq, batch in ((5, 2), (ROWS, 1), (1, 3)):
        h.assert_close(model, out, {"x": h.rng.standard_normal((seq, batch, H, D)).astype(np.float32)})


def test_seq_first_tables_cut_on_another_axis_do_not_fuse(h):
    model = _seq_first(h, cut_axis=3)
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert reasons and not any(r.startswith("matched") for r in reasons), reasons
    assert any("not varying over the heads" in r for r in reasons), reasons  # the cut leaves no head dim D
    assert "RotaryEmbedding" not in h.ops(h.fuse(model, "ort"))
