"""BLOOM as transformers 4.45 wrote it with a KV cache: bmm attention on [B*H,S,D] views whose K^T
length (past + sequence, a sum no input's Shape holds) is also read by a Shape; shape CSE reads that
sum from the inputs (Shape(past)[2] + Shape(q)[2]), so the attention fuses with its cache. (Session 19
deleted rules/layout/shape_reads.yaml, shape-through-key-transpose, which read Shape(Transpose(k3))
through the Transpose: it fired on no corpus or hold-out file, nor on these graphs, once shape CSE
moved the read.)"""

from __future__ import annotations

import collections

import numpy as np
import pytest

B, H, S, P, D = 2, 2, 3, 4, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
KV_RULE = {"ort": "attention-kv-ort", "onnx": "attention-kv-onnx", "trt": "attention-kv-trt"}


def _bloom_kv(h, d=D, placeholders=False, causal=False, s="s", padding=False):
    """``s``: the query length (1: a decode-only export); ``padding`` (with ``causal``): GPT-NeoX's
    additive padding mask from attention_mask [b, total] added to the causal Where."""
    n = h.node
    low = [n("Where", ["cm", "s4", "low"], ["sm"])] if not padding else [
        n("Where", ["cm", "s4", "low"], ["sc4"]), n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]),
        n("Cast", ["am4"], ["amf"], to=1), n("Sub", ["onef", "amf"], ["inv"]), n("Mul", ["inv", "low"], ["pad"]),
        n("Add", ["sc4", "pad"], ["sm"])]
    nodes = [
        n("Concat", ["pk", "kn"], ["k"], axis=2), n("Concat", ["pv", "vn"], ["v"], axis=2),
        n("Shape", ["q"], ["qs"]), n("Slice", ["qs", "i0", "i1"], ["bb"]), n("Slice", ["qs", "i2", "i3"], ["ss"]),
        n("Mul", ["bb", "hh"], ["bh"]), n("Concat", ["bh", "m1", "dd"], ["t3d"], axis=0),
        n("Reshape", ["q", "t3d"], ["q3"]), n("Reshape", ["k", "t3d"], ["k3"]), n("Reshape", ["v", "t3d"], ["v3"]),
        n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"]),
        n("Mul", ["sc", "scale"], ["ss3"]),
        n("Concat", ["bb", "hh", "ss", "m1"], ["t4"], axis=0), n("Reshape", ["ss3", "t4"], ["s4"]),
        # the mask sliced to the keys' length, read from K^T (key_layer.shape[-1])
        n("Shape", ["kt"], ["kts"]), n("Slice", ["kts", "i2", "i3"], ["klen"]),
        *([n("Slice", ["mask", "i0", "klen", "i3"], ["mk"]), n("Add", ["s4", "mk"], ["sm"])]
          if not causal else  # GPT-NeoX 4.38's causal buffer cut at rows [T - S : T], columns [: T]
          [n("Sub", ["klen", "ss"], ["top"]), n("Slice", ["tril", "top", "klen", "i2"], ["rows"]),
           n("Slice", ["rows", "i0", "klen", "i3"], ["cm"]), *low]),
        n("Softmax", ["sm"], ["p"], axis=-1),
        n("Concat", ["bh", "ss", "m1"], ["tp"], axis=0), n("Reshape", ["p", "tp"], ["p3"]),
        n("MatMul", ["p3", "v3"], ["o3"]), n("Concat", ["bb", "hh", "ss", "dd"], ["to"], axis=0),
        n("Reshape", ["o3", "to"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "i3": np.array([3], np.int64), "hh": np.array([H], np.int64), "m1": np.array([-1], np.int64),
             "dd": np.array([d], np.int64), "scale": np.array(d ** -0.5, np.float32),
             **({"tril": np.tril(np.ones((64, 64), bool))[None, None],
                 "low": np.array(np.finfo(np.float32).min, np.float32)} if causal else {}),
             **({"ax12": np.array([1, 2], np.int64), "onef": np.array(1.0, np.float32)} if padding else {})}
    inputs = [h.vi("q", ["b", H, s, d]), h.vi("kn", ["b", H, s, d]), h.vi("vn", ["b", H, s, d]),
              h.vi("pk", ["b", H, "p", d]), h.vi("pv", ["b", H, "p", d])]
    inputs += [] if causal else [h.vi("mask", ["b", 1, s, "m"])]
    inputs += [h.vi("attention_mask", ["b", "total"], 7)] if padding else []
    present = [h.vi(x, ["b", H, f"Concat{x}_dim_2", d] if placeholders else None) for x in ("k", "v")]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, s, d]), *present], inits, opset=18)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_bloom_kv_bmm_attention_with_a_shape_read_of_k_transposed_fuses(h, target):
    model = _bloom_kv(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    # the keys' length p + s is read from the inputs (passes/shape_cse.py), not from K^T or the
    # present, so the cache is recognized as well: past in, present out
    assert h.fired(out)[KV_RULE[target]] >= 1
    assert not [nd.input for nd in out.graph.node if nd.op_type == "Shape" and nd.input[0] not in ("q", "pk")]
    mask = np.zeros((B, 1, S, P + S + 2), np.float32)  # longer than the keys: the slice matters
    mask[1, ..., :2] = np.finfo(np.float32).min
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "kn", "vn")}
    feeds.update({x: h.rng.standard_normal((B, H, P, D)).astype(np.float32) for x in ("pk", "pv")})
    h.assert_close(model, out, {**feeds, "mask": mask})


def test_bloom_kv_cache_read_by_its_length_is_paged(h):
    """The same at head size 64 with the TorchScript exporter's placeholder lengths on the presents
    (``Concatk_dim_2``): the presents are named p + s from their Concats, the mask's slice reads that
    sum from the inputs, and trt-paged-kv pages the cache (it refused before: the slice's length was
    read from the present, which PagedAttention replaces)."""
    import onnx_fuse

    model = _bloom_kv(h, d=64, placeholders=True, causal=True)
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True, verify=True)
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["PagedAttention"] == 1 and ops["Softmax"] == 0, (ops, result.report.warnings)
    assert result.report.verify["passed"], result.report.verify


@pytest.mark.parametrize("padding", [False, True])
def test_decode_only_kv_cache_read_by_its_length_is_paged(h, padding):
    """The same as a decode-only export (S fixed at 1, so the causal rows are [T - 1 : T]): the
    present's length P + 1 is read from the inputs (it stayed on the present, and attention-kv-cache
    refused the cycle), the causal row against the one query is 1 (the layer's output kept invented
    dims), and GPT-NeoX's padding mask added to the causal Where is decided on its values like any
    other mask (a structural refusal of an Add took it for ALiBi): paged at trt-O4, verified."""
    import onnx_fuse

    model = _bloom_kv(h, d=64, placeholders=True, causal=True, s=1, padding=padding)
    shapes = {"p": (5,), **({"total": (6,)} if padding else {})}   # attention_mask: 5 cached keys + 1 new
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True,
                                verify=True, shapes=shapes)
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["PagedAttention"] == 1 and ops["Softmax"] == 0, (ops, result.report.warnings)
    assert result.report.verify["passed"], result.report.verify
    o3 = onnx_fuse.optimize(model, level=3, target="ort", verify=True, shapes=shapes)   # the cache at ort too
    assert h.fired(o3.to_proto())["attention-kv-ort"] >= 1, o3.report.warnings
    assert o3.report.verify["passed"], o3.report.verify
