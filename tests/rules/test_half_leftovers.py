"""Half-precision leftovers of the hold-out sweeps (docs/holdout.md, "half-precision leftovers (session 13)"):
float16 GPT-1, whose padding mask is arithmetic on the attention mask, (1 - m) * finfo.min, beside its
causal 0/1 multiplier (1 - b) * -1e4 (unfused on onnx / trt before: the padding term was an unknown
bias and the causal one bounded by 2e4, not 1e4). Each graph runs before and after in ONNX Runtime,
on right- and left-padded rows and a row with no key kept."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

F16 = TensorProto.FLOAT16
B, H, S, D, MAXPOS = 3, 2, 6, 8, 16
ATTN = ("Attention", "com.microsoft::MultiHeadAttention", "onnx_fuse::FusedAttention")
MASKS = {"right": [[1] * S, [1] * 4 + [0] * 2, [1] * S], "left": [[1] * S, [0] * 2 + [1] * 4, [1] * S],
         "no_key": [[1] * S, [0] * S, [1] * S]}


def _gpt1_half(h, *, pad_fill=-65504.0, dtype=F16, mask_dtype=TensorProto.INT64, via_bool=False, clip=False):
    """float16 GPT-1 attention: s * b + (1 - b) * -1e4 + (1 - Cast(m)) * pad_fill, b the causal 0/1
    buffer sliced to the sequence at run time, m the [B, T] attention mask unsqueezed to [B, 1, 1, T]
    (``via_bool``: the mask input cast to bool and back to its integer type first; ``clip``: the
    integer input clamped to [0, 1] first, attention_mask.clamp(0, 1))."""
    n = h.node
    np_t = np.float16 if dtype == F16 else np.float32
    nodes = [n("Shape", ["q"], ["sl"], start=2, end=3), n("Slice", ["buf", "zero", "sl", "two"], ["b2"]),
             n("Slice", ["b2", "zero", "sl", "three"], ["b"]),
             n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["qk"]),
             n("Div", ["qk", "four"], ["s"]), n("Mul", ["s", "b"], ["sb"]),
             n("Sub", ["one", "b"], ["nb"]), n("Mul", ["nb", "cfill"], ["cm"]), n("Add", ["sb", "cm"], ["sc"]),
             n("Unsqueeze", ["attention_mask", "ax12"], ["am"]), n("Cast", ["am"], ["amf"], to=dtype),
             n("Sub", ["one", "amf"], ["nam"]), n("Mul", ["nam", "pfill"], ["pad"]), n("Add", ["sc", "pad"], ["sp"]),
             n("Softmax", ["sp"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["o4"]),
             n("Transpose", ["o4"], ["o"], perm=[0, 2, 1, 3])]  # [B, S, H, D]: rows by query position
    inits = {"buf": np.tril(np.ones((MAXPOS, MAXPOS), np_t))[None, None], "zero": np.array([0], np.int64),
             "two": np.array([2], np.int64), "three": np.array([3], np.int64), "four": np.array(4.0, np_t),
             "one": np.array(1.0, np_t), "cfill": np.array(-1e4, np_t), "pfill": np.array(pad_fill, np_t),
             "ax12": np.array([1, 2], np.int64)}
    if via_bool:
        nodes[10:10] = [n("Cast", ["attention_mask"], ["amb"], to=TensorProto.BOOL), n("Cast", ["amb"], ["ami"], to=mask_dtype)]
        nodes[12].input[0] = "ami"
    if clip:
        nodes[10:10] = [n("Clip", ["attention_mask", "lo", "hi"], ["ami"])]
        nodes[11].input[0] = "ami"
        inits.update(lo=np.array(0, np.int64), hi=np.array(1, np.int64))
    dims = ["batch", H, "seq", D]
    inputs = [h.vi(x, dims, dtype) for x in ("q", "k", "v")] + [h.vi("attention_mask", ["batch", "seq"], mask_dtype)]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", "seq", H, D], dtype)], inits)


def _feeds(h, mask, np_t=np.float16, mask_np=np.int64):
    f = {x: h.rng.standard_normal((B, H, S, D)).astype(np_t) for x in ("q", "k", "v")}
    f["attention_mask"] = np.array(MASKS[mask], mask_np)
    return f


def _attn(h, model):
    return sum(h.ops(model)[k] for k in ATTN)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
@pytest.mark.parametrize("mask_dtype,via_bool,clip", [(TensorProto.BOOL, False, False), (TensorProto.INT64, True, False),
                                                     (TensorProto.INT64, False, True)],
                         ids=["bool", "int64_of_bool", "int64_clipped"])
def test_float16_gpt1_arithmetic_padding_mask_fuses_on_every_target(h, target, level, mask_dtype, via_bool, clip):
    """0/1 on onnx-O3 and trt-O4 before (the two float16 terms stayed two additions); within float16
    rounding of the original on every row of a right-padded batch and of one with no key kept, and on
    the unpadded rows of a left-padded one. (A left-padded query whose causal keys are all padding weighs
    its later keys uniformly in the original, s * b being 0 there; scores-binary-mask's s + m gives them
    their scores, in float32 too: a padded position's output, not compared.) The mask is proven 0 / 1:
    a bool input, an int64 one cast to bool and back, or one clamped to [0, 1] (Clip, value_range)."""
    model = _gpt1_half(h, mask_dtype=mask_dtype, via_bool=via_bool, clip=clip)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    for mask in MASKS:
        f = _feeds(h, mask, mask_np=bool if mask_dtype == TensorProto.BOOL else np.int64)
        if (via_bool or clip) and mask == "right":
            f["attention_mask"][0, 0] = 2   # read as kept through the bool or the clamp, as the original does
        h.assert_close(model, out, f, atol=4e-3, rtol=4e-3, valid=f["attention_mask"] if mask == "left" else None)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_float16_gpt1_integer_mask_input_is_not_read_as_a_select(h, target, level):
    """An int64 attention_mask input may hold 2 (the original pushes that key up by 65504) or -1
    ((1 - -1) * -65504 is -inf in float16): (1 - m) * F is no select there, so the rule refuses
    (it rewrote it before: 2.6-3.5 off with m = 2, 1.6-2.4 with m = -1) and the outputs stay the
    original's (ort still fuses the attention, with the sum as its bias)."""
    model = _gpt1_half(h)
    reasons = h.reasons(model, target, "padding-mask-arith-select-half")
    assert any("proven to hold only 0 and 1" in r for r in reasons), reasons
    out = h.fuse(model, target, level)
    for value in (2, -1):
        f = _feeds(h, "right")
        f["attention_mask"][1, 1] = value
        f["attention_mask"][2, 3] = value
        h.assert_close(model, out, f, atol=4e-3, rtol=4e-3)


def test_float16_padding_fill_that_is_no_mask_stays_arithmetic(h):
    """(1 - m) * -1 is a bias the model means (a key lowered by 1), not a mask: refused with the reason."""
    model = _gpt1_half(h, pad_fill=-1.0)
    reasons = h.reasons(model, "onnx", "padding-mask-arith-select-half")
    assert any("mask fill" in r for r in reasons), reasons


def test_float32_arithmetic_padding_mask_is_left_to_the_sum(h):
    """float32: the plain sum of the terms is exact, so the arithmetic is not rewritten (and fuses)."""
    model = _gpt1_half(h, dtype=TensorProto.FLOAT)
    out = h.fuse(model, "onnx")
    assert _attn(h, out) == 1 and h.ops(out)["Sub"] == 2, h.ops(out)   # both (1 - x) kept
    h.assert_close(model, out, _feeds(h, "right", np.float32), atol=1e-4)


# ---- float16 GPT-Neo / GPT-J: eager attention in a float32 island (0/2 at every target before) ----------

def _float32_island(h, *, buffer=None):
    """GPT-Neo's eager attention of a float16 model: q and k cast up to float32, where(causal, q k^T,
    float32 finfo.min), plus the float16 padding mask Where(m, 0, -65504) cast up, softmax in float32,
    the probabilities cast back to v's float16."""
    n = h.node
    buf = np.tril(np.ones((MAXPOS, MAXPOS), bool)) if buffer is None else buffer
    nodes = [n("Shape", ["q"], ["sl"], start=2, end=3), n("Slice", ["buf", "zero", "sl", "two"], ["b2"]),
             n("Slice", ["b2", "zero", "sl", "three"], ["c"]),
             n("Cast", ["q"], ["qf"], to=TensorProto.FLOAT), n("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
             n("Transpose", ["kf"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["qf", "kt"], ["s"]),
             n("Where", ["c", "s", "fmin"], ["w"]),
             n("Unsqueeze", ["attention_mask", "ax12"], ["am"]), n("Cast", ["am"], ["amb"], to=TensorProto.BOOL),
             n("Where", ["amb", "z16", "min16"], ["pad"]), n("Cast", ["pad"], ["padf"], to=TensorProto.FLOAT),
             n("Add", ["w", "padf"], ["sp"]), n("Softmax", ["sp"], ["p"], axis=-1),
             n("Cast", ["p"], ["p16"], to=F16), n("MatMul", ["p16", "v"], ["o4"]),
             n("Transpose", ["o4"], ["o"], perm=[0, 2, 1, 3])]
    inits = {"buf": buf[None, None], "zero": np.array([0], np.int64), "two": np.array([2], np.int64),
             "three": np.array([3], np.int64), "fmin": np.array(np.finfo(np.float32).min, np.float32),
             "z16": np.array(0.0, np.float16), "min16": np.array(-65504.0, np.float16),
             "ax12": np.array([1, 2], np.int64)}
    dims = ["batch", H, "seq", D]
    inputs = [h.vi(x, dims, F16) for x in ("q", "k", "v")] + [h.vi("attention_mask", ["batch", "seq"], TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("o", ["batch", "seq", H, D], F16)], inits)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_float16_attention_in_a_float32_island_fuses_on_every_target(h, target, level):
    """The causal select and the padding Add in float32 (finfo.min absorbs the scores): the op gets
    the float16 q, k, v and the mask in float16 (the select's fill -inf). Every row of a right-padded
    batch and the unpadded rows of a left-padded one match; on ort (MultiHeadAttention, float32 inside)
    a row with no key kept too. Attention-23 in float16 (onnx, trt) gives such a row its own numbers,
    as for Hugging Face's plain float16 mask Where(c & m, 0, -65504) (docs/precision.md)."""
    model = _float32_island(h)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    for mask in MASKS:
        f = _feeds(h, mask)
        every_row = mask == "right" or (mask == "no_key" and target == "ort")
        h.assert_close(model, out, f, atol=4e-3, rtol=4e-3, valid=None if every_row else f["attention_mask"])


def test_float32_island_whose_select_is_not_causal_fuses_in_float32(h):
    """A select that may mask a query's own key (an upper-triangular buffer) would turn a row to -inf
    in float16 where the original's finfo.min averaged it: the island is not taken whole in float16.
    Its float32 part is an attention of float32 q and k with v cast up (the probabilities' Cast meets
    v's float16, session 14): the op runs in float32, where finfo.min averages that row as the
    original does, and the numbers are kept exactly."""
    model = _float32_island(h, buffer=np.triu(np.ones((MAXPOS, MAXPOS), bool), k=1))
    out = h.fuse(model, "onnx")
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    attn = next(n for n in out.graph.node if n.op_type == "Attention")
    q_type = {v.name: v.type.tensor_type.elem_type for v in (*out.graph.value_info, *out.graph.input)}
    assert q_type.get(attn.input[0]) == TensorProto.FLOAT   # in float32, not the float16 island
    for pad in ("right", "left"):
        h.assert_close(model, out, _feeds(h, pad), atol=0, rtol=0)


def _float32_island_kv(h):
    """The island with a KV cache (GPT-Neo's kv export): K and V are Concat(past, new) before the Cast,
    the causal buffer sliced to rows P..P+S and keys 0..P+S, the attention mask over P + S keys."""
    n = h.node
    nodes = [n("Concat", ["past_k", "k"], ["kall"], axis=2), n("Concat", ["past_v", "v"], ["vall"], axis=2),
             n("Shape", ["past_k"], ["pl"], start=2, end=3), n("Shape", ["q"], ["sl"], start=2, end=3),
             n("Add", ["pl", "sl"], ["tl"]),   # the keys' length read as past + new (the exports' shape reads)
             n("Sub", ["tl", "sl"], ["st"]), n("Slice", ["buf", "st", "tl", "two"], ["b2"]),
             n("Slice", ["b2", "zero", "tl", "three"], ["c"]),
             n("Cast", ["q"], ["qf"], to=TensorProto.FLOAT), n("Cast", ["kall"], ["kf"], to=TensorProto.FLOAT),
             n("Transpose", ["kf"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["qf", "kt"], ["s"]),
             n("Where", ["c", "s", "fmin"], ["w"]),
             n("Unsqueeze", ["attention_mask", "ax12"], ["am"]), n("Cast", ["am"], ["amb"], to=TensorProto.BOOL),
             n("Where", ["amb", "z16", "min16"], ["pad"]), n("Cast", ["pad"], ["padf"], to=TensorProto.FLOAT),
             n("Add", ["w", "padf"], ["sp"]), n("Softmax", ["sp"], ["p"], axis=-1),
             n("Cast", ["p"], ["p16"], to=F16), n("MatMul", ["p16", "vall"], ["o4"]),
             n("Transpose", ["o4"], ["o"], perm=[0, 2, 1, 3])]
    # max_position_embeddings rows: the probe runs past lengths beyond every constant of the cone
    inits = {"buf": np.tril(np.ones((64, 64), bool))[None, None], "zero": np.array([0], np.int64),
             "two": np.array([2], np.int64), "three": np.array([3], np.int64),
             "fmin": np.array(np.finfo(np.float32).min, np.float32), "z16": np.array(0.0, np.float16),
             "min16": np.array(-65504.0, np.float16), "ax12": np.array([1, 2], np.int64)}
    new, past = ["batch", H, "sequence", D], ["batch", H, "past_sequence", D]   # the exports' dim names
    inputs = ([h.vi(x, new, F16) for x in ("q", "k", "v")] + [h.vi(x, past, F16) for x in ("past_k", "past_v")]
              + [h.vi("attention_mask", ["batch", "total_sequence"], TensorProto.INT64)])
    total = ["batch", H, "total_sequence", D]   # the cache's present outputs, as the exports return them
    outputs = [h.vi("o", ["batch", "sequence", H, D], F16), h.vi("kall", total, F16), h.vi("vall", total, F16)]
    return h.make_model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3)])
def test_float16_attention_in_a_float32_island_with_a_cache_fuses(h, target, level):
    """With a KV cache the select's rows start at the past length: the probe takes the past from the
    keys' Concat (concat_past), where it had the prefill's [S, S] in mind (0/2 before, GPT-Neo kv)."""
    model = _float32_island_kv(h)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    P = 3
    f = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float16) for x in ("q", "k", "v")}
    f.update({x: h.rng.standard_normal((B, H, P, D)).astype(np.float16) for x in ("past_k", "past_v")})
    f["attention_mask"] = np.ones((B, P + S), np.int64)
    f["attention_mask"][1, -2:] = 0   # right padding of the new tokens
    h.assert_close(model, out, f, atol=4e-3, rtol=4e-3)
