"""Attention whose values have another head size than queries and keys (DeepSeek's MLA: q/k
heads of nope + rope = 24, v heads of 16): recognize.yaml makes the canonical op with the original
output's type (v's head size), the lowerings that need one head size for q, k and v refuse it and
ONNX Attention-23 (which takes v's own head size) runs it. Before, the canonical op was typed like
q, validation rejected the rewrite and the attention stayed unfused."""

from __future__ import annotations

import numpy as np
import pytest

H, DQK, DV = 2, 24, 16


def _mla(h, kv: bool):
    n = h.node
    nodes = [n("Transpose", ["kc" if kv else "k"], ["kt"], perm=[0, 1, 3, 2]),
             n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["sc"]),
             n("Add", ["sc", "mask"], ["sm"]),
             n("Softmax", ["sm"], ["p"], axis=-1),
             n("MatMul", ["p", "vc" if kv else "v"], ["o"])]
    inputs = [h.vi("q", ["b", H, "s", DQK]), h.vi("k", ["b", H, "s", DQK]), h.vi("v", ["b", H, "s", DV]),
              h.vi("mask", ["b", 1, "s", "t"])]
    outputs = [h.vi("o", ["b", H, "s", DV])]
    if kv:
        nodes = [n("Concat", ["past_k", "k"], ["kc"], axis=2), n("Concat", ["past_v", "v"], ["vc"], axis=2)] + nodes
        inputs += [h.vi("past_k", ["b", H, "p", DQK]), h.vi("past_v", ["b", H, "p", DV])]
        outputs += [h.vi("kc", ["b", H, "t", DQK]), h.vi("vc", ["b", H, "t", DV])]
    return h.make_model(nodes, inputs, outputs, {"scale": np.array(DQK ** -0.5, np.float32)})


def _feeds(h, kv: bool):
    b, s, p = 2, 5, 3 if kv else 0
    r = h.rng.standard_normal
    f = {"q": r((b, H, s, DQK)), "k": r((b, H, s, DQK)), "v": r((b, H, s, DV)),
         "mask": np.triu(np.full((s, p + s), -1e9), k=p + 1)[None, None].repeat(b, 0)}
    if kv:
        f.update(past_k=r((b, H, p, DQK)), past_v=r((b, H, p, DV)))
    return {k: v.astype(np.float32) for k, v in f.items()}


@pytest.mark.parametrize("kv", [False, True], ids=["prefill", "kv-cache"])
@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 3), ("trt", 4)])
def test_v_head_size_other_than_q_fuses(h, target, level, kv):
    model = _mla(h, kv)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert ops["Attention"] == 1 and "Softmax" not in ops, ops
    assert not any(k.endswith("MultiHeadAttention") or k.endswith("FusedAttention") for k in ops), ops
    h.assert_close(model, out, _feeds(h, kv))
