"""Causal + key padding masks rebuilt from attention_mask where Attention-23 / MultiHeadAttention keep a bias.

transformers 5's decoder mask is Where(key j <= P + query i and attention_mask[b, j], 0, min), written as
two index grids, a GatherND of attention_mask, Max / Expand / Concat, LessOrEqual, two And: about 20 ops,
plus the lowering's keep-masked-rows (Attention-23) or cache-mask's Expand chain (MultiHeadAttention
with a past). Attention-23's is_causal masks future keys with -inf, not the fill, so the bias has to
stay; but where the values prove the mask is that function (causal_key_padding in prefill,
cache_key_padding over a cache: rewrite/_mask_probe.py) and more ops die with it than the rebuilt
Where(And(LessOrEqual(Range(T), Range(P, T)[:, None]), attention_mask[:, None, None, :]), 0, fill)
adds (freed_ops), the lowering rebuilds it (rules/attention/lower.yaml causal-key-padding-bias,
cache-key-padding-bias): onnx / trt prefill, onnx and ort with a past. Checked against the original
with right, fully, left and inner padded rows (and a padded past), prefill at two lengths, decode at 3
and 1 new tokens. Near misses keep the export's bias: a fill per batch row, a sliding window, a mask
that another op reads.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as oh

from attention_testing import decoder_attention

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)
GLUE = {"GatherND", "Max", "Expand"}


def _mask_nodes(n, past: bool, kind: str) -> list:
    """transformers 5's causal + padding mask over attention_mask [B, P+S] -> ``mask`` [B,1,S,P+S].
    kind: plain; row_fills (batch row b masks with (b + 1) * -1e30); window (key j > P + i - 3
    too: a sliding window of 3); rows_late (batch rows past the second keep every key); band_rows (those rows
    keep every key at 2..4 new tokens in prefill, 2..4 cached ones with a past, only); chunk (every key at
    5..9 new tokens); short / short_past
    (every key kept below 5 new / cached tokens); free (plain, attention_mask declared [batch, mask_len], a length of
    its own); cut (free, attention_mask sliced to its first P + S columns first)."""
    nodes = [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i0"], ["nb"], axis=0),
             n("Gather", ["xs", "i1"], ["ns"], axis=0)]
    if past:
        nodes += [n("Shape", ["past_k"], ["pks"]), n("Gather", ["pks", "i2"], ["np"], axis=0),
                  n("Add", ["np", "ns"], ["nt"]), n("Range", ["i0", "nt", "i1"], ["rk"]),
                  n("Range", ["np", "nt", "i1"], ["rq"])]
        if kind == "cut":
            nodes += [n("Unsqueeze", ["nt", "ax0"], ["nt1"]),
                      n("Slice", ["attention_mask", "ax0", "nt1", "ax1"], ["am_cut"])]
    else:
        nodes += [n("Range", ["i0", "ns", "i1"], ["rk"]), n("Identity", ["rk"], ["rq"])]
    nodes += [n("Range", ["i0", "nb", "i1"], ["rb"]),
              n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Unsqueeze", ["rk", "ax012"], ["ki"]),
              n("Unsqueeze", ["rq", "ax013"], ["qi"]),
              n("Max", ["bi", "ki"], ["bk"]), n("Shape", ["bk"], ["bks"]),
              n("Expand", ["bi", "bks"], ["bix"]), n("Unsqueeze", ["bix", "axm1"], ["biu"]),
              n("Expand", ["ki", "bks"], ["kix"]), n("Unsqueeze", ["kix", "axm1"], ["kiu"]),
              n("Concat", ["biu", "kiu"], ["idx"], axis=-1),
              n("Cast", ["am_cut" if kind == "cut" else "attention_mask"], ["amb"], to=9),
              n("GatherND", ["amb", "idx"], ["keep"]), n("LessOrEqual", ["ki", "qi"], ["cz"]),
              n("And", ["keep", "cz"], ["keepc"])]
    cond = "keepc"
    if kind == "rows_late":   # batch rows past the second see every key (the proof's batch of 2 shows none)
        nodes += [n("Greater", ["bi", "i1"], ["later"]), n("Or", ["keepc", "later"], ["keepl"])]
        cond = "keepl"
    if kind == "chunk":   # every key kept at 5..9 new tokens over a cache (the proof's 3 and 1 show none)
        nodes += [n("GreaterOrEqual", ["ns", "i5"], ["c_lo"]), n("LessOrEqual", ["ns", "i9"], ["c_hi"]),
                  n("And", ["c_lo", "c_hi"], ["chunk"]), n("Or", [cond, "chunk"], ["keepk"])]
        cond = "keepk"
    if kind == "band_rows":   # rows past the second see every key at 2..4 new (prefill) or cached tokens only
        nodes += [n("GreaterOrEqual", ["np" if past else "ns", "i2"], ["b_lo"]),
                  n("LessOrEqual", ["np" if past else "ns", "i4"], ["b_hi"]), n("And", ["b_lo", "b_hi"], ["band"]),
                  n("Greater", ["bi", "i1"], ["later"]), n("And", ["band", "later"], ["bl"]),
                  n("Or", ["keepc", "bl"], ["keepb"])]
        cond = "keepb"
    if kind in ("short", "short_past"):   # every key kept below 5 new (short) or cached (short_past) tokens
        nodes += [n("Less", ["ns" if kind == "short" else "np", "i5"], ["few"]), n("Or", [cond, "few"], ["keeps"])]
        cond = "keeps"
    if kind == "window":
        nodes += [n("Sub", ["qi", "i3"], ["qw"]), n("Greater", ["ki", "qw"], ["inw"]),
                  n("And", ["keepc", "inw"], ["keepw"])]
        cond = "keepw"
    if kind == "row_fills":
        nodes += [n("Add", ["bi", "i1"], ["b1"]), n("Cast", ["b1"], ["b1f"], to=1),
                  n("Mul", ["b1f", "big"], ["fills"]), n("Where", [cond, "zero", "fills"], ["mask"])]
    else:
        nodes.append(n("Where", [cond, "zero", "fmin"], ["mask"]))
    return nodes


def _model(h, past: bool = False, kind: str = "plain", read_elsewhere: bool = False):
    """One decoder attention over ``mask`` (q / k / v biased projections of x; with ``past`` the
    keys and values are Concat(past, new) and the presents are outputs)."""
    n = h.node
    nodes, inputs, outputs, inits = decoder_attention(h, H, D, past)
    nodes = _mask_nodes(n, past, kind) + nodes
    inputs.insert(1, h.vi("attention_mask", ["batch", ("mask_len" if kind in ("free", "cut") else "total") if past else "seq"],
                          TensorProto.INT64))
    if read_elsewhere:   # the 4-D mask has another reader: it stays, nothing is saved
        nodes.append(n("ReduceMin", ["mask"], ["mask_min"], keepdims=0))
        outputs.append(h.vi("mask_min", []))
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
                  "i3": np.array(3, np.int64), "i4": np.array(4, np.int64), "i5": np.array(5, np.int64),
                  "i9": np.array(9, np.int64), "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
                  "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
                  "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64),
                  "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
                  "big": np.array(-1e30, np.float32)})
    return h.make_model(nodes, inputs, outputs, inits)


def _check(h, model, fused, past: bool, extra: int = 0, sizes=None):
    """Right, fully, left and inner padded rows (batch 4); with a past, a left-padded past too;
    ``extra``: attention_mask that many columns longer than the keys (ones); ``sizes``: (S, P) pairs."""
    rng = np.random.default_rng(2)
    for s, p in sizes or (((3, 5), (1, 6)) if past else ((7, 0), (3, 0))):
        am = np.ones((4, p + s + extra), np.int64)
        am[0, p + s - 1] = 0
        am[1, :] = 0
        am[2, : p + 1] = 0
        am[3, p // 2] = 0
        feeds = {"x": rng.standard_normal((4, s, HID)).astype(np.float32), "attention_mask": am}
        if past:
            feeds["past_k"] = rng.standard_normal((4, H, p, D)).astype(np.float32)
            feeds["past_v"] = rng.standard_normal((4, H, p, D)).astype(np.float32)
        h.assert_close(model, fused, feeds)


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_prefill_bias_rebuilt_at_attention_23(h, target):
    model = _model(h)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, ops
    assert not GLUE & set(ops), ops   # the export's grids and gather died
    assert ops["Where"] == 1 and ops["LessOrEqual"] == 1 and ops["And"] == 1, ops
    assert h.fired(fused)["attention-onnx" if target == "onnx" else "attention-trt"] >= 1
    _check(h, model, fused, past=False)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_cache_bias_rebuilt(h, target):
    """(trt: attention-kv-trt joins the caches and rebuilds the bias before attention-trt lowers it)"""
    model = _model(h, past=True)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    op = "com.microsoft::MultiHeadAttention" if target == "ort" else "Attention"
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    # (at trt attention-trt then raises the fill and broadcasts the rows: keep-masked-rows' Max, an Expand)
    assert not (GLUE if target != "trt" else {"GatherND"}) & set(ops), ops
    assert ops["Where"] == 1 and ops["LessOrEqual"] == 1 and ops["Range"] == 2, ops
    _check(h, model, fused, past=True)


@pytest.mark.parametrize("kind", ["free", "cut"])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_cache_bias_takes_a_longer_mask(h, target, kind):
    """transformers 5's grids read attention_mask's first P + S columns only, so an export that
    declares the mask's length apart from the keys' (the corpus's total_sequence) runs with a longer
    mask (a serving loop's fixed-size one); so must the rebuilt bias: it reads the input's columns
    0..P+S-1 (cache_padding_cut), by a Gather of the grid's key range. ``cut``: the export slices
    attention_mask itself first."""
    model = _model(h, past=True, kind=kind)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    assert "GatherND" not in h.ops(fused), h.ops(fused)   # the export's glue died: the bias was rebuilt
    # its values are read through the cut only (trt reads its shape as well): a Cast to bool, then a
    # Gather of key columns on axis 1
    readers = [n for n in fused.graph.node if "attention_mask" in n.input and n.op_type != "Shape"]
    assert [n.op_type for n in readers] == ["Cast"], readers
    cut = [n for n in fused.graph.node if readers[0].output[0] in n.input]
    axis = [oh.get_node_attr_value(n, "axis") if n.op_type == "Gather" else None for n in cut]
    assert [(n.op_type, n.input[0]) for n in cut] == [("Gather", readers[0].output[0])] and axis == [1], cut
    for extra in (0, 2):
        _check(h, model, fused, past=True, extra=extra)


@pytest.mark.parametrize("kind", ["row_fills", "window"])
@pytest.mark.parametrize("past", [False, True])
def test_other_masks_keep_the_bias(h, kind, past):
    """A fill per batch row is no single fill; a sliding window is no plain causal part: the export's
    bias stays (GatherND)."""
    model = _model(h, past=past, kind=kind)
    fused = h.fuse(model, "onnx")
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["GatherND"] == 1, ops
    _check(h, model, fused, past=past)


@pytest.mark.parametrize("past", [False, True])
def test_a_mask_read_elsewhere_keeps_the_bias(h, past):
    model = _model(h, past=past, read_elsewhere=True)
    fused = h.fuse(model, "onnx")
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["GatherND"] == 1, ops
    _check(h, model, fused, past=past)


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rows_past_the_second_keep_the_bias(h, target, past):
    """Batch rows past the second keeping every key are no key padding: the proof probes batches
    beside each constant of the cone and past them (with 2 rows only, every target rebuilt the bias
    from attention_mask or took its 2-D form: max abs 0.7-2.8 on batch rows 2 and 3)."""
    model = _model(h, past=past, kind="rows_late")
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["GatherND"] == 1 and ops["Or"] == 1, ops
    _check(h, model, fused, past=past)


@pytest.mark.parametrize("kind, past", [("short", False), ("short", True), ("short_past", True)])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_short_lengths_keep_the_bias(h, target, kind, past):
    """Every key kept below 5 new or cached tokens is no key padding there: the proof probes the
    query length (prefill) or the cache length either side of each constant of the cone, not only
    past them (prefill, probed at 16 tokens only, rebuilt the bias or took the 2-D key mask at every
    target: max abs 2.5-3.5 at 3 tokens)."""
    model = _model(h, past=past, kind=kind)
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["GatherND"] == 1 and ops["Or"] == 1, ops
    _check(h, model, fused, past=past, sizes=((3, 2), (1, 0), (2, 6)) if past else ((7, 0), (3, 0), (1, 0)))


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rows_late_at_some_lengths_keep_the_bias(h, target, past):
    """Batch rows past the second keeping every key at 2..4 new (prefill) or cached tokens only: the proof
    probes the batches beside each constant at each length it probes too (at the proof's own length
    only, every target rebuilt the bias or took the 2-D key mask: max abs 0.9-4.4 at 2..4 tokens)."""
    model = _model(h, past=past, kind="band_rows")
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["GatherND"] == 1 and ops["Or"] == 1, ops
    _check(h, model, fused, past=past, sizes=((3, 3), (1, 2), (2, 6)) if past else ((7, 0), (3, 0), (2, 0)))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_chunk_of_new_tokens_keeping_every_key_keeps_the_bias(h, target):
    """Over a cache, every key kept at 5..9 new tokens is no key padding there: the cache proof probes the
    new tokens' count either side of each constant and past them too (at 3 and 1 only, every target
    rebuilt the bias or took the 2-D key mask: max abs 2.2-3.7 at 5..9 new tokens)."""
    model = _model(h, past=True, kind="chunk")
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["GatherND"] == 1 and ops["Or"] == 1, ops
    _check(h, model, fused, past=True, sizes=((6, 2), (3, 4), (9, 0), (1, 6)))
