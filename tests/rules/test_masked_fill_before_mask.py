"""A masked_fill of the scores BEFORE the additive mask (Bark's causal attention, transformers 5.25: a bool tril
buffer sliced to [S, T], compared with 0, then the padding mask added):

    s = q k^T * scale;  s = s.masked_fill(tril[..., :S, :T] == 0, finfo.min);  p = softmax(s + mask);  o = p v

The recognizer took a masked_fill only after the Add (and the inverted where(causal, s, fill) before it).
Filled first, a masked key holds fill + mask: exactly fill where the mask is 0 and -inf where the mask is
finfo.min too, which the additive form s + mask + where(m, fill, 0) gives as well (finite scores vanish next
to finfo.min), so it is the same additive bias. Compared with the original in ONNX Runtime, rows with right
padding (every query keeps key 0) and with left padding (a query row whose every key is masked)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 4, 6, 8
MIN = float(np.finfo(np.float32).min)


def _bark(h, *, fill=MIN, mask=True, int_compare=True):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"])]
    if int_compare:  # `bias == 0` on a bool buffer: torch casts it to int64 first
        nodes += [n("Cast", ["tril"], ["tri"], to=TensorProto.INT64), n("Equal", ["tri", "zero"], ["off"])]
    else:
        nodes.append(n("Not", ["tril"], ["off"]))
    nodes.append(n("Where", ["off", "fill", "ss"], ["sf"]))
    last = "sf"
    if mask:
        nodes.append(n("Add", ["sf", "pad"], ["sm"]))
        last = "sm"
    nodes += [n("Softmax", [last], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inits = {"scale": np.array(D ** -0.5, np.float32), "fill": np.array(fill, np.float32),
             "zero": np.array(0, np.int64), "tril": np.tril(np.ones((S, S), bool))[None, None]}
    inputs = [h.vi(x, [B, H, S, D]) for x in ("q", "k", "v")]
    if mask:
        inputs.append(h.vi("pad", [B, 1, 1, S]))
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], inits)


def _feeds(h, left=False):
    r = h.rng
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    keep = np.ones((B, S), bool)
    if left:
        keep[1, :2] = False  # batch 1's query rows 0 and 1 keep no key
    else:
        keep[1, S // 2:] = False
    feeds["pad"] = np.where(keep, 0.0, MIN).astype(np.float32)[:, None, None, :]
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("int_compare", [True, False])
def test_masked_fill_before_the_mask_add_fuses(h, target, int_compare):
    model = _bark(h, int_compare=int_compare)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    assert sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rows_with_no_kept_key_match_the_original(h, target):
    """Left padding: the original's row is fill + finfo.min = -inf at padded keys and fill at the others."""
    model = _bark(h)
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out), h.ops(out)
    feeds = _feeds(h, left=True)
    want, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_fill_that_is_not_minus_infinity_is_refused(h):
    """-1e4 is no -inf: a kept key 1e4 below the row's best would not vanish the same way."""
    model = _bark(h, fill=-1e4)
    rs = h.reasons(model, "ort", "attention")
    assert rs and not any(r.startswith("matched") for r in rs), rs


def test_lone_masked_fill_keeps_its_post_add_reading(h):
    """Without the Add the single masked_fill is read as before (the post-mask select), not as the new one."""
    model = _bark(h, mask=False)
    out = h.fuse(model, "ort")
    assert "Softmax" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, {k: v for k, v in _feeds(h).items() if k != "pad"})
