"""Three masked_fill forms the attention recognizer left unfused (fuzz28's report, "Found, not fixed"):

- fp32_island: float16 scores cast up to float32 (before or after the scale) and masked by the keep-form select
  Where(keep, s32, fill) with a float32 fill (float16's lowest, float32's lowest or -inf), softmax in float32, the
  probabilities cast back. The fill becomes float16's lowest as the masked_fill form's does (dd42ea4), -inf stays.
- fill_then_scale: Where(Not(keep), fill, s) * scale, the fill before the scale (its inverted form was fused):
  scores-scale-before-mask moves the scale in front; a float16 fill at the dtype's lowest stays there (-65504 * scale
  is finite, no floor, but beside a kept key both weigh 0), a (nearly) -inf one is scaled as before.
- own_fill: a float16 model's Where(Not(keep), -65504, s) in its own dtype, the only mask of the scores (and its
  keep-form select Where(keep, s, -65504), the same mask).

Each fused model is compared with the original in ONNX Runtime on causal rows with right padding (each query keeps key
0) and on left-padded rows, where queries 0 and 1 of batch 1 keep no key: the original gives those rows uniform weights
(a finite fill) or NaN (-inf). A float32 fill then absorbs the scores in the fused op too (equal rows); a float16 row
with no kept key has no exact form (docs/holdout.md "Masked rows (session 14)", the fuzzer's half-masked-rows), so it
must stay finite; every other row must be equal."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onnx_fuse

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
B, H, S, D = 2, 2, 6, 8
F32_MIN = float(np.finfo(np.float32).min)


def _model(h, form, *, dtype=F16, fill=-65504.0, cast_before=False):
    n = h.node
    npt = np.float16 if dtype == F16 else np.float32
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"])]
    inits = {"scale": np.array(D ** -0.5, npt)}
    if form == "fp32_island":
        if cast_before:
            nodes += [n("Cast", ["sc"], ["s32"], to=F32), n("Mul", ["s32", "scale32"], ["ss"])]
            inits["scale32"] = np.array(D ** -0.5, np.float32)
        else:
            nodes += [n("Mul", ["sc", "scale"], ["ss16"]), n("Cast", ["ss16"], ["ss"], to=F32)]
        nodes += [n("Where", ["keep", "ss", "fill"], ["sw"]), n("Softmax", ["sw"], ["p32"], axis=-1),
                  n("Cast", ["p32"], ["p"], to=dtype)]
        inits["fill"] = np.array(fill, np.float32)
    elif form == "fill_then_scale":
        nodes += [n("Not", ["keep"], ["masked"]), n("Where", ["masked", "fill", "sc"], ["sw"]),
                  n("Mul", ["sw", "scale"], ["ss"]), n("Softmax", ["ss"], ["p"], axis=-1)]
        inits["fill"] = np.array(fill, npt)
    elif form == "own_keep":   # the keep-form select of the same: Where(keep, s, -65504)
        nodes += [n("Mul", ["sc", "scale"], ["ss"]), n("Where", ["keep", "ss", "fill"], ["sw"]),
                  n("Softmax", ["sw"], ["p"], axis=-1)]
        inits["fill"] = np.array(fill, npt)
    else:   # own_fill
        nodes += [n("Mul", ["sc", "scale"], ["ss"]), n("Not", ["keep"], ["masked"]),
                  n("Where", ["masked", "fill", "ss"], ["sw"]), n("Softmax", ["sw"], ["p"], axis=-1)]
        inits["fill"] = np.array(fill, npt)
    nodes.append(n("MatMul", ["p", "v"], ["o"]))
    inputs = [h.vi(x, [B, H, S, D], dtype) for x in "qkv"] + [h.vi("keep", [B, 1, S, S], TensorProto.BOOL)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], dtype)], inits)


def _feeds(h, dtype, left: bool):
    npt = np.float16 if dtype == F16 else np.float32
    feeds = {x: (2 * h.rng.standard_normal((B, H, S, D))).astype(npt) for x in "qkv"}
    pad = np.ones((B, S), bool)
    if left:
        pad[1, :2] = False   # batch 1's queries 0 and 1 keep no key under the causal mask
    else:
        pad[1, S // 2:] = False   # every query keeps key 0
    feeds["keep"] = np.tril(np.ones((S, S), bool))[None, None] & pad[:, None, None, :]
    return feeds


def _check(h, model, out, dtype, fill):
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    tol = 4e-3 if dtype == F16 else 1e-5
    h.assert_close(model, out, _feeds(h, dtype, left=False), atol=tol, rtol=tol)
    feeds = _feeds(h, dtype, left=True)
    want, got = (r.astype(np.float64) for r in (h.run(model, feeds)[0], h.run(out, feeds)[0]))
    keyless = np.zeros(want.shape, bool)
    keyless[1, :, :2] = True
    np.testing.assert_allclose(got[~keyless], want[~keyless], atol=tol, rtol=tol)
    if np.isinf(fill):
        assert np.isnan(want[keyless]).all()   # 0 / 0 in the original: undefined, not compared
    elif dtype == F32:
        np.testing.assert_allclose(got[keyless], want[keyless], atol=tol, rtol=tol)   # the fill absorbs the scores
    else:
        assert np.isfinite(want).all() and np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:4]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("cast_before", [False, True], ids=["cast_after_scale", "cast_before_scale"])
@pytest.mark.parametrize("fill", [-65504.0, F32_MIN, -np.inf])
def test_keep_select_of_up_cast_half_scores_fuses(h, target, cast_before, fill):
    """Before: the keep-form select took a float32 fill only in a q / k island, at <= -1e30 (never fused)."""
    model = _model(h, "fp32_island", fill=fill, cast_before=cast_before)
    _check(h, model, h.fuse(model, target), F16, fill)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("dtype, fill", [(F32, F32_MIN), (F32, -np.inf), (F16, -65504.0), (F16, -np.inf)],
                         ids=["f32-lowest", "f32--inf", "f16-lowest", "f16--inf"])
def test_masked_fill_before_the_scale_fuses(h, target, dtype, fill):
    """Before: Where(Not(keep), fill, s) * scale was never fused (the scale after the select in the masked_fill
    order); a float16 fill of -65504 scaled is -23160, which is no floor: it is kept at -65504 instead."""
    model = _model(h, "fill_then_scale", dtype=dtype, fill=fill)
    result = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True)
    assert result.report.rule_fires.get("scores-scale-before-mask") == 1, result.report.rule_fires
    _check(h, model, result.to_proto(), dtype, fill)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["own_fill", "own_keep"])
def test_half_masked_fill_at_the_dtype_floor_fuses(h, target, form):
    """Before: a float16 masked_fill was read as a mask only with a -inf fill (<= -1e30); the keep-form select
    Where(keep, s, -65504) is the same mask and is read alike (where-causal-select-half took it only causal)."""
    model = _model(h, form)
    _check(h, model, h.fuse(model, target), F16, -65504.0)


@pytest.mark.parametrize("form", ["fill_then_scale", "own_fill", "own_keep"])
def test_half_fill_above_the_floor_is_refused(h, form):
    """-1e4 is no float16 floor: a masked key at -1e4 + s is not outweighed in every row, so the select stays."""
    model = _model(h, form, fill=-1e4)
    assert "Softmax" in h.ops(h.fuse(model, "ort"))
    h.assert_close(model, h.fuse(model, "ort"), _feeds(h, F16, left=True), atol=4e-3, rtol=4e-3)


def test_half_floor_fill_with_another_mask_is_refused(h):
    """float16's lowest is a floor only as the scores' one mask: next to an additive mask -65504 + m may overflow to
    -inf in float16 where the select kept -65504, so the select stays."""
    n = h.node
    model = _model(h, "own_fill")
    g = model.graph
    add = n("Add", ["ss", "bias"], ["ssb"])
    for node in g.node:
        if node.op_type == "Where":
            node.input[2] = "ssb"
    idx = [i for i, node in enumerate(g.node) if node.op_type == "Mul"][0]
    g.node.insert(idx + 1, add)
    g.input.append(h.vi("bias", [B, 1, 1, S], F16))
    rs = h.reasons(model, "ort", "attention")
    assert rs and not any(r.startswith("matched") for r in rs), rs
    assert "Softmax" in h.ops(h.fuse(model, "ort"))
