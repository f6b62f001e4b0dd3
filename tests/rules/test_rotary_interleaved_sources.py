"""Interleaved RoPE with the cos / sin tables read as values, whatever made them (session 18:
rules/rope/rotary_interleaved_paired.yaml is the one recognizer, rules/rope/half_tables.yaml folds
the caches' even-column Slice onto the half table).

The new source here: constant (folded) tables rotating a float16 x cast up to float32 (a static
export of a float16 model whose tables stay float32: GPT-J 4.4x, diffusers' apply_rotary_emb). The
session-17 rules had one rule per table source: the const-table rules did not take x's Cast and the
paired-tables rules refused constant tables, so this stayed unfused (0 RotaryEmbedding)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

B, S, H, D = 2, 6, 3, 8
F16 = onnx.TensorProto.FLOAT16


def _i64(*v):
    return np.array(v, np.int64)


def _tables(scale=1.0, bad_pairs=False):
    f = np.arange(S)[:, None] * (1.0 / 10000.0 ** (np.arange(D // 2) / (D // 2)))[None]
    cos, sin = np.repeat(np.cos(f), 2, axis=-1) * scale, np.repeat(np.sin(f), 2, axis=-1) * scale
    if bad_pairs:
        cos[:, 1::2] = np.cos(2.0 * f)
    return cos.astype(np.float32), sin.astype(np.float32)


def _model(h, *, heads_first, cast_x=True, computed=False, **table_kw):
    """q [B, S, H, D] with [1, S, 1, D] tables (or [B, H, S, D] with [1, 1, S, D]) rotated by
    x*cos + rotate_every_two(x)*sin; cast_x: x float16, cast up (and its rotation) before the Muls,
    the sum cast back. computed: the tables cos / sin(repeat_interleave(f, 2)) * 0.5 from positions
    (f = inv_freq @ positions, an outer product as a MatMul: HF's rotary modules)."""
    n = h.node
    xshape = [B, H, S, D] if heads_first else [B, S, H, D]
    tshape = [1, 1, S, D] if heads_first else [1, S, 1, D]
    inits = dict(zero=_i64(0), one=_i64(1), big=_i64(D), last=_i64(-1), two=_i64(2), xshape=_i64(*xshape))
    nodes = []
    if computed:
        # HF's rotary module: the angles as inv_freq[None, :, None] @ positions[:, None, :], transposed
        inits.update(inv=(1.0 / 10000.0 ** (np.arange(D // 2) / (D // 2))).astype(np.float32).reshape(1, D // 2, 1),
                     pair=_i64(1, 1, 2), merge=_i64(1, S, D), k=np.array(0.5, np.float32),
                     head=_i64(1 if heads_first else 2), ax01=_i64(0, 1))
        nodes += [n("Cast", ["pos"], ["posf"], to=h.F32), n("Unsqueeze", ["posf", "ax01"], ["pc"]),
                  n("MatMul", ["inv", "pc"], ["f2"]), n("Transpose", ["f2"], ["f"], perm=[0, 2, 1]),
                  n("Unsqueeze", ["f", "last"], ["fu"]), n("Expand", ["fu", "pair"], ["fx"]),
                  n("Reshape", ["fx", "merge"], ["ri"])]
        for fn, t in (("Cos", "cu"), ("Sin", "su")):
            nodes += [n(fn, ["ri"], [f"{t}0"]), n("Mul", [f"{t}0", "k"], [f"{t}1"]),
                      n("Unsqueeze", [f"{t}1", "head"], [t])]
    else:
        cos, sin = _tables(**table_kw)
        inits.update(cu=cos.reshape(tshape), su=sin.reshape(tshape))
    xm, rot = ("xf", "rot16") if cast_x else ("x", "rot")
    if cast_x:
        nodes += [n("Cast", ["x"], ["xf"], to=h.F32), n("Cast", ["rot16"], ["rot"], to=h.F32)]
    nodes += [n("Slice", ["x", "zero", "big", "last", "two"], ["xe"]),
              n("Slice", ["x", "one", "big", "last", "two"], ["xo"]), n("Neg", ["xo"], ["xn"]),
              n("Unsqueeze", ["xn", "last"], ["nu"]), n("Unsqueeze", ["xe", "last"], ["eu"]),
              n("Concat", ["nu", "eu"], ["st"], axis=-1), n("Reshape", ["st", "xshape"], [rot]),
              n("Mul", [xm, "cu"], ["c"]), n("Mul", ["rot", "su"], ["s"]),
              n("Add", ["c", "s"], ["y32" if cast_x else "y"])]
    if cast_x:
        nodes.append(n("Cast", ["y32"], ["y"], to=F16))
    elem = F16 if cast_x else h.F32
    inputs = [h.vi("x", xshape, elem)] + ([h.vi("pos", [S], onnx.TensorProto.INT64)] if computed else [])
    return h.make_model(nodes, inputs, [h.vi("y", xshape, elem)], inits)


def _feeds(h, heads_first, cast_x=True, computed=False):
    shape = (B, H, S, D) if heads_first else (B, S, H, D)
    feeds = {"x": h.rng.standard_normal(shape).astype(np.float16 if cast_x else np.float32)}
    if computed:
        feeds["pos"] = np.arange(3, 3 + S, dtype=np.int64)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads_first", [False, True], ids=["bshd", "bhsd"])
def test_constant_tables_of_an_x_cast_up_fuse(h, target, heads_first):
    """Fails on the session-17 rules (no RotaryEmbedding): one recognizer, tables checked by value."""
    model = _model(h, heads_first=heads_first)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and "Slice" not in ops, ops
    rule = "rotary-interleaved-paired-tables"  # both layouts (bshd: the 3-D form)
    assert h.fired(out)[rule] >= 1, h.fired(out)
    # the caches are the constants' even columns, folded: [B, S, D/2] from a [1, S, D/2] initializer
    rot = next(nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    assert next(a.i for a in rot.attribute if a.name == "interleaved") == 1
    h.assert_close(model, out, _feeds(h, heads_first), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("kw,why", [(dict(bad_pairs=True), "even and odd columns"),
                                    (dict(scale=np.linspace(0.5, 1.0, S)[:, None]), r"not a \(scaled\) rotation")])
def test_constant_tables_are_checked_by_value(h, kw, why):
    """Constant tables must be repeat_interleave'd (equal column pairs) and a (scaled) rotation."""
    model = _model(h, heads_first=True, cast_x=False, **kw)
    out = h.fuse(model, "onnx", level=2)
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    rs = h.reasons(model, "onnx", "rotary-interleaved-paired-tables")
    assert any(why in r or __import__("re").search(why, r) for r in rs), rs
    h.assert_close(model, out, _feeds(h, True, cast_x=False))


@pytest.mark.parametrize("heads_first", [False, True], ids=["bshd", "bhsd"])
def test_computed_tables_caches_are_the_half_table(h, heads_first):
    """cos(repeat_interleave(f, 2)) * k: the caches end as cos(f) * k (half-of-doubled-table-cos /
    -sin fold the even-column Slice), no Slice and no D-wide Cos left."""
    model = _model(h, heads_first=heads_first, cast_x=False, computed=True)
    out = h.fuse(model, "onnx", level=2)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Slice" not in ops and "Neg" not in ops, ops
    fired = h.fired(out)
    assert fired["half-of-doubled-table-cos"] >= 1 and fired["half-of-doubled-table-sin"] >= 1, fired
    h.assert_close(model, out, _feeds(h, heads_first, cast_x=False, computed=True))


@pytest.mark.parametrize("heads_first", [False, True], ids=["bshd", "bhsd"])
def test_computed_tables_pass_the_per_rewrite_check(h, heads_first):
    """optimize(verify=True) checks each rewrite on random inputs. The tables are a boundary value
    of the recognizer (read as values, not matched), so the check must compute them from the
    positions: their cone runs through HF's inv_freq @ positions MatMul, an outer product (contracted
    axis 1) that rewrite/_local_check.py counted as an activation op and fed random tables instead,
    whose columns are not paired (4 rewrites rolled back on the corpus's glm / cohere optimum)."""
    import onnx_fuse

    model = _model(h, heads_first=heads_first, cast_x=False, computed=True)
    result = onnx_fuse.optimize(model, level=2, target="onnx", verify=True)
    checks = result.report.verify["rewrites"]
    assert checks["rolled_back"] == 0 and not checks["failed"], checks
    assert h.ops(result.to_proto())["RotaryEmbedding"] == 1, h.ops(result.to_proto())
