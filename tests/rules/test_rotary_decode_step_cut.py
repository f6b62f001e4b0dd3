"""Rotary over one row of a cos / sin buffer cut at run time: a KV-cache decoder's step (x holds one position, S = 1
static) reads the rows [p, p + 1) of its tables, p known only at run time -- fed (a past length), read off a past
tensor's shape, counted back from the buffer's end (R - S), or the window's end minus S ([T - S, T), T the total
length). ONNX inference leaves the cut's row count unknown, and against x's one position an unknown count is no
broadcast the rewrite may assume (R rows against 1 would give R); table_dims reads the window's length off the
Slice's values (ends = starts + 1, starts = ends - 1, whatever made the offset: rewrite/_rotation_tables.py), so the
tables hold one row and table_layout reads them in every layout (bshd / bhsd / sbhd), rotate-half and the halves form,
full and partial rotary. All failed before (fuzz_s40 rope_cut seeds 14 and 34 were two of them).
A window [p, p + 2) of step 2 is one row too (the caches are the cut rows themselves: which rows does not matter, only
their count against x's positions). Near misses, in the rotate-half form (whose rewrite needs a rotation pair; the
halves form's RotaryEmbedding takes any cos / sin caches): a window of two rows against the one position (the
original broadcasts to two), sin cut one row after cos, tables that are no rotation (sin halved). The cut table and
the x * cos product read elsewhere (multi-consumer intermediates) still match."""

from __future__ import annotations

import numpy as np
import pytest

B, H, D, R = 2, 2, 8, 7
BIG = np.iinfo(np.int64).max
TARGETS = ["ort", "onnx", "trt"]
#: x's dims and the tables' Unsqueeze axes (the buffer's [rows, W] placed where x holds its positions)
LAYOUTS = {"bshd": (["b", 1, H, D], 1, [0, 2]), "bhsd": (["b", H, 1, D], 2, [0, 1]),
           "sbhd": ([1, "b", H, D], 0, [1, 2])}


def _angles(rows, half):
    return (np.arange(rows)[:, None] * (1.0 / 50 ** (np.arange(half) / half))[None, :] + 0.1).astype(np.float32)


def _model(h, *, layout="sbhd", form="rotate-half", start="fed", rd=D, window=1, step=1, sin_shift=0,
           scale_sin=1.0, shared=()):
    """x's first rd columns rotated over buffer rows [p, p + window) (p per ``start``), placed per ``layout``;
    ``shared`` names intermediates also read as graph outputs (cc the cut cos rows, prod x * cos)."""
    n = h.node
    dims, sax, uax = LAYOUTS[layout]
    w = rd if form == "rotate-half" else rd // 2
    a = _angles(R, rd // 2)
    full = np.concatenate([a, a], axis=-1) if form == "rotate-half" else a
    inits = {"cb": np.cos(full), "sb": (np.sin(full) * scale_sin).astype(np.float32), "z": np.array([0], np.int64),
             "one": np.array([1], np.int64), "win": np.array([window], np.int64), "uax": np.array(uax, np.int64),
             "hf": np.array([rd // 2], np.int64), "rd": np.array([rd], np.int64), "big": np.array([BIG], np.int64),
             "m1": np.array([-1], np.int64), "k": np.array([2], np.int64), "stp": np.array([step], np.int64)}
    assert full.shape[1] == w
    inputs = [h.vi("x", dims)]
    nodes = [n("Shape", ["x"], ["sx"], start=sax, end=sax + 1)]
    if start == "fed":
        inputs.append(h.vi("p", [1], 7))
        nodes += [n("Identity", ["p"], ["st"]), n("Add", ["st", "win"], ["en"])]
    elif start == "past-shape":
        inputs.append(h.vi("past", ["b", H, "past", D]))
        nodes += [n("Shape", ["past"], ["st"], start=2, end=3), n("Add", ["win", "st"], ["en"])]
    elif start == "from-end":   # p = R - (S + 2): two rows left after the cut
        nodes += [n("Shape", ["cb"], ["rb"], start=0, end=1), n("Add", ["sx", "k"], ["span"]),
                  n("Sub", ["rb", "span"], ["st"]), n("Add", ["st", "win"], ["en"])]
    else:                       # "total": T = past + S, the rows [T - S, T)
        inputs.append(h.vi("p", [1], 7))
        nodes += [n("Add", ["p", "sx"], ["en"]), n("Sub", ["en", "win"], ["st"])]
    nodes += [n("Slice", ["cb", "st", "en", "z", "stp"], ["cc"])]
    if sin_shift:
        inits["shift"] = np.array([sin_shift], np.int64)
        nodes += [n("Add", ["st", "shift"], ["st2"]), n("Add", ["en", "shift"], ["en2"]),
                  n("Slice", ["sb", "st2", "en2", "z", "stp"], ["sc"])]
    else:
        nodes += [n("Slice", ["sb", "st", "en", "z", "stp"], ["sc"])]
    nodes += [n("Unsqueeze", ["cc", "uax"], ["c"]), n("Unsqueeze", ["sc", "uax"], ["s"])]
    xr = "x"
    if rd < D:
        nodes += [n("Slice", ["x", "z", "rd", "m1"], ["xr"]), n("Slice", ["x", "rd", "big", "m1"], ["xp"])]
        xr = "xr"
    nodes += [n("Slice", [xr, "z", "hf", "m1"], ["x1"]), n("Slice", [xr, "hf", "big", "m1"], ["x2"])]
    if form == "rotate-half":
        nodes += [n("Neg", ["x2"], ["nx"]), n("Concat", ["nx", "x1"], ["r"], axis=-1),
                  n("Mul", [xr, "c"], ["prod"]), n("Mul", ["s", "r"], ["b_"]), n("Add", ["prod", "b_"], ["yr"])]
    else:
        nodes += [n("Mul", ["x1", "c"], ["prod"]), n("Mul", ["x2", "s"], ["m2"]), n("Sub", ["prod", "m2"], ["lo"]),
                  n("Mul", ["c", "x2"], ["m3"]), n("Mul", ["x1", "s"], ["m4"]), n("Add", ["m3", "m4"], ["hi"]),
                  n("Concat", ["lo", "hi"], ["yr"], axis=-1)]
    nodes += [n("Concat", ["yr", "xp"], ["y"], axis=-1)] if rd < D else [n("Identity", ["yr"], ["y"])]
    outputs = [h.vi("y", None)] + [h.vi(v, None) for v in shared]
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, layout, start, p):
    dims = [B if d == "b" else d for d in LAYOUTS[layout][0]]
    feeds = {"x": h.rng.standard_normal(dims).astype(np.float32)}
    if start in ("fed", "total"):
        feeds["p"] = np.array([p], np.int64)
    elif start == "past-shape":
        feeds["past"] = np.zeros((B, H, p, D), np.float32)
    return feeds


def _rotaries(model):
    return sum(1 for nd in model.graph.node if nd.op_type == "RotaryEmbedding")


CASES = [("sbhd", "rotate-half", "fed", D),          # fuzz_s40 rope_cut seed 14
         ("sbhd", "halves", "past-shape", D // 2),  # seed 34 (partial rotary)
         ("bhsd", "halves", "from-end", D // 2),     # seed 13's form on a buffer of several rows
         ("bshd", "rotate-half", "total", D),
         ("bhsd", "rotate-half", "past-shape", D),
         ("bshd", "halves", "fed", D)]


@pytest.mark.parametrize("layout, form, start, rd", CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_one_row_cut_at_run_time_fuses(h, target, layout, form, start, rd):
    model = _model(h, layout=layout, form=form, start=start, rd=rd)
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1, ops
    assert "Neg" not in ops, ops
    for p in (0, 3, R - 1) if start != "from-end" else (None,):
        h.assert_close(model, out, _feeds(h, layout, start, p))


@pytest.mark.parametrize("target", TARGETS)
def test_every_other_row_of_two_is_one_row(h, target):
    """[p, p + 2) of step 2 is the row p alone: one row, whatever p is (the caches are the cut rows themselves,
    so which row does not matter, only their count against x's one position)."""
    model = _model(h, window=2, step=2)
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    assert _rotaries(out) == 1, h.ops(out)
    for p in (0, R - 2, R - 1):
        h.assert_close(model, out, _feeds(h, "sbhd", "fed", p))


@pytest.mark.parametrize("shared", ["cc", "prod"])
@pytest.mark.parametrize("target", TARGETS)
def test_intermediates_read_elsewhere_match(h, target, shared):
    """The cut cos rows (cc) or x * cos (prod) also a graph output: the rewrite keeps it, the outputs match; a
    shared table does not stop the fusion."""
    model = _model(h, layout="sbhd", form="rotate-half", start="fed", shared=(shared,))
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    assert [o.name for o in out.graph.output] == ["y", shared]
    if shared == "cc":
        assert _rotaries(out) == 1, h.ops(out)
    for p in (0, R - 1):
        h.assert_close(model, out, _feeds(h, "sbhd", "fed", p))


@pytest.mark.parametrize("near", ["two-rows", "sin-shifted", "not-rotation"])
@pytest.mark.parametrize("target", TARGETS)
def test_near_misses_stay(h, target, near):
    """Two rows against one position (the original broadcasts x to both), sin one row after cos (two angles), sin
    halved (cos^2 + sin^2 not one number): no RotaryEmbedding, outputs equal."""
    kw = {"two-rows": {"window": 2}, "sin-shifted": {"sin_shift": 1}, "not-rotation": {"scale_sin": 0.5}}[near]
    model = _model(h, layout="sbhd", form="rotate-half", start="fed", **kw)
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    assert _rotaries(out) == 0, h.ops(out)
    for p in (0, R - 3):
        h.assert_close(model, out, _feeds(h, "sbhd", "fed", p))
