"""rules/layout/shape_reads.yaml (shape-through-key-transpose): Shape(Transpose(k3, [0,2,1])) reads
Gather(Shape(k3), [0,2,1]), so the Transpose keeps only its real readers; other permutations are left.
BLOOM as transformers 4.45 wrote it with a KV cache: bmm attention on [B*H,S,D] views whose K^T
length (past + sequence, a sum no input's Shape holds) is also read by a Shape; with the read moved
to the [B*H,T,D] view the attention fuses (the cache stays contiguous: the view is of the present)."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, P, D = 2, 2, 3, 4, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _model(h, perm):
    n = h.node
    nodes = [n("Transpose", ["x"], ["t"], perm=perm), n("Relu", ["t"], ["y"]), n("Shape", ["t"], ["s"])]
    rank = len(perm)
    return h.make_model(nodes, [h.vi("x", ["b", 3, "n", 5][:rank])], [h.vi("y", None), h.vi("s", [rank], 7)],
                        opset=18)


@pytest.mark.parametrize("perm,moved", [([0, 2, 1], True), ([1, 0, 2], False), ([0, 2, 1, 3], False)])
def test_shape_of_a_key_transpose_reads_its_input(h, perm, moved):
    model = _model(h, perm)
    out = h.fuse(model, "ort")
    shapes = [nd for nd in out.graph.node if nd.op_type == "Shape"]
    assert (h.fired(out)["shape-through-key-transpose"] >= 1) == moved
    assert all((nd.input[0] == "x") == moved for nd in shapes), [nd.input for nd in shapes]
    x = h.rng.standard_normal((2, 3, 4, 5)[:len(perm)]).astype(np.float32)
    h.assert_close(model, out, {"x": x}, atol=0, rtol=0)


def _bloom_kv(h):
    n = h.node
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
        n("Slice", ["mask", "i0", "klen", "i3"], ["mk"]),
        n("Add", ["s4", "mk"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
        n("Concat", ["bh", "ss", "m1"], ["tp"], axis=0), n("Reshape", ["p", "tp"], ["p3"]),
        n("MatMul", ["p3", "v3"], ["o3"]), n("Concat", ["bb", "hh", "ss", "dd"], ["to"], axis=0),
        n("Reshape", ["o3", "to"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "i3": np.array([3], np.int64), "hh": np.array([H], np.int64), "m1": np.array([-1], np.int64),
             "dd": np.array([D], np.int64), "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("kn", ["b", H, "s", D]), h.vi("vn", ["b", H, "s", D]),
              h.vi("pk", ["b", H, "p", D]), h.vi("pv", ["b", H, "p", D]), h.vi("mask", ["b", 1, "s", "m"])]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", D]), h.vi("k", None), h.vi("v", None)], inits,
                        opset=18)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_bloom_kv_bmm_attention_with_a_shape_read_of_k_transposed_fuses(h, target):
    model = _bloom_kv(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    assert h.fired(out)["shape-through-key-transpose"] >= 1
    mask = np.zeros((B, 1, S, P + S + 2), np.float32)  # longer than the keys: the slice matters
    mask[1, ..., :2] = np.finfo(np.float32).min
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "kn", "vn")}
    feeds.update({x: h.rng.standard_normal((B, H, P, D)).astype(np.float32) for x in ("pk", "pv")})
    h.assert_close(model, out, {**feeds, "mask": mask})
