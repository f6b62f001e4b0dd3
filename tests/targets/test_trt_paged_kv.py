"""Paged KV at O4 for target trt: the `trt-paged-kv` lowering of canonical AttentionKV
(rules/attention/paged_trt.yaml, its graph_io block, the readers hook in
optimizer/targets/trt_paged_kv.py; docs/paged_kv.md).

The real exports tests/data/models/{llama64,gpt264}_kv_dynamo.onnx (tools/export_decoder_kv.py
--head-dim 64: LLaMA with 2 q / 1 kv heads and RoPE, GPT-2 with 2 heads and learned positions; 2
layers, head size 64, past_key_values inputs, present outputs) are optimized at O4/trt; the
rewritten model runs in ONNX Runtime with PagedAttention through its NumPy reference
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
import yaml

import onnx_fuse.rewrite
from onnx_fuse.plugins.check_trt import check_model
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from tests.decode_models import static_decode

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
KV_MODEL = MODELS / "llama64_kv_dynamo.onnx"
LAYERS, D, VOCAB = 2, 64, 128
HQ = 2
HKV = {"llama64_kv_dynamo": 1, "gpt264_kv_dynamo": 2}


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph)


@pytest.fixture(scope="module", params=sorted(HKV))
def name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def paged(name) -> ir.Model:
    return onnx_fuse.optimize(str(MODELS / f"{name}.onnx"), level=4, target="trt", float32_plugins=True).model


@pytest.fixture(scope="module")
def sessions(name, paged):
    return make_session(onnx.load(str(MODELS / f"{name}.onnx"))), make_session(paged), HKV[name]


def _feeds(batch: int, past: int, new: int, seed: int = 0, hkv: int = 1) -> dict:
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
    assert ops["Softmax"] == 0 and ops["Attention"] == 0  # attention cores are gone
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
            assert attrs["num_heads"] == HQ and attrs["kv_num_heads"] == HKV[name]
            assert node.metadata_props.get("onnx_fuse.rule") == "trt-paged-kv"
            assert attrs["scale"] == pytest.approx(1 / np.sqrt(D), rel=1e-6)
    by_name = {v.name: v for v in paged.graph.inputs}
    assert by_name["block_tables"].dtype == ir.DataType.INT32
    assert by_name["seq_lens"].dtype == ir.DataType.INT32
    assert list(by_name["kv_pool_k.0"].shape)[2:] == [HKV[name], D]
    proto = ir.to_proto(paged)
    onnx.checker.check_model(proto)
    # check-trt: the plugin contract holds (head size, layouts); only the fp32 dtype of these
    # test models is outside it (an engine is built with --precision fp16)
    reasons = [str(vars(i)) for i in check_model(proto).issues]
    # (the caches' reason also names the fp8 pool type: "float16 or bfloat16 (like the query) or
    # float8e4m3fn (got FLOAT)")
    assert reasons and not [r for r in reasons if not ("float16 or bfloat16" in r and "(got FLOAT)" in r)], reasons


def test_fp16_paged_model_is_check_trt_clean(name):
    """What an engine is built from: -O4 --target trt --precision fp16 passes check-trt whole."""
    model = onnx_fuse.optimize(str(MODELS / f"{name}.onnx"), level=4, target="trt", precision="fp16").model
    assert _ops(model)["PagedAttention"] == LAYERS
    report = check_model(ir.to_proto(model))
    assert not report.issues, [vars(i) for i in report.issues]


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


@pytest.mark.parametrize("past_lens, sq, block_size", [((5, 2), 3, 4), ((0, 6), 8, 4), ((9, 1), 5, 2)])
def test_chunked_prefill_matches_original_in_the_reference(sessions, past_lens, sq, block_size):
    """Sq new tokens per sequence (a first chunk with no past among them): the exporter's causal
    mask over Concat(past, new) is the contract's bottom-right causal attention, so the paged
    model matches the original (logits and the pools) for Sq > 1 too. The plugin runs it on
    the JIT path (append_kv + paged prefill; tests/plugins/test_paged_chunked_gpu.py)."""
    orig, new, hkv = sessions
    feeds = _feeds(2, max(past_lens), sq, seed=7 + sq, hkv=hkv)
    pf = paged_inputs_from_contiguous(feeds, block_size, past_lens=past_lens, new_tokens=sq, seed=4)
    got = _run(new, pf)
    for b, L in enumerate(past_lens):
        ref = _run_original(orig, feeds, b, L)
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                np.testing.assert_allclose(gather_pool(got[f"kv_pool_{t}_out.{i}"], pf["block_tables"][b], L + sq),
                                           ref[f"present.{i}.{kv}"][0], rtol=1e-4, atol=1e-5)



def test_static_decode_export_is_paged_and_builds_with_the_aot_kernel(name):
    """S fixed at 1: the readers hook takes the folded constant positions, verify passes, and
    the engine builder picks the embedded (AOT) decode kernel; with a dynamic S the same model
    gets the JIT path (aot = 0), which runs chunked prefill too. Both pass check-trt."""
    from onnx_fuse.plugins.engine_builder import prepare_for_tensorrt

    static = _o4(static_decode(name), verify=True)
    assert _ops(static.model)["PagedAttention"] == LAYERS, static.report.warnings
    assert static.report.status == "PASSED", static.report.status_reason
    for proto, aot in ((static_decode(name), 1), (MODELS / f"{name}.onnx", 0)):
        model = ir.to_proto(_o4(proto, precision="fp16").model)
        prepared, changed = prepare_for_tensorrt(model)
        assert changed == LAYERS
        assert [onnx.helper.get_attribute_value(a) for n in prepared.graph.node
                if n.op_type == "PagedAttention" for a in n.attribute if a.name == "aot"] == [aot] * LAYERS
        assert not check_model(prepared).issues, [vars(i) for i in check_model(prepared).issues]


def test_static_decode_ragged_batch_matches_original(name):
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    paged = make_session(_o4(static_decode(name)).model)
    feeds = _feeds(2, 7, 1, seed=21, hkv=HKV[name])
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=(7, 2), new_tokens=1, seed=3)
    got = _run(paged, pf)
    for b, L in enumerate((7, 2)):
        ref = _run_original(orig, feeds, b, L)
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)


def test_prefill_head_sizes_need_a_static_decode_query(tmp_path):
    """At a head size the paged prefill kernel lacks (80, 96, 256) the rule fires only where the
    graph fixes S = 1. Exercised on the head-64 export with the rule's prefill list narrowed to
    (128,): dynamic S is refused with the reason, S fixed at 1 is lowered."""
    text = (Path(onnx_fuse.__file__).resolve().parents[1] / "rules" / "attention" / "paged_trt.yaml").read_text()
    assert text.count("dim(q, 3) in (64, 128) or dim(q, 2) == 1") == 1
    path = tmp_path / "paged_narrow.yaml"
    path.write_text(text.replace("dim(q, 3) in (64, 128) or dim(q, 2) == 1", "dim(q, 3) in (128,) or dim(q, 2) == 1"))
    result = _o4(KV_MODEL, rules=[str(path)])
    assert _ops(result.model)["PagedAttention"] == 0
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "prefill kernel (more than one new token) takes head sizes 64 and 128" in notes[0]
    assert _ops(_o4(static_decode("llama64_kv_dynamo"), rules=[str(path)]).model)["PagedAttention"] == LAYERS


def test_rule_prefill_head_sizes_are_the_plugin_contract():
    from onnx_fuse.plugins.paged_attention_plugin import PREFILL_HEAD_DIMS

    rule = onnx_fuse.rewrite.load_rule_set().get("trt-paged-kv")
    text = next(c for c in rule.checks if "prefill kernel" in c.message).expr.text
    assert f"dim(q, 3) in {PREFILL_HEAD_DIMS}" in text


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


def _o4(proto_or_path, **kw):
    return onnx_fuse.optimize(proto_or_path if isinstance(proto_or_path, onnx.ModelProto) else str(proto_or_path),
                              level=4, target="trt", float32_plugins=True, **kw)


def _refused(proto: onnx.ModelProto, reason: str) -> None:
    """All or nothing: no PagedAttention, the contiguous interface kept, the reason reported."""
    result = _o4(proto)
    assert _ops(result.model)["PagedAttention"] == 0
    assert [v.name for v in result.model.graph.inputs] == [v.name for v in proto.graph.input]
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and reason in notes[0], result.report.warnings


def _export() -> onnx.ModelProto:
    return onnx.load(str(KV_MODEL))


def test_head_size_16_is_not_lowered_while_64_is():
    """Issue 11: PagedAttention only at the head sizes its kernels take (plugins/paged_attention.yaml);
    the head-size-16 export keeps its contiguous cache (attention still fused, Attention-23)."""
    small = onnx.load(str(MODELS / "llama_kv_dynamo.onnx"))
    _refused(small, "PagedAttention's kernels take head sizes 64, 80, 96, 128 and 256")
    o4 = _o4(small).model
    assert _ops(o4)["Attention"] == LAYERS and _ops(o4)["Softmax"] == 0
    assert _ops(_o4(KV_MODEL).model)["PagedAttention"] == LAYERS


def test_rule_head_sizes_are_the_plugin_contract():
    contract = yaml.safe_load((Path(onnx_fuse.__file__).resolve().parents[1] / "plugins" /
                               "paged_attention.yaml").read_text())
    rule = onnx_fuse.rewrite.load_rule_set().get("trt-paged-kv")
    text = next(c for c in rule.checks if "head sizes" in c.message).expr.text
    assert f"dim(q, 3) in {tuple(contract['kernel']['head_dims'])}" in text


def test_model_without_cache_is_untouched():
    result = _o4(MODELS / "llama64_sdpa_dynamo.onnx")
    assert _ops(result.model)["PagedAttention"] == 0
    assert not [w for w in result.report.warnings if "trt-paged-kv" in w]
    assert "block_tables" not in [v.name for v in result.model.graph.inputs]


def test_present_read_elsewhere_is_not_lowered():
    proto = _export()
    proto.graph.node.append(onnx.helper.make_node("ReduceSum", ["present.1.value"], ["kv_sum"], keepdims=0))
    proto.graph.output.append(onnx.helper.make_tensor_value_info("kv_sum", onnx.TensorProto.FLOAT, []))
    _refused(proto, "graph output 'present.1.value' is still read by ReduceSum")


def test_past_in_another_layout_is_not_lowered():
    """past_key_values.0.value given as [B, P, Hkv, D] and transposed in the graph: not a pool
    view, and the other layers are not lowered either (all or nothing)."""
    proto = _export()
    g = proto.graph
    name = "past_key_values.0.value"
    dims = next(i for i in g.input if i.name == name).type.tensor_type.shape.dim
    d1, d2 = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
    d1.CopyFrom(dims[1])
    d2.CopyFrom(dims[2])
    dims[1].CopyFrom(d2)
    dims[2].CopyFrom(d1)
    for node in g.node:
        for i, x in enumerate(node.input):
            if x == name:
                node.input[i] = f"{name}_t"
    g.node.insert(0, onnx.helper.make_node("Transpose", [name], [f"{name}_t"], perm=[0, 2, 1, 3]))
    _refused(proto, "the past keys and values must be graph inputs or a crop of them")


def test_concat_on_the_wrong_axis_is_not_lowered():
    """One layer's K Concat on axis 1: that layer is no AttentionKV, so its past stays, and the
    model is not half paged."""
    proto = _export()
    for node in proto.graph.node:
        if node.op_type == "Concat" and node.input[0] == "past_key_values.1.key":
            node.attribute[0].i = 1
            break
    else:
        raise AssertionError("no Concat reads past_key_values.1.key")
    _refused(proto, "are not read by a lowered attention")


def test_non_causal_mask_is_not_lowered():
    """A mask without a causal comparison (here: a graph input bias) is outside the contract."""
    proto = _export()
    g = proto.graph
    producers = {o: n for n in g.node for o in n.output}
    softmax_in = {n.input[0] for n in g.node if n.op_type == "Softmax"}
    adds = [n for n in g.node if n.op_type == "Add" and n.output[0] in softmax_in]
    assert len(adds) == LAYERS
    for add in adds:  # the mask side is the input not produced by the scores' MatMul/Mul
        j = next(i for i, x in enumerate(add.input) if producers.get(x) is None
                 or producers[x].op_type not in ("MatMul", "Mul", "Div"))
        add.input[j] = "bias"
    g.input.append(onnx.helper.make_tensor_value_info("bias", onnx.TensorProto.FLOAT, ["b", 1, "s", "t"]))
    _refused(proto, "the mask must be causal")


def test_bias_added_to_the_causal_mask_is_not_lowered():
    """ALiBi-like: a float bias added to the causal mask (BLOOM, MPT) is outside the contract."""
    proto = _export()
    g = proto.graph
    producers = {o: n for n in g.node for o in n.output}
    softmax_in = {n.input[0] for n in g.node if n.op_type == "Softmax"}
    add = next(n for n in g.node if n.op_type == "Add" and n.output[0] in softmax_in)
    j = next(i for i, x in enumerate(add.input) if producers.get(x) is None
             or producers[x].op_type not in ("MatMul", "Mul", "Div"))
    g.initializer.append(onnx.numpy_helper.from_array(np.full((1, HQ, 1, 1), -0.5, np.float32), "slopes"))
    at = list(g.node).index(add)
    g.node.insert(at, onnx.helper.make_node("Add", [add.input[j], "slopes"], ["mask_plus_bias"]))
    add.input[j] = "mask_plus_bias"
    _refused(proto, "adds a bias to kept keys")


def test_disable_keeps_the_contiguous_cache():
    o4 = _o4(KV_MODEL, disable=["trt-paged-kv"]).model
    assert _ops(o4)["PagedAttention"] == 0 and _ops(o4)["Attention"] == LAYERS
    assert [v.name for v in o4.graph.inputs][2:4] == ["past_key_values.0.key", "past_key_values.0.value"]


def test_o3_keeps_the_cache_and_fuses_attention():
    o3 = onnx_fuse.optimize(str(KV_MODEL), level=3, target="trt", verify=True)
    assert _ops(o3.model)["Attention"] == LAYERS and _ops(o3.model)["PagedAttention"] == 0
    assert o3.report.status == "PASSED", o3.report.status_reason


# ---- the corpus (head size 16) through the same rule without its head-size check ---------------


@pytest.mark.parametrize("name", [
    "gptj__kv__trained",        # RoPE from a gathered sin/cos table: position ids reach RotaryEmbedding
    "gpt2__optimum__trained",   # Optimum: position_ids is an input, the mask was sized from present
    "qwen2__kv__trained",       # GQA through repeat_kv
])
def test_corpus_decoder_is_paged_and_verified(any_head_rule, name):
    result = _o4(MODELS.parent / "corpus" / f"{name}.onnx", rules=[any_head_rule], verify=True)
    assert _ops(result.model)["PagedAttention"] == LAYERS, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
    assert not [v.name for v in result.model.graph.inputs if v.name.startswith("past_")]
