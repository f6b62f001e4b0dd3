"""attention-repeat-kv (rules/attention/recognize.yaml) on every way of repeating each kv head n times
in a row (optimizer/rewrite/_head_repeat.py), and Keras' masked softmax (masked-softmax-keep-zero,
rules/attention/masked_softmax_zero.yaml). Graphs built with onnx.helper as the exporters write
them: TorchScript's repeat_interleave (Unsqueeze -> Tile on a new axis -> Reshape), keras-hub's
tf.repeat through tf2onnx ([B, T, Hkv, D] tiled on a new axis, merged, then moved to heads-first),
a Gather by i // n, a stack of copies; and the head maps that are not a repeat_interleave
(k.repeat(1, n, 1, 1): a Tile on the heads axis, h % Hkv; a Gather by i % Hkv), which must not be
read as GQA. Numerics in ONNX Runtime against the original."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse

B, S, H, D = 2, 5, 4, 8


def _repeat(n, src, dst, form, layout, hkv):
    """Nodes and constants making ``dst`` = ``src`` with each of its ``hkv`` heads repeated H // hkv
    times ("interleave" forms) or tiled (head map h % hkv: "tile-heads", "gather-mod")."""
    rep = H // hkv
    ax = 1 if layout == "bhsd" else 2
    tiles = [1] * 5
    tiles[ax + 1] = rep
    merge = [0, H, -1, D] if layout == "bhsd" else [0, 0, H, D]
    consts = {f"{dst}_ax": np.array([ax + 1], np.int64), f"{dst}_tiles": np.array(tiles, np.int64),
              f"{dst}_merge": np.array(merge, np.int64)}
    u, e = f"{dst}_u", f"{dst}_e"
    if form == "tile":
        nodes = [n("Unsqueeze", [src, f"{dst}_ax"], [u]), n("Tile", [u, f"{dst}_tiles"], [e]),
                 n("Reshape", [e, f"{dst}_merge"], [dst])]
    elif form == "concat":
        nodes = [n("Unsqueeze", [src, f"{dst}_ax"], [u]), n("Concat", [u] * rep, [e], axis=ax + 1),
                 n("Reshape", [e, f"{dst}_merge"], [dst])]
    elif form in ("gather", "gather-mod"):
        idx = np.arange(H) // rep if form == "gather" else np.arange(H) % hkv
        consts = {f"{dst}_idx": idx.astype(np.int64)}
        nodes = [n("Gather", [src, f"{dst}_idx"], [dst], axis=ax)]
    else:  # tile-heads: k.repeat(1, n, 1, 1)
        reps = [1, 1, 1, 1]
        reps[ax] = rep
        consts = {f"{dst}_reps": np.array(reps, np.int64)}
        nodes = [n("Tile", [src, f"{dst}_reps"], [dst])]
    return nodes, consts


def n(*args, **kw):
    from onnx import helper

    return helper.make_node(*args, **kw)


def _block(h, *, form="tile", layout="bhsd", hkv=2, keras_softmax=False, fill=-1e9, proj=False):
    """softmax(q k^T / sqrt(D) + mask) v over repeated K / V; q [B, H, S, D], k / v [B, Hkv, S, D]
    (layout bhsd) or [B, S, Hkv, D] (bshd: moved to heads-first after the repeat, as Keras does).
    keras_softmax: the mask as Keras' Softmax(mask) writes it, where(m, softmax(where(m, s, fill)), 0)
    with m a boolean keep-mask input [B, 1, S, S]. proj: k and v go through a MatMul by a [D, D]
    weight first (activations, as in a model, not graph inputs)."""
    kv = ["b", hkv, "s", D] if layout == "bhsd" else ["b", "s", hkv, D]
    nodes, consts = [], {"scale": np.array(D ** -0.5, np.float32), "fill": np.array(fill, np.float32),
                         "zero": np.array(0.0, np.float32)}
    for src, dst in (("k", "kr"), ("v", "vr")):
        if proj:
            consts[f"w{src}"] = (h.rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
            nodes.append(n("MatMul", [src, f"w{src}"], [f"{src}p"]))
            src = f"{src}p"
        more, c = _repeat(n, src, dst, form, layout, hkv)
        nodes += more
        consts.update(c)
    if layout == "bhsd":
        nodes += [n("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2])]
        v4 = "vr"
    else:
        nodes += [n("Transpose", ["kr"], ["kt"], perm=[0, 2, 3, 1]), n("Transpose", ["vr"], ["v4"], perm=[0, 2, 1, 3])]
        v4 = "v4"
    nodes += [n("MatMul", ["q", "kt"], ["sc"]), n("Mul", ["sc", "scale"], ["ss"])]
    if keras_softmax:
        nodes += [n("Where", ["m", "ss", "fill"], ["sw"]), n("Softmax", ["sw"], ["p0"], axis=-1),
                  n("Where", ["m", "p0", "zero"], ["p"])]
        mask = h.vi("m", ["b", 1, "s", "s"], 9)
    else:
        nodes += [n("Add", ["ss", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1)]
        mask = h.vi("mask", ["b", 1, "s", "s"])
    nodes += [n("MatMul", ["p", v4], ["y"])]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k", kv), h.vi("v", kv), mask]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", D])], consts, opset=18)


def _feeds(h, layout="bhsd", hkv=2, keras_softmax=False):
    kv = (B, hkv, S, D) if layout == "bhsd" else (B, S, hkv, D)
    keep = np.tril(np.ones((S, S), bool))[None, None].repeat(B, 0)
    keep[1, :, :, :2] = False   # left padding on row 1: its first two queries keep no key
    feeds = {"q": h.rng.standard_normal((B, H, S, D)).astype(np.float32),
             "k": h.rng.standard_normal(kv).astype(np.float32), "v": h.rng.standard_normal(kv).astype(np.float32)}
    if keras_softmax:
        feeds["m"] = keep
    else:
        feeds["mask"] = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
        feeds["mask"][1, :, :2, 0] = 0.0   # every row keeps a key in the additive form
    return feeds


def _attention(model):
    (node,) = [x for x in model.graph.node if x.op_type in ("GroupQueryAttention", "MultiHeadAttention")]
    return node


@pytest.mark.parametrize("form,layout", [("tile", "bhsd"), ("tile", "bshd"), ("concat", "bhsd"),
                                         ("gather", "bhsd"), ("gather", "bshd")])
def test_repeat_interleave_forms_fold_to_gqa(h, form, layout):
    """Each form of x[:, h] = k[:, h // n] becomes GroupQueryAttention on the 2 kv heads (ort) and
    Attention-23 on them (onnx). Before head_repeat only Unsqueeze -> Expand -> Reshape on [B,H,T,D]
    was folded: these fused as MultiHeadAttention over the copies (or, for Keras' layout, did not
    fold at all)."""
    model = _block(h, form=form, layout=layout)
    feeds = _feeds(h, layout)
    out = h.fuse(model, "ort")
    node = _attention(out)
    assert node.op_type == "GroupQueryAttention", h.ops(out)
    assert {a.name: a.i for a in node.attribute}["kv_num_heads"] == 2
    assert not {"Tile", "Gather", "Concat"} & set(h.ops(out)), h.ops(out)
    h.assert_close(model, out, feeds)
    res = onnx_fuse.optimize(model, level=3, target="onnx")
    assert res.report.rule_fires.get("attention-repeat-kv") == 1, res.report.rule_fires
    h.assert_close(model, res.to_proto(), feeds)


@pytest.mark.parametrize("form", ["tile-heads", "gather-mod"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_head_tiling_is_not_gqa(h, form, layout):
    """k.repeat(1, n, 1, 1) (Tile on the heads axis) and a Gather by i % Hkv give head h the kv head
    h % Hkv, not h // n: the attention fuses over the tiled K / V as they are (4 heads), with the
    original's numbers; GQA's head map would pair the wrong heads."""
    model = _block(h, form=form, layout=layout)
    out = h.fuse(model, "ort")
    assert _attention(out).op_type == "MultiHeadAttention", h.ops(out)
    assert "attention-repeat-kv" not in onnx_fuse.optimize(model, level=3, target="onnx").report.rule_fires
    h.assert_close(model, out, _feeds(h, layout))


def test_one_kv_head_tiled_on_heads_axis_is_mqa(h):
    """With one kv head, tiling the heads axis is a repeat_interleave too (h % 1 == h // H)."""
    model = _block(h, form="tile-heads", hkv=1)
    out = h.fuse(model, "ort")
    node = _attention(out)
    assert node.op_type == "GroupQueryAttention" and {a.name: a.i for a in node.attribute}["kv_num_heads"] == 1
    h.assert_close(model, out, _feeds(h, hkv=1))


def test_repeat_kv_rewrite_passes_its_local_check(h):
    """The rewrite reads the K / V before the repetition, which the match does not hold: the
    per-rewrite check computes the match's inputs from them (_local_check._bridge). Fed unrelated
    random data at both ends, it failed the check ('failed its numeric check, kept'), where K / V
    are activations (a graph input's cone of moves was computed already)."""
    model = _block(h, form="tile", layout="bshd", proj=True)
    res = onnx_fuse.optimize(model, level=3, target="ort", verify=True)
    assert res.report.rule_fires.get("attention-repeat-kv") == 1
    assert not [w for w in res.report.warnings if "numeric check" in w], res.report.warnings


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_keras_masked_softmax_fuses(h, target):
    """Keras' Softmax(mask): where(m, softmax(where(m, s, -1e9)), 0), keras-hub Llama's tf.repeat'd
    K / V: one GQA attention; the rows whose keys are all masked (left padding) stay 0."""
    model = _block(h, form="tile", layout="bshd", keras_softmax=True)
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out), h.ops(out)
    res = onnx_fuse.optimize(model, level=3, target=target)
    assert res.report.rule_fires.get("masked-softmax-keep-zero") == 1
    assert res.report.rule_fires.get("attention-repeat-kv") == 1
    h.assert_close(model, out, _feeds(h, "bshd", keras_softmax=True))


def test_keras_masked_softmax_small_fill_is_refused(h):
    """A fill of -1e3 is not far enough below the scores to weigh 0: not the -inf form."""
    model = _block(h, form="tile", layout="bshd", keras_softmax=True, fill=-1e3)
    assert any("large negative" in r for r in h.reasons(model, "onnx", "masked-softmax-keep-zero"))
    assert "Softmax" in h.ops(h.fuse(model, "onnx"))


def test_repeated_kv_read_elsewhere_still_folds(h):
    """The repetition is not matched: a second reader of the repeated K keeps it, the attention
    reads the kv heads (GQA) and both outputs keep the original's numbers."""
    model = _block(h, form="tile")
    model.graph.node.append(n("ReduceSum", ["kr"], ["side"], keepdims=0))
    model.graph.output.append(h.vi("side", []))
    out = h.fuse(model, "ort")
    assert _attention(out).op_type == "GroupQueryAttention" and "Tile" in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h))


def test_tiled_kv_cache_folds_with_its_past(h):
    """TorchScript's repeat_interleave over Concat(past, new): the fold leaves the Concat as the
    op's K / V, which attention-kv-cache then takes (past in, present out) on the kv heads."""
    hkv, P = 2, 3
    nodes, consts = [], {"scale": np.array(D ** -0.5, np.float32)}
    for x in ("k", "v"):
        nodes.append(n("Concat", [f"past_{x}", x], [f"present_{x}"], axis=2))
        more, c = _repeat(n, f"present_{x}", f"{x}r", "tile", "bhsd", hkv)
        nodes += more
        consts.update(c)
    nodes += [n("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "vr"], ["y"])]
    kv = ["b", hkv, "s", D]
    past = ["b", hkv, "p", D]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k", kv), h.vi("v", kv), h.vi("past_k", past),
              h.vi("past_v", past), h.vi("mask", ["b", 1, "s", "t"])]
    outputs = [h.vi("y", ["b", H, "s", D]), h.vi("present_k", ["b", hkv, "t", D]),
               h.vi("present_v", ["b", hkv, "t", D])]
    model = h.make_model(nodes, inputs, outputs, consts, opset=18)
    res = onnx_fuse.optimize(model, level=3, target="onnx")
    fires = res.report.rule_fires
    assert fires.get("attention-repeat-kv") == 1 and fires.get("attention-kv-cache") == 1, fires
    keep = np.tril(np.ones((S, P + S), bool), P)[None, None].repeat(B, 0)
    feeds = {"q": h.rng.standard_normal((B, H, S, D)).astype(np.float32),
             "mask": np.where(keep, 0.0, -np.inf).astype(np.float32)}
    for x in ("k", "v"):
        feeds[x] = h.rng.standard_normal((B, hkv, S, D)).astype(np.float32)
        feeds[f"past_{x}"] = h.rng.standard_normal((B, hkv, P, D)).astype(np.float32)
    h.assert_close(model, res.to_proto(), feeds)
