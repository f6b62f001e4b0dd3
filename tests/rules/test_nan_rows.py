"""Query rows with no kept key (hold-out 14's sliding window over a padded sequence): every score of
the row is filled with -inf, so the original's softmax is 0/0 = NaN over the whole row, while a fused
attention op gives numbers there (ONNX Attention-23 gives 0). Such a row is undefined output:
verify.compare_arrays accepts any value on rows (all of the last axis) the original has NaN
throughout, and nowhere else, so the per-rewrite check no longer rolls the attention back."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onnx_fuse

from onnx_fuse.verify import compare_arrays, nan_rows

H, S, D, W = 2, 8, 8, 2
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _sliding_padded(h):
    """scores.masked_fill(band[:S, :S] == 0, -inf).masked_fill(~attention_mask[:, None, None, :], -inf),
    band = ones.tril().triu(-(W - 1)): a query keeps itself and the W - 1 keys before it."""
    n = h.node
    band = (np.tril(np.ones((16, 16), np.float32)) * np.triu(np.ones((16, 16), np.float32), -(W - 1)))[None, None]
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]),
             n("Shape", ["q"], ["qs"], start=2, end=3),
             n("Slice", ["band", "zero", "qs", "ax2"], ["t1"]), n("Slice", ["t1", "zero", "qs", "ax3"], ["t2"]),
             n("Equal", ["t2", "fzero"], ["outside"]), n("Where", ["outside", "ninf", "ss"], ["w1"]),
             n("Cast", ["attention_mask"], ["padb"], to=TensorProto.BOOL),
             n("Unsqueeze", ["padb", "ax12"], ["padu"]),
             n("Not", ["padu"], ["padn"]), n("Where", ["padn", "ninf", "w1"], ["w2"]),
             n("Softmax", ["w2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inits = {"band": band, "zero": np.array([0], np.int64), "ax2": np.array([2], np.int64),
             "ax3": np.array([3], np.int64), "ax12": np.array([1, 2], np.int64),
             "fzero": np.array(0.0, np.float32), "ninf": np.array(-np.inf, np.float32),
             "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")] + \
        [h.vi("attention_mask", ["b", "s"], TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)


def _feeds(h, *, padded: int):
    feeds = {x: h.rng.standard_normal((2, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    mask = np.ones((2, S), np.int64)
    mask[1, S - padded:] = 0
    return {**feeds, "attention_mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_sliding_window_over_padding_fuses(h, target):
    """The per-rewrite check pads the second half of one mask row, so queries S-1 (window S-2, S-1)
    keep no key: NaN in the original, numbers in the fused op (Attention-23 gives 0; ORT's
    MultiHeadAttention keeps the NaN). Before: the recognizer's check rolled the attention back at
    every target ('NaN positions differ'); with only compare_arrays changed, the check of the
    MultiHeadAttention lowering still warned (the written-out canonical op zeroed the row whatever
    nan_rows_zero said, MultiHeadAttention gives NaN)."""
    model = _sliding_padded(h)
    result = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True, verify=True)
    assert not any("numeric check" in w for w in result.report.warnings), result.report.warnings
    assert result.report.verify["passed"], result.report.verify
    out = result.to_proto()
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    feeds = _feeds(h, padded=S // 2)
    ref, got = h.run(model, feeds), h.run(out, feeds)
    keyless = np.isnan(ref[0]).all(axis=-1)            # [B, H, S]: rows with no kept key
    assert keyless[1, :, S // 2 + W - 1:].all() and keyless.sum() == H * (S // 2 - W + 1)
    assert compare_arrays("y", ref[0], got[0], 1e-5, 1e-4).passed
    # every row with a kept key agrees: padding shorter than the window leaves no keyless row, so
    # nothing is NaN and every row, padded queries included, is compared
    short = _feeds(h, padded=W - 1)
    assert not np.isnan(h.run(model, short)[0]).any()
    h.assert_close(model, out, short)
    h.assert_close(model, out, _feeds(h, padded=0))


def test_compare_accepts_only_rows_nan_throughout():
    ref = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    ref[1, 1, :] = np.nan                                  # one query row with no kept key
    got = np.nan_to_num(ref, nan=0.0)                      # Attention-23's 0 there
    assert nan_rows(ref).sum() == 3
    assert compare_arrays("y", ref, got, 1e-5, 1e-4).passed
    assert compare_arrays("y", ref, ref.copy(), 1e-5, 1e-4).passed      # NaN kept there: fine too
    wrong = got.copy()
    wrong[0, 0, 1] += 1                                    # a finite row still has to agree
    assert not compare_arrays("y", ref, wrong, 1e-5, 1e-4).passed
    new_nan = got.copy()
    new_nan[0, 1, 2] = np.nan                              # NaN where the original is finite
    assert compare_arrays("y", ref, new_nan, 1e-5, 1e-4).reason == "NaN positions differ"
    part = ref.copy()
    part[0, 0, 0] = np.nan                                 # a row only partly NaN: NaN must stay
    assert not compare_arrays("y", part, np.nan_to_num(part, nan=0.0), 1e-5, 1e-4).passed
    assert compare_arrays("y", part, np.where(np.isnan(part) & ~nan_rows(part), np.nan,
                                               np.nan_to_num(part, nan=0.0)), 1e-5, 1e-4).passed
    every = np.full((2, 3), np.nan, np.float32)            # NaN everywhere: nothing to compare, no pass
    assert not compare_arrays("y", every, np.zeros_like(every), 1e-5, 1e-4).passed
    vec = np.array([np.nan, np.nan], np.float32)           # below rank 2 there are no rows
    assert not compare_arrays("y", vec, np.zeros_like(vec), 1e-5, 1e-4).passed
