"""A causal mask computed from shapes alone lowers to the causal flag (causal_only, rewrite/_mask_probe.py).

Cohere ASR's decoder has no decoder attention_mask: transformers builds its self-attention mask from
shapes, the causal grid And-ed with the packed-sequence check (positions arange(S); a new sequence
wherever a position does not follow the one before: CumSum of Not(Equal(diff, 1)), equal ids kept),
which is all one sequence for those positions. The bias stayed at every column (no attention-mask
input for the key-padding proofs). causal_only proves on the values, at the lengths where the cone's
constants can flip a comparison and past them, with a batch of 1 and 2 and the other dims of what it
reads the shape of moved, that the mask is causal and nothing else with masked keys at (nearly)
-inf; the lowerings then drop the bias: unidirectional=1 (com.microsoft Attention /
MultiHeadAttention, with a past too), causal=1 (GroupQueryAttention), is_causal=1 (Attention-23,
bottom-right over past_key). Near misses keep the bias: positions read from an input (packed
sequences would make it block-diagonal), a sliding window, full attention below 5 tokens, a batch row
that sees every key, full attention when an encoder input is longer, a -1e4 fill.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from attention_testing import decoder_attention

H, D = 2, 8
MIN = float(np.finfo(np.float32).min)
GLUE = {"Where", "CumSum", "LessOrEqual", "Range"}


def _mask_nodes(n, past: bool, kind: str) -> list:
    """The causal grid (key j <= P + i) from Shape(x) (and the past's length), And-ed with the
    packed-sequence check over the positions in prefill, -> ``mask`` = Where(keep, 0, min)."""
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i0"], ["nb"], axis=0),
             n("Gather", ["xs", "i1"], ["ns"], axis=0)]
    if past:
        nodes += [n("Shape", ["past_k"], ["pks"]), n("Gather", ["pks", "i2"], ["np"], axis=0),
                  n("Add", ["np", "ns"], ["nt"]), n("Range", ["i0", "nt", "i1"], ["rk"]),
                  n("Range", ["np", "nt", "i1"], ["rq"])]
    else:
        nodes += [n("Range", ["i0", "ns", "i1"], ["rk"]), n("Identity", ["rk"], ["rq"])]
    nodes += [n("Unsqueeze", ["rk", "ax012"], ["ki"]), n("Unsqueeze", ["rq", "ax013"], ["qi"]),
              n("LessOrEqual", ["ki", "qi"], ["cz"])]
    keep = "cz"
    if not past:   # transformers' packed-sequence check: positions [B, S], CumSum of the jumps
        if kind == "positions":
            pos = "position_ids"
        else:
            pos = "pos"
            nodes += [n("Unsqueeze", ["nb", "ax0"], ["nb1"]), n("Concat", ["nb1", "one1"], ["es"], axis=0),
                      n("Unsqueeze", ["rq", "ax0"], ["rq2"]), n("Expand", ["rq2", "es"], ["pos"])]
        nodes += [n("Slice", [pos, "s0", "s1", "ax1"], ["first"]), n("Sub", ["first", "i1"], ["fm"]),
                  n("Concat", ["fm", pos], ["cat"], axis=1),
                  n("Slice", ["cat", "s1", "sbig", "ax1"], ["after"]), n("Slice", ["cat", "s0", "sm1", "ax1"], ["before"]),
                  n("Sub", ["after", "before"], ["jump"]), n("Equal", ["jump", "i1"], ["follows"]),
                  n("Not", ["follows"], ["starts"]), n("Cast", ["starts"], ["starts_i"], to=TensorProto.INT64),
                  n("CumSum", ["starts_i", "i1"], ["seq"]), n("Unsqueeze", ["seq", "ax13"], ["sq"]),
                  n("Unsqueeze", ["seq", "ax12"], ["sk"]), n("Equal", ["sq", "sk"], ["same"]),
                  n("And", ["cz", "same"], ["keep"])]
        keep = "keep"
    if kind == "long":   # more glue (always true: positions are >= 0) and the [B, 1, S, T] broadcast
        nodes += [n("Abs", ["ki"], ["ka"]), n("Equal", ["ka", "ki"], ["kpos"]), n("Abs", ["qi"], ["qa"]),
                  n("Equal", ["qa", "qi"], ["qpos"]), n("And", [keep, "kpos"], ["k1"]), n("And", ["k1", "qpos"], ["k2"]),
                  n("Shape", ["k2"], ["k2s"]), n("Slice", ["k2s", "s2", "s4", "s0"], ["st"]),
                  n("Unsqueeze", ["nb", "ax0"], ["nbl"]), n("Concat", ["nbl", "one1", "st"], ["bst"], axis=0),
                  n("Expand", ["k2", "bst"], ["kl"])]
        keep = "kl"
    if kind == "tie":   # 8 nodes of always-true glue over positions read elsewhere: 13 die, the rebuild's count
        for j, (op, a, b) in enumerate([("GreaterOrEqual", "ki", "i0"), ("GreaterOrEqual", "qi", "i0"),
                                        ("Greater", "ki", "sm1"), ("Greater", "qi", "sm1")]):
            nodes += [n(op, [a, b], [f"tg{j}"]), n("And", [keep, f"tg{j}"], [f"tk{j}"])]
            keep = f"tk{j}"
        nodes.append(n("Identity", ["rq"], ["cache_position"]))
    if kind == "window":   # a sliding window of 3 keys
        nodes += [n("Sub", ["qi", "i3"], ["qw"]), n("Greater", ["ki", "qw"], ["inw"]), n("And", [keep, "inw"], ["kw"])]
        keep = "kw"
    if kind == "short_full":   # every key visible below 5 tokens
        nodes += [n("Less", ["ns", "i5"], ["short"]), n("Or", [keep, "short"], ["kw"])]
        keep = "kw"
    if kind == "row_full":   # batch rows past the first see every key
        nodes += [n("Range", ["i0", "nb", "i1"], ["rb"]), n("Unsqueeze", ["rb", "ax123"], ["bi"]),
                  n("Greater", ["bi", "i0"], ["later"]), n("Or", [keep, "later"], ["kw"])]
        keep = "kw"
    if kind == "rows_late":   # batch rows past the second see every key (a batch of 2 shows none)
        nodes += [n("Range", ["i0", "nb", "i1"], ["rb"]), n("Unsqueeze", ["rb", "ax123"], ["bi"]),
                  n("Greater", ["bi", "i1"], ["later"]), n("Or", [keep, "later"], ["kw"])]
        keep = "kw"
    if kind == "batch_3":   # every key with a batch of exactly 3
        nodes += [n("Equal", ["nb", "i3"], ["b3"]), n("Or", [keep, "b3"], ["kw"])]
        keep = "kw"
    if kind == "band_batch":   # every key with a batch of 3 or more at 2..4 new tokens (not at 2 rows or past 4)
        nodes += [n("GreaterOrEqual", ["ns", "i2"], ["lo"]), n("LessOrEqual", ["ns", "i4"], ["hi"]),
                  n("GreaterOrEqual", ["nb", "i3"], ["b3"]), n("And", ["lo", "hi"], ["band"]),
                  n("And", ["band", "b3"], ["bb"]), n("Or", [keep, "bb"], ["kw"])]
        keep = "kw"
    if kind == "enc_longer":   # every key visible when another input (an encoder's states) is longer
        nodes += [n("Shape", ["enc"], ["encs"]), n("Gather", ["encs", "i1"], ["ne"], axis=0),
                  n("Greater", ["ne", "ns"], ["longer"]), n("Or", [keep, "longer"], ["kw"])]
        keep = "kw"
    nodes.append(n("Where", [keep, "zero", "fsmall" if kind == "fill_1e4" else "fmin"], ["mask"]))
    return nodes


def _model(h, attn: str = "packed", past: bool = False, kind: str = "plain", d: int = D):
    """One self-attention over ``mask``. attn: packed (q, k, v biased projections of x: ORT's packed
    Attention), mha (q without a bias: MultiHeadAttention), gqa (one kv head repeated); ``d`` the
    head size."""
    n = h.node
    hid = H * d
    attention, inputs, outputs, inits = decoder_attention(h, H, d, past, kv_heads=1 if attn == "gqa" else H,
                                                          q_bias=attn != "mha")
    if kind == "positions":
        inputs.insert(1, h.vi("position_ids", ["batch", "seq"], TensorProto.INT64))
    if kind == "enc_longer":
        inputs.insert(1, h.vi("enc", ["batch", "enc_seq", hid]))
    if kind == "tie":   # the cache positions are an output too (Whisper's position embedding reads them)
        outputs.append(h.vi("cache_position", ["seq"], TensorProto.INT64))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
                  "i3": np.array(3, np.int64), "i4": np.array(4, np.int64), "i5": np.array(5, np.int64),
                  "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "ax12": np.array([1, 2], np.int64),
                  "ax13": np.array([1, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
                  "ax013": np.array([0, 1, 3], np.int64), "ax123": np.array([1, 2, 3], np.int64),
                  "one1": np.array([1], np.int64), "s0": np.array([0], np.int64), "s1": np.array([1], np.int64),
                  "s2": np.array([2], np.int64), "s4": np.array([4], np.int64),
                  "sm1": np.array([-1], np.int64), "sbig": np.array([2 ** 62], np.int64),
                  "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
                  "fsmall": np.array(-1e4, np.float32)})
    return h.make_model(_mask_nodes(n, past, kind) + attention, inputs, outputs, inits)


def _check(h, model, fused, past: bool, kind: str = "plain"):
    """Batches of 1 and 3 at several lengths (with a past: 1 and 5 cached, 1 and 3 new)."""
    rng = np.random.default_rng(2)
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    hid = dims["x"][2]
    hkv = dims["past_k"][1] if "past_k" in dims else H
    shapes = [(1, 1, 5), (3, 3, 1), (3, 4, 5)] if past else [(1, 1, 0), (3, 4, 0), (3, 7, 0), (2, 9, 0)]
    for b, s, p in shapes:
        feeds = {"x": rng.standard_normal((b, s, hid)).astype(np.float32)}
        if past:
            feeds["past_k"] = rng.standard_normal((b, hkv, p, hid // H)).astype(np.float32)
            feeds["past_v"] = rng.standard_normal((b, hkv, p, hid // H)).astype(np.float32)
        if kind == "positions":   # two packed sequences in the last row
            pos = np.tile(np.arange(s, dtype=np.int64), (b, 1))
            pos[-1, s // 2:] -= s // 2
            feeds["position_ids"] = pos
        if kind == "enc_longer":
            feeds["enc"] = np.zeros((b, s + 2, hid), np.float32)
        h.assert_close(model, fused, feeds)


def _attr(model, op: str, name: str) -> list[int]:
    return [helper.get_attribute_value(a) for nd in model.graph.node if nd.op_type == op
            for a in nd.attribute if a.name == name]


@pytest.mark.parametrize("attn, op, flag", [("packed", "com.microsoft::Attention", "unidirectional"),
                                            ("mha", "com.microsoft::MultiHeadAttention", "unidirectional"),
                                            ("gqa", "com.microsoft::GroupQueryAttention", "causal")])
def test_prefill_causal_flag_at_ort(h, attn, op, flag):
    model = _model(h, attn)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    assert _attr(fused, op.split("::")[1], flag) == [1], ops
    assert not GLUE & set(ops), ops   # the grid, the packed-sequence check and the bias died
    _check(h, model, fused, past=False)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_prefill_is_causal_at_attention_23(h, target):
    model = _model(h)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and _attr(fused, "Attention", "is_causal") == [1], ops
    assert not GLUE & set(ops), ops
    _check(h, model, fused, past=False)


def test_fused_attention_plugin_takes_the_flag(h):
    """trt-O4 (plugins on float32, the NumPy reference runs them): Attention-23 with is_causal=1
    and no mask becomes FusedAttention(causal=1) without seq_lens (fused-attention-trt-is-causal)."""
    model = _model(h, d=64)
    fused = h.fuse(model, "trt", level=4)
    ops = h.ops(fused)
    assert ops["onnx_fuse::FusedAttention"] == 1 and ops["Attention"] == 0, ops
    assert _attr(fused, "FusedAttention", "causal") == [1] and not GLUE & set(ops), ops
    assert h.fired(fused)["fused-attention-trt-is-causal"] == 1
    _check(h, model, fused, past=False)


@pytest.mark.parametrize("target, op, flag", [("ort", "MultiHeadAttention", "unidirectional"),
                                              ("onnx", "Attention", "is_causal")])
def test_cache_causal_flag(h, target, op, flag):
    """Over a cache the flag is offset by the past's length (key j <= P + i) in both ops."""
    model = _model(h, past=True)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    assert _attr(fused, op, flag) == [1], ops
    assert not GLUE & set(ops), ops
    _check(h, model, fused, past=True)


@pytest.mark.parametrize("level", [3, 4])
def test_cache_causal_bias_rebuilt_at_trt(h, level):
    """trt joins the caches (attention-kv-trt): Attention-23 gets no past_key to align is_causal by, so
    a causal mask from shapes over the cache is rebuilt as Where(key j <= P + i, 0, lowest) (cache-causal-bias)
    where that makes the graph smaller (net_nodes)."""
    model = _model(h, past=True, kind="long")
    fused = h.fuse(model, "trt", level=level)
    ops = h.ops(fused)
    assert ops["Abs"] == 0 and ops["Equal"] == 0 and ops["LessOrEqual"] == 1 and ops["Range"] == 2, ops
    _check(h, model, fused, past=True)


def test_cache_causal_bias_rebuilt_at_a_tie(h):
    """As many of the export's nodes die (13) as the rebuild and attention-trt's broadcast have: the rebuild shares
    the past-length reads and positions the graph computes anyway (Whisper's position embedding), so it nets fewer
    than it frees, which net_nodes counts (Whisper's decoder 109 -> 104 at trt-O4)."""
    model = _model(h, past=True, kind="tie")
    fused = h.fuse(model, "trt", level=4)
    ops = h.ops(fused)
    assert ops["And"] == 0 and ops["GreaterOrEqual"] == 0 and ops["Greater"] == 0 and ops["LessOrEqual"] == 1, ops
    assert len(fused.graph.node) < 39, ops   # 39 with the export's mask kept
    _check(h, model, fused, past=True)


@pytest.mark.parametrize("kind", ["positions", "window", "short_full", "row_full", "rows_late", "batch_3",
                                  "band_batch", "enc_longer", "fill_1e4"])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_other_masks_keep_the_bias(h, kind, target):
    """Positions read from an input (block-diagonal for packed sequences), a window of 3, every key
    below 5 tokens (the probe tries lengths beside each constant), a later batch row seeing every
    key (the probe runs a batch of 2), rows past the second or a batch of 3 seeing every key (the
    probe runs batches beside each constant and past them), every key for a batch of 3 at 2..4 tokens
    only (the batches are probed at every probed length too), every key when an encoder input is
    longer (the probe moves the other dims it reads the shape of), a -1e4 fill: no causal flag, the
    bias stays."""
    model = _model(h, kind=kind)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    flags = _attr(fused, "Attention", "unidirectional" if target == "ort" else "is_causal")
    assert not any(flags) and ops["Where"] >= 1, ops
    _check(h, model, fused, past=False, kind=kind)


def test_cache_window_keeps_the_bias(h):
    model = _model(h, past=True, kind="window")
    fused = h.fuse(model, "ort")
    assert not any(_attr(fused, "MultiHeadAttention", "unidirectional")), h.ops(fused)
    _check(h, model, fused, past=True)


@pytest.mark.parametrize("kind", ["rows_late", "batch_3", "band_batch"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_cache_mask_by_batch_keeps_the_bias(h, kind, target):
    """Over a cache too (trt: no cache-causal-bias rebuild either): batches of 3 see every key (at 2..4
    new tokens only: band_batch)."""
    model = _model(h, past=True, kind=kind)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    flags = _attr(fused, "MultiHeadAttention" if target == "ort" else "Attention",
                  "unidirectional" if target == "ort" else "is_causal")
    ops = h.ops(fused)
    assert not any(flags) and ops["Or"] == 1, ops
    _check(h, model, fused, past=True)


def _mask_length_model(h, past: bool):
    """A causal grid whose query positions are read from attention_mask's length (declared apart:
    [batch, mask_len]), its values unused: key j kept for query i when j <= T - S + i, T the mask's
    length. With T = P + S that is the causal mask; with a longer or shorter attention_mask, which
    the model takes, it is not."""
    n = h.node
    attention, inputs, outputs, inits = decoder_attention(h, H, D, past)
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["ns"], axis=0),
             n("Shape", ["attention_mask"], ["ams"]), n("Gather", ["ams", "i1"], ["nm"], axis=0),
             n("Sub", ["nm", "ns"], ["q0"]), n("Range", ["q0", "nm", "i1"], ["rq"])]
    if past:
        nodes += [n("Shape", ["past_k"], ["pks"]), n("Gather", ["pks", "i2"], ["np"], axis=0),
                  n("Add", ["np", "ns"], ["nt"]), n("Range", ["i0", "nt", "i1"], ["rk"])]
    else:
        nodes.append(n("Range", ["i0", "ns", "i1"], ["rk"]))
    nodes += [n("Unsqueeze", ["rk", "ax0"], ["ki"]), n("Unsqueeze", ["rq", "ax1"], ["qi"]),
              n("LessOrEqual", ["ki", "qi"], ["keep"]), n("Where", ["keep", "zero", "fmin"], ["mask"])]
    inputs.insert(1, h.vi("attention_mask", ["batch", "mask_len"], TensorProto.INT64))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
                  "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64),
                  "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32)})
    return h.make_model(nodes + attention, inputs, outputs, inits)


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_positions_from_the_mask_length_keep_the_bias(h, target, past):
    """causal_only feeds attention_mask P + S long; a mask that reads only its length is probed with
    it 2 longer and 1 shorter as well (the lengths a [batch, mask_len] input takes): with the flag
    every target was wrong by 2-4 on a mask 2 longer."""
    model = _mask_length_model(h, past)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert h.ops(fused)["Where"] == 1, h.ops(fused)
    rng = np.random.default_rng(3)
    for extra in (0, 2, -1):
        for b, s, p in ((2, 4, 3), (1, 1, 5)) if past else ((2, 4, 0), (1, 6, 0)):
            feeds = {"x": rng.standard_normal((b, s, H * D)).astype(np.float32),
                     "attention_mask": np.ones((b, p + s + extra), np.int64)}
            if past:
                feeds["past_k"] = rng.standard_normal((b, H, p, D)).astype(np.float32)
                feeds["past_v"] = rng.standard_normal((b, H, p, D)).astype(np.float32)
            h.assert_close(model, fused, feeds)
