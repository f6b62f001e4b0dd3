"""rotary-interleaved-complex, the one recognizer of the complex-product rotary
re = x0*cos - x1*sin, im = x0*sin + x1*cos of x's column pairs: the spellings no rule of its five
predecessors took (each had one table making and one layout), built here and fused, each compared with
the unfused graph in ONNX Runtime:
- seq-first x [S, B, H, D] with constant tables [S, 1, 1, D/2] (RoPE between the heads view and the
  batch-first transpose);
- x viewed as pairs [B, H, S, D/2, 2] (view_as_complex's spelling) in the heads-first layout, constant
  and computed tables;
- computed tables Cos(f) / Sin(f) in the [B, S, H, D] layout, per-batch angles, head size 64;
- rank-2 constant tables [S, D/2] broadcast over batch and heads;
- tables scaled by one number (HF's attention_scaling) on both Cos and Sin.
Refused: tables that vary over the heads, cos / sin of different angles, different scales."""

from __future__ import annotations

import numpy as np
import pytest

INT64_MAX = np.iinfo(np.int64).max
_INTS = {"z": [0], "o": [1], "two": [2], "big": [INT64_MAX], "m1": [-1]}


def _angles(s, half, batch=None):
    a = np.arange(s)[:, None] * (1.0 / 100 ** (np.arange(half) / half))[None, :]
    if batch is not None:  # per-batch position offsets (left padding)
        a = np.stack([a + 0.7 * b for b in range(batch)])
    return a.astype(np.float32)


def _model(h, x_shape, tables, nodes_pre, inputs_extra=(), *, pairs=False, out_shape=None, inits=None):
    """x's column pairs rotated by values named 'c' / 's' (made by ``nodes_pre`` or in ``tables``)."""
    n = h.node
    ini = {k: np.array(v, np.int64) for k, v in _INTS.items()}
    ini.update(inits or {})
    ini.update(tables)
    d = x_shape[-1]
    nodes = list(nodes_pre)
    if pairs:
        ini["s5"] = np.array([0] * (len(x_shape) - 1) + [d // 2, 2], np.int64)
        nodes += [n("Reshape", ["x", "s5"], ["xp"]),
                  n("Slice", ["xp", "z", "o", "m1"], ["x0"]), n("Slice", ["xp", "o", "two", "m1"], ["x1"])]
    else:
        nodes += [n("Slice", ["x", "z", "big", "m1", "two"], ["x0"]),
                  n("Slice", ["x", "o", "big", "m1", "two"], ["x1"])]
    nodes += [n("Mul", ["x0", "c"], ["a"]), n("Mul", ["x1", "s"], ["b_"]), n("Sub", ["a", "b_"], ["re"]),
              n("Mul", ["s", "x0"], ["dd"]), n("Mul", ["x1", "c"], ["e"]), n("Add", ["dd", "e"], ["im"])]
    if pairs:
        nodes += [n("Concat", ["re", "im"], ["st"], axis=-1)]
    else:
        nodes += [n("Unsqueeze", ["re", "m1"], ["ru"]), n("Unsqueeze", ["im", "m1"], ["iu"]),
                  n("Concat", ["ru", "iu"], ["st"], axis=-1)]
    ini["shp"] = np.array(out_shape or [0] * (len(x_shape) - 1) + [d], np.int64)
    nodes += [n("Reshape", ["st", "shp"], ["y"])]
    return h.make_model(nodes, [h.vi("x", x_shape), *inputs_extra], [h.vi("y", None)], ini)


def _computed(h, f_name="f", g_name=None, scale=None, scale2=None, axes=(1,)):
    """Cos(f) / Sin(g or f), optionally times a number each, unsqueezed at ``axes``."""
    n = h.node
    nodes, inits = [n("Cos", [f_name], ["co"]), n("Sin", [g_name or f_name], ["si"])], {"uax": np.array(axes, np.int64)}
    co, si = "co", "si"
    if scale is not None:
        inits["k1"] = np.array(scale, np.float32)
        inits["k2"] = np.array(scale if scale2 is None else scale2, np.float32)
        nodes += [n("Mul", ["co", "k1"], ["cok"]), n("Mul", ["k2", "si"], ["sik"])]
        co, si = "cok", "sik"
    nodes += [n("Unsqueeze", [co, "uax"], ["c"]), n("Unsqueeze", [si, "uax"], ["s"])]
    return nodes, inits


def _fused(h, model, target, feeds):
    out = h.fuse(model, target, 3 if target != "trt" else 4)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1, ops
    assert "Sub" not in ops, ops
    assert "rotary-interleaved-complex" in h.fired(out), h.fired(out)
    h.assert_close(model, out, feeds)


TARGETS = ["ort", "onnx", "trt"]


@pytest.mark.parametrize("target", TARGETS)
def test_seq_first_constant_tables(h, target):
    S, B, H, D = 6, 2, 3, 8
    a = _angles(S, D // 2)[:, None, None, :]
    model = _model(h, [S, B, H, D], {"c": np.cos(a), "s": np.sin(a)}, [])
    _fused(h, model, target, {"x": h.rng.standard_normal((S, B, H, D)).astype(np.float32)})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("merged_out", [False, True])
def test_pairs_view_heads_first_constant_tables(h, target, merged_out):
    B, H, S, D = 2, 3, 5, 8
    a = _angles(S, D // 2)[None, None, :, :, None]
    model = _model(h, [B, H, S, D], {"c": np.cos(a), "s": np.sin(a)}, [], pairs=True,
                   out_shape=[0, 0, S * D] if merged_out else None)
    _fused(h, model, target, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)})


@pytest.mark.parametrize("target", TARGETS)
def test_pairs_view_computed_tables(h, target):
    """view_as_complex's pairs [B, S, H, D/2, 2] with tables Cos / Sin(f) [B, S, D/2] unsqueezed to
    [B, S, 1, D/2, 1] in the graph (dynamic S)."""
    B, S, H, D = 2, 5, 3, 16
    nodes, inits = _computed(h, axes=(2, 4))
    model = _model(h, ["b", "s", H, D], {}, nodes, [h.vi("f", ["b", "s", D // 2])], pairs=True, inits=inits)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), "f": _angles(S, D // 2, batch=B)}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale", [None, 1.25])
def test_computed_tables_before_the_head_transpose(h, target, scale):
    """x [B, S, H, D] at head size 64, Cos / Sin(f) of per-batch angles [B, S, D/2] unsqueezed at the
    head axis 2 (the old computed rule took axis 1 only), optionally both times one number."""
    B, S, H, D = 2, 4, 2, 64
    nodes, inits = _computed(h, scale=scale, axes=(2,))
    model = _model(h, ["b", "s", H, D], {}, nodes, [h.vi("f", ["b", "s", D // 2])], inits=inits)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), "f": _angles(S, D // 2, batch=B)}
    _fused(h, model, target, feeds)


@pytest.mark.parametrize("target", TARGETS)
def test_rank2_constant_tables(h, target):
    B, H, S, D = 2, 4, 7, 32
    a = _angles(S, D // 2)
    model = _model(h, [B, H, S, D], {"c": np.cos(a), "s": np.sin(a)}, [])
    _fused(h, model, target, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)})


def _refused(h, model, feeds, why):
    rs = h.reasons(model, "ort", "rotary-interleaved-complex")
    assert rs and not any(r.startswith("matched") for r in rs), rs
    assert any(why in r for r in rs), rs
    out = h.fuse(model, "ort", 3)
    assert not any(k.endswith("RotaryEmbedding") for k in h.ops(out)), h.ops(out)
    h.assert_close(model, out, feeds)


def test_tables_varying_over_heads_are_refused(h):
    B, H, S, D = 2, 3, 5, 8
    a = _angles(S, D // 2)[None, None] * (1 + np.arange(H))[None, :, None, None]  # [1, H, S, D/2]
    model = _model(h, [B, H, S, D], {"c": np.cos(a).astype(np.float32), "s": np.sin(a).astype(np.float32)}, [])
    _refused(h, model, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)}, "not varying over the heads")


@pytest.mark.parametrize("kind", ["angles", "scales"])
def test_computed_tables_that_are_no_rotation_are_refused(h, kind):
    B, S, H, D = 2, 4, 2, 8
    if kind == "angles":
        nodes, inits = _computed(h, g_name="g", axes=(2,))
        extra = [h.vi("f", ["b", "s", D // 2]), h.vi("g", ["b", "s", D // 2])]
    else:
        nodes, inits = _computed(h, scale=1.0, scale2=0.5, axes=(2,))
        extra = [h.vi("f", ["b", "s", D // 2])]
    model = _model(h, ["b", "s", H, D], {}, nodes, extra, inits=inits)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32), "f": _angles(S, D // 2, batch=B)}
    if kind == "angles":
        feeds["g"] = feeds["f"] * 0.5
    _refused(h, model, feeds, "not a (scaled) rotation")


@pytest.mark.parametrize("target", TARGETS)
def test_buffer_rows_gathered_by_position_ids(h, target):
    """Constant [rows, D/2] buffers, their rows gathered by position_ids [B, S] and unsqueezed at the head
    axis of x [B, S, H, D] (the old rules took a Slice of the rows only)."""
    B, S, H, D, rows = 2, 5, 2, 16, 12
    n = h.node
    a = _angles(rows, D // 2)
    nodes = [n("Gather", ["ct", "pos"], ["cg"], axis=0), n("Gather", ["stb", "pos"], ["sg"], axis=0),
             n("Unsqueeze", ["cg", "two"], ["c"]), n("Unsqueeze", ["sg", "two"], ["s"])]
    model = _model(h, ["b", "s", H, D], {"ct": np.cos(a), "stb": np.sin(a)}, nodes,
                   [h.vi("pos", ["b", "s"], 7)])
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32),
             "pos": np.stack([np.arange(S) + 3, np.arange(S)]).astype(np.int64)}
    _fused(h, model, target, feeds)
