"""com.microsoft::GroupQueryAttention as a graph brings it (onnxruntime-genai's model builder) becomes the
canonical AttentionKV at the onnx and trt targets (rules/attention/contrib_gqa.yaml), so neither keeps an
op only ONNX Runtime runs: Attention-23 with past / present (RotaryEmbedding-23 for do_rotary) at onnx,
the contiguous Attention-23 at trt. Each graph is checked against the contrib op in ONNX Runtime's CPU
provider (verify). Before the rule both targets kept the contrib op."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse

H, HKV, D, MAXPOS = 4, 2, 32, 64


def _gqa_model(*, packed=True, rotary=True, interleaved=0, rot_dim=D, softcap=0.0, window=-1, scale=0.0):
    hid, kvh = H * D, HKV * D
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("past_key", f, ["batch", HKV, "past", "kv_dim"]),
              helper.make_tensor_value_info("past_value", f, ["batch", HKV, "past", "kv_dim"]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    if packed:
        inputs.insert(0, helper.make_tensor_value_info("qkv", f, ["batch", "seq", hid + 2 * kvh]))
        qkv_in = ["qkv", "", ""]
    else:
        inputs[:0] = [helper.make_tensor_value_info("q", f, ["batch", "seq", hid]),
                      helper.make_tensor_value_info("k", f, ["batch", "seq", kvh]),
                      helper.make_tensor_value_info("v", f, ["batch", "seq", kvh])]
        qkv_in = ["q", "k", "v"]
    inits = []
    gqa_in = [*qkv_in, "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    if rotary:
        inv = 1.0 / (10000 ** (np.arange(0, rot_dim, 2) / rot_dim))
        ang = np.outer(np.arange(MAXPOS), inv).astype(np.float32)
        inits += [helper.make_tensor("cos_cache", f, ang.shape, np.cos(ang).ravel()),
                  helper.make_tensor("sin_cache", f, ang.shape, np.sin(ang).ravel())]
        gqa_in += ["cos_cache", "sin_cache"]
    node = helper.make_node("GroupQueryAttention", gqa_in, ["y", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=H, kv_num_heads=HKV, scale=scale,
                            softcap=softcap, local_window_size=window, do_rotary=int(rotary),
                            rotary_interleaved=interleaved)
    outputs = [helper.make_tensor_value_info("y", f, ["batch", "seq", hid]),
               helper.make_tensor_value_info("present_key", f, ["batch", HKV, "total", "kv_dim"]),
               helper.make_tensor_value_info("present_value", f, ["batch", HKV, "total", "kv_dim"])]
    graph = helper.make_graph([node], "gqa", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid("com.microsoft", 1)])


def _feeds(model, batch, seq, past, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in ("qkv", "q", "k", "v"):
            width = vi.type.tensor_type.shape.dim[2].dim_value
            feeds[vi.name] = rng.standard_normal((batch, seq, width)).astype(np.float32)
        elif vi.name.startswith("past"):
            feeds[vi.name] = rng.standard_normal((batch, HKV, past, D)).astype(np.float32)
    feeds["seqlens_k"] = np.full((batch,), past + seq - 1, np.int32)   # a mask of ones: T - 1
    feeds["total_sequence_length"] = np.array(past + seq, np.int32)
    return feeds


def _ops(proto):
    return [f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in proto.graph.node]


CASES = {
    "packed-rotary": dict(),
    "separate-qkv": dict(packed=False),
    "no-rotary": dict(rotary=False),
    "interleaved": dict(interleaved=1),
    "partial-rotary": dict(rot_dim=16),   # ORT: the half width a multiple of 8
    "softcap-scale": dict(softcap=2.0, scale=0.3),
    "local-window": dict(window=4),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_gqa_contrib_is_recognized(tmp_path, case, target):
    model = _gqa_model(**CASES[case])
    path = tmp_path / "gqa.onnx"
    onnx.save(model, path)
    # a prefill with a past (batch 1: ORT 1.32's CPU kernel refuses more with a past and S > 1)
    result = onnx_fuse.optimize(str(path), level=3, target=target, verify=True, verify_inputs=_feeds(model, 1, 6, 5))
    ops = _ops(result.to_proto())
    assert not [o for o in ops if o.startswith("com.microsoft::")], ops
    # TensorRT's attention has no softcap: the plain ops there (attention-trt-softcap)
    plain = target == "trt" and CASES[case].get("softcap")
    assert ops.count("Attention") == (0 if plain else 1) and ops.count("Softmax") == (1 if plain else 0)
    assert ops.count("RotaryEmbedding") == (2 if CASES[case].get("rotary", True) else 0)
    assert result.report.passed, result.report.verify_failure
    # the same graph on a decode step of a batch of 2, and on a prompt without a past
    out = tmp_path / "out.onnx"
    result.save(str(out))
    for batch, seq, past in ((2, 1, 7), (1, 5, 0)):
        res = onnx_fuse.verify.verify(str(path), str(out), inputs=_feeds(model, batch, seq, past, seed=1))
        assert res["passed"], (batch, seq, past, res)


def test_ort_keeps_the_contrib_op(tmp_path):
    path = tmp_path / "gqa.onnx"
    onnx.save(_gqa_model(), path)
    result = onnx_fuse.optimize(str(path), level=3, target="ort", verify=True, verify_inputs=_feeds(_gqa_model(), 1, 6, 5))
    assert _ops(result.to_proto()).count("com.microsoft::GroupQueryAttention") == 1
    assert result.report.passed


def test_smooth_softmax_is_left_alone(tmp_path):
    model = _gqa_model()
    helper_attr = helper.make_attribute("smooth_softmax", 1)
    model.graph.node[0].attribute.append(helper_attr)
    path = tmp_path / "gqa.onnx"
    onnx.save(model, path)
    result = onnx_fuse.optimize(str(path), level=3, target="onnx", verify=False)
    assert "com.microsoft::GroupQueryAttention" in _ops(result.to_proto())


def _mha_rotary_model(*, bias=True, interleaved=0):
    """The builder's fp16 CPU form in float32: contrib RotaryEmbedding on q and k [B, S, N*D]
    (num_heads 0: heads of the caches' width), MultiHeadAttention over K/V given whole, an additive
    attention_bias [1, 1, S, T]."""
    f, hid = TensorProto.FLOAT, H * D
    inv = 1.0 / (10000 ** (np.arange(0, D, 2) / D))
    ang = np.outer(np.arange(MAXPOS), inv).astype(np.float32)
    inits = [helper.make_tensor("cos_cache", f, ang.shape, np.cos(ang).ravel()),
             helper.make_tensor("sin_cache", f, ang.shape, np.sin(ang).ravel())]
    nodes = [helper.make_node("RotaryEmbedding", [x, "position_ids", "cos_cache", "sin_cache"], [f"{x}_rot"],
                              domain="com.microsoft", interleaved=interleaved, num_heads=0, rotary_embedding_dim=0)
             for x in ("q", "k")]
    nodes.append(helper.make_node("MultiHeadAttention", ["q_rot", "k_rot", "v", "", "", "bias" if bias else ""],
                                  ["y"], domain="com.microsoft", num_heads=H, scale=0.2))
    inputs = [helper.make_tensor_value_info("q", f, ["batch", "seq", hid]),
              helper.make_tensor_value_info("k", f, ["batch", "seq", hid]),
              helper.make_tensor_value_info("v", f, ["batch", "seq", hid]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", f, [1, 1, "seq", "seq"]))
    graph = helper.make_graph(nodes, "mha", inputs, [helper.make_tensor_value_info("y", f, ["batch", "seq", hid])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("bias,interleaved", [(True, 0), (False, 1)])
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_mha_and_rotary_contrib_are_recognized(tmp_path, target, bias, interleaved):
    model = _mha_rotary_model(bias=bias, interleaved=interleaved)
    path = tmp_path / "mha.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(0)
    b, s = 2, 6
    feeds = {x: rng.standard_normal((b, s, H * D)).astype(np.float32) for x in ("q", "k", "v")}
    feeds["position_ids"] = np.broadcast_to(np.arange(3, 3 + s), (b, s)).astype(np.int64)
    if bias:   # causal, the lowest float32 above the diagonal (the builder's mask)
        feeds["bias"] = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1)[None, None]
    result = onnx_fuse.optimize(str(path), level=3, target=target, verify=True, verify_inputs=feeds)
    ops = _ops(result.to_proto())
    assert not [o for o in ops if o.startswith("com.microsoft::")], ops
    assert ops.count("Attention") == 1 and ops.count("RotaryEmbedding") == 2
    assert result.report.passed, result.report.verify_failure


@pytest.mark.parametrize("case", ["packed-rotary", "separate-qkv", "local-window", "partial-rotary"])
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_padded_batch_with_past_is_exact(tmp_path, case, target):
    """Sequence 1 of a batch of 2 has 4 real past tokens of 7 (seqlens_k 4 on a decode step), or 3 of
    5 prompt tokens: ORT reads that sequence's own past, writes its new K/V right after it, ropes them
    there and leaves zeros after; the rewrite gathers the same present (all three outputs compared).
    On the old code (Concat(past, new), positions P + i) the padded sequence's output moved by ~1."""
    model = _gqa_model(**CASES[case])
    path = tmp_path / "gqa.onnx"
    onnx.save(model, path)
    result = onnx_fuse.optimize(str(path), level=3, target=target, verify=True, verify_inputs=_feeds(model, 1, 6, 5))
    assert result.report.passed, result.report.verify_failure
    out = tmp_path / "out.onnx"
    result.save(str(out))
    for seq, past, own in ((1, 7, 4), (5, 0, 3)):
        feeds = _feeds(model, 2, seq, past, seed=2)
        feeds["seqlens_k"][1] = own + seq - 1 if past else own - 1
        res = onnx_fuse.verify.verify(str(path), str(out), inputs=feeds)
        assert res["passed"], (seq, past, res)
