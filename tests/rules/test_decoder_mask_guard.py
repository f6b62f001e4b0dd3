"""The sdpa NaN guard after a contrib attention op over a decoder's causal + padding mask.

A decoder's mask adds attention_mask's padding, (1 - m) * finfo.min (Optimum, transformers 4), to a
causal part Where(key <= query position, 0, min): value_range cannot bound (1 - m) * min of an int
input, so finite_mask did not prove it and the lowering kept IsNaN + Where per layer. finite_rows
(rewrite/_mask_finite.py) runs the mask's cone with attention_mask all ones, all zeros and mixed
rows: every query row keeps a key finite either way (its own position: 0, or min when padded; a
key both causally masked and padded is min + min = -inf, which only keys of rows that keep a finite
one get), so no 0/1 attention_mask gives a row of -inf keys and the guard goes, at
MultiHeadAttention with a past, GroupQueryAttention and the packed Attention. Numerics against the
original in ONNX Runtime with right-, fully, left- and inner-padded attention_mask rows (the fully
padded row: every query's keys at min or -inf, the mean of V over its causal keys in both).
Near misses keep the guard: a -inf padding fill (a fully padded row is all -inf: NaN without it), a
fill that grows with the batch row, a float16 mask.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

H, D = 2, 8
HID = H * D
MIN = float(np.finfo(np.float32).min)


def _mask_nodes(n, kind: str, cache: bool) -> list:
    """attention_mask [batch, total] (int64) -> ``mask`` [B,1,S,T]; query i sits at position P + i."""
    nodes = [n("Shape", ["attention_mask"], ["ash"]), n("Gather", ["ash", "i1"], ["nt"], axis=0),
             n("Range", ["i0", "nt", "i1"], ["kidx"])]
    if cache:   # P = the past's length
        nodes += [n("Shape", ["past_k"], ["psh"]), n("Gather", ["psh", "i2"], ["np_"], axis=0),
                  n("Range", ["np_", "nt", "i1"], ["qidx"])]
    else:
        nodes.append(n("Identity", ["kidx"], ["qidx"]))
    nodes += [n("Unsqueeze", ["kidx", "ax0"], ["k2"]), n("Unsqueeze", ["qidx", "ax1"], ["q2"]),
              n("LessOrEqual", ["k2", "q2"], ["causal"]), n("Unsqueeze", ["attention_mask", "ax12"], ["am4"])]
    if kind == "bool_inf":   # torch's bool mask: Where(causal and kept, 0, -inf)
        nodes += [n("Cast", ["am4"], ["amb"], to=9), n("And", ["causal", "amb"], ["keep"]),
                  n("Where", ["keep", "zero", "ninf"], ["mask"])]
        return nodes
    nodes += [n("Where", ["causal", "zero", "fmin"], ["cbias"]), n("Cast", ["am4"], ["amf"], to=1),
              n("Sub", ["one", "amf"], ["inv"])]
    if kind == "row_fills":   # batch row b pads with (b + 1) * -1e30
        nodes += [n("Shape", ["attention_mask"], ["ash2"]), n("Gather", ["ash2", "i0"], ["nb"], axis=0),
                  n("Add", ["nb", "i1"], ["nb1"]), n("Range", ["i1", "nb1", "i1"], ["rb"]),
                  n("Cast", ["rb"], ["rbf"], to=1), n("Unsqueeze", ["rbf", "ax123"], ["rb4"]),
                  n("Mul", ["rb4", "big"], ["rfill"]), n("Mul", ["inv", "rfill"], ["pad"])]
    else:                     # (1 - m) * min
        nodes.append(n("Mul", ["inv", "fmin"], ["pad"]))
    nodes.append(n("Add", ["cbias", "pad"], ["mask"]))
    return nodes


def _model(h, kind: str = "sub_mul", *, cache: bool = False, kv_heads: int = H, packed: bool = False):
    """One decoder attention with the sdpa guard (IsNaN / Where after Softmax): q / k / v graph
    inputs [B,H,S,D] (or, ``packed``, biased projections of x), K / V with a past when ``cache``;
    fewer kv heads broadcast by the MatMuls (MQA)."""
    n = h.node
    nodes = _mask_nodes(n, kind, cache)
    inputs = [h.vi("attention_mask", ["batch", "total"], TensorProto.INT64)]
    outputs = []
    if packed:
        inputs.insert(0, h.vi("x", ["batch", "seq", HID]))
        for c in "qkv":
            nodes += [n("MatMul", ["x", f"w{c}"], [f"m{c}"]), n("Add", [f"m{c}", f"bias_{c}"], [f"{c}3"]),
                      n("Reshape", [f"{c}3", "hshape"], [f"{c}r"]),
                      n("Transpose", [f"{c}r"], [f"{c}4" if c == "q" else f"{c}_new"], perm=[0, 2, 1, 3])]
        q = "q4"
    else:
        inputs = [h.vi("q", ["batch", H, "seq", D]), h.vi("k_new", ["batch", kv_heads, "seq", D]),
                  h.vi("v_new", ["batch", kv_heads, "seq", D])] + inputs
        q = "q"
    k, v = "k_new", "v_new"
    if cache:
        inputs += [h.vi("past_k", ["batch", kv_heads, "past", D]), h.vi("past_v", ["batch", kv_heads, "past", D])]
        nodes += [n("Concat", ["past_k", "k_new"], ["present_k"], axis=2),
                  n("Concat", ["past_v", "v_new"], ["present_v"], axis=2)]
        k, v = "present_k", "present_v"
        outputs += [h.vi("present_k", ["batch", kv_heads, "total", D]),
                    h.vi("present_v", ["batch", kv_heads, "total", D])]
    nodes += [n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", [q, "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("IsNaN", ["p"], ["isn"]),
              n("Where", ["isn", "zero", "p"], ["pz"]), n("MatMul", ["pz", v], ["o"])]
    if packed:
        nodes += [n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), n("Reshape", ["ot", "merge"], ["y"])]
        outputs.insert(0, h.vi("y", ["batch", "seq", HID]))
    else:
        outputs.insert(0, h.vi("o", ["batch", H, "seq", D]))
    rng = np.random.default_rng(3)
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
             "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64),
             "ax12": np.array([1, 2], np.int64), "ax123": np.array([1, 2, 3], np.int64),
             "zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32),
             "fmin": np.array(MIN, np.float32), "ninf": np.array(-np.inf, np.float32),
             "big": np.array(-1e30, np.float32), "scale": np.array(D ** -0.5, np.float32),
             "hshape": np.array([0, 0, H, D], np.int64), "merge": np.array([0, 0, HID], np.int64)}
    if packed:
        for c in "qkv":
            inits[f"w{c}"] = (rng.standard_normal((HID, HID)) * 0.3).astype(np.float32)
            inits[f"bias_{c}"] = (rng.standard_normal(HID) * 0.1).astype(np.float32)
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(model, b: int, s: int, p: int, kv_heads: int = H) -> dict:
    """Right, fully, left and inner padding over the P + S keys: row 1 keeps no key at all."""
    rng = np.random.default_rng(4)
    t = p + s
    am = np.ones((b, t), np.int64)
    am[0, t - 2:] = 0
    am[1, :] = 0
    am[2, :t // 2 + 1] = 0   # left: the first queries of a prefill see only padded keys
    am[3, 1] = 0
    feeds = {"attention_mask": am}
    for i in model.graph.input:
        if i.name == "x":
            feeds["x"] = rng.standard_normal((b, s, HID)).astype(np.float32)
        elif i.name == "q":
            feeds["q"] = rng.standard_normal((b, H, s, D)).astype(np.float32)
        elif i.name in ("k_new", "v_new"):
            feeds[i.name] = rng.standard_normal((b, kv_heads, s, D)).astype(np.float32)
        elif i.name in ("past_k", "past_v"):
            feeds[i.name] = rng.standard_normal((b, kv_heads, p, D)).astype(np.float32)
    return feeds


def _check(h, model, fused, cache: bool, kv_heads: int = H):
    for s, p in ((5, 3), (1, 6)) if cache else ((6, 0), (3, 0)):
        h.assert_close(model, fused, _feeds(model, 4, s, p, kv_heads))


CASES = {   # (cache, kv_heads, packed) -> the contrib op
    "mha_past": ((True, H, False), "com.microsoft::MultiHeadAttention"),
    "mha": ((False, H, False), "com.microsoft::MultiHeadAttention"),
    "gqa": ((False, 1, False), "com.microsoft::GroupQueryAttention"),
    "packed": ((False, H, True), "com.microsoft::Attention"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_causal_padding_mask_drops_the_guard(h, case):
    (cache, kv_heads, packed), op = CASES[case]
    model = _model(h, cache=cache, kv_heads=kv_heads, packed=packed)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops[op] == 1 and ops["Softmax"] == 0, ops
    assert ops["IsNaN"] == 0, ops   # every row keeps a finite key for any 0/1 attention_mask
    _check(h, model, fused, cache, kv_heads)


@pytest.mark.parametrize("kind", ["bool_inf", "row_fills"])
@pytest.mark.parametrize("case", ["mha_past", "packed"])
def test_other_decoder_masks_keep_the_guard(h, kind, case):
    """A -inf padding fill leaves a fully padded row all -inf (NaN in the op, 0 in the export); a
    fill computed from the batch row is not attention_mask's alone: the guard stays."""
    (cache, kv_heads, packed), op = CASES[case]
    model = _model(h, kind, cache=cache, kv_heads=kv_heads, packed=packed)
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops[op] == 1 and ops["Softmax"] == 0 and ops["IsNaN"] == 1, ops
    _check(h, model, fused, cache, kv_heads)


def test_finite_rows_reasons(h):
    """finite_rows() on the values: the decoder mask holds, -inf fills and float16 masks do not."""
    import onnx_ir as ir

    from onnx_fuse.rewrite._mask_finite import finite_rows

    def run(kind, cache, dtype=None):
        g = ir.serde.deserialize_model(_model(h, kind, cache=cache)).graph
        vals = {v.name: v for n in g for v in n.outputs} | {v.name: v for v in g.inputs}
        mask, q = vals["mask"], vals["q"]
        if dtype is not None:
            mask.dtype = dtype
        return finite_rows(None, mask, q, vals["past_k"] if cache else None)

    assert run("sub_mul", True) and run("sub_mul", False)
    assert not run("bool_inf", True) and not run("bool_inf", False)
    assert not run("row_fills", False)
    assert not run("sub_mul", False, ir.DataType.FLOAT16)


def test_two_min_fills_summed_keep_the_guard(h):
    """Where(c, 0, min) + Where(d, 0, min) of two bool inputs: value_range bounds it at 2 * min in
    float64, but float32 overflows to -inf where both mask a key, so a row masked by both everywhere
    is NaN in the op (0 in the export): finite_mask compares with float32's own range, and
    finite_rows cannot probe bool inputs, so the guard stays."""
    n = h.node
    nodes = [n("Where", ["c", "zero", "fmin"], ["a"]), n("Where", ["d", "zero", "fmin"], ["b"]),
             n("Add", ["a", "b"], ["mask"]),
             n("Transpose", ["k_new"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
             n("Softmax", ["sm"], ["p"], axis=-1), n("IsNaN", ["p"], ["isn"]),
             n("Where", ["isn", "zero", "p"], ["pz"]), n("MatMul", ["pz", "v_new"], ["o"])]
    inputs = [h.vi(x, ["batch", H, "seq", D]) for x in ("q", "k_new", "v_new")]
    inputs += [h.vi(x, ["batch", 1, "seq", "seq"], TensorProto.BOOL) for x in "cd"]
    model = h.make_model(nodes, inputs, [h.vi("o", ["batch", H, "seq", D])],
                         {"zero": np.array(0.0, np.float32), "fmin": np.array(MIN, np.float32),
                          "scale": np.array(D ** -0.5, np.float32)})
    fused = h.fuse(model, "ort")
    ops = h.ops(fused)
    assert ops["com.microsoft::MultiHeadAttention"] == 1 and ops["IsNaN"] == 1, ops
    rng = np.random.default_rng(7)
    c = rng.random((2, 1, 4, 4)) < 0.5
    d = rng.random((2, 1, 4, 4)) < 0.5
    c[1, 0, 2], d[1, 0, 2] = False, False   # row 2 of batch 1: every key at min + min = -inf
    feeds = {x: rng.standard_normal((2, H, 4, D)).astype(np.float32) for x in ("q", "k_new", "v_new")}
    h.assert_close(model, fused, {**feeds, "c": c, "d": d})
