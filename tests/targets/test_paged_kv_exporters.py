"""Paged KV (O4, trt) on head-size-64 exports of other exporters and idioms than the two
tools/export_decoder_kv.py models of test_trt_paged_kv.py (docs/paged_kv.md, "Coverage"):

- opt_hd64__kv__trained: dynamo; OPT computes its position ids from attention_mask's cumsum,
  sliced at the past length (+2): proven to be the cache positions by their values
  (optimizer/targets/trt_paged_positions.py) and re-derived from seq_lens;
- opt_hd64__torchscript_kv__trained: the same in TorchScript, whose positions have no symbolic
  shape: the probe finds them one row per sequence already, S comes from the token ids;
- llama_hd64__torchscript_kv__trained: TorchScript; the RoPE positions [1, S] are unsqueezed in
  two steps ([0], then [2]) on the way to cos/sin;
- qwen2_hd64__optimum__trained: Optimum (position_ids input, Optimum's own mask code), GQA 2/1;
- gemma_hd64__optimum__trained: Optimum without a position_ids input: the RoPE positions are
  Range(P, P + S) (probed by value), [1, S] through HF's inv_freq MatMul and a Transpose.

Each also as a decode-only graph (tests/decode_models.static_decode, S fixed at 1): paged at O4 and,
at ort-O3, one cache-holding attention per layer with the model's KV heads (GQA kept).

Made offline (tests/data/models/<name>.json says how: tools/export_corpus.py --head-dim 64). Each is
optimized with verify, must be paged in every layer with nothing of the contiguous interface left,
and a ragged batch through the paged model must match the original run once per sequence.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from tests.decode_models import static_decode

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
NAMES = ["opt_hd64__kv__trained", "opt_hd64__torchscript_kv__trained", "llama_hd64__torchscript_kv__trained",
         "qwen2_hd64__optimum__trained", "gemma_hd64__optimum__trained"]


@pytest.fixture(scope="module", params=NAMES)
def case(request):
    name = request.param
    entry = json.loads((MODELS / f"{name}.json").read_text())
    result = onnx_fuse.optimize(str(MODELS / f"{name}.onnx"), level=4, target="trt", float32_plugins=True,
                                verify=True)
    return name, entry, result


def test_export_is_paged_in_every_layer_and_verified(case):
    name, entry, result = case
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert result.report.status == "PASSED", result.report.status_reason
    assert ops["PagedAttention"] == entry["num_layers"], result.report.warnings
    assert ops["Attention"] == 0 and ops["Softmax"] == 0
    inputs = [v.name for v in result.model.graph.inputs]
    # the padding mask goes (batch size from seq_lens); Optimum's position_ids input stays
    assert "attention_mask" not in inputs and not [n for n in inputs if n.startswith("past_")], inputs
    assert not [v.name for v in result.model.graph.outputs if v.name.startswith("present")]


def _original_feeds(entry: dict, batch: int, past: int, new: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(3, entry["vocab_size"], (batch, new)).astype(np.int64)}
    for inp in entry["inputs"]:
        if inp["name"].startswith("past_key_values."):
            hkv, d = inp["dims"][1], inp["dims"][3]
            feeds[inp["name"]] = rng.standard_normal((batch, hkv, past, d)).astype(np.float32)
    return feeds


def _has(entry: dict, name: str) -> bool:
    return any(i["name"] == name for i in entry["inputs"])


@pytest.mark.parametrize("past_lens,new", [((7, 3), 1), ((0, 9), 1), ((5, 2), 3)])
def test_ragged_batch_matches_original(case, past_lens, new):
    name, entry, result = case
    _check_ragged_batch(name, entry, result.model, past_lens, new)


def _check_ragged_batch(name: str, entry: dict, model, past_lens, new: int) -> None:
    orig = make_session(onnx.load(str(MODELS / f"{name}.onnx")))
    paged = make_session(model)
    feeds = _original_feeds(entry, 2, max(past_lens), new, seed=sum(past_lens))
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=new, seed=1)
    if _has(entry, "position_ids"):  # Optimum: the caller gives the positions, per sequence
        pf["position_ids"] = np.stack([np.arange(L, L + new) for L in past_lens]).astype(np.int64)
    got = dict(zip([o.name for o in paged.get_outputs()],
                   paged.run(None, {k: v for k, v in pf.items() if k in {i.name for i in paged.get_inputs()}})))
    for b, L in enumerate(past_lens):
        f = {"input_ids": feeds["input_ids"][b:b + 1], "attention_mask": np.ones((1, L + new), np.int64)}
        f.update({k: v[b:b + 1, :, :L] for k, v in feeds.items() if k.startswith("past_key_values.")})
        if _has(entry, "position_ids"):
            f["position_ids"] = np.arange(L, L + new, dtype=np.int64)[None]
        ref = dict(zip([o.name for o in orig.get_outputs()], orig.run(None, f)))
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-4)
        for i in range(entry["num_layers"]):
            for kv, t in (("key", "k"), ("value", "v")):
                np.testing.assert_allclose(gather_pool(got[f"kv_pool_{t}_out.{i}"], pf["block_tables"][b], L + new),
                                           ref[f"present.{i}.{kv}"][0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_static_decode_is_paged_and_matches_original(name):
    """S fixed at 1 makes a present's length ``past_sequence + 1``; shape CSE must not swap the
    reads of it for an Add it cannot read back (TorchScript LLaMA's repeat-KV Expand target then
    stayed unfolded: no GQA, no cache fusion, nothing paged)."""
    entry = json.loads((MODELS / f"{name}.json").read_text())
    result = onnx_fuse.optimize(static_decode(name), level=4, target="trt", float32_plugins=True, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["PagedAttention"] == entry["num_layers"], result.report.warnings
    _check_ragged_batch(name, entry, result.model, (7, 3), 1)


@pytest.mark.parametrize("name", NAMES)
def test_static_decode_keeps_kv_heads_and_cache_at_ort_o3(name):
    entry = json.loads((MODELS / f"{name}.json").read_text())
    result = onnx_fuse.optimize(static_decode(name), level=3, target="ort", verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    fused = [n for n in result.model.graph if n.op_type in ("Attention", "MultiHeadAttention", "GroupQueryAttention")]
    assert len(fused) == entry["num_layers"], collections.Counter(n.op_type for n in result.model.graph)
    for v in result.model.graph.inputs:   # the cache goes into the attention, not a Concat (Shape: dims)
        if v.name.startswith("past_key_values."):
            assert {u.node.op_type for u in v.uses()} <= {n.op_type for n in fused} | {"Shape"}, v.name
    for n in fused:   # GQA: K/V not repeated to the query heads ([B, Hkv, S, D] or kv_num_heads)
        k = n.inputs[1]
        heads = (k.shape[1] if k.shape is not None and len(k.shape) == 4
                 else n.attributes["kv_num_heads"].value if "kv_num_heads" in n.attributes
                 else n.attributes["num_heads"].value)
        assert heads == entry["num_kv_heads"], (n.op_type, k.shape)


def test_padding_mask_read_only_for_the_batch_size_goes():
    """The batch size read as Shape(attention_mask)[0:1] (where shape CSE took it from the mask, as in
    the corpus-style dynamo LLaMA) is Shape(seq_lens) once paged: the mask input goes."""
    proto = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    batch = [n for n in proto.graph.node if n.op_type == "Shape" and n.input[0] == "past_key_values.0.key"
             and [(a.name, a.i) for a in sorted(n.attribute, key=lambda a: a.name)] == [("end", 1), ("start", 0)]]
    assert len(batch) == 1
    batch[0].input[0] = "attention_mask"
    result = onnx_fuse.optimize(proto, level=4, target="trt", float32_plugins=True, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert collections.Counter(n.op_type for n in result.model.graph)["PagedAttention"] == 2
    assert [v.name for v in result.model.graph.inputs][:3] == ["input_ids", "block_tables", "seq_lens"]


def test_positions_that_are_not_the_cache_positions_are_refused():
    """OPT's mask-derived positions with a stride of 2: not P + i + c, so the probe refuses and the
    contiguous cache stays, with the reason in the report."""
    proto = onnx.load(str(MODELS / "opt_hd64__kv__trained.onnx"))
    gather = next(n for n in proto.graph.node if n.op_type == "Gather" and "embed_positions" in n.input[0])
    two = onnx.numpy_helper.from_array(np.array(2, np.int64), "stride_two")
    proto.graph.initializer.append(two)
    proto.graph.node.insert(list(proto.graph.node).index(gather),
                            onnx.helper.make_node("Mul", [gather.input[1], "stride_two"], ["strided_pos"]))
    gather.input[1] = "strided_pos"
    result = onnx_fuse.optimize(proto, level=4, target="trt", float32_plugins=True)
    assert collections.Counter(n.op_type for n in result.model.graph)["PagedAttention"] == 0
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "not consecutive" in notes[0], result.report.warnings
