"""Interleaved RoPE whose cos / sin tables reach the rotation through a Cast (hold-out 48: cohere2
static_cache float16, session 43). The float16 model computes cos / sin of the repeat_interleave'd
angles in float32, casts them to float16 (the model's dtype), unsqueezes the head axis and casts
them back up to float32 to rotate a float16 x cast up. rotary-interleaved-paired-tables cut the
caches (the even columns, the head axis squeezed) AFTER the last Cast, where half-of-doubled-table
could not fold the cut onto the half table: 2 Slice + 2 Squeeze (and the D-wide Cos / Sin) more than
the float32 export. Taking columns and dropping an axis commute with a Cast, so the rule now cuts
the table before it: the caches are Cast(Cast(cos(f))) of the half angles f, as in float32."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

B, S, H, D = 2, 5, 3, 8
F16 = onnx.TensorProto.FLOAT16


def _i64(*v):
    return np.array(v, np.int64)


def _model(h, *, shared_cast_reader=False):
    """q and k [B, H, S, D] float16, each cast up and rotated by x*cos + rotate_every_two(x)*sin with
    [1, 1, S, D] tables Cast(Unsqueeze(Cast(cos(repeat_interleave(f, 2)), f16), 1), f32), f the
    angles of the positions (HF's inv_freq @ positions). shared_cast_reader: the float32 cos table
    is also a graph output (the Cast's output has a reader that is not a rotation)."""
    n = h.node
    inits = dict(inv=(1.0 / 10000.0 ** (np.arange(D // 2) / (D // 2))).astype(np.float32).reshape(1, D // 2, 1),
                 pair=_i64(1, 1, 2), merge=_i64(1, S, D), head=_i64(1), ax01=_i64(0, 1),
                 zero=_i64(0), one=_i64(1), big=_i64(D), last=_i64(-1), two=_i64(2),
                 xshape=_i64(B, H, S, D))
    nodes = [n("Cast", ["pos"], ["posf"], to=h.F32), n("Unsqueeze", ["posf", "ax01"], ["pc"]),
             n("MatMul", ["inv", "pc"], ["f2"]), n("Transpose", ["f2"], ["f"], perm=[0, 2, 1]),
             n("Unsqueeze", ["f", "last"], ["fu"]), n("Expand", ["fu", "pair"], ["fx"]),
             n("Reshape", ["fx", "merge"], ["ri"])]
    for fn, t in (("Cos", "cu"), ("Sin", "su")):
        nodes += [n(fn, ["ri"], [f"{t}0"]), n("Cast", [f"{t}0"], [f"{t}16"], to=F16),
                  n("Unsqueeze", [f"{t}16", "head"], [f"{t}u"]), n("Cast", [f"{t}u"], [t], to=h.F32)]
    for x in ("q", "k"):
        nodes += [n("Cast", [x], [f"{x}f"], to=h.F32),
                  n("Slice", [x, "zero", "big", "last", "two"], [f"{x}e"]),
                  n("Slice", [x, "one", "big", "last", "two"], [f"{x}o"]), n("Neg", [f"{x}o"], [f"{x}n"]),
                  n("Unsqueeze", [f"{x}n", "last"], [f"{x}nu"]), n("Unsqueeze", [f"{x}e", "last"], [f"{x}eu"]),
                  n("Concat", [f"{x}nu", f"{x}eu"], [f"{x}st"], axis=-1),
                  n("Reshape", [f"{x}st", "xshape"], [f"{x}r16"]), n("Cast", [f"{x}r16"], [f"{x}r"], to=h.F32),
                  n("Mul", [f"{x}f", "cu"], [f"{x}c"]), n("Mul", [f"{x}r", "su"], [f"{x}s"]),
                  n("Add", [f"{x}c", f"{x}s"], [f"{x}32"]), n("Cast", [f"{x}32"], [f"{x}y"], to=F16)]
    xs = [B, H, S, D]
    inputs = [h.vi("q", xs, F16), h.vi("k", xs, F16), h.vi("pos", [S], onnx.TensorProto.INT64)]
    outputs = [h.vi("qy", xs, F16), h.vi("ky", xs, F16)]
    if shared_cast_reader:
        outputs.append(h.vi("cu", [1, 1, S, D], h.F32))
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h):
    return {"q": h.rng.standard_normal((B, H, S, D)).astype(np.float16),
            "k": h.rng.standard_normal((B, H, S, D)).astype(np.float16),
            "pos": np.arange(7, 7 + S, dtype=np.int64)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_tables_cast_down_and_up_are_cut_before_the_cast(h, target):
    """Fails on the old rule (2 Slice + 2 Squeeze, the D-wide Cos / Sin stay): the caches are cut
    before the float32 Cast, the cut folds onto the half angles and the head Unsqueeze cancels."""
    model = _model(h)
    out = h.fuse(model, target, level=3 if target != "trt" else 4)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Neg" not in ops, ops
    assert "Slice" not in ops and "Squeeze" not in ops, ops
    fired = h.fired(out)
    assert fired["rotary-interleaved-paired-tables"] >= 1, fired
    assert fired["half-of-doubled-table-cos"] >= 1 and fired["half-of-doubled-table-sin"] >= 1, fired
    # the caches' Cos / Sin run on the half angles [.., D/2], not the D-wide table
    cos = next(nd for nd in out.graph.node if nd.op_type == "Cos")
    assert "ri" not in cos.input, [nd.op_type for nd in out.graph.node]
    h.assert_close(model, out, _feeds(h), atol=2e-3, rtol=2e-3)


def test_a_cast_with_another_reader_stays_and_values_match(h):
    """The float32 table is also a graph output: the Cast stays for it, the rotations still read the
    table cut before the Cast (27 -> 25 nodes: the full-width Cos stays for the output; the old rule
    left the Slices after the Cast), and the values equal the original's in ONNX Runtime."""
    model = _model(h, shared_cast_reader=True)
    out = h.fuse(model, "ort", level=3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Neg" not in ops, ops
    assert "cu" in [o.name for o in out.graph.output] and "Slice" not in ops and "Squeeze" not in ops, ops
    h.assert_close(model, out, _feeds(h), atol=2e-3, rtol=2e-3)


def _model_2d(h, layout, cast):
    """Tables of 2-D angles (glue50, fuzz_s45 cast_tables): f = pos[:, None] * inv_freq [S, D/2], repeat_interleave'd
    to [S, D], cos / sin (cast to float16 and back when ``cast``), the batch and head axes added by ONE Unsqueeze
    ([0, 1]: [1, 1, S, D] for x [B, H, S, D]; [0, 2]: [1, S, 1, D] for x [B, S, H, D]); x float32."""
    n = h.node
    xs = [B, H, S, D] if layout == "bhsd" else [B, S, H, D]
    inits = dict(inv=(1.0 / 10000.0 ** (np.arange(D // 2) / (D // 2))).astype(np.float32).reshape(1, D // 2) * 1.3,
                 pair=_i64(1, 1, 2), merge=_i64(S, D), ax=_i64(0, 1) if layout == "bhsd" else _i64(0, 2),
                 zero=_i64(0), one=_i64(1), big=_i64(D), last=_i64(-1), two=_i64(2), xshape=_i64(*xs))
    nodes = [n("Cast", ["pos"], ["posf"], to=h.F32), n("Unsqueeze", ["posf", "last"], ["pc"]),
             n("Mul", ["pc", "inv"], ["f"]),
             n("Unsqueeze", ["f", "last"], ["fu"]), n("Expand", ["fu", "pair"], ["fx"]),
             n("Reshape", ["fx", "merge"], ["ri"])]
    for fn, t in (("Cos", "cu"), ("Sin", "su")):
        if cast:
            nodes += [n(fn, ["ri"], [f"{t}0"]), n("Cast", [f"{t}0"], [f"{t}16"], to=F16),
                      n("Unsqueeze", [f"{t}16", "ax"], [f"{t}u"]), n("Cast", [f"{t}u"], [t], to=h.F32)]
        else:
            nodes += [n(fn, ["ri"], [f"{t}0"]), n("Unsqueeze", [f"{t}0", "ax"], [t])]
    for x in ("q", "k"):
        nodes += [n("Slice", [x, "zero", "big", "last", "two"], [f"{x}e"]),
                  n("Slice", [x, "one", "big", "last", "two"], [f"{x}o"]), n("Neg", [f"{x}o"], [f"{x}n"]),
                  n("Unsqueeze", [f"{x}n", "last"], [f"{x}nu"]), n("Unsqueeze", [f"{x}e", "last"], [f"{x}eu"]),
                  n("Concat", [f"{x}nu", f"{x}eu"], [f"{x}st"], axis=-1),
                  n("Reshape", [f"{x}st", "xshape"], [f"{x}r"]),
                  n("Mul", [x, "cu"], [f"{x}c"]), n("Mul", [f"{x}r", "su"], [f"{x}s"]),
                  n("Add", [f"{x}c", f"{x}s"], [f"{x}y"])]
    inputs = [h.vi("q", xs, h.F32), h.vi("k", xs, h.F32), h.vi("pos", [S], onnx.TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("qy", xs, h.F32), h.vi("ky", xs, h.F32)], inits), xs


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("cast", [False, True])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_2d_tables_unsqueezed_by_one_two_axis_unsqueeze_fold_onto_the_half_angles(h, target, cast, layout):
    """[S, D] tables given their batch and head axes by one Unsqueeze: the cut folds onto the half angles (no Slice /
    Squeeze left, Cos / Sin of f [S, D/2]); the old half-of-doubled-table read only a one-axis Unsqueeze and left
    Squeeze(Slice(Unsqueeze(Cos(ri)), step 2)) per cache (2 Slice + 2 Squeeze). Values equal in ONNX Runtime."""
    model, xs = _model_2d(h, layout, cast)
    out = h.fuse(model, target, level=3 if target != "trt" else 4)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Neg" not in ops, ops
    assert "Slice" not in ops and "Squeeze" not in ops, ops
    fired = h.fired(out)
    assert fired["half-of-doubled-table-cos"] >= 1 and fired["half-of-doubled-table-sin"] >= 1, fired
    cos = next(nd for nd in out.graph.node if nd.op_type == "Cos")
    assert "ri" not in cos.input, [nd.op_type for nd in out.graph.node]
    feeds = {"q": h.rng.standard_normal(xs).astype(np.float32), "k": h.rng.standard_normal(xs).astype(np.float32),
             "pos": np.arange(3, 3 + S, dtype=np.int64)}
    h.assert_close(model, out, feeds, atol=2e-3 if cast else 1e-5, rtol=2e-3 if cast else 1e-5)
