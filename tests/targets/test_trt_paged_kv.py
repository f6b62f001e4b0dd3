"""Paged-KV rewriting at O4 for target trt (optimizer/targets/trt_paged_kv.py, docs/paged_kv.md).

The real exports tests/data/models/{llama,gpt2}_kv_dynamo.onnx (tools/export_decoder_kv.py: LLaMA
with 4 q / 2 kv heads and RoPE, GPT-2 with 4 heads and learned positions; 2 layers, head dim 16,
past_key_values inputs, present outputs) are optimized at O4/trt; the rewritten model runs in ONNX Runtime with PagedAttention through its NumPy reference
(onnx_fuse.reference.ort_ops) and is compared with the original export. A ragged batch (different
past lengths per sequence) cannot be fed to the contiguous original, so the original runs once per
sequence with that sequence's own past, and the paged batch must match each of them.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.targets.trt_paged_kv import PagedKVPass
from onnx_fuse.verify import make_session

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
KV_MODEL = MODELS / "llama_kv_dynamo.onnx"
LAYERS, D, VOCAB = 2, 16, 128
HKV = {"llama_kv_dynamo": 2, "gpt2_kv_dynamo": 4}


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph)


@pytest.fixture(scope="module", params=sorted(HKV))
def name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def paged(name) -> ir.Model:
    return onnx_fuse.optimize(str(MODELS / f"{name}.onnx"), level=4, target="trt").model


@pytest.fixture(scope="module")
def sessions(name, paged):
    return make_session(onnx.load(str(MODELS / f"{name}.onnx"))), make_session(paged), HKV[name]


def _feeds(batch: int, past: int, new: int, seed: int = 0, hkv: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, VOCAB, (batch, new)).astype(np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, hkv, past, D)).astype(np.float32)
    return feeds


def _run_original(sess, feeds: dict, b: int, past_len: int) -> dict:
    """The contiguous original for sequence ``b`` alone, with its own past length."""
    new = feeds["input_ids"].shape[1]
    f = {"input_ids": feeds["input_ids"][b:b + 1],
         "attention_mask": np.ones((1, past_len + new), np.int64)}
    f.update({k: v[b:b + 1, :, :past_len] for k, v in feeds.items() if k.startswith("past_key_values.")})
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))


def _run(sess, feeds: dict) -> dict:
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_every_layer_becomes_paged_attention(name, paged):
    ops = _ops(paged)
    assert ops["PagedAttention"] == LAYERS
    assert ops["Softmax"] == 0 and ops["Concat"] <= 5  # attention cores and KV Concats are gone
    names_in = [v.name for v in paged.graph.inputs]
    assert names_in == ["input_ids", "block_tables", "seq_lens"] + [
        f"kv_pool_{t}.{i}" for i in range(LAYERS) for t in ("k", "v")]
    names_out = [v.name for v in paged.graph.outputs]
    assert names_out == ["logits"] + [f"kv_pool_{t}_out.{i}" for i in range(LAYERS) for t in ("k", "v")]
    for node in paged.graph:
        if node.op_type == "PagedAttention":
            assert node.domain == "onnx_fuse"
            attrs = {k: a.value for k, a in node.attributes.items()}
            assert attrs["plugin_version"] == "1" and attrs["plugin_namespace"] == "onnx_fuse"
            assert attrs["num_heads"] == 4 and attrs["kv_num_heads"] == HKV[name]
            assert attrs["scale"] == pytest.approx(1 / np.sqrt(D), rel=1e-6)
    by_name = {v.name: v for v in paged.graph.inputs}
    assert by_name["block_tables"].dtype == ir.DataType.INT32
    assert by_name["seq_lens"].dtype == ir.DataType.INT32
    assert list(by_name["kv_pool_k.0"].shape)[2:] == [HKV[name], D]
    onnx.checker.check_model(ir.to_proto(paged))


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("past_lens", [(7, 3), (0, 9), (9, 9)])
def test_decode_ragged_batch_matches_original(sessions, block_size, past_lens):
    orig, new, hkv = sessions
    feeds = _feeds(2, max(past_lens), 1, seed=block_size, hkv=hkv)
    pf = paged_inputs_from_contiguous(feeds, block_size, past_lens=past_lens, new_tokens=1, seed=1)
    assert np.any(pf["block_tables"][:, :-1] + 1 != pf["block_tables"][:, 1:]) or block_size == 16
    got = _run(new, pf)
    for b, L in enumerate(past_lens):
        ref = _run_original(orig, feeds, b, L)
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                pool = got[f"kv_pool_{t}_out.{i}"]
                np.testing.assert_allclose(gather_pool(pool, pf["block_tables"][b], L + 1),
                                           ref[f"present.{i}.{kv}"][0], rtol=1e-5, atol=1e-6)


def test_untouched_pool_slots_stay_as_they_were(sessions):
    """Only the new token's slot changes; the NaN garbage elsewhere is never read (logits finite)."""
    _, new, hkv = sessions
    feeds = _feeds(2, 6, 1, seed=3, hkv=hkv)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=(6, 2), seed=2)
    got = _run(new, pf)
    assert np.isfinite(got["logits"]).all()
    before, after = pf["kv_pool_k.0"], got["kv_pool_k_out.0"]
    changed = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    written = {(int(pf["block_tables"][b, p // 4]), p % 4) for b, p in ((0, 6), (1, 2))}
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(changed.any(axis=(2, 3))))} == written


def test_chunked_prefill_matches_original_in_the_reference(sessions):
    """Sq = 3 new tokens per sequence: causal within the chunk (reference only; the kernel is Sq = 1)."""
    orig, new, hkv = sessions
    past_lens = (5, 2)
    feeds = _feeds(2, 5, 3, seed=7, hkv=hkv)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=3, seed=4)
    got = _run(new, pf)
    for b, L in enumerate(past_lens):
        ref = _run_original(orig, feeds, b, L)
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)


def test_decode_loop_feeds_pools_back(sessions):
    """Three decode steps: the updated pools of one step are the next step's input."""
    orig, new, hkv = sessions
    feeds = _feeds(1, 4, 1, seed=11, hkv=hkv)
    pf = paged_inputs_from_contiguous(feeds, 2, past_lens=(4,), new_tokens=3, seed=5)  # room for 3 steps
    ref_past = {k: v for k, v in feeds.items() if k.startswith("past_key_values.")}
    rng = np.random.default_rng(12)
    for step in range(3):
        ids = rng.integers(0, VOCAB, (1, 1)).astype(np.int64)
        pf["input_ids"] = ids
        pf["seq_lens"] = np.array([4 + step + 1], np.int32)
        got = _run(new, pf)
        f = {"input_ids": ids, "attention_mask": np.ones((1, 4 + step + 1), np.int64), **ref_past}
        ref = _run(orig, f)
        np.testing.assert_allclose(got["logits"], ref["logits"], rtol=1e-4, atol=1e-5)
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                pf[f"kv_pool_{t}.{i}"] = got[f"kv_pool_{t}_out.{i}"]
                ref_past[f"past_key_values.{i}.{kv}"] = ref[f"present.{i}.{kv}"]


# ---- near misses -------------------------------------------------------------------------------


def test_model_without_cache_is_untouched():
    model = onnx_fuse.optimize(str(MODELS / "llama_sdpa_dynamo.onnx"), level=3, target="trt").model
    before = ir.to_proto(model).SerializeToString()
    p = PagedKVPass()
    assert p(model).modified is False
    assert p.stats["no-kv-cache"] == 1 and ir.to_proto(model).SerializeToString() == before
    o4 = onnx_fuse.optimize(str(MODELS / "llama_sdpa_dynamo.onnx"), level=4, target="trt").model
    assert _ops(o4)["PagedAttention"] == 0


def _o3_kv() -> onnx.ModelProto:
    return ir.to_proto(onnx_fuse.optimize(str(KV_MODEL), level=3, target="trt").model)


def _refused(proto: onnx.ModelProto, reason: str) -> None:
    model = ir.serde.deserialize_model(proto)
    before = ir.to_proto(model).SerializeToString()
    p = PagedKVPass()
    assert p(model).modified is False
    assert p.stats["refused"] == 1 and reason in p.stats_reason
    assert ir.to_proto(model).SerializeToString() == before
    assert _ops(model)["PagedAttention"] == 0


def test_o3_output_is_rewritten_by_the_pass_alone():
    """The positive control of the near misses below: the same O3 graph, unmodified, is rewritten."""
    model = ir.serde.deserialize_model(_o3_kv())
    p = PagedKVPass()
    assert p(model).modified is True and p.stats["paged-attention"] == LAYERS


def test_present_consumed_elsewhere_is_not_rewritten():
    proto = _o3_kv()
    proto.graph.node.append(onnx.helper.make_node("ReduceSum", ["present.1.value"], ["kv_sum"], keepdims=0))
    proto.graph.output.append(onnx.helper.make_tensor_value_info("kv_sum", onnx.TensorProto.FLOAT, []))
    _refused(proto, "consumed outside its attention")


def test_past_in_another_layout_is_not_rewritten():
    """past_key_values.0.key given as [B, P, Hkv, D] and transposed in the graph: not a pool view."""
    proto = _o3_kv()
    g = proto.graph
    inp = next(i for i in g.input if i.name == "past_key_values.0.key")
    dims = inp.type.tensor_type.shape.dim
    d1, d2 = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
    d1.CopyFrom(dims[1]); d2.CopyFrom(dims[2])
    dims[1].CopyFrom(d2); dims[2].CopyFrom(d1)
    for node in g.node:
        if node.op_type == "Concat" and node.input[0] == "past_key_values.0.key":
            node.input[0] = "past_k0_bhsd"
    g.node.insert(0, onnx.helper.make_node("Transpose", ["past_key_values.0.key"], ["past_k0_bhsd"],
                                           perm=[0, 2, 1, 3]))
    _refused(proto, "is not a graph input")


def test_concat_on_the_wrong_axis_is_not_rewritten():
    proto = _o3_kv()
    for node in proto.graph.node:
        if node.op_type == "Concat" and node.input[0] == "past_key_values.1.value":
            node.attribute[0].i = 1
    _refused(proto, "axis 1")


def test_non_causal_mask_is_not_rewritten():
    """A mask without a causal comparison (here: a graph input bias) is outside the contract."""
    proto = _o3_kv()
    g = proto.graph
    for node in g.node:
        if node.op_type == "Add" and any(i == "val_160" for i in node.input):
            node.input[list(node.input).index("val_160")] = "bias"
    g.input.append(onnx.helper.make_tensor_value_info("bias", onnx.TensorProto.FLOAT, ["b", 1, "s", "t"]))
    _refused(proto, "not a causal mask")


def test_disable_and_refusal_reach_the_report():
    o4 = onnx_fuse.optimize(str(KV_MODEL), level=4, target="trt", disable=["trt-paged-kv"]).model
    assert _ops(o4)["PagedAttention"] == 0
    assert [v.name for v in o4.graph.inputs][2:4] == ["past_key_values.0.key", "past_key_values.0.value"]
    proto = _o3_kv()
    proto.graph.node.append(onnx.helper.make_node("ReduceSum", ["present.0.key"], ["kv_sum"], keepdims=0))
    proto.graph.output.append(onnx.helper.make_tensor_value_info("kv_sum", onnx.TensorProto.FLOAT, []))
    result = onnx_fuse.optimize(proto, level=4, target="trt")
    assert _ops(result.model)["PagedAttention"] == 0
    assert any("trt-paged-kv: not rewritten" in w and "consumed outside" in w for w in result.report.warnings)


def test_value_cache_in_another_layout_is_refused_not_ignored():
    """Every V side fails to match (past V transposed in the graph): past inputs exist, so the
    pass says why instead of reporting a model without cache."""
    proto = _o3_kv()
    g = proto.graph
    for i in range(LAYERS):
        name = f"past_key_values.{i}.value"
        for node in g.node:
            if node.op_type == "Concat" and node.input[0] == name:
                node.input[0] = f"{name}_t"
        g.node.insert(0, onnx.helper.make_node("Transpose", [name], [f"{name}_t"], perm=[0, 1, 2, 3]))
    _refused(proto, "not read by a rewritable attention")
