"""scores-scale-before-mask keeps a float16 masked_fill at the dtype's floor (-65504) unscaled when the scale comes
after the select (af83ea8): beside a kept key both weigh 0 -- only while the original's scaled fill is still far
below the scaled scores (review29, session 29). With a tiny scale (1e-4) the original's masked keys sit at
-65504 * 1e-4 = -6.55, weighed against kept scores near 0, where the kept floor gives them 0: kept rows differ.
Session 30 (left30): the keep order Where(keep, s, -65504) * e with an input mask moves alike (it was refused:
where-causal-select-half's near miss), with the same floor condition; a row with no kept key is the
half-masked-rows class there as in the masked_fill order (no exact float16 form)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onnx_fuse

F16 = TensorProto.FLOAT16
B, H, S, D = 2, 2, 6, 8


def _model(h, scale, order="fill"):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"])]
    if order == "fill":
        nodes += [n("Not", ["keep"], ["masked"]), n("Where", ["masked", "fill", "sc"], ["sw"])]
    else:
        nodes.append(n("Where", ["keep", "sc", "fill"], ["sw"]))
    nodes += [n("Mul", ["sw", "scale"], ["ss"]), n("Softmax", ["ss"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inits = {"scale": np.array(scale, np.float16), "fill": np.array(-65504.0, np.float16)}
    inputs = [h.vi(x, [B, H, S, D], F16) for x in "qkv"] + [h.vi("keep", [B, 1, S, S], TensorProto.BOOL)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], F16)], inits)


def _feeds(h):
    f = {x: (2 * h.rng.standard_normal((B, H, S, D))).astype(np.float16) for x in "qkv"}
    f["keep"] = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)   # every query keeps key 0
    return f


@pytest.mark.parametrize("order", ["fill", "keep"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_floor_fill_scaled_off_the_floor_is_refused(h, target, order):
    model = _model(h, 1e-4, order)
    result = onnx_fuse.optimize(model, level=4 if target == "trt" else 3, target=target, float32_plugins=True)
    assert "scores-scale-before-mask" not in result.report.rule_fires, result.report.rule_fires
    h.assert_close(model, result.to_proto(), _feeds(h), atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("order", ["fill", "keep"])
@pytest.mark.parametrize("scale", [D ** -0.5, 1 / 64], ids=["d8", "d4096"])
def test_floor_fill_with_a_head_size_scale_still_moves(h, scale, order):
    model = _model(h, scale, order)
    result = onnx_fuse.optimize(model, level=3, target="onnx", float32_plugins=True)
    assert result.report.rule_fires.get("scores-scale-before-mask") == 1, result.report.rule_fires
    h.assert_close(model, result.to_proto(), _feeds(h), atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_keep_order_with_an_input_mask_fuses(h, target):
    """Where(keep, s, -65504) * e, keep an input: the attention fuses (before: Softmax left at every target).
    Rows that keep a key equal the original; left-padded rows that keep none stay finite (the original
    is uniform there; ORT's MultiHeadAttention adds -65504 to the scores in float32, 0.9 off here, the
    masked_fill order's class since af83ea8: half-masked-rows)."""
    model = _model(h, D ** -0.5, "keep")
    out = onnx_fuse.optimize(model, level=4 if target == "trt" else 3, target=target, float32_plugins=True).to_proto()
    ops = h.ops(out)
    assert "Softmax" not in ops and any("Attention" in op for op in ops), ops
    f = _feeds(h)
    f["keep"][1, :, :, :2] = False          # batch 1 left-padded: its queries 0 and 1 keep no key
    ref, got = h.run(model, f)[0].astype(np.float64), h.run(out, f)[0].astype(np.float64)
    np.testing.assert_allclose(got[0], ref[0], atol=4e-3, rtol=4e-3)
    np.testing.assert_allclose(got[1, :, 2:], ref[1, :, 2:], atol=4e-3, rtol=4e-3)
    assert np.isfinite(got).all()
