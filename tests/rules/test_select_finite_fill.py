"""where-finite-fill-lowest (rules/attention/score_select.yaml): a float32 select of attention scores with a
large finite fill, softmax(scores.masked_fill(mask == 0, -1e9)) (the Annotated Transformer's idiom;
Reformer's local attention, transformers 5.25, hold-out 34, writes it with exp(s - logsumexp(s)), which
softmax-logsumexp makes a Softmax). The recognizers read only a fill <= -1e30 as a mask, so the attention
stayed unfused at every target with any input mask. Numerics against the original in ONNX Runtime on
rows that keep a key and on rows that keep none (uniform in the original, and in the fused op)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, D = 2, 2, 5, 8


def _attn(h, *, fill=-1e9, form="keep", lse=False, scale_after=False, dtype=np.float32, elem=TensorProto.FLOAT,
          mask_dtype=TensorProto.BOOL, const_mask=None):
    """q, k, v [B, H, S, D]; keep [B, 1, S, S] an input (or the constant const_mask). form keep:
    Where(keep, s, F); fill: Where(Not(keep), F, s)."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"])]
    s = "qk"
    if not scale_after:
        nodes.append(n("Mul", ["qk", "scale"], ["s0"]))
        s = "s0"
    c = "keep"
    if mask_dtype != TensorProto.BOOL:
        nodes.append(n("Cast", ["keep"], ["keepb"], to=TensorProto.BOOL))
        c = "keepb"
    if form == "keep":
        nodes.append(n("Where", [c, s, "fill"], ["sm"]))
    else:
        nodes += [n("Not", [c], ["drop"]), n("Where", ["drop", "fill", s], ["sm"])]
    s = "sm"
    if scale_after:
        nodes.append(n("Mul", ["sm", "scale"], ["sms"]))
        s = "sms"
    if lse:
        nodes += [n("ReduceLogSumExp", [s, "ax"], ["l"], keepdims=1), n("Sub", [s, "l"], ["d"]),
                  n("Exp", ["d"], ["p"])]
    else:
        nodes.append(n("Softmax", [s], ["p"], axis=-1))
    nodes.append(n("MatMul", ["p", "v"], ["y"]))
    inits = {"scale": np.array(D ** -0.5, dtype), "ax": np.array([-1], np.int64), "fill": np.array(fill, dtype)}
    inputs = [h.vi(x, [B, H, S, D], elem) for x in "qkv"]
    if const_mask is None:
        inputs.append(h.vi("keep", [B, 1, S, S], mask_dtype))
    else:
        inits["keep"] = const_mask
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D], elem)], inits)


def _feeds(h, dtype=np.float32, *, keyless=True, mask_dtype=bool):
    f = {x: (3 * h.rng.standard_normal((B, H, S, D))).astype(dtype) for x in "qkv"}
    keep = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)
    keep[1, :, :, :2] = False           # batch 1 left-padded by 2 keys: its queries 0 and 1 keep no key
    if not keyless:
        keep[1, :, :2, 2] = True        # every row keeps a key
    f["keep"] = keep.astype(mask_dtype)
    return f


def _fused(ops):
    return sum(c for op, c in ops.items() if "Attention" in op)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["keep", "fill"])
def test_finite_fill_select_fuses(h, target, form):
    """Before: Where + Softmax unfused at every target."""
    model = _attn(h, form=form)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert _fused(ops) == 1 and "Softmax" not in ops and "Exp" not in ops, ops
    for keyless in (False, True):
        h.assert_close(model, out, _feeds(h, keyless=keyless))


@pytest.mark.parametrize("fill", [-1e8, -1e9, -1e20])
def test_fill_range_and_keyless_rows_exact(h, fill):
    """Rows with no kept key are uniform over all keys in both graphs (the lowest float absorbs any score)."""
    model = _attn(h, fill=fill)
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert _fused(h.ops(out)) == 1, h.ops(out)
        f = _feeds(h)
        ref, got = h.run(model, f)[0], h.run(out, f)[0]
        uniform = f["v"][1, :, :, :].mean(axis=1)           # [H, D]: mean of the values over all keys
        np.testing.assert_allclose(ref[1, :, 0], uniform, atol=1e-5)
        np.testing.assert_allclose(got[1, :, :2], ref[1, :, :2], atol=1e-5)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-4)


def test_int_mask_cast_to_bool_fuses(h):
    model = _attn(h, mask_dtype=TensorProto.INT64)
    out = h.fuse(model, "ort")
    assert _fused(h.ops(out)) == 1, h.ops(out)
    h.assert_close(model, out, _feeds(h, mask_dtype=np.int64))


@pytest.mark.parametrize("kw, why", [
    (dict(fill=-1e4), "finite number in"),                       # scores could come within 100 of it
    (dict(fill=-1e7), "finite number in"),
    (dict(dtype=np.float16, elem=TensorProto.FLOAT16, fill=-6e4), "float32, bfloat16 or double"),
])
def test_near_misses_stay_unfused(h, kw, why):
    model = _attn(h, **kw)
    got = h.reasons(model, "ort", "where-finite-fill-lowest")
    assert any(why in r for r in got), got
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert _fused(h.ops(out)) == 0, h.ops(out)
        h.assert_close(model, out, _feeds(h, kw.get("dtype", np.float32), keyless=False), atol=2e-3, rtol=2e-3)


def test_scale_after_the_select_is_left(h):
    """Where(keep, s, -1e9) * e: the rule needs the select to feed the softmax (the lowest float scaled by
    e > 1 would be -inf, NaN rows where the original is uniform); nothing here reads -1e9 * e as a mask."""
    model = _attn(h, scale_after=True)
    got = h.reasons(model, "ort", "where-finite-fill-lowest")
    assert not any(r.startswith("matched") for r in got), got
    out = h.fuse(model, "ort")
    assert _fused(h.ops(out)) == 0, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_select_read_elsewhere_is_left(h):
    """The select's output also a graph output: it must keep its -1e9."""
    model = _attn(h)
    model.graph.output.append(h.vi("sm", [B, H, S, S]))
    out = h.fuse(model, "ort")
    assert _fused(h.ops(out)) == 0, h.ops(out)
    h.assert_close(model, out, _feeds(h))


def _chunk_mask(keyless=False):
    """A constant keep-mask like Reformer's (each query keeps its own chunk's earlier keys); keyless: one
    query row keeps none."""
    keep = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)
    keep[:, :, 3:, :2] = False
    if keyless:
        keep[1, :, 0] = False
    return keep


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_logsumexp_under_a_constant_mask_fuses(h, target):
    """Reformer's form: exp(s - logsumexp(Where(mask, s, -1e9))) with a constant mask keeping a key in every
    row. Before: Softmax after softmax-logsumexp, unfused at every target."""
    model = _attn(h, lse=True, const_mask=_chunk_mask())
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert _fused(ops) == 1 and "Exp" not in ops and "Softmax" not in ops, ops
    f = _feeds(h)
    del f["keep"]
    h.assert_close(model, out, f)


@pytest.mark.parametrize("const", [False, True])
def test_logsumexp_with_keyless_rows_stays(h, const):
    """A row of one fill -1e9 throughout: logsumexp rounds to -1e9, so the original weighs every key 1 (p v
    is the sum of the values), a softmax 1 / n (their mean). softmax-logsumexp fired here before (11.1 off
    on the keyless rows at every target); now it is refused, an input mask or a constant one with a keyless
    row alike."""
    model = _attn(h, lse=True, const_mask=_chunk_mask(keyless=True) if const else None)
    got = h.reasons(model, "ort", "softmax-logsumexp")
    assert any("large finite fill" in r for r in got), got
    f = _feeds(h)
    if const:
        del f["keep"]
    ref = h.run(model, f)[0]
    np.testing.assert_allclose(ref[1, :, 0], f["v"][1].sum(axis=1), rtol=1e-5, atol=1e-5)   # weights 1
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert "ReduceLogSumExp" in h.ops(out), h.ops(out)
        h.assert_close(model, out, f)


@pytest.mark.parametrize("fill", [-1e3, -float("inf")])
def test_logsumexp_small_or_infinite_fill_fires(h, fill):
    """A fill within 1e3 (logsumexp keeps log(n)) or -inf (NaN rows in both) is softmax-logsumexp's."""
    model = _attn(h, lse=True, fill=fill)
    out = h.fuse(model, "ort")
    assert "ReduceLogSumExp" not in h.ops(out), h.ops(out)
    f = _feeds(h, keyless=fill != -float("inf"))
    h.assert_close(model, out, f)


def test_logsumexp_with_an_additive_input_mask_stays(h):
    """softmax-logsumexp over s + m, m a float input: a row of m at finfo.min throughout (a fully padded query)
    is finfo.min throughout, where the original weighs every key 1; unproven, so the rule refuses (it fired
    before, 20 off on such a row)."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["s0"]), n("Add", ["s0", "m"], ["sm"]),
             n("ReduceLogSumExp", ["sm", "ax"], ["l"], keepdims=1), n("Sub", ["sm", "l"], ["d"]),
             n("Exp", ["d"], ["p"]), n("MatMul", ["p", "v"], ["y"])]
    inits = {"scale": np.array(D ** -0.5, np.float32), "ax": np.array([-1], np.int64)}
    inputs = [h.vi(x, [B, H, S, D]) for x in "qkv"] + [h.vi("m", [B, 1, S, S])]
    model = h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits)
    got = h.reasons(model, "ort", "softmax-logsumexp")
    assert any("large finite fill" in r for r in got), got
    f = _feeds(h)
    f["m"] = np.where(f.pop("keep"), 0.0, np.finfo(np.float32).min).astype(np.float32)
    for target in ("ort", "onnx", "trt"):
        out = h.fuse(model, target)
        assert "ReduceLogSumExp" in h.ops(out), h.ops(out)
        h.assert_close(model, out, f)
