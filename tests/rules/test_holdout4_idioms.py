"""Idioms found on the fourth hold-out sweep, part A (Optimum's exporter, transformers 4.57, on the
hold-out architectures: tools/holdout_specs.py HOLDOUT4, docs/holdout.md), each as a tiny graph that
failed before its fix; numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8


def _row_table_rotary(h, cut_axis=2, sin_end="send"):
    """ESM's rotary as transformers 4.57 writes it: f = outer(arange(S), inv_freq) (an Einsum
    'i,j->ij' in TorchScript / Optimum exports), cos/sin(concat(f, f))[None, None], cut to x's length
    by cos[:, :, :S, :] (a Slice whose end is read from x's shape), then x*cos + rotate_half(x)*sin;
    x [B, H, S, D] with a dynamic batch and sequence."""
    n = h.node
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i2"], ["slen"], axis=0),
             n("Range", ["zero", "slen", "one"], ["t"]), n("Cast", ["t"], ["tf"], to=h.F32),
             n("Einsum", ["tf", "inv_freq"], ["f"], equation="i,j->ij"),
             n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"]),
             n("Unsqueeze", ["co", "ax0"], ["cu0"]), n("Unsqueeze", ["cu0", "ax1"], ["cu1"]),
             n("Unsqueeze", ["si", "ax0"], ["su0"]), n("Unsqueeze", ["su0", "ax1"], ["su1"]),
             n("Shape", ["x"], ["send"], start=2, end=3),
             n("Slice", ["cu1", "ax0", "send", "cut"], ["cs"]), n("Slice", ["su1", "ax0", sin_end, "cut"], ["ss"]),
             n("Slice", ["x", "ax0", "ih", "last"], ["x1"]), n("Slice", ["x", "ih", "big", "last"], ["x2"]),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=-1),
             n("Mul", ["x", "cs"], ["c"]), n("Mul", ["r", "ss"], ["s"]), n("Add", ["c", "s"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"i2": np.array(2, np.int64), "zero": np.array(0, np.int64), "one": np.array(1, np.int64),
             "inv_freq": (1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32),
             "ax0": i64(0), "ax1": i64(1), "cut": i64(cut_axis), "ih": i64(D // 2), "last": i64(-1),
             "big": i64(2 ** 62), "sfix": i64(S - 1)}
    shape = ["batch", H, "seq", D]
    return h.make_model(nodes, [h.vi("x", shape)], [h.vi("y", shape)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rotary_with_row_tables_cut_to_the_sequence_is_fused(h, target):
    """ESM through Optimum (hold-out 4): RoPE 0/4 before (no rule took [S, D] tables lifted by two
    Unsqueezes and cut by a Slice). The general rotary-rotate-half-tables takes it (the retired
    rotary-rotate-half-row-tables did before), and the row cut moves onto the angles f through the
    Unsqueezes and Cos / Sin (row-slice-above-*), so f is cut once for both caches, as the old rule
    wrote it. Here f has x's own rows (Range over x's length), so since 5c0df4c that one cut is a
    whole-axis Slice and identity-elimination drops it: no Squeeze and no Slice left, for any batch and
    sequence length (tests/rules/test_row_slice.py covers a cut that stays)."""
    model = _row_table_rotary(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["RotaryEmbedding"] == 1 and "Neg" not in counts, counts
    assert h.fired(out)["rotary-rotate-half-tables"] >= 1, h.fired(out)
    assert "Slice" not in counts and counts["Cos"] == 1 and counts["Sin"] == 1, counts
    assert "Squeeze" not in counts and sum(counts.values()) <= 15, counts   # the old rule's 16, less its cut
    for batch, seq in ((B, S), (1, 3), (3, 1)):
        h.assert_close(model, out, {"x": h.rng.standard_normal((batch, H, seq, D)).astype(np.float32)})


def test_rotary_row_tables_near_misses(h):
    """Tables cut along another axis than their rows, or cos and sin cut differently, are refused
    with the reason (the RoPE stays plain ops)."""
    model = _row_table_rotary(h, cut_axis=3)
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert any("must be rows of positions" in r for r in reasons), reasons
    assert "RotaryEmbedding" not in h.ops(h.fuse(model, "ort"))
    model = _row_table_rotary(h, sin_end="sfix")
    reasons = h.reasons(model, "ort", "rotary-rotate-half-tables")
    assert any("not a (scaled) rotation" in r for r in reasons), reasons
    assert "RotaryEmbedding" not in h.ops(h.fuse(model, "ort"))


N, NW, WT = 4, 2, 2  # window tokens, windows per image, window batch = images * NW


def _shifted_window_attention(h, wide=False):
    """Swin's shifted-window attention as transformers 4.x writes it: scores [B*nW, H, N, N] scaled,
    plus the relative-position bias [1, H, N, N], viewed [B, nW, H, N, N] (B = the window batch over
    mask.shape[0], both read from shapes at run time), plus the mask [1, nW, 1, N, N], viewed back
    to [-1, H, N, N], softmax, times V. wide: the mask gets one more leading axis (rank 6)."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "root"], ["sd"]), n("Add", ["sd", "rel"], ["sb"]),
             n("Shape", ["q"], ["qs"], start=0, end=1),
             n("Shape", ["mask"], ["ms"], start=0, end=1), n("Div", ["qs", "ms"], ["nb"]),
             n("Concat", ["nb", "ms", "tail3"], ["view5"], axis=0), n("Reshape", ["sb", "view5"], ["v5"]),
             n("Unsqueeze", ["mask", "ax1"], ["m1"]), n("Unsqueeze", ["m1", "ax0"], ["m0"])]
    if wide:
        nodes += [n("Unsqueeze", ["m0", "ax0"], ["m00"]), n("Add", ["v5", "m00"], ["a5"])]
    else:
        nodes += [n("Add", ["v5", "m0"], ["a5"])]
    nodes += [n("Reshape", ["a5", "back"], ["s4"]), n("Softmax", ["s4"], ["p"], axis=-1),
              n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(name, ["wb", H, N, D]) for name in ("q", "k", "v")] + [h.vi("mask", ["nw", N, N])]
    inits = {"root": np.array(D ** 0.5, np.float32), "rel": h.rng.standard_normal((1, H, N, N)).astype(np.float32),
             "tail3": np.array([H, N, N], np.int64), "back": np.array([-1, H, N, N], np.int64),
             "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("o", [None, H, N, D])], inits)


def _window_feeds(h, images):
    r = h.rng
    feeds = {name: r.standard_normal((images * NW, H, N, D)).astype(np.float32) for name in ("q", "k", "v")}
    feeds["mask"] = np.where(r.random((NW, N, N)) < 0.3, -100.0, 0.0).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_score_terms_in_a_view_that_splits_the_batch_are_fused(h, target):
    """Swin through Optimum (hold-out 4): attention 3/4 before (the shifted-window block's mask is
    added with the window batch split into [images, windows]); scores-bias-in-view now takes any
    view (its shape reused on zeros of the scores' shape), and the scale and a bias before it."""
    model = _shifted_window_attention(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Softmax" not in counts and h.fired(out)["scores-bias-in-view"] >= 1, counts
    for images in (1, 3):
        h.assert_close(model, out, _window_feeds(h, images))


def test_score_view_term_that_widens_is_refused(h):
    """A term of higher rank than the view (the mask unsqueezed once more: the view back then folds
    the new axis into the batch) is refused with the reason; the softmax stays."""
    model = _shifted_window_attention(h, wide=True)
    reasons = h.reasons(model, "ort", "scores-bias-in-view")
    assert any("must not widen the view" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out)
    h.assert_close(model, out, _window_feeds(h, 1))


def _scaled_after_mask(h, op="Div", axis=-1, pad=False, half=False):
    """CodeGen's attention as transformers 4.57 writes it: softmax((q @ k^T + mask) / scale) @ v, the
    mask a [B, 1, S, T] additive bias (0 kept, finfo.min masked); ``pad``: a [B, 1, 1, T] padding
    mask added after the scale as well; ``half``: everything float16."""
    n = h.node
    ft = 10 if half else 1
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Add", ["sc", "mask"], ["sm"]), n(op, ["sm", "scale"], ["sd"]),
             n("Softmax", ["sd"], ["p"], axis=axis), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(name, ["batch", H, "seq", D], ft) for name in ("q", "k", "v")] + [h.vi("mask", ["batch", 1, "seq", "seq"], ft)]
    if pad:
        nodes[4:4] = [n("Add", ["pad", "sd"], ["sp"])]
        nodes[5] = n("Softmax", ["sp"], ["p"], axis=axis)
        inputs.append(h.vi("pad", ["batch", 1, 1, "seq"]))
    value = D ** 0.5 if op == "Div" else D ** -0.5
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", H, "seq", D], ft)],
                        {"scale": np.array(value, np.float16 if half else np.float32)})


def _causal_feeds(h, batch=B, seq=S):
    r = h.rng
    feeds = {name: r.standard_normal((batch, H, seq, D)).astype(np.float32) for name in ("q", "k", "v")}
    causal = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)
    feeds["mask"] = np.broadcast_to(causal, (batch, 1, seq, seq)).copy()
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("op", ["Div", "Mul"])
def test_scores_scaled_after_the_mask_are_fused(h, target, op):
    """CodeGen through Optimum (hold-out 4): attention 0/2 before (the scale divides scores + mask);
    scores-scale-before-mask scales the mask with the scores, the attention rules take the rest."""
    model = _scaled_after_mask(h, op)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Softmax" not in counts and h.fired(out)["scores-scale-before-mask"] >= 1, counts
    h.assert_close(model, out, _causal_feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_scores_scaled_between_two_masks_are_fused(h, target):
    """softmax((q k^T + causal) / scale + padding): attention-scale-after-mask wanted the Softmax
    right after the scale and left this unfused; scores-scale-before-mask takes an additive term
    between them (as it does after a causal select)."""
    model = _scaled_after_mask(h, pad=True)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Softmax" not in counts and h.fired(out)["scores-scale-before-mask"] >= 1, counts
    feeds = _causal_feeds(h)
    pad = np.zeros((B, 1, 1, S), np.float32)
    pad[-1, ..., S // 2:] = np.finfo(np.float32).min   # batch row 1 right-padded (every row keeps a key)
    h.assert_close(model, out, {**feeds, "pad": pad})


def test_half_scores_keep_the_scale_after_an_additive_mask(h):
    """float16: (s + (-65504)) / d is -inf for s <= -16 where s / d + (-65504 / d) stays finite, so a
    fully masked row (here every key of batch row 1) changes: attention-scale-after-mask moved the
    scale anyway (ORT 1.24 off at onnx-O3 on the fuzzer's float16 mask_scale case, seed 21, with an
    all-zero attention_mask); scores-scale-before-mask refuses with the reason, the softmax stays."""
    model = _scaled_after_mask(h, half=True)
    out = h.fuse(model, "onnx")
    feeds = {k: (10 * v).astype(np.float16) for k, v in _causal_feeds(h).items() if k != "mask"}
    mask = np.full((B, 1, S, S), np.finfo(np.float16).min, np.float16)
    mask[0] = np.triu(mask[0, 0], 1)   # batch row 0 causal, batch row 1 fully masked
    h.assert_close(model, out, {**feeds, "mask": mask})
    assert "Softmax" in h.ops(out), h.ops(out)
    reasons = h.reasons(model, "onnx", "scores-scale-before-mask")
    assert any("float16 scores keep the scale" in r for r in reasons), reasons


def test_scale_after_mask_near_misses(h):
    """A softmax over another axis than the keys is refused with the reason; a (x + b) / c without a
    softmax (a GELU's x / sqrt(2)) is never a candidate."""
    reasons = h.reasons(_scaled_after_mask(h, axis=2), "ort", "scores-scale-before-mask")
    assert any("over the keys" in r for r in reasons), reasons
    n = h.node
    nodes = [n("MatMul", ["x", "w"], ["xw"]), n("Add", ["xw", "b"], ["xb"]), n("Div", ["xb", "c"], ["y"])]
    inits = {"w": np.ones((D, D), np.float32), "b": np.ones(D, np.float32), "c": np.array(1.4142135, np.float32)}
    model = h.make_model(nodes, [h.vi("x", ["batch", D])], [h.vi("y", ["batch", D])], inits)
    assert not h.fired(h.fuse(model, "ort"))["scores-scale-before-mask"]


def _seq_first_rotary(h, index=(0, 1)):
    """wav2vec2-conformer's rotary as transformers 4.57 writes it: tables cos/sin(concat(f, f)) of
    f = outer(arange(S), inv_freq), lifted to [S, 1, 1, D], stacked (torch.stack([cos, sin])) and read
    back by index, cut to the sequence; x the hidden states [B, S, H*D] viewed [B, S, H, D] and
    transposed seq-first, rotated, transposed back and merged. index: the stack entries read for cos
    and sin."""
    n = h.node
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["slen"], axis=0),
             n("Range", ["zero", "slen", "one"], ["t"]), n("Cast", ["t"], ["tf"], to=h.F32),
             n("Einsum", ["tf", "inv_freq"], ["f"], equation="i,j->ij"),
             n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"]),
             n("Unsqueeze", ["co", "ax12"], ["cu"]), n("Unsqueeze", ["si", "ax12"], ["su"]),
             n("Unsqueeze", ["cu", "ax0"], ["cu0"]), n("Unsqueeze", ["su", "ax0"], ["su0"]),
             n("Concat", ["cu0", "su0"], ["stack"], axis=0),
             n("Gather", ["stack", "pick_c"], ["ct"], axis=0), n("Gather", ["stack", "pick_s"], ["st"], axis=0),
             n("Shape", ["x"], ["send"], start=1, end=2),
             n("Slice", ["ct", "ax0", "send", "ax0"], ["cs"]), n("Slice", ["st", "ax0", "send", "ax0"], ["ss"]),
             n("Reshape", ["x", "heads"], ["x4"]), n("Transpose", ["x4"], ["xt"], perm=[1, 0, 2, 3]),
             n("Slice", ["xt", "ax0", "ih", "last"], ["x1"]), n("Slice", ["xt", "ih", "big", "last"], ["x2"]),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["r"], axis=3),
             n("Mul", ["xt", "cs"], ["c"]), n("Mul", ["r", "ss"], ["s"]), n("Add", ["c", "s"], ["yt"]),
             n("Transpose", ["yt"], ["y4"], perm=[1, 0, 2, 3]), n("Reshape", ["y4", "merge"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"i1": np.array(1, np.int64), "zero": np.array(0, np.int64), "one": np.array(1, np.int64),
             "inv_freq": (1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32),
             "ax0": i64(0), "ax12": i64(1, 2), "ih": i64(D // 2), "last": i64(-1), "big": i64(2 ** 62),
             "pick_c": np.array(index[0], np.int64), "pick_s": np.array(index[1], np.int64),
             "heads": i64(0, 0, H, D), "merge": i64(0, 0, H * D)}
    shape = ["batch", "seq", H * D]
    return h.make_model(nodes, [h.vi("x", shape)], [h.vi("y", shape)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_seq_first_rotary_with_stacked_row_tables_is_fused(h, target):
    """wav2vec2-conformer through Optimum (hold-out 4): RoPE 0/2 before; gather-of-stack reads the
    tables back out of their stack and rotary-rotate-half-tables fuses the seq-first rotation
    (RotaryEmbedding's 3-D form; the Transposes around it cancel)."""
    model = _seq_first_rotary(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["RotaryEmbedding"] == 1 and "Neg" not in counts, counts
    fired = h.fired(out)
    assert fired["rotary-rotate-half-tables"] >= 1, fired
    # one node leaner than the retired rotary-rotate-half-row-tables-sbhd's 16: the angles' rows cut
    # to S (two Slices), no Unsqueeze of the tables
    assert "Unsqueeze" not in counts and counts["Cos"] == 1 and counts["Sin"] == 1, counts
    assert sum(counts.values()) <= 15, counts
    for batch, seq in ((B, S), (1, 3), (3, 1)):
        h.assert_close(model, out, {"x": h.rng.standard_normal((batch, seq, H * D)).astype(np.float32)})


def test_stacked_tables_read_back_swapped_are_not_rotary(h):
    """cos read from the sin entry and sin from the cos entry: gather-of-stack still picks exactly
    (numbers kept), but the tables are no rotation and no RotaryEmbedding comes."""
    model = _seq_first_rotary(h, index=(1, 0))
    out = h.fuse(model, "ort")
    assert "RotaryEmbedding" not in h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, S, H * D)).astype(np.float32)})
