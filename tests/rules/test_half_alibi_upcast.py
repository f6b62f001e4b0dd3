"""Float16 attention whose scale runs in float16 and whose scores are then cast up to float32 to
meet a float32 additive bias (MPT's ALiBi table) and a float32 masked_fill at float16's lowest
value (torch.finfo(query.dtype).min, promoted to float32 by the bias), the softmax in float32 and
the probabilities cast back (MPT exported by TorchScript in float16):

    p = softmax(where(m, -65504f, float(q k^T * scale) + alibi_f32)).to(float16);  o = p v

The recognizer takes the up-cast after the scale as it takes it before, and the float32 fill of
up-cast scores at or below the float16 floor, as that floor (every kept key outweighs it by far more
than float32's exp range, so its probability is 0 either way; a row with no kept key stays finite). Each fused graph is compared with the
original in ONNX Runtime on causal rows with right padding (each query keeps its first key; a
fully masked float16 row has no exact form, docs/holdout.md "Masked rows (session 14)")."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
B, H, S, D = 2, 4, 6, 8


def _mpt_half(h, *, fill=-65504.0, up=F32, bias=True):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Cast", ["ss"], ["s32"], to=up)]
    last = "s32"
    if bias:
        nodes.append(n("Add", ["s32", "alibi"], ["sb"]))
        last = "sb"
    nodes += [n("Where", ["m", "fill", last], ["sw"]), n("Softmax", ["sw"], ["p"], axis=-1),
              n("Cast", ["p"], ["p16"], to=F16), n("MatMul", ["p16", "v"], ["o"])]
    slopes = 2.0 ** (-np.arange(1, H + 1))
    alibi = (slopes[:, None] * np.arange(1 - S, 1)[None, :]).reshape(1, H, 1, S).astype(np.float32)
    inits = {"scale": np.array(D ** -0.5, np.float16), "fill": np.array(fill, np.float32), "alibi": alibi}
    inputs = [h.vi(x, [B, H, S, D], F16) for x in ("q", "k", "v")] + [h.vi("m", [B, 1, S, S], TensorProto.BOOL)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], F16)], inits)


def _feeds(h):
    r = h.rng
    feeds = {x: (2 * r.standard_normal((B, H, S, D))).astype(np.float16) for x in ("q", "k", "v")}
    keep = np.ones((B, S), bool)
    keep[1, S // 2:] = False  # right padding: every query still keeps key 0
    causal = np.tril(np.ones((S, S), bool))
    feeds["m"] = ~(causal[None, None] & keep[:, None, None, :])
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("fill", [-65504.0, float(np.finfo(np.float32).min), -np.inf])
def test_half_scores_cast_up_after_the_scale_with_float32_bias_fuse(h, target, fill):
    model = _mpt_half(h, fill=fill)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    assert sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    h.assert_close(model, out, _feeds(h), atol=4e-3, rtol=4e-3)


def test_half_scores_cast_up_after_the_scale_without_bias_fuse(h):
    """The same up-cast with only the masked_fill (no additive term)."""
    model = _mpt_half(h, bias=False)
    out = h.fuse(model, "ort")
    assert "Softmax" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h), atol=4e-3, rtol=4e-3)


def test_float32_fill_above_the_half_floor_is_refused(h):
    """-1e4 is no float16 floor: a kept key at -1e4 + 10 would not outweigh it in every row."""
    model = _mpt_half(h, fill=-1e4)
    rs = h.reasons(model, "ort", "attention")
    assert rs and not any(r.startswith("matched") for r in rs), rs
    assert any("masked_fill" in r for r in rs), rs


def test_scores_cast_after_the_scale_to_bfloat16_are_refused(h):
    """Only an up-cast to float32 keeps the numbers: float16 scores cast to bfloat16 are not."""
    model = _mpt_half(h, up=TensorProto.BFLOAT16, bias=False)
    fill = next(t for t in model.graph.initializer if t.name == "fill")
    fill.CopyFrom(numpy_helper.from_array(np.array(-65504.0, np.float32).astype(ml_dtypes.bfloat16), "fill"))
    rs = h.reasons(model, "ort", "attention")
    assert rs and not any(r.startswith("matched") for r in rs), rs


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("fill", [-65504.0, float(np.finfo(np.float32).min)])
def test_fully_masked_half_rows_stay_finite(h, target, fill):
    """Left padding leaves query rows with no kept key. The original's float32 fill makes them uniform
    (finite); the fused op must keep them finite too (their values have no exact float16 form), or
    the next layer reads NaN K/V at those positions and 0 * NaN poisons every row. A float32 fill
    below float16's range saturates at float16's lowest instead of becoming -inf."""
    model = _mpt_half(h, fill=fill)
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out), h.ops(out)
    feeds = _feeds(h)
    keep = np.ones((B, S), bool)
    keep[1, :2] = False  # left padding: batch 1's query rows 0 and 1 keep no key
    feeds["m"] = ~(np.tril(np.ones((S, S), bool))[None, None] & keep[:, None, None, :])
    want = h.run(model, feeds)[0]
    got = h.run(out, feeds)[0]
    assert np.isfinite(want).all()
    assert np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:4]
    np.testing.assert_allclose(got[:, :, 2:].astype(np.float32), want[:, :, 2:].astype(np.float32), atol=4e-3, rtol=4e-3)
