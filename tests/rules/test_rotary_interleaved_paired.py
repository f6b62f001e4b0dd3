"""Interleaved RoPE over tables computed at run time whose columns come in equal pairs
(rules/rope/rotary_interleaved_paired.yaml, the paired_columns proof, rewrite/_paired.py): Flux's
cos / sin from the position ids, one repeat_interleave per id axis in float64, cast and concatenated,
rotate_every_two written as the unbind of x viewed as [..., D/2, 2] (passes/unbind_pairs.py).
0 RotaryEmbedding before (eighth sweep part C, flux 0/6); numerics against the original in ORT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

B, S, H, D = 2, 5, 2, 12
AXES = (4, 4, 4)  # per id axis rotary widths (Flux's axes_dims_rope), summing to D
F64 = onnx.TensorProto.DOUBLE


def _i64(*v):
    return np.array(v, np.int64)


def _tables(h, *, repeat=True, scale=None, tiled=False, einsum=False):
    """cos / sin [S, D] from ids [S, 3]: per axis i, repeat_interleave(cos(pos_i * w_i), 2) in float64,
    cast to float32, concatenated. repeat=False: cos(pos_i * w) with D_i distinct frequencies (no pairs).
    scale: a per-column constant multiplied into the cos table afterwards. tiled: the repeat as
    TorchScript writes it (Unsqueeze, Tile [1, 1, 2], Flatten(axis=1)). einsum: the angles as
    TorchScript writes them, einsum("i,j->ij", positions, w_i) (no Reshape / Mul)."""
    n, nodes, inits = h.node, [], {}
    cos_parts, sin_parts = [], []
    for i, d in enumerate(AXES):
        inits[f"ax{i}"] = np.array(i, np.int64)
        inits[f"w{i}"] = (1.0 / 100.0 ** (np.arange(d // 2 if repeat else d) / d)).astype(np.float64)
        if einsum:
            nodes += [n("Gather", ["ids", f"ax{i}"], [f"p{i}"], axis=1), n("Cast", [f"p{i}"], [f"pd{i}"], to=F64),
                      n("Einsum", [f"pd{i}", f"w{i}"], [f"f{i}"], equation="i,j->ij")]
        else:
            nodes += [n("Gather", ["ids", f"ax{i}"], [f"p{i}"], axis=1), n("Reshape", [f"p{i}", "col"], [f"pc{i}"]),
                      n("Cast", [f"pc{i}"], [f"pd{i}"], to=F64), n("Mul", [f"pd{i}", f"w{i}"], [f"f{i}"])]
        for fn, parts in (("Cos", cos_parts), ("Sin", sin_parts)):
            t = f"{fn.lower()}{i}"
            nodes.append(n(fn, [f"f{i}"], [t]))
            if repeat and tiled:
                nodes += [n("Unsqueeze", [t, "ax_last"], [f"{t}_u"]), n("Tile", [f"{t}_u", "pair"], [f"{t}_x"]),
                          n("Flatten", [f"{t}_x"], [f"{t}_r"], axis=1)]
                t = f"{t}_r"
            elif repeat:
                nodes += [n("Unsqueeze", [t, "ax_last"], [f"{t}_u"]), n("Expand", [f"{t}_u", "pair"], [f"{t}_x"]),
                          n("Reshape", [f"{t}_x", "merge"], [f"{t}_r"])]
                t = f"{t}_r"
            nodes.append(n("Cast", [t], [f"{t}_f"], to=h.F32))
            parts.append(f"{t}_f")
    nodes += [n("Concat", cos_parts, ["cos_t"], axis=-1), n("Concat", sin_parts, ["sin_t"], axis=-1)]
    if scale is not None:
        inits["cscale"] = scale.astype(np.float32)
        nodes += [n("Mul", ["cos_t", "cscale"], ["cos_s"])]
    inits.update(col=_i64(S, 1), ax_last=_i64(2), pair=_i64(1, 1, 2), merge=_i64(S, -1))
    return nodes, inits, ("cos_s" if scale is not None else "cos_t"), "sin_t"


def _rope(h, x, cu, su, heads_first, half=False, view="pairs"):
    """x*cu + rotate_every_two(x)*su, rotate_every_two through the [..., D/2, 2] view's unbind.
    half: x float16, rotated in float32 (x and the rotated pairs cast up, the sum cast back: diffusers'
    apply_rotary_emb on a float16 Flux)."""
    n = h.node
    view, pairs = f"{x}_v", view
    up = [n("Cast", [x, ], [f"{x}_up"], to=h.F32), n("Cast", [f"{x}_rot16"], [f"{x}_rot"], to=h.F32),
          n("Cast", [f"{x}_y32"], [f"{x}_y"], to=onnx.TensorProto.FLOAT16)] if half else []
    xm, rot, y = (f"{x}_up", f"{x}_rot16", f"{x}_y32") if half else (x, f"{x}_rot", f"{x}_y")
    return up + [n("Reshape", [x, pairs], [view]),
            n("Slice", [view, "zero", "one", "last"], [f"{x}_e0"]), n("Squeeze", [f"{x}_e0", "last"], [f"{x}_e"]),
            n("Slice", [view, "one", "two", "last"], [f"{x}_o0"]), n("Squeeze", [f"{x}_o0", "last"], [f"{x}_o"]),
            n("Neg", [f"{x}_o"], [f"{x}_n"]), n("Unsqueeze", [f"{x}_n", "last"], [f"{x}_nu"]),
            n("Unsqueeze", [f"{x}_e", "last"], [f"{x}_eu"]), n("Concat", [f"{x}_nu", f"{x}_eu"], [f"{x}_st"], axis=-1),
            n("Reshape", [f"{x}_st", "xshape"], [rot]), n("Mul", [xm, cu], [f"{x}_c"]),
            n("Mul", [f"{x}_rot", su], [f"{x}_s"]), n("Add", [f"{x}_c", f"{x}_s"], [y])]


def _model(h, *, heads_first=False, opset=20, half=False, computed_view=False, **table_kw):
    """q and k (sharing the tables) rotated; [B, S, H, D] with [1, S, 1, D] tables (Flux), or
    [B, H, S, D] with [1, 1, S, D]."""
    n = h.node
    nodes, inits, cos_t, sin_t = _tables(h, **table_kw)
    where = [0, 1] if heads_first else [0, 2]
    nodes += [n("Unsqueeze", [cos_t, "where"], ["cu"]), n("Unsqueeze", [sin_t, "where"], ["su"])]
    xshape = [B, H, S, D] if heads_first else [B, S, H, D]
    for x in ("q", "k"):
        if computed_view:  # a target only folding makes constant (shape inference does not read Max)
            nodes += [n("Max", ["pairs", "ones5"], [f"{x}_pairs"])]
        nodes += _rope(h, x, "cu", "su", heads_first, half, f"{x}_pairs" if computed_view else "pairs")
    inits.update(where=_i64(*where), pairs=_i64(*xshape[:3], D // 2, 2), xshape=_i64(*xshape), zero=_i64(0),
                 one=_i64(1), two=_i64(2), last=_i64(-1), ones5=_i64(1, 1, 1, 1, 1))
    elem = onnx.TensorProto.FLOAT16 if half else h.F32
    return h.make_model(nodes, [h.vi("q", xshape, elem), h.vi("k", xshape, elem), h.vi("ids", [S, 3])],
                        [h.vi("q_y", xshape, elem), h.vi("k_y", xshape, elem)], inits, opset=opset)


def _unbound(model):
    """The model after unbind-pairs (explain runs the target's prepare passes only)."""
    import onnx_ir as ir

    from onnx_fuse.passes.unbind_pairs import UnbindPairsPass

    work = ir.from_proto(model)
    UnbindPairsPass()(work)
    return ir.to_proto(work)


def _feeds(h, heads_first=False, half=False):
    shape = (B, H, S, D) if heads_first else (B, S, H, D)
    ids = np.zeros((S, 3), np.float32)
    ids[2:, 1], ids[2:, 2] = np.arange(S - 2) // 2, np.arange(S - 2) % 2  # text tokens 0, image (0, row, col)
    dt = np.float16 if half else np.float32
    return {"q": h.rng.standard_normal(shape).astype(dt), "k": h.rng.standard_normal(shape).astype(dt), "ids": ids}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads_first", [False, True], ids=["bshd", "bhsd"])
def test_computed_paired_tables_fuse_to_rotary_embedding(h, target, heads_first):
    model = _model(h, heads_first=heads_first)
    out = h.fuse(model, target, 2)
    # one rule for both layouts: the tables' broadcast axis says which (bshd: the 3-D form)
    assert h.ops(out)["RotaryEmbedding"] == 2 and h.fired(out)["rotary-interleaved-paired-tables"] >= 2, \
        (h.ops(out), h.fired(out))
    assert "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, heads_first))


def test_tables_without_pairs_are_refused(h):
    """cos(pos * w) with D distinct frequencies: columns 2j and 2j+1 differ, not RotaryEmbedding."""
    model = _model(h, repeat=False, opset=23)  # explain skips a rule outside its opsets
    reasons = h.reasons(_unbound(model), "ort", "rotary-interleaved-paired-tables")
    assert any("not provably equal" in r for r in reasons), reasons
    assert h.ops(h.fuse(model, "ort", 2))["RotaryEmbedding"] == 0


def test_a_per_column_scale_breaks_the_pairs(h):
    """A paired table times a constant whose even and odd columns differ is no longer paired (refused);
    times one whose columns come in pairs it still is (fused, same numbers)."""
    odd = np.arange(1, D + 1, dtype=np.float32) / D
    model = _model(h, scale=odd, opset=23)
    reasons = h.reasons(_unbound(model), "ort", "rotary-interleaved-paired-tables")
    assert any("not provably equal" in r for r in reasons), reasons
    paired = np.repeat(np.arange(1, D // 2 + 1, dtype=np.float32) / D, 2)
    model = _model(h, scale=paired)
    out = h.fuse(model, "ort", 2)
    assert h.ops(out)["RotaryEmbedding"] == 2, h.ops(out)
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads_first", [False, True], ids=["bshd", "bhsd"])
def test_float16_x_rotated_in_float32_fuses(h, target, heads_first):
    """A float16 Flux (eighth sweep's float16 exports: RoPE 0/6 before): x and rotate_every_two(x)
    cast up to the float32 tables, the sum cast back; the rotation runs on x cast up, as exported."""
    model = _model(h, heads_first=heads_first, half=True)
    out = h.fuse(model, target, 2)
    # one rule for both layouts: the tables' broadcast axis says which (bshd: the 3-D form)
    assert h.ops(out)["RotaryEmbedding"] == 2 and h.fired(out)["rotary-interleaved-paired-tables"] >= 2, \
        (h.ops(out), h.fired(out))
    assert "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, heads_first, half=True), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_tables_repeated_by_tile_and_flatten_fuse(h, target):
    """Flux's TorchScript export writes repeat_interleave(2, dim=1) of each [S, D_i/2] table as
    Unsqueeze, Tile [1, 1, 2], Flatten(axis=1): paired like the Reshape form (RoPE 0/6 before)."""
    model = _model(h, tiled=True)
    out = h.fuse(model, target, 2)
    assert h.ops(out)["RotaryEmbedding"] == 2 and h.fired(out)["rotary-interleaved-paired-tables"] >= 2, \
        (h.ops(out), h.fired(out))
    h.assert_close(model, out, _feeds(h))


def test_flatten_of_halves_tiled_is_not_paired(h):
    """Tiled on a middle axis ([S, 2, D/2]) and flattened: the halves repeated (t, t), columns 2j and
    2j + 1 differ, refused; the same table tiled on the last axis is paired."""
    import onnx_ir as ir

    from onnx_fuse.rewrite._paired import paired_columns

    class Ctx:
        @staticmethod
        def constant(v):
            return None if v.const_value is None else v.const_value.numpy()

    n = h.node
    nodes = [n("Unsqueeze", ["t", "ax2"], ["u2"]), n("Tile", ["u2", "last2"], ["x2"]),
             n("Flatten", ["x2"], ["paired"], axis=1),
             n("Unsqueeze", ["t", "ax1"], ["u1"]), n("Tile", ["u1", "mid2"], ["x1"]),
             n("Flatten", ["x1"], ["halves"], axis=1)]
    model = h.make_model(nodes, [h.vi("t", [S, D // 2])], [h.vi("paired", [S, D]), h.vi("halves", [S, D])],
                         {"ax2": _i64(2), "last2": _i64(1, 1, 2), "ax1": _i64(1), "mid2": _i64(1, 2, 1)})
    values = {v.name: v for node in ir.from_proto(model).graph for v in node.outputs}
    assert paired_columns(Ctx, values["paired"]) and not paired_columns(Ctx, values["halves"])


def test_view_target_known_after_folding_fuses(h):
    """A view whose dims shape inference only gets once folding made its target constant (Flux's
    TorchScript export): unbind-pairs runs after the shape refresh (RoPE 0/6 before)."""
    model = _model(h, computed_view=True)
    out = h.fuse(model, "ort", 2)
    assert h.ops(out)["RotaryEmbedding"] == 2, (h.ops(out), h.fired(out))
    h.assert_close(model, out, _feeds(h))


def test_einsum_built_tables_pass_the_local_check(h):
    """Angles as einsum("i,j->ij", positions, w): the per-rewrite check computes the tables from the
    ids (an outer product of vectors is no activation), so the rewrite is kept under verify."""
    import onnx_fuse

    model = _model(h, einsum=True, tiled=True)
    result = onnx_fuse.optimize(model, level=2, target="ort", verify=True)
    out = result.to_proto()
    assert result.report.passed and h.ops(out)["RotaryEmbedding"] == 2, (h.ops(out), result.report.warnings)
    h.assert_close(model, out, _feeds(h))
