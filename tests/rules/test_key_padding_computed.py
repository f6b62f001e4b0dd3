"""A key-padding mask over a COMPUTED [B, S] boolean key mask, lowered to the canonical key mask.

Audio encoders compute their frame mask: AudioFlamingo 3 / LASR as arange(S') < lengths' (lengths
after the conv stride, from a [B, frames] mask's sum), Nemotron 3's diarization encoder as a strided
Slice of attention_mask over the subsampled frames. transformers 5's vmap mask then gathers that km
over batch / key index grids (GatherND, Max, Expand, Concat, And, Where: ~20 ops). The key-padding
proof (rewrite/_mask_probe.py) used to feed only a graph input as the attention mask; it now also
tries the boolean [B, S] values the mask is computed from (S: q's length), fed as the attention mask
with the cone cut there, and proves on the values that the 4-D bias is Where(km[b, j], 0, fill). Then
the ort ops read Cast(km) as their 2-D key mask and Attention-23 reads Where(km, 0, fill') [B,1,1,S]:
the glue after km dies, km's own ops stay. Checked with rows of different lengths, length 0 included
(a fully padded row: the export's finite min averages every key, and so does the key mask).
Near misses keep the bias: km masking query rows (not keys), a mask that also reads another input.
Cross-attention (the encoder's keys, another length than the queries): the probe binds the keys to
their own count, so encoder_attention_mask's key padding is proven over T keys (Cohere ASR's decoder);
a causal part over those keys keeps the bias.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, D = 2, 8
HID = H * D
S = 7
MIN = float(np.finfo(np.float32).min)
GLUE = {"GatherND", "Max", "Concat", "And"}


def _scores_core(n):
    """q4 k4^T * scale + mask, softmax, times v4, heads merged back to y (the two graphs' shared end)."""
    return [n("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q4", "kt"], ["sc"]),
            n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
            n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v4"], ["o"]),
            n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]


def _vmap(n, km: str, rows: bool = False) -> list:
    """transformers 5's padding_mask[batch_idx, kv_idx] over ``km`` [B, S] (bool) -> ``mask``
    [B,1,1,S] float (``rows``: indexed by the query instead, [B,1,S,1])."""
    ki = ["ax012", "ax013"][rows]
    return [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i0"], ["nb"], axis=0),
            n("Gather", ["xs", "i1"], ["ns"], axis=0), n("Range", ["i0", "nb", "i1"], ["rb"]),
            n("Range", ["i0", "ns", "i1"], ["rs"]),
            n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Unsqueeze", ["rs", ki], ["ki"]),
            n("Max", ["bi", "ki"], ["bk"]), n("Shape", ["bk"], ["bks"]),
            n("Expand", ["bi", "bks"], ["bix"]), n("Unsqueeze", ["bix", "axm1"], ["biu"]),
            n("Expand", ["ki", "bks"], ["kix"]), n("Unsqueeze", ["kix", "axm1"], ["kiu"]),
            n("Concat", ["biu", "kiu"], ["idx"], axis=-1), n("GatherND", [km, "idx"], ["keep"]),
            n("And", ["alltrue", "keep"], ["keep2"]), n("Where", ["keep2", "zero", "fmin"], ["mask"])]


def _model(h, kind: str, packed: bool = True, rows: bool = False):
    """One encoder attention over x [B, S, HID] with km computed per ``kind``:
    lengths  : arange(S) < lengths[:, None] (an int64 [B] input, no mask-named [B, S] input);
    strided  : Cast(attention_mask[:, ::2], bool), attention_mask [B, 2S] (subsampled frames);
    features : frames whose features are not all zero (km from x's values, an activation);
    extra    : km = lengths' and a second mask input's columns And-ed in the bias (two sources)."""
    n = h.node
    nodes: list = []
    inputs = [h.vi("x", ["batch", S, HID])]
    if kind in ("lengths", "extra"):
        inputs.append(h.vi("lengths", ["batch"], TensorProto.INT64))
        nodes += [n("Range", ["i0", "s_len", "i1"], ["ar"]), n("Unsqueeze", ["lengths", "ax1"], ["len2"]),
                  n("Less", ["ar", "len2"], ["km"])]
    elif kind == "strided":
        inputs.append(h.vi("attention_mask", ["batch", 2 * S], TensorProto.INT64))
        nodes += [n("Slice", ["attention_mask", "i0_1", "big_1", "ax1", "two_1"], ["ams"]),
                  n("Cast", ["ams"], ["km"], to=9)]
    elif kind == "features":
        nodes += [n("Abs", ["x"], ["xa"]), n("ReduceMax", ["xa", "axm1"], ["xm"], keepdims=0),
                  n("Greater", ["xm", "zero"], ["km"])]
    nodes += _vmap(n, "km", rows)
    if kind == "extra":   # another mask's columns And-ed in after the gather: not km's padding alone
        inputs.append(h.vi("other_mask", ["batch", S], TensorProto.BOOL))
        nodes[-1] = n("And", ["keep2", "om4"], ["keep3"])
        nodes += [n("Unsqueeze", ["other_mask", "ax12"], ["om4"]), n("Where", ["keep3", "zero", "fmin"], ["mask"])]
    if packed:
        for c in "qkv":
            nodes += [n("MatMul", ["x", f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"])]
    else:
        inputs += [h.vi(f"{c}3", ["batch", S, HID]) for c in "qkv"]
    for c in "qkv":
        nodes += [n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]),
                  n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    nodes += _scores_core(n)
    rng = np.random.default_rng(1)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "s_len": np.array(S, np.int64),
             "i0_1": np.array([0], np.int64), "big_1": np.array([2 * S], np.int64), "two_1": np.array([2], np.int64),
             "ax1": np.array([1], np.int64), "ax12": np.array([1, 2], np.int64),
             "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
             "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
             "alltrue": np.ones((1, 1, S, S), bool), "zero": np.array(0.0, np.float32),
             "fmin": np.array(MIN, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    if packed:
        for c in "qkv":
            inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
            inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", S, HID])], inits)


LENGTHS = np.array([7, 0, 3, 5], np.int64)   # full, none (a fully padded row), two partial


def _feeds(model) -> dict:
    rng = np.random.default_rng(2)
    b = len(LENGTHS)
    feeds = {}
    for i in model.graph.input:
        if i.name == "lengths":
            feeds[i.name] = LENGTHS
        elif i.name == "attention_mask":   # frame f kept iff f // 2 < length: [B, 2S], read every other
            feeds[i.name] = (np.arange(2 * S)[None, :] // 2 < LENGTHS[:, None]).astype(np.int64)
        elif i.name == "other_mask":
            feeds[i.name] = np.arange(S)[None, :] % 3 != np.arange(b)[:, None] % 3
        else:
            x = rng.standard_normal((b, S, HID)).astype(np.float32)
            if i.name == "x":   # padded frames are zero (what the features kind reads)
                x *= (np.arange(S)[None, :] < LENGTHS[:, None])[..., None]
            feeds[i.name] = x
    return feeds


def _key_mask_source(fused, op: str) -> str:
    node = next(x for x in fused.graph.node if x.op_type == op)
    slot = 3 if op == "Attention" else 4   # mask_index / key_padding_mask
    assert len(node.input) == slot + 1, node.input   # no 4-D attention_bias beside it
    cast = next(x for x in fused.graph.node if node.input[slot] in x.output)
    assert cast.op_type == "Cast", cast
    return cast.input[0]


@pytest.mark.parametrize("kind", ["lengths", "strided", "features"])
@pytest.mark.parametrize("packed", [True, False])
def test_computed_key_mask_at_ort(h, kind, packed):
    model = _model(h, kind, packed)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    op = "Attention" if packed else "MultiHeadAttention"
    assert ops[f"com.microsoft::{op}"] == 1 and ops["Softmax"] == 0, ops
    assert _key_mask_source(fused, op) == "km" or kind == "strided", fused.graph.node
    assert not GLUE & set(ops) and ops["Where"] == 0, ops   # the vmap glue died
    fill = next(a.f for x in fused.graph.node if x.op_type == op for a in x.attribute if a.name == "mask_filter_value")
    assert fill == np.float32(MIN)
    h.assert_close(model, fused, _feeds(model))


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_computed_key_mask_at_attention_23(h, target):
    model = _model(h, "lengths")
    fused = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(fused)
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, ops
    # Unsqueeze(Cast(km)) -> Where(., 0, fill') broadcast to the rows; the gather glue died
    assert not (GLUE - {"Concat"}) & set(ops) and ops["Where"] == 1, ops
    h.assert_close(model, fused, _feeds(model))


def test_query_row_mask_keeps_the_bias(h):
    """km indexed by the query (row i masked iff km[b, i] is false): no key padding, the bias stays."""
    model = _model(h, "lengths", rows=True)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 1 and ops["GatherND"] == 1, ops
    node = next(x for x in fused.graph.node if x.op_type == "Attention")
    assert len(node.input) == 6 and node.input[3] == "", node.input
    h.assert_close(model, fused, _feeds(model))


def test_a_second_mask_source_keeps_the_bias(h):
    """The mask also reads another input's values after km's gather: km's padding alone is not the
    mask (the probe feeds km only), the bias stays."""
    model = _model(h, "extra")
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::Attention"] == 1 and ops["GatherND"] == 1, ops
    node = next(x for x in fused.graph.node if x.op_type == "Attention")
    assert len(node.input) == 6 and node.input[3] == "", node.input
    h.assert_close(model, fused, _feeds(model))


def _cross_model(h, causal_part: bool = False):
    """Decoder queries x [B, S, HID] over encoder keys e [B, T, HID] (T another symbol), masked by
    encoder_attention_mask [B, T] through transformers 5's gather (Cohere ASR's, BART's cross mask);
    ``causal_part``: key j > query i masked too (not key padding alone)."""
    n = h.node
    nodes = [n("Shape", ["e"], ["es"]), n("Gather", ["es", "i0"], ["nb"], axis=0),
             n("Gather", ["es", "i1"], ["nt"], axis=0), n("Range", ["i0", "nb", "i1"], ["rb"]),
             n("Range", ["i0", "nt", "i1"], ["rt"]),
             n("Unsqueeze", ["rb", "ax123"], ["bi"]), n("Unsqueeze", ["rt", "ax012"], ["ki"]),
             n("Max", ["bi", "ki"], ["bk"]), n("Shape", ["bk"], ["bks"]),
             n("Expand", ["bi", "bks"], ["bix"]), n("Unsqueeze", ["bix", "axm1"], ["biu"]),
             n("Expand", ["ki", "bks"], ["kix"]), n("Unsqueeze", ["kix", "axm1"], ["kiu"]),
             n("Concat", ["biu", "kiu"], ["idx"], axis=-1), n("Cast", ["encoder_attention_mask"], ["emb"], to=9),
             n("GatherND", ["emb", "idx"], ["keep"])]
    cond = "keep"
    if causal_part:
        nodes += [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i1"], ["ns"], axis=0),
                  n("Range", ["i0", "ns", "i1"], ["rs"]), n("Unsqueeze", ["rs", "ax013"], ["qi"]),
                  n("LessOrEqual", ["ki", "qi"], ["cz"]), n("And", ["keep", "cz"], ["keepc"])]
        cond = "keepc"
    nodes.append(n("Where", [cond, "zero", "fmin"], ["mask"]))
    for c, src in (("q", "x"), ("k", "e"), ("v", "e")):
        nodes += [n("MatMul", [src, f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"]),
                  n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]),
                  n("Transpose", [f"{c}r"], [f"{c}4"], perm=[0, 2, 1, 3])]
    nodes += _scores_core(n)
    rng = np.random.default_rng(1)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "ax123": np.array([1, 2, 3], np.int64), "ax012": np.array([0, 1, 2], np.int64),
             "ax013": np.array([0, 1, 3], np.int64), "axm1": np.array([-1], np.int64),
             "zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    for c in "qkv":
        inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
        inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
    inputs = [h.vi("x", ["batch", "seq", HID]), h.vi("e", ["batch", "enc", HID]),
              h.vi("encoder_attention_mask", ["batch", "enc"], TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", "seq", HID])], inits)


def _cross_check(h, model, fused):
    """Encoder rows right, fully, left and inner padded; 5 queries over 9 keys, 1 over 4, 6 over 6."""
    rng = np.random.default_rng(2)
    for s, t in ((5, 9), (1, 4), (6, 6)):
        em = np.ones((4, t), np.int64)
        em[0, t - 2:] = 0
        em[1, :] = 0
        em[2, :2] = 0
        em[3, t // 2] = 0
        feeds = {"x": rng.standard_normal((4, s, HID)).astype(np.float32),
                 "e": rng.standard_normal((4, t, HID)).astype(np.float32), "encoder_attention_mask": em}
        h.assert_close(model, fused, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_cross_attention_key_mask(h, target):
    """Keys of another length (the encoder's): the probe binds them to their own count (not q's), so
    the mask is proven encoder_attention_mask's key padding over T keys; MultiHeadAttention reads it
    as its [B, T] key_padding_mask, Attention-23 as Where(m, 0, fill') [B,1,1,T]."""
    model = _cross_model(h)
    fused = h.fuse(model, target)
    ops = h.ops(fused)
    if target == "ort":
        assert ops["com.microsoft::MultiHeadAttention"] == 1, ops
        assert _key_mask_source(fused, "MultiHeadAttention") == "encoder_attention_mask"
    else:   # (the Concat / Expand broadcast the [B,1,1,T] bias to the query rows)
        assert ops["Attention"] == 1 and ops["Where"] == 1, ops
    assert not (GLUE - {"Concat"}) & set(ops) and ops["GatherND"] == 0 and ops["Softmax"] == 0, ops
    _cross_check(h, model, fused)


def test_cross_attention_with_a_causal_part_keeps_the_bias(h):
    """Key j > query i masked too over the encoder's keys: no key padding alone, the bias stays."""
    model = _cross_model(h, causal_part=True)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::MultiHeadAttention"] == 1 and ops["GatherND"] == 1, ops
    _cross_check(h, model, fused)
