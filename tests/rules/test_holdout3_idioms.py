"""Idioms found on the third hold-out sweep (tools/holdout_specs.py HOLDOUT3, docs/holdout.md), each
as a tiny graph that failed before its fix; numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8


def _flipped_rotary(h, layout):
    """NanoChat's rotary: y = x*cos + concat(x2, -x1)*sin (rotate_half with its signs flipped), the
    tables cos/sin(concat(f, f)) unsqueezed at the head axis; x [B, H, S, D] (bhsd) or [B, S, H, D]."""
    n = h.node
    axis = 1 if layout == "bhsd" else 2
    nodes = [n("Concat", ["f", "f"], ["cat"], axis=-1), n("Cos", ["cat"], ["co"]), n("Sin", ["cat"], ["si"]),
             n("Unsqueeze", ["co", "ax_head"], ["cu"]), n("Unsqueeze", ["si", "ax_head"], ["su"]),
             n("Slice", ["x", "i0", "ih", "ax_last"], ["x1"]), n("Slice", ["x", "ih", "big", "ax_last"], ["x2"]),
             n("Neg", ["x1"], ["nx1"]), n("Concat", ["x2", "nx1"], ["r"], axis=-1),
             n("Mul", ["x", "cu"], ["c"]), n("Mul", ["r", "su"], ["s"]), n("Add", ["c", "s"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"ax_head": i64(axis), "ax_last": i64(-1), "i0": i64(0), "ih": i64(D // 2), "big": i64(2 ** 62)}
    xshape = ["batch", H, S, D] if layout == "bhsd" else ["batch", S, H, D]
    return h.make_model(nodes, [h.vi("x", xshape), h.vi("f", [1, S, D // 2])], [h.vi("y", xshape)], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_rotate_half_with_flipped_signs_is_fused(h, target, layout):
    """NanoChat (hold-out 3): concat(x2, -x1) is minus the usual rotate_half; rewritten around sign
    vectors to the usual form, the rotary rules fuse it (RoPE 0/4 on nanochat before), and the sign
    Muls then fold into the op as a negated sin cache (rotary-flipped-signs-fold): no Mul is left,
    and the one Neg reads the sin table, not x."""
    model = _flipped_rotary(h, layout)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["RotaryEmbedding"] == 1 and "Mul" not in counts and counts["Neg"] <= 1, counts
    assert h.fired(out)["rotary-flipped-signs-fold"] >= 1
    rope = next(nd for nd in out.graph.node if nd.op_type == "RotaryEmbedding")
    assert [nd.output[0] for nd in out.graph.node if nd.op_type == "Neg"] in ([], [rope.input[2]])
    f = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(D // 2) * 2 / D))[None].astype(np.float32)
    xshape = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
    feeds = {"x": h.rng.standard_normal(xshape).astype(np.float32), "f": f}
    h.assert_close(model, out, feeds)


def test_rotate_half_with_flipped_signs_is_exact_for_any_tables(h):
    """The sign rewrite alone (tables that are graph inputs, not cos/sin of one frequency table, so no
    RotaryEmbedding follows) keeps the numbers for any cos/sin."""
    n = h.node
    nodes = [n("Slice", ["x", "i0", "ih", "ax_last"], ["x1"]), n("Slice", ["x", "ih", "big", "ax_last"], ["x2"]),
             n("Neg", ["x1"], ["nx1"]), n("Concat", ["x2", "nx1"], ["r"], axis=-1),
             n("Mul", ["x", "cu"], ["c"]), n("Mul", ["r", "su"], ["s"]), n("Add", ["c", "s"], ["y"])]
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"ax_last": i64(-1), "i0": i64(0), "ih": i64(D // 2), "big": i64(2 ** 62)}
    model = h.make_model(nodes, [h.vi("x", [B, H, S, D]), h.vi("cu", [1, 1, S, D]), h.vi("su", [1, 1, S, D])],
                         [h.vi("y", [B, H, S, D])], inits)
    out = h.fuse(model, "ort")
    assert h.fired(out)["rotary-rotate-half-flipped"] >= 1
    r = h.rng
    feeds = {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
             "cu": r.standard_normal((1, 1, S, D)).astype(np.float32),
             "su": r.standard_normal((1, 1, S, D)).astype(np.float32)}
    h.assert_close(model, out, feeds)


def test_rotate_half_flipped_near_misses(h):
    """concat(x[..., :D/2], -x[..., D/2:]) (the halves in place, not swapped: no rotation) is refused
    with the reason; the usual concat(-x2, x1) is left to the rotary rules."""
    model = _flipped_rotary(h, "bhsd")
    for node in model.graph.node:  # x1 <- the second half, x2 <- the first
        if node.output[0] == "x1":
            node.input[1:3] = ["ih", "big"]
        elif node.output[0] == "x2":
            node.input[1:3] = ["i0", "ih"]
    reasons = h.reasons(model, "ort", "rotary-rotate-half-flipped")
    assert any("must be the two halves" in r for r in reasons), reasons
    assert not h.fired(h.fuse(model, "ort"))["rotary-rotate-half-flipped"]
    usual = _flipped_rotary(h, "bhsd")
    for node in usual.graph.node:  # concat(-x2, x1): Neg on the second half, first in the Concat
        if node.output[0] == "nx1":
            node.input[0] = "x2"
        elif node.output[0] == "r":
            node.input[:] = ["nx1", "x1"]
    out = h.fuse(usual, "ort")
    assert not h.fired(out)["rotary-rotate-half-flipped"] and h.ops(out)["RotaryEmbedding"] == 1


def _signed_rotary(h, d_in, d_out):
    """Mul(x, d_in) -> RotaryEmbedding-23 (caches are graph inputs) -> Mul(., d_out), x [B, H, S, D]."""
    n = h.node
    nodes = [n("Mul", ["x", "d_in"], ["xd"]), n("RotaryEmbedding", ["xd", "cs", "sn"], ["r"], interleaved=0),
             n("Mul", ["r", "d_out"], ["y"])]
    inputs = [h.vi("x", [B, H, S, D]), h.vi("cs", [B, S, D // 2]), h.vi("sn", [B, S, D // 2])]
    inits = {"d_in": np.asarray(d_in, np.float32), "d_out": np.asarray(d_out, np.float32)}
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits)


def _signed_rotary_feeds(h):
    r = h.rng
    return {"x": r.standard_normal((B, H, S, D)).astype(np.float32),
            "cs": r.standard_normal((B, S, D // 2)).astype(np.float32),
            "sn": r.standard_normal((B, S, D // 2)).astype(np.float32)}


def test_flipped_signs_fold_into_the_rotary_op_for_any_caches(h):
    """d * RotaryEmbedding(d*x, cos, sin) == RotaryEmbedding(x, cos, -sin) for d = [1.., -1..] and
    any caches (here random, not a unit circle): the two Muls go, one Neg on sin comes."""
    sign = [1.0] * (D // 2) + [-1.0] * (D // 2)
    model = _signed_rotary(h, sign, np.reshape(sign, (1, 1, 1, D)))
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out) == {"RotaryEmbedding": 1, "Neg": 1}, h.ops(out)
    h.assert_close(model, out, _signed_rotary_feeds(h), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("signs", ["alternating", "outer differs"])
def test_flipped_signs_fold_near_misses(h, signs):
    """Signs that are not [1.., -1..] on both sides (alternating ones; the outer Mul keeping the
    second half) are no rotation by -theta: refused with the reason, the Muls stay."""
    half = [1.0] * (D // 2) + [-1.0] * (D // 2)
    d_in, d_out = ([1.0, -1.0] * (D // 2), [1.0, -1.0] * (D // 2)) if signs == "alternating" else (half, half[::-1])
    model = _signed_rotary(h, d_in, d_out)
    reasons = h.reasons(model, "onnx", "rotary-flipped-signs-fold")
    assert any("must keep the first half and negate the second" in r for r in reasons), reasons
    out = h.fuse(model, "onnx", level=2)
    assert h.ops(out)["Mul"] == 2 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _signed_rotary_feeds(h))


def _differential_attention(h, d=D):
    """DiffLlama's two attention calls with one q and k over two values, as the dynamo export writes
    them after its CSE: one scaled, masked softmax read by two P.V MatMuls, the outputs joined."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
             n("Softmax", ["sm"], ["p"], axis=-1),
             n("MatMul", ["p", "v1"], ["o1"]), n("MatMul", ["p", "v2"], ["o2"]),
             n("Concat", ["o1", "o2"], ["o"], axis=-1)]
    inputs = [h.vi(name, ["batch", H, S, d]) for name in ("q", "k", "v1", "v2")] + [h.vi("mask", ["batch", 1, S, S])]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", H, S, 2 * d])],
                        {"scale": np.array(d ** -0.5, np.float32)})


def _differential_feeds(h, d=D):
    r = h.rng
    feeds = {name: r.standard_normal((B, H, S, d)).astype(np.float32) for name in ("q", "k", "v1", "v2")}
    mask = np.zeros((B, 1, S, S), np.float32)
    mask[..., np.triu_indices(S, 1)[0], np.triu_indices(S, 1)[1]] = -1e9
    feeds["mask"] = mask
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_probabilities_shared_by_two_value_matmuls_are_fused(h, target):
    """DiffLlama (hold-out 3): the softmax has two readers, so the attention rules refused it (an
    intermediate escapes; attention 0/2 on diffllama). merge-shared-probabilities makes it one P.V
    MatMul over [v1 | v2], which fuses as one attention of v head size 2D; numbers unchanged."""
    model = _differential_attention(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert counts["Attention"] == 1 and "Softmax" not in counts, counts
    h.assert_close(model, out, _differential_feeds(h))


def _gathered_mask_attention(h, d, keys=S, form="gathered"):
    """The differential attention with a padding mask gathered from a [B, T] attention_mask
    (GatherND of its boolean at (b, j), as Hugging Face's masks are built), filled with finfo.min;
    ``keys`` != S makes K/V longer than q (a cached attention's shape). ``form``: "expanded", the
    same mask as (1 - attention_mask[:, None, None, :]) * finfo.min (no GatherND: transformers 4.x's
    _expand_mask); "reversed", GatherND at (b, T - 1 - j) (not the key padding: key j reads key
    T - 1 - j's entry)."""
    n = h.node
    b_idx, j_idx = np.meshgrid(np.arange(B), np.arange(keys), indexing="ij")
    if form == "reversed":
        j_idx = keys - 1 - j_idx
    idx = np.stack([b_idx, j_idx], -1).reshape(B, 1, 1, keys, 2).astype(np.int64)
    masking = [n("Cast", ["attention_mask"], ["am"], to=9), n("GatherND", ["am", "idx"], ["g"]),
               n("Where", ["g", "zero", "fill"], ["mask"])]
    if form == "expanded":
        masking = [n("Cast", ["attention_mask"], ["amf"], to=1), n("Unsqueeze", ["amf", "ax12"], ["am4"]),
                   n("Sub", ["one", "am4"], ["inv"]), n("Mul", ["inv", "fill"], ["mask"])]
    nodes = masking + [
             n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
             n("MatMul", ["p", "v1"], ["o1"]), n("MatMul", ["p", "v2"], ["o2"]), n("Concat", ["o1", "o2"], ["o"], axis=-1)]
    inputs = [h.vi("q", [B, H, S, d])] + [h.vi(name, [B, H, keys, d]) for name in ("k", "v1", "v2")]
    inputs.append(h.vi("attention_mask", [B, keys], 7))
    inits = {"scale": np.array(d ** -0.5, np.float32), "idx": idx, "zero": np.array(0.0, np.float32),
             "fill": np.array(np.finfo(np.float32).min, np.float32), "one": np.array(1.0, np.float32),
             "ax12": np.array([1, 2], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, 2 * d])], inits)


def _gathered_mask_feeds(h, d, keys=S):
    r = h.rng
    feeds = {"q": r.standard_normal((B, H, S, d)).astype(np.float32)}
    feeds.update({name: r.standard_normal((B, H, keys, d)).astype(np.float32) for name in ("k", "v1", "v2")})
    am = np.ones((B, keys), np.int64)
    am[-1, keys // 2:] = 0
    feeds["attention_mask"] = am
    return feeds


@pytest.mark.parametrize("d", [16, 64])
def test_value_halves_split_for_the_trt_plugin(h, d):
    """At trt -O4 the attention of v head size 2D becomes two of head size D over V's halves (the
    FusedAttention plugin takes one head size), where D is one of the plugin's head sizes (64) and
    the mask is gathered from the attention mask input; V's Concat and the merge pass's Split of the
    output cancel against the split. At D = 16, and at ort / onnx -O3 (one Attention-23), it stays
    one op. Numbers against the original in ORT."""
    import onnx_fuse

    model = _gathered_mask_attention(h, d)
    res = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    out = res.to_proto()
    counts = h.ops(out)
    if d == 64:   # both halves the plugin's (fused-attention-trt-probed: two Attention-23 before)
        assert counts["onnx_fuse::FusedAttention"] == 2 and "Attention" not in counts, counts
    else:
        assert counts["Attention"] == 1, counts
    assert "Softmax" not in counts, counts
    assert res.report.rule_fires.get("attention-split-value-heads", 0) == (1 if d == 64 else 0)
    if d == 64:
        assert "Split" not in counts and counts["Concat"] <= 1, counts
    _assert_unpadded_close(h, model, out, _gathered_mask_feeds(h, d))
    for target in ("ort", "onnx"):
        assert h.ops(h.fuse(model, target))["Attention"] == 1


@pytest.mark.parametrize("form", ["expanded", "reversed"])
def test_value_halves_split_where_the_mask_values_are_the_key_padding(h, form):
    """The split asks padding_mask() (the mask cone run with attention_mask all ones and with keys
    dropped), not for a GatherND among the mask's producers: the key padding written without a
    GatherND is split, a GatherND that reads other keys' entries is not (both the other way round
    with the GatherND stand-in). Numbers against the original in ORT either way."""
    import onnx_fuse

    model = _gathered_mask_attention(h, 64, form=form)
    res = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    out = res.to_proto()
    split = form == "expanded"
    if split:   # the halves the plugin's (fused-attention-trt-probed), the mask proven the same way
        assert h.ops(out)["onnx_fuse::FusedAttention"] == 2 and "Attention" not in h.ops(out), h.ops(out)
    else:
        assert h.ops(out)["Attention"] == 1, h.ops(out)
    assert res.report.rule_fires.get("attention-split-value-heads", 0) == (1 if split else 0)
    _assert_unpadded_close(h, model, out, _gathered_mask_feeds(h, 64))


def _assert_unpadded_close(h, model, out, feeds):
    """Outputs [B, H, S, .] equal on the unpadded query rows (FusedAttention zeroes padded ones)."""
    keep = feeds["attention_mask"].astype(bool)
    ref, got = (np.moveaxis(h.run(m, feeds)[0], 2, 1)[keep] for m in (model, out))
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", ["graph-input mask", "more keys than queries"])
def test_value_halves_kept_where_the_plugin_cannot_take_them(h, case):
    """A mask that is a graph input (not gathered from an attention mask) or K/V longer than q (a
    cache's shape): FusedAttention would take neither half, so one Attention-23 stays; numbers
    unchanged."""
    import onnx_fuse

    if case == "graph-input mask":
        model, feeds = _differential_attention(h, 64), _differential_feeds(h, 64)
    else:
        model, feeds = _gathered_mask_attention(h, 64, keys=S + 2), _gathered_mask_feeds(h, 64, keys=S + 2)
    res = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    out = res.to_proto()
    assert h.ops(out)["Attention"] == 1 and "attention-split-value-heads" not in res.report.rule_fires
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("sizes", [(4, 4), (2, 6)])
def test_split_of_concat(h, sizes):
    """split-of-concat (trt -O4): Split(Concat(a, b)) at the Concat's seam gives a and b back; a Split
    elsewhere is refused with the reason. Numbers against ORT."""
    n = h.node
    nodes = [n("Concat", ["a", "b"], ["c"], axis=-1), n("Split", ["c", "sizes"], ["y1", "y2"], axis=-1),
             n("Mul", ["y1", "two"], ["z1"]), n("Mul", ["y2", "two"], ["z2"])]
    model = h.make_model(nodes, [h.vi("a", [B, 4]), h.vi("b", [B, 4])], [h.vi("z1", [B, sizes[0]]), h.vi("z2", [B, sizes[1]])],
                         {"sizes": np.array(sizes, np.int64), "two": np.array(2.0, np.float32)})
    out = h.fuse(model, "trt", level=4)
    seam = sizes == (4, 4)
    assert ("Split" in h.ops(out)) != seam, h.ops(out)
    if not seam:
        assert any("cut at the Concat's seam" in r for r in h.reasons(model, "trt", "split-of-concat"))
    h.assert_close(model, out, {x: h.rng.standard_normal((B, 4)).astype(np.float32) for x in "ab"})


def test_value_split_near_miss(h):
    """v head size 3D (V three heads wide) is not split: one attention, numbers unchanged."""
    import onnx_fuse

    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Softmax", ["sc"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    model = h.make_model(nodes, [h.vi("q", [B, H, S, 64]), h.vi("k", [B, H, S, 64]), h.vi("v", [B, H, S, 192])],
                         [h.vi("o", [B, H, S, 192])])
    res = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    out = res.to_proto()
    assert h.ops(out)["Attention"] == 1 and "attention-split-value-heads" not in res.report.rule_fires
    r = h.rng
    h.assert_close(model, out, {"q": r.standard_normal((B, H, S, 64)).astype(np.float32),
                                "k": r.standard_normal((B, H, S, 64)).astype(np.float32),
                                "v": r.standard_normal((B, H, S, 192)).astype(np.float32)})


def test_shared_probabilities_unfused_without_the_merge(h):
    """The same graph with the pass disabled keeps its softmax (what every target did before)."""
    import onnx_fuse

    out = onnx_fuse.optimize(_differential_attention(h), level=3, target="ort",
                             disable=["merge-shared-probabilities"]).to_proto()
    assert "Attention" not in h.ops(out) and h.ops(out)["Softmax"] == 1


def _decomposed_rel_pos(h, view=(-1, 2, 2, 2, 2), computed=False):
    """ViTDet / SAM attention on [N, S, D] (N = B*heads, S = 2x2 window positions): the scores viewed
    [N, h, w, h, w], rel_h [N, h, w, h, 1] and rel_w [N, h, w, 1, w] added there, viewed back. computed:
    the view shapes from the scores' Shape, as TorchScript writes them (not constants)."""
    n = h.node
    N = B * H
    nodes = [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("Mul", ["q3", "scale"], ["qs"]),
             n("MatMul", ["qs", "kt"], ["sc"])]
    if computed:
        nodes += [n("Shape", ["sc"], ["shp"], start=0, end=1),
                  n("Concat", ["shp", "tail5"], ["view5"], axis=0), n("Concat", ["shp", "tail3"], ["view3"], axis=0)]
    nodes += [n("Reshape", ["sc", "view5"], ["v5"]),
             n("Add", ["v5", "rel_h"], ["a1"]), n("Add", ["a1", "rel_w"], ["a2"]),
             n("Reshape", ["a2", "view3"], ["sb"]), n("Softmax", ["sb"], ["p"], axis=-1),
             n("MatMul", ["p", "v3"], ["o"])]
    inputs = [h.vi(name, ["n", S, D]) for name in ("q3", "k3", "v3")] + [
        h.vi("rel_h", ["n", 2, 2, 2, 1]), h.vi("rel_w", ["n", 2, 2, 1, 2])]
    inits = {"scale": np.array(D ** -0.5, np.float32)}
    inits.update({"tail5": np.array(view[1:], np.int64), "tail3": np.array([S, S], np.int64)} if computed else
                 {"view5": np.array(view, np.int64), "view3": np.array([-1, S, S], np.int64)})
    return h.make_model(nodes, inputs, [h.vi("o", ["n", S, D])], inits), N


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("computed", [False, True])
def test_score_terms_added_in_a_finer_view_are_fused(h, target, computed):
    """ViTDet (hold-out 3): the relative-position terms are added to the scores viewed [N, h, w, h, w]
    (attention 0/2 before, dynamo and TorchScript). scores-bias-in-view moves them onto the [N, S, T]
    scores as one bias."""
    model, N = _decomposed_rel_pos(h, computed=computed)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Softmax" not in counts and h.fired(out)["scores-bias-in-view"] >= 1, counts
    r = h.rng
    feeds = {name: r.standard_normal((N, S, D)).astype(np.float32) for name in ("q3", "k3", "v3")}
    feeds["rel_h"] = r.standard_normal((N, 2, 2, 2, 1)).astype(np.float32)
    feeds["rel_w"] = r.standard_normal((N, 2, 2, 1, 2)).astype(np.float32)
    h.assert_close(model, out, feeds)


def _key_view_scores(h, softmax=True):
    """SqueezeBERT's scores: K^T is the view [B, H, D, T] of a channels-first projection [B, H*D, T]
    (no Transpose), q [B, H, S, D]; with softmax, the whole attention over v [B, H, T, D]."""
    n = h.node
    nodes = [n("Reshape", ["kc", "heads"], ["kd"]), n("MatMul", ["q", "kd"], ["sc"]),
             n("Div", ["sc", "root"], ["sd"])]
    inits = {"heads": np.array([0, H, D, -1], np.int64), "root": np.array(D ** 0.5, np.float32)}
    inputs = [h.vi("q", ["batch", H, S, D]), h.vi("kc", ["batch", H * D, S])]
    if not softmax:
        return h.make_model(nodes, inputs, [h.vi("sd", ["batch", H, S, S])], inits)
    nodes += [n("Add", ["sd", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs += [h.vi("v", ["batch", H, S, D]), h.vi("mask", ["batch", 1, 1, S])]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_key_written_as_a_channels_first_view_is_fused(h, target):
    """SqueezeBERT (hold-out 3): K^T is a Reshape of the Conv1d projection, not a Transpose, so the
    attention fragment refused it (attention 0/2). scores-key-view passes it on as a Transpose pair."""
    model = _key_view_scores(h)
    out = h.fuse(model, target)
    # the Transpose pair scores-key-view emits is folded again by fold-layout-chains (cleanup after the
    # rules), so its nodes no longer carry the rule's name: the attention op is the evidence
    ops = h.ops(out)
    assert "Softmax" not in ops and any(o.endswith("Attention") for o in ops), ops
    r = h.rng
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[-1, ..., S // 2:] = -1e9
    feeds = {"q": r.standard_normal((B, H, S, D)).astype(np.float32),
             "kc": r.standard_normal((B, H * D, S)).astype(np.float32),
             "v": r.standard_normal((B, H, S, D)).astype(np.float32), "mask": mask}
    h.assert_close(model, out, feeds)


def test_key_view_pair_is_removed_without_attention(h):
    """Scores that are no attention's (no softmax after them): the Transpose pair is removed again."""
    model = _key_view_scores(h, softmax=False)
    out = h.fuse(model, "ort")
    assert "Transpose" not in h.ops(out), h.ops(out)
    r = h.rng
    h.assert_close(model, out, {"q": r.standard_normal((B, H, S, D)).astype(np.float32),
                                "kc": r.standard_normal((B, H * D, S)).astype(np.float32)})


def _channels_first_attention(h):
    """SqueezeBERT's attention end to end: q, k, v channels-first [B, H*D, T] (Conv1d projections)
    viewed [B, H, D, T]; q and v permuted to [B, H, T, D], k read as K^T straight from its view;
    the context permuted back to [B, H, D, T] and viewed [B, H*D, T]. No mask (the lowerings read a
    mask's target shape from q, which would keep q's permutation alive until the final cleanup)."""
    n = h.node
    nodes = [n("Reshape", [f"{x}c", "heads"], [f"{x}d"]) for x in "qkv"]
    nodes += [n("Transpose", ["qd"], ["q"], perm=[0, 1, 3, 2]), n("Transpose", ["vd"], ["v"], perm=[0, 1, 3, 2]),
              n("MatMul", ["q", "kd"], ["sc"]), n("Div", ["sc", "root"], ["sd"]),
              n("Softmax", ["sd"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"]),
              n("Transpose", ["o"], ["ot"], perm=[0, 1, 3, 2]), n("Reshape", ["ot", "merge"], ["y"])]
    inits = {"heads": np.array([0, H, D, -1], np.int64), "merge": np.array([0, H * D, -1], np.int64),
             "root": np.array(D ** 0.5, np.float32)}
    inputs = [h.vi(f"{x}c", ["batch", H * D, S]) for x in "qkv"]
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", H * D, S])], inits)


@pytest.mark.parametrize("target", ["ort", "trt"])
def test_channels_first_head_views_become_transposes(h, target):
    """The fused op takes q, k, v as [B, T, H*D]: each channels-first view, permutation and head merge
    the lowering leaves (and the split, permutation and view back) is one Transpose(x, [0, 2, 1])
    (heads-view-channels-last, rules/layout/heads_channels.yaml; the way back by the layout-chain fold): at trt no Reshape is left,
    4 Transposes (q, k, v and the output: the unfused graph read K^T from its view, the fused op
    needs K like q), and at ort too: the lowering gives MultiHeadAttention's output q's [B, T, H*D],
    which proves the way back (it had a dtype only and kept its Reshapes). Numbers against the
    original in ORT."""
    import onnx_fuse

    model = _channels_first_attention(h)
    res = onnx_fuse.optimize(model, level=3, target=target)
    out = res.to_proto()
    counts, fires = h.ops(out), res.report.rule_fires
    assert "Softmax" not in counts and fires.get("heads-view-channels-last") == 3, (counts, fires)
    # the way back is folded by passes/layout_chains.py (no rule since session 19)
    assert "heads-view-channels-first" not in fires and "Reshape" not in counts, counts
    assert counts["Transpose"] == 4, counts
    r = h.rng
    h.assert_close(model, out, {f"{x}c": r.standard_normal((B, H * D, S)).astype(np.float32) for x in "qkv"})


def test_channels_first_view_near_miss(h):
    """A view that does not split x's channels ([B, C, T] -> [B, 2, C/4, 2T]: it moves data across
    T), permuted and merged to [B, T, C] like the glue, is no Transpose of x: refused with the
    reason, numbers unchanged."""
    n = h.node
    c = H * D
    nodes = [n("Reshape", ["x", "split"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 3, 1, 2]),
             n("Reshape", ["t", "merge"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", [B, c, S])], [h.vi("y", [B, S, c])],
                         {"split": np.array([B, 2, c // 4, 2 * S], np.int64), "merge": np.array([B, S, c], np.int64)})
    reasons = h.reasons(model, "ort", "heads-view-channels-last")
    assert any("the view must split x's channels into heads" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Reshape" in h.ops(out), h.ops(out)
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, c, S)).astype(np.float32)})


def _einsum_attention(h):
    """Funnel's attention written with einsum: scores einsum('bind,bjnd->bnij', q, k) + mask, softmax,
    output einsum('bnij,bjnd->bind', p, v); q, k, v [B, S, H, D] as the projections' views."""
    n = h.node
    nodes = [n("Mul", ["q", "scale"], ["qs"]), n("Einsum", ["qs", "k"], ["sc"], equation="bind,bjnd->bnij"),
             n("Add", ["sc", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
             n("Einsum", ["p", "v"], ["o"], equation="bnij,bjnd->bind")]
    inputs = [h.vi(name, ["batch", S, H, D]) for name in ("q", "k", "v")] + [h.vi("mask", ["batch", 1, 1, S])]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", S, H, D])], {"scale": np.array(D ** -0.5, np.float32)})


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_einsum_attention_is_fused(h, target):
    """Funnel (hold-out 3): attention 0/2 with its einsums; einsum-to-matmul writes them as the MatMuls
    the attention rules take."""
    model = _einsum_attention(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Einsum" not in counts and "Softmax" not in counts, counts
    r = h.rng
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[-1, ..., S // 2:] = -1e9
    feeds = {name: r.standard_normal((B, S, H, D)).astype(np.float32) for name in ("q", "k", "v")}
    feeds["mask"] = mask
    h.assert_close(model, out, feeds)


def _subtracted_mask(h, stabilizer=False):
    """Funnel's scores with an attention_mask: q k^T + position term + token-type term, minus
    INF * (1 - mask) (INF = 1e6), softmax, @ v. stabilizer: softmax(x - max(x)) instead of a mask."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Add", ["sc", "pos"], ["a1"]), n("Add", ["a1", "tt"], ["a2"])]
    if stabilizer:
        nodes += [n("ReduceMax", ["a2", "ax_last"], ["m"], keepdims=1)]
    else:
        nodes += [n("Cast", ["keep"], ["kf"], to=h.F32), n("Sub", ["one", "kf"], ["off"]),
                  n("Unsqueeze", ["off", "ax12"], ["off4"]), n("Mul", ["off4", "inf"], ["m"])]
    nodes += [n("Sub", ["a2", "m"], ["d"]), n("Softmax", ["d"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(name, ["batch", H, S, D]) for name in ("q", "k", "v")] + [
        h.vi("pos", ["batch", H, S, S]), h.vi("tt", ["batch", H, S, S])]
    if not stabilizer:
        inputs.append(h.vi("keep", ["batch", S], 7))  # int64 attention_mask
    inits = {"one": np.array(1.0, np.float32), "inf": np.array(1e6, np.float32),
             "ax12": np.array([1, 2], np.int64), "ax_last": np.array([-1], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", H, S, D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_mask_subtracted_before_the_softmax_is_fused(h, target):
    """Funnel with an attention_mask (hold-out 3, a static export with the mask input): softmax(s + pos +
    tt - INF * (1 - mask)) was not a mask form the rules took (attention 0/2); softmax-sub-mask makes
    the Sub an Add of the negated term and attention-scores-bias-sum sums the three terms."""
    model = _subtracted_mask(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert "Softmax" not in counts and h.fired(out)["softmax-sub-mask"] >= 1, counts
    r = h.rng
    feeds = {name: r.standard_normal((B, H, S, D)).astype(np.float32) for name in ("q", "k", "v")}
    feeds.update(pos=r.standard_normal((B, H, S, S)).astype(np.float32),
                 tt=r.standard_normal((B, H, S, S)).astype(np.float32))
    keep = np.ones((B, S), np.int64)
    keep[-1, S // 2:] = 0
    feeds["keep"] = keep
    h.assert_close(model, out, feeds)


def test_softmax_stabilizer_is_not_a_mask(h):
    """softmax(x - max(x)) is left alone (it reads the scores: no additive mask)."""
    model = _subtracted_mask(h, stabilizer=True)
    reasons = h.reasons(model, "ort", "softmax-sub-mask")
    assert any("stabilizer" in r for r in reasons), reasons
