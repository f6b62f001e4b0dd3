"""rules/layout/row_slice.yaml: a cut of rows moved onto the input of the Cos / Sin / Unsqueeze it reads.

Slice(op(a)) == op(Slice(a)) for an elementwise op, and for an Unsqueeze when the cut is on one of
the input's own axes (renumbered). Two tables cut alike from one angle tensor then cut it twice the
same way, and CSE keeps one cut (ESM's RoPE tables, hold-out 4). Numerics against the original in ONNX
Runtime at several lengths (the cut's end is read from an input's shape).
"""

from __future__ import annotations

import numpy as np
import pytest

R, W = 7, 4   # table rows, width


def _tables(h, unsqueeze=False, cut_axis=None, step=None, other_reader=False):
    """cos / sin of f [R, W] (optionally Unsqueeze'd at 0), each cut to the first S rows, S read from
    x [S]'s shape; outputs the two cut tables (and Cos(f) itself when other_reader)."""
    n = h.node
    axis = cut_axis if cut_axis is not None else (1 if unsqueeze else 0)
    nodes = [n("Shape", ["x"], ["send"]), n("Cos", ["f"], ["co"]), n("Sin", ["f"], ["si"])]
    co, si = "co", "si"
    if unsqueeze:
        nodes += [n("Unsqueeze", ["co", "ax0"], ["cu"]), n("Unsqueeze", ["si", "ax0"], ["su"])]
        co, si = "cu", "su"
    extra = ["step"] if step is not None else []
    nodes += [n("Slice", [co, "zero", "send", "cut", *extra], ["yc"]),
              n("Slice", [si, "zero", "send", "cut", *extra], ["ys"])]
    inits = {"ax0": np.array([0], np.int64), "zero": np.array([0], np.int64), "cut": np.array([axis], np.int64)}
    if step is not None:
        inits["step"] = np.array([step], np.int64)
    lead = [1] if unsqueeze else []
    rows = ["s"] if axis == len(lead) else [R]
    cols = ["s"] if axis == len(lead) + 1 else [W]
    outs = [h.vi("yc", lead + rows + cols), h.vi("ys", lead + rows + cols)]
    if other_reader:
        outs.append(h.vi("co", [R, W]))
    return h.make_model(nodes, [h.vi("f", [R, W]), h.vi("x", ["s"])], outs, inits)


def _feeds(h, s):
    return {"f": h.rng.uniform(-3, 3, (R, W)).astype(np.float32), "x": np.zeros(s, np.float32)}


@pytest.mark.parametrize("unsqueeze", [False, True], ids=["rows", "unsqueezed"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_cos_and_sin_share_one_cut_of_the_angles(h, target, unsqueeze):
    model = _tables(h, unsqueeze=unsqueeze)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["Slice"] == 1, counts                 # two cuts before, of Cos(f) and of Sin(f)
    cut = next(nd for nd in out.graph.node if nd.op_type == "Slice")
    assert cut.input[0] == "f", cut                     # the angles are cut, then Cos / Sin (/ Unsqueeze)
    fired = h.fired(out)
    assert fired["row-slice-above-cos"] + fired["row-slice-above-sin"] >= 1, fired
    for s in (R, 3, 1):
        h.assert_close(model, out, _feeds(h, s))


def _stays(h, model, s=3):
    out = h.fuse(model, "ort")
    assert h.ops(out)["Slice"] == 2, h.ops(out)
    assert not any(k.startswith("row-slice-above") for k in h.fired(out)), h.fired(out)
    h.assert_close(model, out, _feeds(h, s))


def test_a_cut_of_the_last_axis_stays(h):
    """The last axis is the half-slice sink's (it proves the halves equal first)."""
    reasons = h.reasons(_tables(h, cut_axis=1), "ort", "row-slice-above-cos")
    assert any("all before the last" in r for r in reasons), reasons
    _stays(h, _tables(h, cut_axis=1), s=2)


def test_a_cut_with_steps_stays(h):
    reasons = h.reasons(_tables(h, step=2), "ort", "row-slice-above-cos")
    assert any("take every row" in r for r in reasons), reasons
    _stays(h, _tables(h, step=2))


def test_a_table_read_elsewhere_stays(h):
    """Cos(f) is also a graph output: moving its cut would compute Cos twice (Sin's still moves)."""
    model = _tables(h, other_reader=True)
    out = h.fuse(model, "ort")
    counts, fired = h.ops(out), h.fired(out)
    assert counts["Cos"] == 1 and counts["Slice"] == 2 and "row-slice-above-cos" not in fired, (counts, fired)
    h.assert_close(model, out, _feeds(h, 3))


def test_a_cut_of_the_added_axis_stays(h):
    """An Unsqueeze's added axis has one row: a cut of it is not a cut of the input's rows."""
    model = _tables(h, unsqueeze=True, cut_axis=0)
    reasons = h.reasons(model, "ort", "row-slice-above-unsqueeze")
    assert any("all come before the cut one or all after it" in r for r in reasons), reasons
