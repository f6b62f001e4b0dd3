"""rules/rope/rotary_const.yaml, rotary_interleaved.yaml, rotary_partial.yaml: RoPE whose cos/sin
tables are constants (folded by static-shape exports, or gathered by position_ids), in the
rotate-half and interleaved forms, [B, H, S, D] and [B, S, H, D] layouts, full and partial rotary.
Each graph is built here with onnx.helper; numerics are checked in ONNX Runtime against the
original graph; near-misses assert no fusion and the reason `explain` gives."""

from __future__ import annotations

import re

import numpy as np
import pytest

B, H, S, D = 2, 3, 5, 16
P = 12              # rows of a gathered table (max positions)
BIG = np.iinfo(np.int64).max


def _angles(rows: int, rd: int, *, bad_halves=False) -> np.ndarray:
    inv = 1.0 / (10000 ** (np.arange(0, rd, 2) / rd))
    f = np.arange(rows)[:, None] * inv[None, :]               # [rows, rd/2]
    return f, (2 * f if bad_halves else f)


def _tables(rows, rd, *, form, bad_halves=False, scale=1.0):
    """cos/sin [rows, rd]: cos(concat(f, f)) (half form) or repeat_interleave(cos(f), 2)."""
    f, g = _angles(rows, rd, bad_halves=bad_halves)
    if form == "half":
        ang = np.concatenate([f, g], axis=-1)
    else:
        ang = np.stack([f, g], axis=-1).reshape(rows, rd)
    return (scale * np.cos(ang)).astype(np.float32), (scale * np.sin(ang)).astype(np.float32)


def _ts_repeat_interleave(n) -> list:
    """GPT-J's repeat_interleave of the gathered sin ("gs") / cos ("gc") halves as TorchScript writes
    it: Unsqueeze(2), Unsqueeze(4), Tile, Reshape(x, Shape(x)[:3] + [-1]) -> "su" / "cu"."""
    nodes = []
    for part, out in (("gs", "su"), ("gc", "cu")):
        nodes += [n("Unsqueeze", [part, "i2"], [part + "4"]), n("Unsqueeze", [part + "4", "i4"], [part + "5"]),
                  n("Tile", [part + "5", "rep"], [part + "x"]), n("Shape", [part + "x"], [part + "sh"]),
                  n("Slice", [part + "sh", "i0", "i3"], [part + "s3"]),
                  n("Concat", [part + "s3", "ilast"], [part + "t"], axis=0),
                  n("Reshape", [part + "x", part + "t"], [out])]
    return nodes


def _graph(h, *, form="half", layout="bhsd", tables="folded", rd=D, bad_halves=False, scale=1.0,
           head_varying=False, slice_start=0, pass_start=None, step=1, elem=1, tile=(1, 1, 1, 1, 2),
           table_batches=1, ts_order=1, promote=False):
    """x -> [x_rot, x_pass split] -> x_rot*cos + rotate(x_rot)*sin -> [concat x_pass] -> y.
    ``promote``: x float16 against the float32 tables, x and its rotation cast up before their Muls
    (GPT-J 4.4x eager in float16, TorchScript), y float32."""
    n = h.node
    shape = [B, H, S, D] if layout == "bhsd" else [B, S, H, D]
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64),
             "ilast": np.array([-1], np.int64), "ibig": np.array([BIG], np.int64),
             "istep": np.array([step], np.int64), "i2": np.array([2], np.int64),
             "ipast": np.array([6], np.int64)}
    nodes, inputs = [], []
    xr = "x"
    if rd < D:
        inits["ird"] = np.array([rd], np.int64)
        inits["ipass"] = np.array([rd if pass_start is None else pass_start], np.int64)
        nodes += [n("Slice", ["x", "i0", "ird", "ilast"], ["xr"]),
                  n("Slice", ["x", "ipass", "ibig", "ilast"], ["xp"])]
        xr = "xr"
    cos, sin = _tables(S if tables == "folded" else P, rd, form=form, bad_halves=bad_halves, scale=scale)
    if tables == "folded":
        tshape = [1, 1, S, rd] if layout == "bhsd" else [1, S, 1, rd]
        cu, su = cos.reshape(tshape), sin.reshape(tshape)
        if head_varying:   # a different table per head: not a function of the position alone
            cu = np.concatenate([cu * (1.0 - 0.1 * k) for k in range(H)], axis=1)
            su = np.concatenate([su * (1.0 - 0.1 * k) for k in range(H)], axis=1)
        inits.update(cu=cu, su=su)
    elif tables in ("computed", "computed-ts"):   # Cohere: cos/sin of repeat_interleave(positions * inv_freq, 2)
        inv = (1.0 / (10000 ** (np.arange(0, rd, 2) / rd))).astype(np.float32)
        inits.update(inv=inv, z=np.array(0, np.int64), o=np.array(1, np.int64),
                     ax02=np.array([0, 2], np.int64), ax1=np.array([1], np.int64),
                     rep=np.array([1, 1, 1, 2], np.int64), rshp=np.array([1, -1, rd], np.int64))
        nodes += [n("Shape", ["x"], ["xs"], start=2, end=3), n("Squeeze", ["xs"], ["s0"]),
                  n("Range", ["z", "s0", "o"], ["pr"]), n("Unsqueeze", ["pr", "ax02"], ["p3"]),
                  n("Cast", ["p3"], ["pf"], to=1), n("Mul", ["pf", "inv"], ["f"])]
        if form == "half":   # LLaMA / GPT-NeoX / Phi: cos/sin of concat(f, f)
            nodes += [n("Concat", ["f", "f"], ["ri"], axis=-1)]
        elif tables == "computed-ts":   # TorchScript's general repeat_interleave (Optimum's Cohere):
            # the axis to the front, a new axis 1 expanded to 2 by torch's Where(c == -1, 1, c) target,
            # rows picked by GatherND (j // 2, j % 2) (ts_order -1: the rows reversed), axis back
            idx = np.array([[j // 2, j % 2] for j in range(rd)][::ts_order], np.int64)
            inits.update(idx=idx, head2=np.array([-1, 2], np.int64), m4=np.array([-1] * 4, np.int64),
                         one4=np.array([1] * 4, np.int64))
            nodes += [n("Transpose", ["f"], ["ft"], perm=[2, 1, 0]), n("Unsqueeze", ["ft", "ax1"], ["fu"]),
                      n("Shape", ["ft"], ["fts"], start=1, end=2),
                      n("Concat", ["head2", "fts", "ilast"], ["ec"], axis=0), n("Equal", ["ec", "m4"], ["eq"]),
                      n("Where", ["eq", "one4", "ec"], ["et"]), n("Expand", ["fu", "et"], ["fx"]),
                      n("GatherND", ["fx", "idx"], ["fg"]), n("Transpose", ["fg"], ["ri"], perm=[2, 1, 0])]
        else:
            nodes += [n("Unsqueeze", ["f", "ilast"], ["fu"]), n("Expand", ["fu", "rep"], ["fx"]),
                      n("Reshape", ["fx", "rshp"], ["ri"])]
        nodes += [n("Cos", ["ri"], ["co"]), n("Sin", ["ri"], ["si"])]
        if scale != 1.0:
            inits["scal"] = np.array(scale, np.float32)
            nodes += [n("Mul", ["co", "scal"], ["com"]), n("Mul", ["si", "scal"], ["sim"])]
        c_, s_ = ("com", "sim") if scale != 1.0 else ("co", "si")
        nodes += [n("Unsqueeze", [c_, "ax1"], ["cu"]), n("Unsqueeze", [s_, "ax1"], ["su"])]
    elif tables == "computed-half":   # GLM: repeat_interleave(cos(concat(f, f))[..., :rd/2], 2)
        inv = (1.0 / (10000 ** (np.arange(0, rd, 2) / rd))).astype(np.float32)
        inits.update(inv=inv, z=np.array(0, np.int64), o=np.array(1, np.int64),
                     ax02=np.array([0, 2], np.int64), ax1=np.array([1], np.int64),
                     rep=np.array([1, 1, 1, 1, 2], np.int64), rshp=np.array([0, 0, 0, -1], np.int64),
                     hcut=np.array([rd // 2], np.int64))
        nodes += [n("Shape", ["x"], ["xs"], start=2, end=3), n("Squeeze", ["xs"], ["s0"]),
                  n("Range", ["z", "s0", "o"], ["pr"]), n("Unsqueeze", ["pr", "ax02"], ["p3"]),
                  n("Cast", ["p3"], ["pf"], to=1), n("Mul", ["pf", "inv"], ["f"]),
                  n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"])]
        if scale != 1.0:
            inits["scal"] = np.array(scale, np.float32)
            nodes += [n("Mul", ["co", "scal"], ["com"]), n("Mul", ["si", "scal"], ["sim"])]
        for part, out in (("com", "cu"), ("sim", "su")) if scale != 1.0 else (("co", "cu"), ("si", "su")):
            nodes += [n("Unsqueeze", [part, "ax1"], [part + "4"]),
                      n("Slice", [part + "4", "i0", "hcut", "ilast"], [part + "h"]),
                      n("Unsqueeze", [part + "h", "ilast"], [part + "5"]),
                      n("Expand", [part + "5", "rep"], [part + "x"]),
                      n("Reshape", [part + "x", "rshp"], [out])]
    elif tables == "sincos":   # GPT-J: concat(sin, cos) [P, rd], GatherND, Split, repeat_interleave
        f, _ = _angles(P, rd)
        inits.update(tab=(scale * np.concatenate([np.sin(f), np.cos(f)], axis=-1)).astype(np.float32),
                     ax24=np.array([2, 4], np.int64), rep=np.array([1, 1, 1, 1, 2], np.int64),
                     rshp=np.array([0, 0, 1, rd], np.int64))
        nodes += [n("Unsqueeze", ["pos", "ilast"], ["pu"]), n("GatherND", ["tab", "pu"], ["g"]),
                  n("Split", ["g"], ["gs", "gc"], axis=-1, num_outputs=2)]
        for part, out in (("gs", "su"), ("gc", "cu")):
            nodes += [n("Unsqueeze", [part, "ax24"], [part + "5"]),
                      n("Expand", [part + "5", "rep"], [part + "x"]),
                      n("Reshape", [part + "x", "rshp"], [out])]
        inputs.append(h.vi("pos", ["b", "s"], 7))
    elif tables == "sincos-ts":   # GPT-J TorchScript (transformers 5): Gather rows by position,
        # Split, repeat_interleave as Unsqueeze(2), Unsqueeze(4), Tile, Reshape(Shape(t)[:3] + [-1])
        f, _ = _angles(P, rd)
        inits.update(tab=(scale * np.concatenate([np.sin(f), np.cos(f)], axis=-1)).astype(np.float32),
                     sp=np.array([rd // 2, rd // 2], np.int64), i3=np.array([3], np.int64),
                     i4=np.array([4], np.int64), rep=np.array(tile, np.int64))
        nodes += [n("Gather", ["tab", "pos"], ["g"], axis=0), n("Split", ["g", "sp"], ["gs", "gc"], axis=-1)]
        nodes += _ts_repeat_interleave(n)
        inputs.append(h.vi("pos", ["b", "s"], 7))
    elif tables == "sincos-ge":   # GPT-J Optimum (transformers < 4.58): table [1, P, rd] tiled
        # over the batch, GatherElements(axis 1) of position_ids tiled over the row, then as above
        f, _ = _angles(P, rd)
        tab = np.concatenate([np.sin(f), np.cos(f)], axis=-1)[None]
        if table_batches == 2:   # a second, different table for the second batch row
            tab = np.concatenate([tab, np.concatenate([np.sin(2 * f), np.cos(2 * f)], axis=-1)[None]])
        inits.update(tab=tab.astype(np.float32), one1=np.array([1, 1], np.int64),
                     sp=np.array([rd // 2, rd // 2], np.int64), i3=np.array([3], np.int64),
                     i4=np.array([4], np.int64), rep=np.array(tile, np.int64))
        nodes += [n("Shape", ["pos"], ["pb"], start=0, end=1), n("Concat", ["pb", "one1"], ["trep"], axis=0),
                  n("Tile", ["tab", "trep"], ["tt"]), n("Unsqueeze", ["pos", "ilast"], ["pu"]),
                  n("Shape", ["tt"], ["tw"], start=2, end=3), n("Concat", ["one1", "tw"], ["prep"], axis=0),
                  n("Tile", ["pu", "prep"], ["pt"]), n("GatherElements", ["tt", "pt"], ["g"], axis=1),
                  n("Split", ["g", "sp"], ["gs", "gc"], axis=-1)]
        nodes += _ts_repeat_interleave(n)
        inputs.append(h.vi("pos", ["b", "s"], 7))
    elif tables == "sincos-ge1":   # GPT-J as transformers 4.38 / 4.45 wrote
        # it (TorchScript): position_ids [1, S], so the table [1, P, rd] is not tiled (repeat by a batch
        # of 1, folded), GatherElements(axis 1) of the one row tiled over the table's row
        f, _ = _angles(P, rd)
        inits.update(tab=np.concatenate([np.sin(f), np.cos(f)], axis=-1)[None].astype(np.float32),
                     one1=np.array([1, 1], np.int64), sp=np.array([rd // 2, rd // 2], np.int64),
                     i3=np.array([3], np.int64), i4=np.array([4], np.int64), rep=np.array(tile, np.int64))
        nodes += [n("Unsqueeze", ["pos", "ilast"], ["pu"]), n("Shape", ["tab"], ["tw"], start=2, end=3),
                  n("Concat", ["one1", "tw"], ["prep"], axis=0), n("Tile", ["pu", "prep"], ["pt"]),
                  n("GatherElements", ["tab", "pt"], ["g"], axis=1), n("Split", ["g", "sp"], ["gs", "gc"], axis=-1)]
        nodes += _ts_repeat_interleave(n)
        inputs.append(h.vi("pos", [1, "s"], 7))
    else:   # [P, rd] tables cut to the sequence (optional) and gathered by position_ids
        inits.update(ct=cos, st=sin, ax0=np.array([0], np.int64), ax1=np.array([1], np.int64),
                     istart=np.array([slice_start], np.int64))
        ct, st = "ct", "st"
        if tables == "sliced4":   # transformers 4.31-4.35: [1, 1, P, D], [:, :, :seq], squeeze(1).squeeze(0)
            inits.update(ct=cos.reshape(1, 1, P, rd), st=sin.reshape(1, 1, P, rd), ax2=np.array([2], np.int64))
            nodes += [n("Shape", ["pos"], ["plen"], start=1, end=2),
                      n("Add", ["plen", "ipast"], ["pend"])]
            for t in ("ct", "st"):
                nodes += [n("Slice", [t, "istart", "pend", "ax2", "i1"], [t + "s"]),
                          n("Squeeze", [t + "s", "ax1"], [t + "q1"]), n("Squeeze", [t + "q1", "ax0"], [t + "q"])]
            ct, st = "ctq", "stq"
        if tables == "sliced":
            nodes += [n("Shape", ["pos"], ["plen"], start=1, end=2),
                      n("Add", ["plen", "ipast"], ["pend"]),   # past + new tokens
                      n("Slice", ["ct", "istart", "pend", "ax0", "i1"], ["cts"]),
                      n("Slice", ["st", "istart", "pend", "ax0", "i1"], ["sts"])]
            ct, st = "cts", "sts"
        nodes += [n("Gather", [ct, "pos"], ["cg"], axis=0), n("Gather", [st, "pos"], ["sg"], axis=0),
                  n("Unsqueeze", ["cg", "ax1"], ["cu"]), n("Unsqueeze", ["sg", "ax1"], ["su"])]
        inputs.append(h.vi("pos", ["b", "s"], 7))
    if promote:
        nodes.append(n("Cast", [xr], ["xrf"], to=1))
    nodes.append(n("Mul", ["xrf" if promote else xr, "cu"], ["c"]))
    if form == "half":
        inits["ihalf"] = np.array([rd // 2], np.int64)
        nodes += [n("Slice", [xr, "i0", "ihalf", "ilast", "istep"], ["x1"]),
                  n("Slice", [xr, "ihalf", "ibig", "ilast", "istep"], ["x2"]),
                  n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1)]
    else:
        nodes += [n("Slice", [xr, "i0", "ibig", "ilast", "i2"], ["xe"]),
                  n("Slice", [xr, "i1", "ibig", "ilast", "i2"], ["xo"]),
                  n("Neg", ["xo"], ["nxo"]), n("Unsqueeze", ["nxo", "ilast"], ["nu"]),
                  n("Unsqueeze", ["xe", "ilast"], ["eu"]), n("Concat", ["nu", "eu"], ["stk"], axis=-1)]
        if tables in ("sincos-ts", "sincos-ge", "sincos-ge1", "computed-ts"):
            # TorchScript sizes the flatten from Shape(stk)[:-2]
            inits["im2"] = np.array([-2], np.int64)
            nodes += [n("Shape", ["stk"], ["stksh"]), n("Slice", ["stksh", "i0", "im2"], ["stk2"]),
                      n("Concat", ["stk2", "ilast"], ["shp"], axis=0)]
        else:
            inits["shp"] = np.array([0, 0, 0, -1], np.int64)
        nodes.append(n("Reshape", ["stk", "shp"], ["r"]))
    if promote:
        nodes.append(n("Cast", ["r"], ["rf"], to=1))
    nodes += [n("Mul", ["rf" if promote else "r", "su"], ["s"]), n("Add", ["c", "s"], ["yr" if rd < D else "y"])]
    if rd < D:
        nodes.append(n("Concat", ["yr", "xp"], ["y"], axis=-1))
    xshape = shape if tables in ("folded",) else (["b", H, "s", D] if layout == "bhsd" else ["b", "s", H, D])
    yshape = list(xshape)
    if pass_start is not None:
        yshape[-1] = rd + D - pass_start
    if elem != 1:   # a float16/bfloat16 model: x, y and the tables in that dtype
        dt = {10: np.float16, 16: __import__("ml_dtypes").bfloat16}[elem]
        inits = {k: (v.astype(dt) if v.dtype == np.float32 else v) for k, v in inits.items()}
    inputs.insert(0, h.vi("x", xshape, 10 if promote else elem))
    return h.make_model(nodes, inputs, [h.vi("y", yshape, elem)], inits)


def _feeds(h, model, dtype=np.float32):
    names = [i.name for i in model.graph.input]
    layout_bshd = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value == H
    f = {"x": h.rng.standard_normal((B, S, H, D) if layout_bshd else (B, H, S, D)).astype(dtype)}
    if "pos" in names:   # positions after a past of 3 tokens, a different offset per row
        f["pos"] = (np.arange(S)[None, :] + np.array([[3], [5]])).astype(np.int64)
        if model.graph.input[names.index("pos")].type.tensor_type.shape.dim[0].dim_value == 1:
            f["pos"] = f["pos"][:1]   # one row of positions for every batch row
    return f


def _rotary_nodes(model):
    return [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]


def _attr(node, name, default=None):
    return next((a.i for a in node.attribute if a.name == name), default)


# ------------------------------------------------------------------------------------------------
# Positive cases


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form,layout,rule", [
    ("half", "bhsd", "rotary-const-table"),
    ("half", "bshd", "rotary-const-table"),
    ("interleaved", "bhsd", "rotary-interleaved-paired-tables"),
    ("interleaved", "bshd", "rotary-interleaved-paired-tables"),
])
def test_folded_tables_fuse(h, target, form, layout, rule):
    model = _graph(h, form=form, layout=layout)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "Slice" not in ops, ops
    assert h.fired(out)[rule] >= 1, h.fired(out)
    (rot,) = _rotary_nodes(out)
    assert _attr(rot, "interleaved", 0) == (form == "interleaved")
    if layout == "bshd":
        assert _attr(rot, "num_heads") == H and ops["Reshape"] == 2, ops
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("form,layout,tables", [("half", "bhsd", "folded"), ("interleaved", "bshd", "folded"),
                                               ("half", "bhsd", "sliced4")])
def test_float16_tables_fuse(h, form, layout, tables):
    """float16 tables: cos^2 + sin^2 is 1 only within float16 rounding; the rule allows it."""
    model = _graph(h, form=form, layout=layout, tables=tables, elem=10)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("tables", ["gathered", "sliced", "sliced4"])
def test_gathered_tables_fuse_with_position_ids(h, tables, target):
    model = _graph(h, tables=tables)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "Gather" not in ops, ops
    (rot,) = _rotary_nodes(out)
    assert len(rot.input) == 4 and rot.input[3], "position_ids must be passed"
    cache = next(i for i in out.graph.initializer if i.name == rot.input[1])
    assert list(cache.dims) == [P, D // 2]   # the half-width [max_pos, D/2] table
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("tables,rule", [("computed", "rotary-interleaved-paired-tables"),
                                         ("computed-ts", "rotary-interleaved-paired-tables"),
                                         ("computed-half", "rotary-interleaved-paired-tables")])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_computed_interleaved_tables_fuse(h, target, tables, rule, scale):
    """Dynamic exports: Cohere's cos(repeat_interleave(f, 2)); GLM's repeat_interleave of the first
    half of cos(concat(f, f)); tables scaled by one number (HF's attention_scaling: YaRN)."""
    model = _graph(h, form="interleaved", tables=tables, scale=scale)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops, ops
    assert rule in h.fired(out), h.fired(out)
    (rot,) = _rotary_nodes(out)
    assert _attr(rot, "interleaved") == 1
    h.assert_close(model, out, _feeds(h, model))


def test_torchscript_repeat_interleave_is_canonicalized(h):
    """TorchScript's GatherND repeat_interleave becomes the dynamo form (then RoPE); rows picked in
    another order are no repeat_interleave and stay."""
    out = h.fuse(_graph(h, form="interleaved", tables="computed-ts"), "onnx", level=2)
    assert "GatherND" not in h.ops(out) and h.ops(out)["RotaryEmbedding"] == 1, h.ops(out)
    model = _graph(h, form="interleaved", tables="computed-ts", ts_order=-1)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["GatherND"] == 1 and "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_gathered_sincos_table_interleaved_fuses(h, target):
    """GPT-J / CodeGen dynamic export: embed_positions gathered, split, repeat_interleave'd."""
    model = _graph(h, form="interleaved", layout="bshd", tables="sincos")
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "GatherND" not in ops and "Neg" not in ops, ops
    (rot,) = _rotary_nodes(out)
    assert _attr(rot, "interleaved") == 1 and _attr(rot, "num_heads") == H and rot.input[3]
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("tables", ["sincos-ts", "sincos-ge"])
def test_gathered_sincos_table_torchscript_form_fuses(h, target, tables):
    """GPT-J TorchScript / transformers 5: Gather (not GatherND) of the rows, Split by sizes, the
    repeat_interleave as two Unsqueezes and a Tile, Reshapes sized from Shape() of their input.
    Optimum (transformers < 4.58): the rows by GatherElements of tiled table and positions."""
    model = _graph(h, form="interleaved", layout="bshd", tables=tables)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Tile" not in ops and "Neg" not in ops, ops
    (rot,) = _rotary_nodes(out)
    assert _attr(rot, "interleaved") == 1 and _attr(rot, "num_heads") == H and rot.input[3]
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("tables", ["sincos-ge1", "sincos-ts"])
def test_gathered_sincos_of_a_promoted_float16_x_fuses(h, target, tables):
    """GPT-J 4.48 eager in float16 (TorchScript): float32 sin / cos promote the float16 q / k, so x and
    its rotation are cast up before their Muls (0/4 RoPE before): the op runs on x cast up, exactly."""
    model = _graph(h, form="interleaved", layout="bshd", tables=tables, promote=True)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops, ops
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=1e-3)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_gathered_sincos_untiled_table_of_one_position_row_fuses(h, target):
    """GPT-J as transformers 4.38 / 4.45 wrote it (TorchScript): position_ids [1, S], the table
    [1, P, rd] gathered untiled by GatherElements; the rows broadcast over the batch."""
    model = _graph(h, form="interleaved", layout="bshd", tables="sincos-ge1")
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "GatherElements" not in ops and "Neg" not in ops, ops
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx"])
@pytest.mark.parametrize("form,layout,tables", [
    ("half", "bhsd", "folded"), ("half", "bshd", "folded"), ("half", "bhsd", "gathered"),
    ("interleaved", "bshd", "folded"), ("interleaved", "bhsd", "folded"),
    ("interleaved", "bshd", "sincos"), ("interleaved", "bshd", "sincos-ts"), ("interleaved", "bshd", "sincos-ge"),
    ("interleaved", "bhsd", "computed-half"),
    ("half", "bhsd", "computed"), ("interleaved", "bhsd", "computed"),
])
def test_partial_rotary_fuses_into_one_op(h, target, form, layout, tables):
    rd = 8
    model = _graph(h, form=form, layout=layout, tables=tables, rd=rd)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Slice" not in ops and "Neg" not in ops, ops
    (rot,) = _rotary_nodes(out)
    assert _attr(rot, "rotary_embedding_dim") == rd
    # one rule for both layouts (the 3-D form's Reshapes are optional nodes of rotary-partial); over gathered
    # tables rotary-caches-gathered-rows then rewrites the folded op (its rotary dim checked above)
    assert {k for k in h.fired(out) if k.startswith("rotary-partial")} == {"rotary-partial"} or (
        tables == "gathered" and "rotary-caches-gathered-rows" in h.fired(out)), h.fired(out)
    h.assert_close(model, out, _feeds(h, model))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form,layout,tables", [
    ("half", "bhsd", "folded"), ("half", "bshd", "folded"), ("half", "bhsd", "gathered"),
    ("interleaved", "bhsd", "folded"), ("interleaved", "bshd", "sincos"), ("interleaved", "bshd", "sincos-ts"),
])
@pytest.mark.parametrize("scale", [0.5, 1.2])
def test_scaled_constant_tables_fuse(h, target, form, layout, tables, scale):
    """YaRN / LongRoPE tables after onnxsim/onnxslim folded the position math: constants scaled
    by attention_scaling, cos^2 + sin^2 == s^2 (refused before: the check wanted 1). The caches
    carry s, so the fused op matches the original."""
    model = _graph(h, form=form, layout=layout, tables=tables, scale=scale)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops, ops
    h.assert_close(model, out, _feeds(h, model))


def test_scaled_float16_tables_fuse(h):
    model = _graph(h, tables="folded", scale=1.1, elem=10)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, model, np.float16), atol=1e-2, rtol=1e-2)


# ------------------------------------------------------------------------------------------------
# Near-misses: one per constraint. Each must leave the rotation unfused and say why.

# a scale that grows with the position (rows of S or P): cos^2 + sin^2 is no single s^2
ROW_SCALE = np.linspace(0.5, 1.0, S)[:, None]
ROW_SCALE_P = np.linspace(0.5, 1.0, P)[:, None]


@pytest.mark.parametrize("kw,rule,why", [
    (dict(bad_halves=True), "rotary-const-table", "halves differ"),
    # cos^2 + sin^2 varying with the position: no single scale s
    (dict(scale=ROW_SCALE), "rotary-const-table", "not a \\(scaled\\) rotation"),
    (dict(head_varying=True), "rotary-const-table", r"\[1\|B, 1, S, D\]"),
    (dict(layout="bshd", bad_halves=True), "rotary-const-table", "halves differ"),
    (dict(form="interleaved", bad_halves=True), "rotary-interleaved-paired-tables", "even and odd"),
    (dict(form="interleaved", scale=ROW_SCALE), "rotary-interleaved-paired-tables", "not a \\(scaled\\) rotation"),
    # constant tables gathered by position_ids: the general rotate-half rule (rotary-gathered-table until
    # session 36), its op then over the tables and the positions (rotary_gathered_caches.yaml)
    (dict(tables="gathered", bad_halves=True), "rotary-rotate-half-tables", "halves are not provably equal"),
    (dict(tables="sliced", slice_start=1), "rotary-position-caches-row-cut", "first rows"),
    (dict(tables="sliced4", slice_start=1), "rotary-position-caches-row-cut", "first rows"),
    (dict(tables="gathered", scale=ROW_SCALE_P), "rotary-rotate-half-tables", "not a \\(scaled\\) rotation"),
    # Tile doubling the frequency axis instead of a new pair axis: concat(sin, sin), not interleaved
    (dict(form="interleaved", layout="bshd", tables="sincos-ts", tile=(1, 1, 1, 2, 1)),
     "rotary-interleaved-paired-tables", "not provably equal"),
    # one table per batch row: the rows are not a function of the position alone (the rotation
    # fuses over the rows; they stay gathered)
    (dict(form="interleaved", layout="bshd", tables="sincos-ge", table_batches=2),
     "rotary-gathered-rows", r"\[1, max_pos, D\] tiled"),
])
def test_near_misses_do_not_fuse(h, kw, rule, why):
    model = _graph(h, **kw)
    out = h.fuse(model, "onnx", level=2)
    # the tables' values are not read where the graph repeats them itself: the paired-tables rules
    # (rotary_interleaved_paired.yaml) take any such tables, exactly (the numbers are checked below);
    # rows gathered from a cut that does not start at row 0 are still a rotation whose halves are
    # equal: rotary-rotate-half-tables fuses them, exactly, and rotary-caches-gathered-rows hands the op the
    # cut tables' halves and the positions
    fired = {r for r in h.fired(out) if r.startswith("rotary")}
    allowed = {"rotary-interleaved-paired-tables"} | (
        {"rotary-rotate-half-tables", "rotary-caches-gathered-rows"} if kw.get("slice_start") else set())
    assert fired <= allowed, fired
    assert fired or "RotaryEmbedding" not in h.ops(out), h.ops(out)
    rs = (h.reasons(model, "onnx", rule) if kw.get("tables") not in ("sincos-ts", "sincos-ge")
          else _fused_reasons(model, rule) if rule == "rotary-gathered-rows" else _prepared_reasons(model, rule))
    if rule == "rotary-position-caches-row-cut":   # it reads the fused op
        rs = _fused_reasons(model, rule)
    assert any(re.search(why, r) for r in rs), rs
    h.assert_close(model, out, _feeds(h, model))


def _prepared_reasons(model, rule):
    """explain() on the model as the fusion stage sees it (shape inference and cleanup run: the
    TorchScript form's Reshapes are sized from Shape() of their input)."""
    from onnx_fuse.api import prepare_for_fusion
    from onnx_fuse.rewrite import explain, load_rule_set

    work = prepare_for_fusion(model, level=2, target="onnx")
    rs = load_rule_set(target="onnx", max_level=4)
    return [f"{r.status.value}: {r.reason}" for r in explain(work, rs, rule)]


def _fused_reasons(model, rule):
    """explain() of a rule on the fused op: on the model fused at O2 without it."""
    import onnx_fuse
    from onnx_fuse.rewrite import explain, load_rule_set

    work = onnx_fuse.optimize(model, level=2, target="onnx", disable=rule).model
    rs = load_rule_set(target="onnx", max_level=4)
    return [f"{r.status.value}: {r.reason}" for r in explain(work, rs, rule)]


@pytest.mark.parametrize("tables", ["sincos", "sincos-ts", "sincos-ge"])
def test_gathered_rows_of_any_table_become_positions(h, tables):
    """Rows gathered from one constant table by the position ids are what RotaryEmbedding reads at
    those positions, whatever the table holds (here no rotation: cos^2 + sin^2 grows with the
    position): the op takes the table's halves and the ids (rotary-gathered-rows), exactly."""
    model = _graph(h, form="interleaved", layout="bshd", tables=tables, scale=ROW_SCALE_P)
    out = h.fuse(model, "onnx", level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and h.fired(out)["rotary-gathered-rows"] >= 1, (ops, h.fired(out))
    assert not {"Gather", "GatherND", "GatherElements", "Split"} & set(ops), ops
    (rot,) = _rotary_nodes(out)
    assert len(rot.input) == 4, "the position ids are the op's 4th input"
    h.assert_close(model, out, _feeds(h, model))


def test_interleaved_tables_do_not_fuse_as_rotate_half(h):
    """A repeat_interleave'd table under the rotate-half form: halves differ, nothing fuses."""
    model = _graph(h, form="half")
    cu = next(i for i in model.graph.initializer if i.name == "cu")
    from onnx import numpy_helper
    c, s = _tables(S, D, form="interleaved")
    for name, t in (("cu", c), ("su", s)):
        init = next(i for i in model.graph.initializer if i.name == name)
        init.CopyFrom(numpy_helper.from_array(t.reshape(1, 1, S, D), name))
    assert cu is not None
    out = h.fuse(model, "onnx", level=2)
    assert "RotaryEmbedding" not in h.ops(out)


def test_partial_split_not_at_rotary_dim_does_not_merge(h):
    """x_pass starting past x_rot's end (a gap): the inner rotation fuses, the partial rule not."""
    model = _graph(h, rd=8, pass_start=10)
    out = h.fuse(model, "onnx", level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and ops["Concat"] == 1, ops
    assert _attr(_rotary_nodes(out)[0], "rotary_embedding_dim", 0) == 0
    rs = h.reasons(out, "onnx", "rotary-partial")
    assert any("split the head dim at rd" in r for r in rs), rs


def test_large_tables_shared_by_q_and_k_give_one_cache_pair(h):
    """Each fired rewrite makes its own half-width cache initializers; cleanup must merge the
    copies (here 128 KiB each, over CSE's 64 KiB limit for loaded weights), else a 32-layer model
    would carry 4 copies per layer."""
    n = h.node
    s_, d_ = 1024, 64
    f, _ = _angles(s_, d_)
    emb = np.concatenate([f, f], axis=-1)
    inits = {"cu": np.cos(emb).astype(np.float32).reshape(1, 1, s_, d_),
             "su": np.sin(emb).astype(np.float32).reshape(1, 1, s_, d_),
             "i0": np.array([0], np.int64), "ih": np.array([d_ // 2], np.int64),
             "ib": np.array([BIG], np.int64), "il": np.array([-1], np.int64)}
    nodes, outs = [], []
    for x in ("q", "k"):
        nodes += [n("Mul", [x, "cu"], [x + "c"]), n("Slice", [x, "i0", "ih", "il"], [x + "1"]),
                  n("Slice", [x, "ih", "ib", "il"], [x + "2"]), n("Neg", [x + "2"], [x + "n"]),
                  n("Concat", [x + "n", x + "1"], [x + "r"], axis=-1), n("Mul", [x + "r", "su"], [x + "s"]),
                  n("Add", [x + "c", x + "s"], [x + "y"])]
        outs.append(h.vi(x + "y", [1, 2, s_, d_]))
    model = h.make_model(nodes, [h.vi("q", [1, 2, s_, d_]), h.vi("k", [1, 2, s_, d_])], outs, inits)
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["RotaryEmbedding"] == 2
    caches = [i for i in out.graph.initializer if list(i.dims) == [1, s_, d_ // 2]]
    assert len(caches) == 2, [i.name for i in caches]   # one cos, one sin
    feeds = {x: h.rng.standard_normal((1, 2, s_, d_)).astype(np.float32) for x in "qk"}
    h.assert_close(model, out, feeds)
