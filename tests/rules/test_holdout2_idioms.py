"""Idioms found on the second hold-out sweep (tools/holdout_specs.py HOLDOUT2, docs/holdout.md), each
as a tiny graph that failed before its fix; numerics against a reference."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8


def _rotate_half(x, cos, sin):
    """RotaryEmbedding-23's non-interleaved rotation, x [B, H, S, D], cos/sin [B|1, S, D/2]."""
    c, s = cos[:, None], sin[:, None]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("three_d", [False, True])
def test_rotary_caches_of_batch_one_are_expanded_to_the_batch(h, target, three_d):
    """torch's opset-23 export writes RotaryEmbedding-23 with cos/sin [1, S, D/2] for a batch of B;
    ONNX Runtime 1.32 refuses that node (cache batch != x batch). After optimize it runs, exactly."""
    n = h.node
    xshape = ["batch", S, H * D] if three_d else ["batch", H, S, D]
    attrs = dict(num_heads=H) if three_d else {}
    nodes = [n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=0, **attrs)]
    model = h.make_model(nodes, [h.vi("x", xshape), h.vi("cos", [1, S, D // 2]), h.vi("sin", [1, S, D // 2])],
                         [h.vi("y", xshape)])
    f = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(D // 2) * 2 / D))[None]
    x4 = h.rng.standard_normal((B, H, S, D)).astype(np.float32)
    feeds = {"x": x4.transpose(0, 2, 1, 3).reshape(B, S, H * D) if three_d else x4,
             "cos": np.cos(f).astype(np.float32), "sin": np.sin(f).astype(np.float32)}
    with pytest.raises(Exception, match="cos_cache"):  # the export as written does not run in ORT
        h.run(model, feeds)
    out = h.fuse(model, target)
    assert any(k.startswith("rotary-caches-to-batch") for k in h.fired(out)), h.fired(out)
    got = h.run(out, feeds)[0]
    want = _rotate_half(x4, feeds["cos"], feeds["sin"])
    if three_d:
        want = want.transpose(0, 2, 1, 3).reshape(B, S, H * D)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_rotary_caches_with_the_batch_are_left_alone(h):
    """Caches that already have x's batch (or an x of batch 1) are what the spec wants: no rewrite."""
    n = h.node
    nodes = [n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=0)]
    for xb, cb in ((1, 1), ("batch", "batch")):
        model = h.make_model(nodes, [h.vi("x", [xb, H, S, D]), h.vi("cos", [cb, S, D // 2]),
                                     h.vi("sin", [cb, S, D // 2])], [h.vi("y", [xb, H, S, D])])
        assert not any(k.startswith("rotary-caches-to-batch") for k in h.fired(h.fuse(model, "ort")))


def _repeat_interleave(h, nodes, src, name, expand):
    """stack([t, t], -1).flatten(-2) as dynamo writes it (Unsqueeze, Concat of the value with itself,
    Reshape) or repeat_interleave's Unsqueeze + Expand to 2 + Reshape; t [1, 1, S, D/2] -> [1, 1, S, D]."""
    n = h.node
    nodes.append(n("Unsqueeze", [src, "ax_last"], [f"{name}5"]))
    nodes.append(n("Expand", [f"{name}5", "pair2"], [f"{name}x"]) if expand else
                 n("Concat", [f"{name}5", f"{name}5"], [f"{name}x"], axis=-1))
    nodes.append(n("Reshape", [f"{name}x", "shape_table"], [name]))


def _roformer_block(h, expand=False):
    """RoFormer's rotary: sin/cos halves of sinusoidal_pos repeated pairwise, x*cos + rotate_every_two(x)*sin
    (rotate_every_two: stack([-x[..., 1::2], x[..., ::2]], -1).reshape_as(x)), x [B, H, S, D]."""
    n = h.node
    nodes = []
    _repeat_interleave(h, nodes, "c", "cu", expand)
    _repeat_interleave(h, nodes, "s", "su", expand)
    nodes += [n("Slice", ["x", "i1", "big", "ax3", "i2"], ["xo"]), n("Neg", ["xo"], ["nx"]),
              n("Slice", ["x", "i0", "big", "ax3", "i2"], ["xe"]),
              n("Unsqueeze", ["nx", "ax_last"], ["nu"]), n("Unsqueeze", ["xe", "ax_last"], ["eu"]),
              n("Concat", ["nu", "eu"], ["st"], axis=-1), n("Reshape", ["st", "shape_x"], ["r"]),
              n("Mul", ["x", "cu"], ["m1"]), n("Mul", ["r", "su"], ["m2"]), n("Add", ["m1", "m2"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"ax_last": i64(-1), "pair2": i64(1, 1, 1, 1, 2), "shape_table": i64(1, 1, S, D),
             "shape_x": i64(B, H, S, D), "i0": i64(0), "i1": i64(1), "i2": i64(2), "big": i64(2 ** 62),
             "ax3": i64(3)}
    inputs = [h.vi("x", [B, H, S, D]), h.vi("c", [1, 1, S, D // 2]), h.vi("s", [1, 1, S, D // 2])]
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("expand", [False, True])
def test_interleaved_rotary_with_tables_repeated_in_the_graph(h, target, expand):
    """RoFormer (hold-out 2): the tables are repeat_interleave'd in the graph from any half tables
    (here graph inputs, not even cos/sin: the rewrite is exact for any values) -> RotaryEmbedding."""
    model = _roformer_block(h, expand)
    out = h.fuse(model, target)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    r = h.rng
    feeds = {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
             "c": r.standard_normal((1, 1, S, D // 2)).astype(np.float32),
             "s": r.standard_normal((1, 1, S, D // 2)).astype(np.float32)}
    h.assert_close(model, out, feeds)


def _bmm_attention(h, seq_first_k, bias):
    """torch.nn.functional.multi_head_attention_forward (WavLM, nn.MultiheadAttention): scaled q3 [N,S,D]
    @ k^T + 3-D bias, softmax on the 3-D scores, @ v3; k^T straight from the seq-first [T, N, D] view
    (Transpose perm [1, 2, 0]) or from k3 [N, T, D]."""
    n = h.node
    N = B * H
    kname, kshape = ("kf", [S, N, D]) if seq_first_k else ("k3", [N, S, D])
    nodes = [n("Transpose", [kname], ["kt"], perm=[1, 2, 0] if seq_first_k else [0, 2, 1]),
             n("Mul", ["q3", "scale"], ["qs"]), n("MatMul", ["qs", "kt"], ["sc"])]
    inputs = [h.vi("q3", [N, S, D]), h.vi(kname, kshape), h.vi("v3", [N, S, D])]
    scores = "sc"
    if bias:
        nodes.append(n("Add", ["sc", "bias"], ["sb"]))
        inputs.append(h.vi("bias", [N, S, S]))
        scores = "sb"
    nodes += [n("Softmax", [scores], ["p"], axis=-1), n("MatMul", ["p", "v3"], ["o"])]
    return h.make_model(nodes, inputs, [h.vi("o", [N, S, D])], {"scale": np.array(D ** -0.5, np.float32)}), kname


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("seq_first_k", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_bmm_attention_without_a_4d_view_is_one_head_per_slice(h, target, seq_first_k, bias):
    """WavLM (hold-out 2): attention on [B*H, S, D] with no 4-D view anywhere -> one fused attention
    (batch B*H, one head), same numbers."""
    model, kname = _bmm_attention(h, seq_first_k, bias)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    r = h.rng
    N = B * H
    feeds = {"q3": r.standard_normal((N, S, D)).astype(np.float32),
             kname: r.standard_normal((S, N, D) if seq_first_k else (N, S, D)).astype(np.float32),
             "v3": r.standard_normal((N, S, D)).astype(np.float32)}
    if bias:
        feeds["bias"] = r.standard_normal((N, S, S)).astype(np.float32)
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("table_shape", [(1, S, D), (S, D)])
def test_rotate_half_with_constant_tables_without_the_head_axis(h, target, table_shape):
    """Pixtral's vision encoder (hold-out 2, static export): apply_rotary_pos_emb(unsqueeze_dim=0)
    folds cos/sin into constants [1, S, D] (or [S, D]) that broadcast over batch and heads."""
    n = h.node
    f = np.outer(np.arange(S), 1.0 / 100 ** (np.arange(D // 2) * 2 / D))
    f = np.concatenate([f, f], -1).reshape(table_shape)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"cos": np.cos(f).astype(np.float32), "sin": np.sin(f).astype(np.float32), "i0": i64(0),
             "ih": i64(D // 2), "big": i64(2 ** 62), "ax3": i64(3)}
    nodes = [n("Mul", ["x", "cos"], ["m1"]), n("Slice", ["x", "i0", "ih", "ax3"], ["x1"]),
             n("Slice", ["x", "ih", "big", "ax3"], ["x2"]), n("Neg", ["x2"], ["nx"]),
             n("Concat", ["nx", "x1"], ["r"], axis=-1), n("Mul", ["r", "sin"], ["m2"]), n("Add", ["m1", "m2"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", [B, H, S, D])], [h.vi("y", [B, H, S, D])], inits)
    out = h.fuse(model, target)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)})


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_position_bias_and_mask_added_in_two_steps(h, target):
    """MPNet (hold-out 2): q k^T / sqrt(D) + position_bias, then + the padding mask, then softmax:
    the two additive terms become one mask and the attention fuses, same numbers."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "sqrt_d"], ["sd"]), n("Add", ["sd", "pos_bias"], ["a1"]), n("Add", ["a1", "mask"], ["a2"]),
             n("Softmax", ["a2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(x, [B, H, S, D]) for x in ("q", "k", "v")] + [h.vi("pos_bias", [1, H, S, S]),
                                                                 h.vi("mask", [B, 1, 1, S])]
    model = h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], {"sqrt_d": np.array(D ** 0.5, np.float32)})
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    r = h.rng
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    feeds["pos_bias"] = r.standard_normal((1, H, S, S)).astype(np.float32)
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., S // 2:] = np.finfo(np.float32).min  # a padded row
    feeds["mask"] = mask
    h.assert_close(model, out, feeds)


def _seq_first_rope(h, x_shape):
    """wav2vec2-conformer's rotation: x0 [B, S, H, D] viewed seq-first (Transpose (1, 0, 2, 3)),
    rotate-half with folded tables [S, 1, 1, D] (halves concatenated on axis 3), transposed back."""
    n = h.node
    f = np.outer(np.arange(S), 1.0 / 100 ** (np.arange(D // 2) * 2 / D))
    f = np.concatenate([f, f], -1).reshape(S, 1, 1, D)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"cos": np.cos(f).astype(np.float32), "sin": np.sin(f).astype(np.float32), "i0": i64(0),
             "ih": i64(D // 2), "big": i64(2 ** 62), "ax3": i64(3)}
    nodes = [n("Transpose", ["x0"], ["x"], perm=[1, 0, 2, 3]),
             n("Mul", ["x", "cos"], ["m1"]), n("Slice", ["x", "i0", "ih", "ax3"], ["x1"]),
             n("Slice", ["x", "ih", "big", "ax3"], ["x2"]), n("Neg", ["x2"], ["nx"]),
             n("Concat", ["nx", "x1"], ["r"], axis=3), n("Mul", ["r", "sin"], ["m2"]), n("Add", ["m1", "m2"], ["y"]),
             n("Transpose", ["y"], ["yb"], perm=[1, 0, 2, 3])]
    return h.make_model(nodes, [h.vi("x0", x_shape)], [h.vi("yb", x_shape)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rotate_half_on_a_seq_first_layout(h, target):
    """wav2vec2-conformer (hold-out 2): the rotation on x [S, B, H, D] (heads view transposed (0, 1))
    with folded tables [S, 1, 1, D], halves concatenated on axis 3 -> RotaryEmbedding, same numbers."""
    model = _seq_first_rope(h, [B, S, H, D])
    out = h.fuse(model, target)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, {"x0": h.rng.standard_normal((B, S, H, D)).astype(np.float32)})


def _xsoftmax_attention(h, batched):
    """SEW-D's (older DeBERTa's) XSoftmax: where(m, 0, softmax(where(m, finfo.min, scores))) @ v, m
    [B, 1, S, S] boolean (query and key padding: a padded query row has every key masked); batched:
    the scores as DeBERTa writes them, q3 @ k3^T on [B*H, S, D] views, viewed [B, H, S, S] for the
    mask and back to [B*H, S, S] for the bmm with v3."""
    n = h.node
    fill = np.array(np.finfo(np.float32).min, np.float32)
    inits = {"fill": fill, "zero": np.array(0.0, np.float32), "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi(x, [B, H, S, D]) for x in ("q", "k", "v")] + [h.vi("m", [B, 1, S, S], elem=9)]
    if batched:
        i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
        inits.update({"v3s": i64(B * H, S, D), "v4s": i64(B, H, S, S), "p3s": i64(B * H, S, S), "o4s": i64(B, H, S, D)})
        nodes = [n("Reshape", ["q", "v3s"], ["q3"]), n("Reshape", ["k", "v3s"], ["k3"]),
                 n("Reshape", ["v", "v3s"], ["vv3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
                 n("MatMul", ["q3", "kt"], ["sc3"]), n("Mul", ["sc3", "scale"], ["ss3"]),
                 n("Reshape", ["ss3", "v4s"], ["ss"])]
    else:
        nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
                 n("Mul", ["sc", "scale"], ["ss"])]
    nodes += [n("Where", ["m", "fill", "ss"], ["sw"]), n("Softmax", ["sw"], ["p"], axis=-1),
              n("Where", ["m", "zero", "p"], ["pz"])]
    if batched:
        nodes += [n("Reshape", ["pz", "p3s"], ["p3"]), n("MatMul", ["p3", "vv3"], ["o3"]),
                  n("Reshape", ["o3", "o4s"], ["o"])]
    else:
        nodes.append(n("MatMul", ["pz", "v"], ["o"]))
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("batched", [False, True])
def test_xsoftmax_zero_fill_of_the_probabilities(h, target, batched):
    """SEW-D (hold-out 2): the probabilities zero-filled where the mask is set after a finfo.min fill
    -> one fused attention whose fully masked query rows give 0, as the original does."""
    model = _xsoftmax_attention(h, batched)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    r = h.rng
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    keep = np.ones((B, S), bool)
    keep[1, S // 2:] = False  # a padded sequence: its last query rows have every key masked
    feeds["m"] = ~(keep[:, None, :, None] & keep[:, None, None, :])
    h.assert_close(model, out, feeds)
    assert not h.run(out, feeds)[0][1, :, S // 2:].any()  # the fully masked rows are 0


def test_interleaved_rotary_tables_reshaped_onto_another_axis_are_left_alone(h):
    """Half tables repeated and then reshaped to [1, S, 1, D] (not [1, 1, S, D]) multiply x's heads
    axis, not its positions (here H == S, so the graph runs): no RotaryEmbedding, the same numbers."""
    import onnx
    from onnx import numpy_helper

    model = _roformer_block(h)
    hs = S  # as many heads as positions: the broadcast is valid, the rotation per head, not position
    for init in model.graph.initializer:
        if init.name in ("shape_table", "shape_x"):
            new = [1, S, 1, D] if init.name == "shape_table" else [B, hs, S, D]
            init.CopyFrom(numpy_helper.from_array(np.array(new, np.int64), init.name))
    for vi in (*model.graph.input, *model.graph.output):
        if vi.name in ("x", "y"):
            vi.type.tensor_type.shape.dim[1].dim_value = hs
    del model.graph.value_info[:]  # make_model's shapes were inferred for the [1, 1, S, D] tables
    onnx.checker.check_model(model)
    out = h.fuse(model, "ort")
    assert "rotary-interleaved-paired-tables" not in h.fired(out), h.fired(out)
    r = h.rng
    feeds = {"x": r.standard_normal((B, hs, S, D)).astype(np.float32),
             "c": r.standard_normal((1, 1, S, D // 2)).astype(np.float32),
             "s": r.standard_normal((1, 1, S, D // 2)).astype(np.float32)}
    h.assert_close(model, out, feeds)


def test_rotate_half_on_a_seq_first_layout_with_symbolic_heads_is_refused_in_one_line(h):
    """rotary-const-table needs static heads on a seq-first x (its Reshape writes H * D): a symbolic head count
    is refused with the check's own reason, not a TypeError from multiplying a dim name."""
    model = _seq_first_rope(h, ["b", S, "h", D])
    assert h.reasons(model, "ort", "rotary-const-table") == ["check failed: heads and head dim must be static"]
    out = h.fuse(model, "ort")
    h.assert_close(model, out, {"x0": h.rng.standard_normal((B, S, H, D)).astype(np.float32)})
