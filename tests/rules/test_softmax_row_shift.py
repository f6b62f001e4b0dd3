"""softmax-max-shift (rules/attention/softmax_shift.yaml) read on what the shift computes (row_max,
optimizer/rewrite/_row_max.py): Softmax((t - rowmax(t)) [* k]) is Softmax(t [* k]), the maximum kept
(keepdims=1) or re-expanded (keepdims=0 + Unsqueeze / Reshape), a power-of-two scale after it, and
CogView's PB-Relax (transformers 4.57 LayoutLMv3, hold-out 35 Optimum: 0/2 attention before)
`softmax((s / 32 - max(s / 32)) * 32)`, which is Softmax(s). Each form as attention scores
q k^T * D^-0.5 (+ a mask with -inf keys), fused and compared with the original in ONNX Runtime; the
near misses keep their numbers."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse

B, H, S, D = 2, 2, 5, 8
ATTN = ("Attention", "com.microsoft::MultiHeadAttention", "com.microsoft::GroupQueryAttention")
TARGETS = [("ort", 3), ("onnx", 3), ("trt", 4)]


def _i64(*v):
    return np.array(v, np.int64)


def _f32(v):
    return np.array(v, np.float32)


def _model(h, shift_nodes, inits, *, x="x", attend=True, extra_out=(), scaled=True):
    """s = q k^T [* D^-0.5] + mask; ``shift_nodes`` make ``x`` from s; p = Softmax(x) (@ v). Unscaled
    where the shift's own scale is the attention's (one scale after the mask is what the
    recognizers take, through scores-scale-before-mask)."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk" if scaled else "sc"])]
    nodes += [n("Mul", ["qk", "scale"], ["sc"])] * scaled + [n("Add", ["sc", "mask"], ["s"])]
    nodes += shift_nodes + [n("Softmax", [x], ["p"], axis=-1)]
    inputs = [h.vi(a, ["batch", H, "seq", D]) for a in ("q", "k", "v")] + [h.vi("mask", ["batch", 1, "seq", "seq"])]
    if attend:
        nodes.append(n("MatMul", ["p", "v"], ["o"]))
        outs = [h.vi("o", ["batch", H, "seq", D])]
    else:
        outs = [h.vi("p", ["batch", H, "seq", "seq"])]
    outs += [h.vi(e, None) for e in extra_out]
    inits = dict(inits, scale=_f32(D ** -0.5))
    return h.make_model(nodes, inputs, outs, inits)


def _feeds(h, inf_keys=True):
    f = {a: (3 * h.rng.standard_normal((B, H, S, D))).astype(np.float32) for a in ("q", "k", "v")}
    # causal with -inf (a masked key in every row but the last): a row mean / min would be -inf
    fill = -np.inf if inf_keys else -3.4e38
    f["mask"] = np.triu(np.full((S, S), fill, np.float32), k=1)[None, None].repeat(B, 0)
    return f


def _attn(h, model):
    ops = h.ops(model)
    return sum(ops[k] for k in ATTN)


# ---- the forms -------------------------------------------------------------------------------------

def _pb_relax(h, alpha=32.0):
    """transformers 4.57 cogview_attention: (s / a - max(s / a, -1).unsqueeze(-1)) * a (Optimum's export)."""
    n = h.node
    return [n("Div", ["s", "alpha"], ["t"]), n("ReduceMax", ["t", "lax"], ["m"], keepdims=0),
            n("Unsqueeze", ["m", "lax"], ["mu"]), n("Sub", ["t", "mu"], ["d"]),
            n("Mul", ["d", "alpha"], ["x"])], {"alpha": _f32(alpha), "lax": _i64(-1)}


def _kept_scaled(h):
    """keepdims=1 maximum, then a power-of-two scale <= 1 written first: Mul(0.5, s - max(s))."""
    n = h.node
    return [n("ReduceMax", ["s", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["d"]),
            n("Mul", ["half", "d"], ["x"])], {"half": _f32(0.5), "lax": _i64(-1)}


def _divided(h):
    """the scale as a divisor after the shift: (s - max(s)) / 2."""
    n = h.node
    return [n("ReduceMax", ["s", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["d"]),
            n("Div", ["d", "two"], ["x"])], {"two": _f32(2.0), "lax": _i64(-1)}


def _scaled_max(h):
    """the maximum taken before the scale, scaled as s was: s * 0.25 - Unsqueeze(max(s) * 0.25)."""
    n = h.node
    return [n("Mul", ["s", "q4"], ["t"]), n("ReduceMax", ["s", "lax"], ["m0"], keepdims=0),
            n("Mul", ["m0", "q4"], ["m"]), n("Unsqueeze", ["m", "lax"], ["mu"]),
            n("Sub", ["t", "mu"], ["x"])], {"q4": _f32(0.25), "lax": _i64(-1)}


def _reshaped(h):
    """keepdims=0 re-expanded by a Reshape to Shape(s)[:3] + [1], then PB-Relax's alpha."""
    n = h.node
    return [n("Div", ["s", "alpha"], ["t"]), n("ReduceMax", ["t", "lax"], ["m"], keepdims=0),
            n("Shape", ["t"], ["sh"], start=0, end=3), n("Concat", ["sh", "one"], ["shc"], axis=0),
            n("Reshape", ["m", "shc"], ["mu"]), n("Sub", ["t", "mu"], ["d"]),
            n("Mul", ["d", "alpha"], ["x"])], {"alpha": _f32(32.0), "lax": _i64(-1), "one": _i64(1)}


FORMS = {"pb_relax": _pb_relax, "kept_scaled": _kept_scaled, "divided": _divided,
         "scaled_max": _scaled_max, "reshaped": _reshaped}
OWN_SCALE = {"kept_scaled", "divided", "scaled_max"}     # the shift's scale is the attention's


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("target,level", TARGETS)
def test_row_shift_attention_is_fused(h, form, target, level):
    nodes, inits = FORMS[form](h)
    model = _model(h, nodes, inits, scaled=form not in OWN_SCALE)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert "Softmax" not in ops and "ReduceMax" not in ops and _attn(h, out) == 1, ops
    h.assert_close(model, out, _feeds(h))
    h.assert_close(model, out, _feeds(h, inf_keys=False))


@pytest.mark.parametrize("form", ["pb_relax", "reshaped", "scaled_max"])
def test_row_shift_is_the_same_softmax_bit_for_bit(h, form):
    """Without the attention around it the rewrite is Softmax(s): the same exp(s - max(s)) as the
    original computes, so every probability is bit-identical (alpha 32 is a power of two)."""
    nodes, inits = FORMS[form](h)
    model = _model(h, nodes, inits, attend=False)
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["Softmax"] == 1 and "ReduceMax" not in ops and "Sub" not in ops, ops
    for feeds in (_feeds(h), _feeds(h, inf_keys=False)):
        ref, got = h.run(model, feeds)[0], h.run(out, feeds)[0]
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("target,level", TARGETS)
def test_one_element_constants_of_rank_two(h, target, level):
    """alpha stored as [1, 1] (a one-element constant of any rank up to the scores' cannot widen them),
    and a [1, 1] scale in the maximum's own chain, written first there (Mul commutes): fused (the first
    row_max took rank <= 1 only and keyed the constant's slot; the fuzzer's max_shift idiom draws both)."""
    n = h.node
    nodes, inits = _pb_relax(h)
    model = _model(h, nodes, dict(inits, alpha=np.full((1, 1), 32.0, np.float32)))
    nodes2 = [n("Mul", ["s", "q4"], ["t"]), n("ReduceMax", ["s", "lax"], ["m0"], keepdims=0),
              n("Mul", ["q4", "m0"], ["m"]), n("Unsqueeze", ["m", "lax"], ["mu"]), n("Sub", ["t", "mu"], ["x"])]
    model2 = _model(h, nodes2, {"q4": np.full((1, 1), 0.25, np.float32), "lax": _i64(-1)}, scaled=False)
    for m in (model, model2):
        out = h.fuse(m, target, level)
        assert "ReduceMax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
        h.assert_close(m, out, _feeds(h))


@pytest.mark.parametrize("form", ["pb_relax", "kept_scaled", "reshaped"])
def test_row_shift_passes_its_local_check(h, form):
    """The shift is not matched (it is proven, row_max): the per-rewrite check computes it from the
    scores, and PB-Relax's t = s / 32 from s the replacement reads (_local_check._bridge, ReduceMax
    and Div passed). Fed unrelated random data, the shift was no row maximum and the check rolled
    every rewrite back ('failed its numeric check'): Optimum's LayoutLMv3 stayed 0/2 under verify."""
    nodes, inits = FORMS[form](h)
    model = _model(h, nodes, inits, attend=False)
    res = onnx_fuse.optimize(model, level=3, target="ort", verify=True)
    assert res.report.rule_fires.get("softmax-max-shift") == 1, res.report.rule_fires
    assert not [w for w in res.report.warnings if "numeric check" in w], res.report.warnings


# ---- near misses: refused with the reason, original numbers kept -----------------------------------

def _refused(h, nodes, inits, why, *, kept="ReduceMax", **kw):
    model = _model(h, nodes, inits, **kw)
    got = h.reasons(model, "ort", "softmax-max-shift")
    assert any(why in r for r in got), got
    out = h.fuse(model, "ort")
    assert kept in h.ops(out), h.ops(out)
    for feeds in (_feeds(h), _feeds(h, inf_keys=False)):
        ref, res = h.run(model, feeds), h.run(out, feeds)
        for r, g in zip(ref, res):   # NaN rows (a -inf row mean) must stay NaN
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    return out


def test_max_over_the_queries_varies_along_the_keys(h):
    n = h.node
    nodes = [n("ReduceMax", ["s", "qax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["x"])]
    _refused(h, nodes, {"qax": _i64(2)}, "not a maximum over axis 3 alone")


def test_max_re_expanded_on_another_axis(h):
    """max over the keys (keepdims=0, [B, H, S]) unsqueezed at axis 2 is [B, H, 1, S]: it lines up with
    the keys, not the rows (for S queries and S keys it broadcasts, and varies along each row)."""
    n = h.node
    nodes = [n("ReduceMax", ["s", "lax"], ["m"], keepdims=0), n("Unsqueeze", ["m", "qax"], ["mu"]),
             n("Sub", ["s", "mu"], ["x"])]
    _refused(h, nodes, {"lax": _i64(-1), "qax": _i64(2)}, "re-inserts axes [2]")


def test_row_mean_is_not_a_shift(h):
    """softmax(s - mean(s)) is NaN on a row with a -inf key, where softmax(s) is not: kept."""
    n = h.node
    nodes = [n("ReduceMean", ["s", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["x"])]
    _refused(h, nodes, {"lax": _i64(-1)}, "goes through ReduceMean", kept="ReduceMean")
    model = _model(h, nodes, {"lax": _i64(-1)})
    assert np.isnan(h.run(model, _feeds(h))[0]).any()   # the reason is real: the original has NaN rows


def test_max_of_another_value(h):
    """max(sc) subtracted from s = sc + mask: row-constant, but not s's own maximum (a -inf key row of
    the mask against a large sc would lose s's bits): refused."""
    n = h.node
    nodes = [n("ReduceMax", ["sc", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["x"])]
    _refused(h, nodes, {"lax": _i64(-1)}, "not of 's'")


@pytest.mark.parametrize("alpha,why", [(-32.0, "after the shift must be one power of two"),
                                       (0.0, "after the shift must be one power of two"),
                                       (24.0, "after the shift must be one power of two")])
def test_scale_must_be_a_positive_power_of_two(h, alpha, why):
    nodes, inits = _pb_relax(h, alpha)
    if alpha == 0.0:   # s / 0 is inf: divide by 32, scale the shift by 0
        inits = dict(inits, zero=_f32(0.0), alpha=_f32(32.0))
        nodes[-1] = h.node("Mul", ["d", "zero"], ["x"])
    _refused(h, nodes, inits, why)


def test_scale_up_without_the_scale_down(h):
    """(s - max(s)) * 32 over s itself: 32 * s could overflow a large finite fill to -inf (a fully
    masked row: uniform in the original, NaN after), and there is no s / 32 to undo: refused."""
    n = h.node
    nodes = [n("ReduceMax", ["s", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["d"]),
             n("Mul", ["d", "alpha"], ["x"])]
    _refused(h, nodes, {"alpha": _f32(32.0), "lax": _i64(-1)}, "needs t to be a power-of-two scale-down")


@pytest.mark.parametrize("reader,why", [(None, "is a graph output"), ("Identity", "is also used by")])
def test_shifted_scores_read_elsewhere(h, reader, why):
    """d = s - max(s) also an output, or read by another node: the intermediate escapes, nothing is
    rewritten."""
    n = h.node
    nodes = [n("ReduceMax", ["s", "lax"], ["m"], keepdims=1), n("Sub", ["s", "m"], ["x"])]
    extra = "x"
    if reader:
        nodes.append(n(reader, ["x"], ["xr"]))
        extra = "xr"
    model = _model(h, nodes, {"lax": _i64(-1)}, extra_out=(extra,))
    got = h.reasons(model, "ort", "softmax-max-shift")
    assert any(why in r for r in got), got
    out = h.fuse(model, "ort")
    assert "ReduceMax" in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, inf_keys=False))
