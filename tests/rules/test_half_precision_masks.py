"""Mask constants in half precision: float16's lowest finite value is -65504, where one unit in
the last place is 32, so float32 habits break. A bias added to a finfo.min mask can overflow to
-inf (attention-scores-bias-sum), and a fill threshold of -1e30 can never be met by a float16
constant (masked-softmax-zero-fill). Each case runs the graph before and after, in ONNX Runtime or
(where ORT's CPU provider widens float16 to float32, or has no bfloat16 kernel) in the ONNX
reference evaluator, and compares every row, fully masked ones included."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import onnx_fuse

F16, BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16
B, H, S, D = 2, 2, 4, 8


def _fuse(model, target, level=3, **kw):
    """The pipeline and the report's fires per rule (a rule whose nodes a later fusion replaced
    leaves no metadata behind)."""
    res = onnx_fuse.optimize(model, level=level, target=target, **kw)
    out = res.to_proto()
    onnx.checker.check_model(out)
    return out, res.report.rule_fires


def _bias_then_mask(h, elem=F16):
    """MPNet's scores in float16: softmax(q k^T / sqrt(D) + position_bias + mask) @ v, the two
    additive terms added one after the other."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Div", ["sc", "sqrt_d"], ["sd"]), n("Add", ["sd", "pos_bias"], ["a1"]),
             n("Add", ["a1", "mask"], ["a2"]), n("Softmax", ["a2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [
        h.vi("pos_bias", [1, H, S, S], elem), h.vi("mask", [B, 1, 1, S], elem)]
    np_t = np.float16 if elem == F16 else ml_dtypes.bfloat16
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], elem)], {"sqrt_d": np.array(D ** 0.5, np_t)})


def _bias_then_mask_feeds():
    """Scores near 2.8 (q = k = ones plus noise), pos_bias -17: s + pos_bias is about -14, which
    finfo(float16).min absorbs, but pos_bias + finfo.min is -inf. Batch 1 masks every key."""
    r = np.random.default_rng(3)
    qk = {x: (1 + 0.05 * r.standard_normal((B, H, S, D))).astype(np.float16) for x in ("q", "k")}
    mask = np.zeros((B, 1, 1, S), np.float16)
    mask[1] = np.finfo(np.float16).min
    return {**qk, "v": r.standard_normal((B, H, S, D)).astype(np.float16),
            "pos_bias": np.full((1, H, S, S), -17, np.float16), "mask": mask}


def _varied_bias_feeds():
    """As above with a position bias that differs per key (-17 +- 4): a fully masked row of the
    original in ORT (which adds in float32) is softmax(s + b), which a bias that lost b shows."""
    feeds = _bias_then_mask_feeds()
    r = np.random.default_rng(4)
    feeds["pos_bias"] = (-17 + 4 * r.uniform(-1, 1, (1, H, S, S))).astype(np.float16)
    return feeds


def test_float16_bias_and_mask_are_summed_clamped_on_ort(h):
    """ort: each term raised to mask_floor / 3 and then summed (attention-scores-bias-sum-half), so
    the sum cannot overflow; the attention fuses (MultiHeadAttention) and every row matches the
    original in ORT, the fully masked batch included, with a constant and a per-key bias."""
    model = _bias_then_mask(h)
    out, fires = _fuse(model, "ort")
    assert fires.get("attention-scores-bias-sum-half") == 1 and "attention-scores-bias-sum" not in fires, fires
    assert h.ops(out)["com.microsoft::MultiHeadAttention"] == 1 and "Softmax" not in h.ops(out), h.ops(out)
    for feeds in (_bias_then_mask_feeds(), _varied_bias_feeds()):
        h.assert_close(model, out, feeds, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_float16_bias_is_not_summed_on_attention_23_targets(h, target):
    """onnx and trt lower to Attention-23, which takes the bias in float16: b + F keeps b only to
    steps of 16, and ORT's fully masked rows (softmax(s + b)) would differ. The two additions keep
    their order there, with the reason; every row matches the original."""
    model = _bias_then_mask(h)
    out, fires = _fuse(model, target)
    for feeds in (_bias_then_mask_feeds(), _varied_bias_feeds()):
        h.assert_close(model, out, feeds, atol=2e-3, rtol=2e-3)
    assert not {"attention-scores-bias-sum", "attention-scores-bias-sum-half"} & set(fires), fires
    assert any("float16 scores: attention-scores-bias-sum-half (ort)" in r
               for r in h.reasons(model, target, "attention-scores-bias-sum"))


def test_float16_clamped_sum_in_float16_arithmetic(h):
    """The clamped sum alone (the recognizers off), in the ONNX reference evaluator, which adds in
    float16 (ORT's CPU provider widens these Adds): rows with a kept key equal the original's, and
    the fully masked batch is finite; with the constant bias it is the mean of V, as the original's
    (the plain sum b + finfo.min overflowed to -inf and made it NaN)."""
    from onnx.reference import ReferenceEvaluator

    model = _bias_then_mask(h)
    out, fires = _fuse(model, "ort", disable=["attention"])
    assert fires.get("attention-scores-bias-sum-half") == 1, fires
    for feeds, whole in ((_bias_then_mask_feeds(), True), (_varied_bias_feeds(), False)):
        ref = ReferenceEvaluator(model).run(None, feeds)[0].astype(np.float32)
        got = ReferenceEvaluator(out).run(None, feeds)[0].astype(np.float32)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got[0], ref[0], atol=2e-3, rtol=2e-3)  # batch 0 keeps every key
        if whole:
            mean_v = np.broadcast_to(feeds["v"][1].astype(np.float32).mean(1, keepdims=True), ref[1].shape)
            np.testing.assert_allclose(ref[1], mean_v, atol=2e-3)
            np.testing.assert_allclose(got, ref, atol=2e-3, rtol=2e-3)


def test_float16_clamp_keeps_terms_above_the_floor(h):
    """A mask value between float16's lowest and F = mask_floor / 3 (-30000 on one key of batch 0,
    whose other keys are kept) is raised to F: that key is masked in both graphs, and batch 0
    matches the original in ORT and in the float16 evaluator."""
    from onnx.reference import ReferenceEvaluator

    model = _bias_then_mask(h)
    out, _ = _fuse(model, "ort", disable=["attention"])
    feeds = _varied_bias_feeds()
    feeds["mask"][0, ..., 1] = -30000  # one key of batch 0 masked by a value between F and lowest
    for run in (lambda m: h.run(m, feeds)[0], lambda m: ReferenceEvaluator(m).run(None, feeds)[0]):
        ref, got = run(model).astype(np.float32), run(out).astype(np.float32)
        np.testing.assert_allclose(got[0], ref[0], atol=2e-3, rtol=2e-3)


def test_bfloat16_bias_and_mask_are_still_summed(h):
    """bfloat16 has float32's range: finfo.min absorbs any score plus bias both ways round, so the
    rule keeps firing and the attention fuses. ORT's CPU provider has no bfloat16 MatMul: both
    graphs run in the ONNX reference evaluator (bfloat16 arithmetic), every row compared."""
    from onnx.reference import ReferenceEvaluator

    model = _bias_then_mask(h, BF16)
    out, fires = _fuse(model, "onnx")
    assert fires.get("attention-scores-bias-sum") == 1, fires
    assert h.ops(out)["Attention"] == 1 and "Softmax" not in h.ops(out), h.ops(out)
    bf16 = ml_dtypes.bfloat16
    feeds = {k: v.astype(np.float32).astype(bf16) for k, v in _bias_then_mask_feeds().items()}
    feeds["mask"][1] = ml_dtypes.finfo(bf16).min
    ref = ReferenceEvaluator(model).run(None, feeds)[0].astype(np.float32)
    got = ReferenceEvaluator(out).run(None, feeds)[0].astype(np.float32)
    np.testing.assert_allclose(got, ref, atol=5e-2, rtol=5e-2)


def _xsoftmax(h, elem):
    """SEW-D's XSoftmax in half precision: where(m, 0, softmax(where(m, finfo.min, s))) @ v with
    finfo.min of the scores' dtype, m [B, 1, S, S] boolean (a padded query has every key masked)."""
    n = h.node
    np_t = np.float16 if elem == F16 else ml_dtypes.bfloat16
    inits = {"fill": np.array(ml_dtypes.finfo(np_t).min, np_t), "zero": np.array(0.0, np_t),
             "scale": np.array(D ** -0.5, np_t)}
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Where", ["m", "fill", "ss"], ["sw"]),
             n("Softmax", ["sw"], ["p"], axis=-1), n("Where", ["m", "zero", "p"], ["pz"]),
             n("MatMul", ["pz", "v"], ["o"])]
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [h.vi("m", [B, 1, S, S], TensorProto.BOOL)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], elem)], inits)


def _xsoftmax_feeds(np_t):
    r = np.random.default_rng(5)
    feeds = {x: r.standard_normal((B, H, S, D)).astype(np.float32).astype(np_t) for x in ("q", "k", "v")}
    keep = np.ones((B, S), bool)
    keep[1, S // 2:] = False  # a padded sequence: its last query rows have every key masked
    feeds["m"] = ~(keep[:, None, :, None] & keep[:, None, None, :])
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_float16_xsoftmax_fill_is_its_own_lowest_float(h, target):
    """finfo(float16).min (-65504) is the lowest float16, though not <= -1e30: the zero fill is
    recognized and the attention fuses, with 0 on the fully masked rows as the original."""
    model = _xsoftmax(h, F16)
    out, fires = _fuse(model, target)
    assert fires.get("masked-softmax-zero-fill") == 1, fires
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    feeds = _xsoftmax_feeds(np.float16)
    h.assert_close(model, out, feeds, atol=2e-3, rtol=2e-3)
    assert not h.run(out, feeds)[0][1, :, S // 2:].any()


def test_bfloat16_xsoftmax_fill_fuses_and_matches_in_bfloat16_arithmetic(h):
    """bfloat16's finfo.min: recognized, and the fused graph gives the original's numbers in the
    ONNX reference evaluator (ORT's CPU provider has no bfloat16 MatMul), every row compared."""
    from onnx.reference import ReferenceEvaluator

    model = _xsoftmax(h, BF16)
    out, fires = _fuse(model, "onnx")
    assert fires.get("masked-softmax-zero-fill") == 1, fires
    assert h.ops(out)["Attention"] == 1 and "Softmax" not in h.ops(out), h.ops(out)
    feeds = _xsoftmax_feeds(ml_dtypes.bfloat16)
    ref = ReferenceEvaluator(model).run(None, feeds)[0].astype(np.float32)
    got = ReferenceEvaluator(out).run(None, feeds)[0].astype(np.float32)
    np.testing.assert_allclose(got, ref, atol=5e-2, rtol=5e-2)
    assert not got[1, :, S // 2:].any()


def test_float16_fill_far_from_the_lowest_float_is_refused(h):
    """-1e4 is a large float16 but not its lowest: near miss, the check's reason."""
    model = _xsoftmax(h, F16)
    fill = next(i for i in model.graph.initializer if i.name == "fill")
    fill.CopyFrom(numpy_helper.from_array(np.array(-1e4, np.float16), "fill"))
    assert ("check failed: the scores must be filled with (nearly) the lowest float of their dtype"
            in h.reasons(model, "onnx", "masked-softmax-zero-fill"))
    assert "masked-softmax-zero-fill" not in _fuse(model, "onnx")[1]


def test_bfloat16_constants_are_numbers_to_the_rules(h):
    """bfloat16 arrays are NumPy kind 'V' (ml_dtypes): a scalar constraint compares the rule's
    number as bfloat16 stores it (0.044715 -> 0.04468, beyond rtol 1e-4), and bfloat16 constants
    are numeric (they were refused as "not numeric"): GPT-2's tanh GELU fuses in bfloat16."""
    from onnx.reference import ReferenceEvaluator

    n, bf16 = h.node, ml_dtypes.bfloat16
    nodes = [n("Pow", ["x", "three"], ["p"]), n("Mul", ["p", "coef"], ["pc"]), n("Add", ["x", "pc"], ["a"]),
             n("Mul", ["a", "k"], ["ak"]), n("Tanh", ["ak"], ["t"]), n("Add", ["t", "one"], ["t1"]),
             n("Mul", ["x", "half"], ["xh"]), n("Mul", ["xh", "t1"], ["y"])]
    inits = {k: np.array(v, bf16) for k, v in
             {"three": 3.0, "coef": 0.044715, "k": np.sqrt(2 / np.pi), "one": 1.0, "half": 0.5}.items()}
    model = h.make_model(nodes, [h.vi("x", ["b", 16], BF16)], [h.vi("y", ["b", 16], BF16)], inits)
    out, fires = _fuse(model, "onnx")
    assert "Tanh" not in h.ops(out) and "Pow" not in h.ops(out), (h.ops(out), fires)
    x = (3 * np.random.default_rng(1).standard_normal((4, 16))).astype(np.float32).astype(bf16)
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.float32)
    got = ReferenceEvaluator(out).run(None, {"x": x})[0].astype(np.float32)
    np.testing.assert_allclose(got, ref, atol=5e-2, rtol=5e-2)


def _as_float16_export(model):
    """A float32 export as a float16 one writes it: weights, Casts to float and the logits in
    float16, the mask's finfo(float32).min fill now float16's lowest (-65504)."""
    g = model.graph
    fp16 = lambda t: numpy_helper.from_array(  # noqa: E731
        np.clip(numpy_helper.to_array(t), -65504, 65504).astype(np.float16), t.name)
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(fp16(t))
    for node in g.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = F16
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(fp16(a.t))
    for o in g.output:
        o.type.tensor_type.elem_type = F16
    del g.value_info[:]
    out = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(out)
    return out


def test_float16_export_gets_fused_attention_at_o4(h):
    """-O4 --target trt on a float16 export: the Hugging Face mask fills with -65504, which the
    FusedAttention rules took for a float32-only threshold (<= -1e30) and refused. Now both
    layers become FusedAttention, with the original's numbers on the valid (right-padded) rows."""
    from pathlib import Path

    from onnx_fuse.plugins.check_trt import check_model

    path = Path(__file__).resolve().parents[1] / "data" / "models" / "llama64_sdpa_dynamo.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    model = _as_float16_export(onnx.load(str(path)))
    out, fires = _fuse(model, "trt", level=4)
    # attention-trt rebuilt the export's causal + padding bias (causal-key-padding-bias): the probed rule takes it
    assert fires.get("fused-attention-trt-probed") == 2, fires
    assert h.ops(out)["onnx_fuse::FusedAttention"] == 2 and "Softmax" not in h.ops(out), h.ops(out)
    verdict = check_model(out)
    assert verdict.supported and not verdict.issues, [str(i) for i in verdict.issues]
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 64, (2, 16), dtype=np.int64), "attention_mask": np.ones((2, 16), np.int64)}
    feeds["attention_mask"][-1, 12:] = 0  # right padding: the plugin's contract
    valid = feeds["attention_mask"].astype(bool)
    ref, got = (h.run(m, feeds)[0].astype(np.float32)[valid] for m in (model, out))
    assert np.abs(got - ref).max() <= 5e-3 * np.abs(ref).max()


def _clamped_bmm(h, elem):
    """XGLM's eager attention on [B*H,S,D] views in half precision: max(view4(q3 k3^T) + mask,
    finfo.min) of the scores' dtype, view3, softmax, bmm with v."""
    n, np_t = h.node, (np.float16 if elem == F16 else ml_dtypes.bfloat16)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [n("Reshape", ["q", "v3s"], ["q3"]), n("Reshape", ["k", "v3s"], ["k3"]),
             n("Reshape", ["v", "v3s"], ["v3"]), n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
             n("MatMul", ["q3", "kt"], ["sc"]), n("Reshape", ["sc", "s4s"], ["s4"]),
             n("Add", ["s4", "mask"], ["sm"]), n("Max", ["sm", "floor"], ["mx"]),
             n("Reshape", ["mx", "s3s"], ["s3"]), n("Softmax", ["s3"], ["p"], axis=-1),
             n("MatMul", ["p", "v3"], ["o3"]), n("Reshape", ["o3", "o4s"], ["o"])]
    inits = {"v3s": i64(B * H, S, D), "s4s": i64(B, H, S, S), "s3s": i64(B * H, S, S), "o4s": i64(B, H, S, D),
             "floor": np.array(ml_dtypes.finfo(np_t).min, np_t)}
    inputs = [h.vi(x, [B, H, S, D], elem) for x in ("q", "k", "v")] + [h.vi("mask", [B, 1, S, S], elem)]
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D], elem)], inits)


def test_float16_clamp_after_the_mask_stays_where_it_is(h):
    """max(s + mask, -65504) -> s + max(mask, -65504) is exact only where the lowest float absorbs
    the score: in float16 a score <= -16 makes it -inf (the clamp kept -65504), so a fully masked
    row would turn NaN. Refused by name (before: by a -1e30 threshold no float16 meets); bfloat16,
    whose lowest float absorbs any score, still fuses."""
    model = _clamped_bmm(h, F16)
    assert any("float16 keeps the clamp after the mask" in r
               for r in h.reasons(model, "onnx", "scores-clamp-onto-mask"))
    out, fires = _fuse(model, "onnx")
    assert "scores-clamp-onto-mask" not in fires, fires
    r = np.random.default_rng(7)
    feeds = {x: (4 * r.standard_normal((B, H, S, D))).astype(np.float16) for x in ("q", "k", "v")}
    feeds["mask"] = np.zeros((B, 1, S, S), np.float16)
    feeds["mask"][1] = -np.inf  # every key of batch 1 masked: the clamp gives uniform rows
    h.assert_close(model, out, feeds, atol=2e-3, rtol=2e-3)
    out, fires = _fuse(_clamped_bmm(h, BF16), "onnx")
    # the clamp moves onto the mask (scores-clamp-onto-mask, which replaced batched-heads-clamped-softmax)
    assert fires.get("scores-clamp-onto-mask") == 1 and h.ops(out)["Attention"] == 1, fires


def _bias_and_key_mask(h, *, mask_first=False, query_rows=False, fill=-65504.0, bias_input=False, dv=D,
                       inverted=False):
    """MPNet as transformers 5 exports it, in float16: softmax(q k^T / sqrt(D) + position_bias +
    Where(keep, 0, finfo.min)) @ v, the position bias gathered from its table by bucket
    (Gather -> Transpose -> Unsqueeze, [1,H,S,S]; ``bias_input``: a graph input instead), keep made
    from the int attention_mask [B, S] (a key mask [B,1,1,S]; with ``query_rows`` also the
    query's, [B,1,S,S], so a padded query has no key). ``mask_first`` adds the mask first;
    ``inverted`` writes it Where(not keep, F, 0)."""
    n = h.node
    keep = [n("Unsqueeze", ["am", "ax12"], ["am4"]), n("Cast", ["am4"], ["kk"], to=TensorProto.BOOL)]
    if query_rows:
        keep += [n("Unsqueeze", ["am", "ax13"], ["amq"]), n("Cast", ["amq"], ["kq"], to=TensorProto.BOOL),
                 n("And", ["kk", "kq"], ["keep"])]
    else:
        keep += [n("Identity", ["kk"], ["keep"])]
    bias = [] if bias_input else [n("Gather", ["table", "bucket"], ["tb"], axis=0),
                                  n("Transpose", ["tb"], ["tt"], perm=[2, 0, 1]),
                                  n("Unsqueeze", ["tt", "ax0"], ["pos_bias"])]
    terms = ["mk", "pos_bias"] if mask_first else ["pos_bias", "mk"]
    where = ([n("Not", ["keep"], ["masked"]), n("Where", ["masked", "fill", "zero"], ["mk"])] if inverted
             else [n("Where", ["keep", "zero", "fill"], ["mk"])])
    nodes = keep + bias + where + [
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
        n("Div", ["sc", "sqrt_d"], ["sd"]), n("Add", ["sd", terms[0]], ["a1"]),
        n("Add", ["a1", terms[1]], ["a2"]), n("Softmax", ["a2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o"])]
    inputs = [h.vi("q", [B, H, S, D], F16), h.vi("k", [B, H, S, D], F16), h.vi("v", [B, H, S, dv], F16),
              h.vi("am", [B, S], TensorProto.INT64)]
    inputs.append(h.vi("pos_bias", [1, H, S, S], F16) if bias_input else h.vi("bucket", [S, S], TensorProto.INT64))
    inits = {"sqrt_d": np.array(D ** 0.5, np.float16), "zero": np.array(0.0, np.float16),
             "fill": np.array(fill, np.float16), "ax12": np.array([1, 2], np.int64),
             "ax13": np.array([1, 3], np.int64), "ax0": np.array([0], np.int64)}
    if not bias_input:
        inits["table"] = _key_mask_table()
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, dv], F16)], inits)


def _key_mask_table():
    """One position bias per (bucket, head), -17 +- 4: bias + finfo.min is below float16's range."""
    return (-17 + 4 * np.random.default_rng(4).uniform(-1, 1, (S * S, H))).astype(np.float16)


def _key_mask_feeds(bias_input=False):
    """Scores near 2.8, a bucket per (query, key), so the bias differs per key; batch 0 keeps its
    first 3 keys, batch 1 none. ``bias_input``: the gathered bias fed as the input."""
    feeds = _bias_then_mask_feeds()
    del feeds["mask"], feeds["pos_bias"]
    feeds["am"] = np.array([[1] * (S - 1) + [0], [0] * S], np.int64)
    bucket = np.arange(S * S, dtype=np.int64).reshape(S, S)
    if bias_input:
        feeds["pos_bias"] = _key_mask_table()[bucket].transpose(2, 0, 1)[None]
    else:
        feeds["bucket"] = bucket
    return feeds


@pytest.mark.parametrize("target, level", [("ort", 3), ("onnx", 3), ("trt", 3), ("trt", 4)])
@pytest.mark.parametrize("form", ["bias_then_mask", "mask_then_bias", "query_rows", "inverted"])
def test_float16_bias_and_boolean_key_mask_fuse_exactly(h, target, level, form):
    """A bias plus a two-valued padding mask Where(keep, 0, finfo.min) in float16: the mask is kept
    apart from the bias as Where(keep or no key kept in the row, bias, -inf), so the attention fuses
    on every target (onnx and trt refused it before; ort clamped the sum) and every row equals the
    original in ORT, the fully masked ones too: softmax(s + b) (ORT adds in float32), not the mean
    of V that bias + finfo.min in float16 arithmetic would give."""
    model = _bias_and_key_mask(h, mask_first=form == "mask_then_bias", query_rows=form == "query_rows",
                               inverted=form == "inverted")
    out, fires = _fuse(model, target, level=level)
    rule = "attention-scores-key-mask-bias-half" if form == "mask_then_bias" else "attention-scores-bias-key-mask-half"
    assert fires.get(rule) == 1 and "attention-scores-bias-sum-half" not in fires, fires
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if k.endswith("Attention")) == 1, ops
    if target == "trt":   # Attention-23 (FusedAttention takes no bias), which check-trt accepts
        from onnx_fuse.plugins.check_trt import check_model

        verdict = check_model(out)
        assert ops["Attention"] == 1 and verdict.supported and not verdict.issues, [str(i) for i in verdict.issues]
    feeds = _key_mask_feeds()
    # ORT's float16 Attention-23 (onnx, trt) is 5e-3 off with every key kept too; a fully masked
    # row that lost the bias (the mean of V) would be 2.4 off
    tol = 2e-3 if target == "ort" else 1e-2
    h.assert_close(model, out, feeds, atol=tol, rtol=tol)
    # the original's fully masked rows (batch 1; with query_rows, batch 0's last query too) are
    # softmax(s + b) @ v, as float32 arithmetic gives them
    f = {k: v.astype(np.float32) for k, v in feeds.items() if k != "am"}
    pos_bias = _key_mask_table().astype(np.float32)[feeds["bucket"]].transpose(2, 0, 1)[None]
    s = f["q"] @ f["k"].transpose(0, 1, 3, 2) / np.float32(D ** 0.5) + pos_bias
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ f["v"]
    got = h.run(out, feeds)[0].astype(np.float32)
    np.testing.assert_allclose(got[1], want[1], atol=tol, rtol=tol)
    if form == "query_rows":
        np.testing.assert_allclose(got[0, :, -1], want[0, :, -1], atol=tol, rtol=tol)


def test_float16_key_mask_with_an_infinite_fill_is_left_to_the_sum(h):
    """A -inf fill is exact as a plain sum (b + -inf is -inf in float16) and its fully masked rows
    are NaN in the original, not softmax(s + b): near miss, the check's reason."""
    model = _bias_and_key_mask(h, fill=-np.inf)
    assert any("the mask must be Where(bool, 0, F) with one finite fill F <= -1e4" in r
               for r in h.reasons(model, "onnx", "attention-scores-bias-key-mask-half"))
    assert "attention-scores-bias-key-mask-half" not in _fuse(model, "onnx")[1]


def test_float16_key_mask_with_a_small_fill_is_refused(h):
    """A fill of -100 does not mask its key beside a kept one (exp(-100) is not 0 in float32):
    near miss, nothing fuses on onnx, the numbers stay the original's."""
    model = _bias_and_key_mask(h, fill=-100.0)
    out, fires = _fuse(model, "onnx")
    assert "attention-scores-bias-key-mask-half" not in fires and "Softmax" in h.ops(out), fires
    h.assert_close(model, out, _key_mask_feeds(), atol=2e-3, rtol=2e-3)


def test_float16_key_mask_beside_an_unbounded_bias_is_refused(h):
    """A bias read from an input may hold mask-like values itself (finfo.min on some keys): a row
    whose kept keys all sit at that floor would differ. Near miss: the bias must be proven bounded
    (value_bound); nothing fuses on onnx, and the numbers stay the original's."""
    model = _bias_and_key_mask(h, bias_input=True)
    assert any("the bias must be proven within a quarter of the fill" in r
               for r in h.reasons(model, "onnx", "attention-scores-bias-key-mask-half"))
    out, fires = _fuse(model, "onnx")
    assert "attention-scores-bias-key-mask-half" not in fires and "Softmax" in h.ops(out), fires
    h.assert_close(model, out, _key_mask_feeds(bias_input=True), atol=2e-3, rtol=2e-3)


def test_float16_key_mask_is_exact_where_ort_falls_back_to_attention_23(h):
    """v's head size twice q's: ort lowers to Attention-23, which takes the bias in float16. The
    clamped sum (attention-scores-bias-sum-half) kept b only to steps of 16 there, so a fully
    masked row was far from the original; the key mask kept apart gives it softmax(s + b)."""
    model = _bias_and_key_mask(h, dv=2 * D)
    out, fires = _fuse(model, "ort")
    assert fires.get("attention-scores-bias-key-mask-half") == 1 and fires.get("attention-onnx") == 1, fires
    feeds = _key_mask_feeds()
    feeds["v"] = np.random.default_rng(6).standard_normal((B, H, S, 2 * D)).astype(np.float16)
    h.assert_close(model, out, feeds, atol=1e-2, rtol=1e-2)
