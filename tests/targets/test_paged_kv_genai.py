"""onnxruntime-genai's builder declares every past / present head size as the symbol kv_cache_dim,
which only its com.microsoft GroupQueryAttention fixes. bind-contrib-head-size (passes/contrib_head_size.py)
binds it from the op (packed QKV width / (H + 2 Hkv)), and the GQA rewrite reads the past length from
the past (not from the mask's Shape), so trt-paged-kv pages the builder's form at head 64; verify sizes
kv_cache_dim by the same reading (no --shape needed). On the old code: trt-paged-kv refused ('the past
must be [B, Hkv, P, D] like the new K/V') and verify guessed 8, which the original refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import paged_feeds, paired_outputs, run_paged, total_length
from onnx_fuse.verify import make_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
import test_contrib_gqa as gqa  # noqa: E402


def _builder_like(d=64):
    """The builder's step: packed QKV from the hidden states, seqlens_k = ReduceSum(mask) - 1 and
    total_sequence_length = Shape(mask)[1] (attn_mask_reformat), past / present [.., kv_cache_dim]."""
    old = gqa.D
    gqa.D = d
    try:
        model = gqa._gqa_model()
    finally:
        gqa.D = old
    g = model.graph
    for vi in [*g.input, *g.output]:
        if vi.name.startswith(("past", "present")):
            vi.type.tensor_type.shape.dim[3].dim_param = "kv_cache_dim"
    keep = [vi for vi in g.input if vi.name not in ("seqlens_k", "total_sequence_length")]
    del g.input[:]
    g.input.extend([*keep, helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"])])
    g.initializer.extend([helper.make_tensor("one", TensorProto.INT64, [], [1]),
                          helper.make_tensor("ax1", TensorProto.INT64, [1], [1])])
    g.node.insert(0, helper.make_node("ReduceSum", ["attention_mask", "ax1"], ["msum"], keepdims=0))
    g.node.insert(1, helper.make_node("Sub", ["msum", "one"], ["sk64"]))
    g.node.insert(2, helper.make_node("Cast", ["sk64"], ["seqlens_k"], to=TensorProto.INT32))
    g.node.insert(3, helper.make_node("Shape", ["attention_mask"], ["mshape"], start=1, end=2))
    g.node.insert(4, helper.make_node("Squeeze", ["mshape"], ["t64"]))
    g.node.insert(5, helper.make_node("Cast", ["t64"], ["total_sequence_length"], to=TensorProto.INT32))
    return model


def _feeds(model, batch, seq, past, d=64, seed=0):
    rng = np.random.default_rng(seed)
    width = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    return {"qkv": rng.standard_normal((batch, seq, width)).astype(np.float32),
            "past_key": rng.standard_normal((batch, gqa.HKV, past, d)).astype(np.float32),
            "past_value": rng.standard_normal((batch, gqa.HKV, past, d)).astype(np.float32),
            "attention_mask": np.ones((batch, past + seq), np.int64)}


def test_builder_gqa_is_paged_at_head_64():
    model = _builder_like()
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    assert result.report.rule_fires.get("trt-paged-kv") == 1, result.report.warnings
    optimized = ir.to_proto(result.model)
    assert not any(i.name.startswith("past") for i in optimized.graph.input)
    names = [o.name for o in model.graph.output]
    for batch, seq, past in ((1, 6, 5), (2, 1, 7)):   # ORT's CPU GQA: batch 1 when S > 1 with a past
        feeds = _feeds(model, batch, seq, past, seed=batch)
        total = total_length(optimized, make_session(model).run(names, feeds))
        ref_feeds, run = paged_feeds(model, optimized, feeds, total=total, seed=3)
        ref_out = make_session(model).run(names, ref_feeds)
        got = run_paged(make_session(optimized), optimized, run)
        for name, r, g in zip(*paired_outputs(model, optimized, ref_out, got, run, total)):
            np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-4, err_msg=f"{name} {batch} {seq} {past}")


def test_verify_sizes_kv_cache_dim_from_the_op(tmp_path):
    """No --shape kv_cache_dim: the random past is [.., 64] as the op requires (onnx-O3)."""
    path = tmp_path / "gqa.onnx"
    onnx.save(_builder_like(), path)
    result = onnx_fuse.optimize(str(path), level=3, target="onnx", verify=True, shapes={"batch": (1,)})
    assert result.report.passed, result.report.verify_failure


def test_padded_batch_with_past_is_exact_when_paged():
    """A padded batch with a past (sequence 1 has 4 real past tokens of 7): ORT's GroupQueryAttention
    reads sequence b's first seqlens_k[b] + 1 - S past tokens, writes its new K/V right after them and
    ropes them at that position; the paged form does the same from seq_lens (positions re-derived per
    sequence), so its output equals ORT's on every sequence. (The contiguous forms at onnx and trt-O3
    join Concat(past, new) and rope at P + i: exact only for equal lengths, docs/holdout.md.)"""
    from onnx_fuse.targets.paged_kv_feeds import paged_inputs_from_contiguous

    model = _builder_like()
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True)
    optimized = ir.to_proto(result.model)
    past, lens = 7, [7, 4]
    feeds = _feeds(model, 2, 1, past, seed=5)
    feeds["attention_mask"][1, lens[1]:past] = 0   # sum = 4 + 1: seqlens_k = 4
    ref = make_session(model).run(["y"], feeds)[0]
    pool_map = {"kv_pool_k.past_key": "past_key", "kv_pool_v.past_value": "past_value"}
    names = {i.name for i in optimized.graph.input}
    assert set(pool_map) <= names, names
    run = paged_inputs_from_contiguous(feeds, 4, past_lens=lens, new_tokens=1, seed=2, pool_map=pool_map)
    run = {k: v for k, v in run.items() if k in names} | {k: feeds[k] for k in names if k in feeds and k not in run}
    got = make_session(optimized).run(["y"], run)[0]
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)
