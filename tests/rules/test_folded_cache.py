"""rules/attention/folded_cache.yaml (cache-heads-folded): BLOOM as transformers 4.38 wrote it with a
KV cache, the heads folded into the batch: key [B*H, D, P] joined to the new K^T view
Reshape(Transpose(k, [0,2,3,1]), [B*H, D, S]) along axis 2, value [B*H, P, D] joined to its
[B*H, S, D] view along axis 1, the joins being the presents and the bmm operands. The past is
viewed as [B,H,P,D] and joined in 4-D, so attention-kv-cache takes it (past in, present out); the
3-D presents are views of the fused op's presents. The past's first dim is the symbol ``2*b``
(export_corpus names it so), which verify's random inputs evaluate."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, P, D = 2, 2, 3, 4, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
KV_RULE = {"ort": "attention-kv-ort", "onnx": "attention-kv-onnx", "trt": "attention-kv-trt"}


def _bloom438_kv(h, d=D):
    n = h.node
    nodes = [
        n("Shape", ["q"], ["qs"]), n("Slice", ["qs", "i0", "i1"], ["bb"]), n("Slice", ["qs", "i2", "i3"], ["ss"]),
        n("Mul", ["bb", "hh"], ["bh"]), n("Concat", ["bh", "m1", "dd"], ["t3d"], axis=0),
        n("Concat", ["bh", "dd", "m1"], ["tkt"], axis=0),
        n("Reshape", ["q", "t3d"], ["q3"]),
        n("Transpose", ["kx"], ["kp"], perm=[0, 2, 3, 1]), n("Reshape", ["kp", "tkt"], ["kn3"]),
        n("Reshape", ["vn", "t3d"], ["vn3"]),
        n("Concat", ["pk", "kn3"], ["k"], axis=2), n("Concat", ["pv", "vn3"], ["v"], axis=1),
        n("MatMul", ["q3", "k"], ["sc"]), n("Mul", ["sc", "scale"], ["ss3"]),
        n("Concat", ["bb", "hh", "ss", "m1"], ["t4"], axis=0), n("Reshape", ["ss3", "t4"], ["s4"]),
        # the mask cut at the keys' length, read from the 3-D present (key_layer.shape[-1])
        n("Shape", ["k"], ["ks"]), n("Slice", ["ks", "i2", "i3"], ["klen"]),
        n("Slice", ["mask", "i0", "klen", "i3"], ["mk"]), n("Add", ["s4", "mk"], ["sm"]),
        n("Softmax", ["sm"], ["p"], axis=-1),
        n("Concat", ["bh", "ss", "m1"], ["tp"], axis=0), n("Reshape", ["p", "tp"], ["p3"]),
        n("MatMul", ["p3", "v"], ["o3"]), n("Concat", ["bb", "hh", "ss", "dd"], ["to"], axis=0),
        n("Reshape", ["o3", "to"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "i3": np.array([3], np.int64), "hh": np.array([H], np.int64), "m1": np.array([-1], np.int64),
             "dd": np.array([d], np.int64), "scale": np.array(d ** -0.5, np.float32)}
    bh = f"{H}*b"
    inputs = [h.vi("q", ["b", H, "s", d]), h.vi("kx", ["b", "s", H, d]), h.vi("vn", ["b", H, "s", d]),
              h.vi("pk", [bh, d, "p"]), h.vi("pv", [bh, "p", d]), h.vi("mask", ["b", 1, "s", "m"])]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", d]), h.vi("k", None), h.vi("v", None)],
                        inits, opset=18)


def _feeds(h, d=D):
    feeds = {x: h.rng.standard_normal((B, H, S, d)).astype(np.float32) for x in ("q", "vn")}
    feeds["kx"] = h.rng.standard_normal((B, S, H, d)).astype(np.float32)
    feeds["pk"] = h.rng.standard_normal((B * H, d, P)).astype(np.float32)
    feeds["pv"] = h.rng.standard_normal((B * H, P, d)).astype(np.float32)
    mask = np.zeros((B, 1, S, P + S + 2), np.float32)  # longer than the keys: the cut matters
    mask[1, ..., :2] = np.finfo(np.float32).min
    feeds["mask"] = mask
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_folded_3d_cache_is_a_kv_cache(h, target):
    model = _bloom438_kv(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    assert h.fired(out)["cache-heads-folded"] >= 1 and h.fired(out)[KV_RULE[target]] >= 1, h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_verify_feeds_the_folded_batch_its_product(h):
    """verify's random inputs give ``2*b`` twice b (it gave the leading dim 2 and the original
    failed to run: 'Non concat axis dimensions must match'); the fused model verifies."""
    import onnx_fuse
    from onnx_fuse.verify import make_inputs

    model = _bloom438_kv(h)
    shapes = {"m": (32,)}   # the mask is cut at the keys' length: longer than any
    feeds = make_inputs(model, shapes=shapes)
    assert feeds["pk"].shape[0] == 2 * feeds["q"].shape[0] and feeds["pv"].shape[0] == feeds["pk"].shape[0]
    result = onnx_fuse.optimize(model, level=3, target="ort", verify=True, shapes=shapes)
    assert result.report.verify["passed"], result.report.verify
