"""Paged KV (O4, trt) for merged decoders (optimizer/targets/trt_merged_decoder.py): the If on
``use_cache_branch`` is resolved to its cache branch when, and only when, that branch is paged.

- a unit merged decoder made from the dynamo LLaMA export tests/data/models/llama64_kv_dynamo.onnx
  (2 layers, 2 q / 1 kv heads of 64): the cache branch is the export as it is, the no-cache
  branch the same nodes over an empty past [B, Hkv, 0, D] built in the branch, as Optimum's merge
  pairs decoder_with_past_model and decoder_model;
- the real Optimum merged Qwen2 at head size 64 (tests/data/models/
  qwen2_hd64__optimum_merged__trained.onnx, its .json says how: tools/export_merged.py --head-dim 64).

The paged model must answer a prefill (seq_lens = S, nothing cached) as the original's no-cache
branch does and a ragged decode as its cache branch does, sequence by sequence.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.targets.trt_merged_decoder import find_cache_branch
from onnx_fuse.verify import make_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from merged_decoder import merged_decoder  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
QWEN2 = "qwen2_hd64__optimum_merged__trained"
LAYERS, VOCAB = 2, 128


def merged_from_kv(proto: onnx.ModelProto, *, else_reads_past: bool = False) -> onnx.ModelProto:
    """tools/merged_decoder.py's If on ``use_cache_branch`` over the KV export (the empty past's
    batch read from input_ids; ``else_reads_past``: both branches read the graph's past)."""
    return merged_decoder(proto, "input_ids", else_reads_past=else_reads_past, name="merged")


def _o4(model, **kw):
    return onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True, **kw)


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph))


def _pools() -> list[str]:
    return [f"kv_pool_{t}.{i}" for i in range(LAYERS) for t in "kv"]


@pytest.fixture(scope="module")
def unit() -> onnx.ModelProto:
    return merged_from_kv(onnx.load(str(MODELS / "llama64_kv_dynamo.onnx")))


@pytest.fixture(scope="module")
def unit_paged(unit):
    return _o4(unit, verify=True)


def test_unit_merged_decoder_is_paged_in_every_layer(unit_paged):
    result = unit_paged
    assert result.report.status == "PASSED", result.report.status_reason
    assert result.report.verify["cases"] == ["use_cache_branch=1", "use_cache_branch=0"]
    ops = _ops(result.model)
    assert ops["PagedAttention"] == LAYERS and ops["If"] == 0 and ops["Attention"] == 0, ops
    # the past, the mask and the branch choice go: the pools replace what the If chose between
    assert [v.name for v in result.model.graph.inputs] == ["input_ids", "block_tables", "seq_lens", *_pools()]
    assert [v.name for v in result.model.graph.outputs] == ["logits", *(p.replace(".", "_out.") for p in _pools())]
    assert any("resolved to its cache branch" in w for w in result.report.warnings), result.report.warnings


def test_unit_merged_decoder_pages_as_its_kv_export_does(unit_paged):
    """The cache branch resolved is the KV export itself: the same paged graph, op for op."""
    alone = _o4(str(MODELS / "llama64_kv_dynamo.onnx")).model
    assert _ops(unit_paged.model) == _ops(alone)


def _unit_feeds(rng, batch: int, past: int, new: int) -> dict:
    feeds = {"input_ids": rng.integers(3, VOCAB, (batch, new)).astype(np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, 1, past, 64)).astype(np.float32)
    return feeds


def _run(sess, feeds: dict) -> dict:
    names = {i.name for i in sess.get_inputs()}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {k: v for k, v in feeds.items() if k in names})))


def _compare(got: dict, ref: dict, tables, lengths, atol=1e-4) -> None:
    for b, total in enumerate(lengths):
        np.testing.assert_allclose(got["logits"][b], ref[b]["logits"][0], rtol=1e-4, atol=atol)
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                np.testing.assert_allclose(gather_pool(got[f"kv_pool_{t}_out.{i}"], tables[b], total),
                                           ref[b][f"present.{i}.{kv}"][0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("new", [1, 5])
def test_prefill_matches_the_no_cache_branch(unit, unit_paged, new):
    """Nothing cached, seq_lens = S: the paged model is the original with use_cache_branch false."""
    orig, paged = make_session(unit), make_session(unit_paged.model)
    feeds = _unit_feeds(np.random.default_rng(new), 2, 0, new)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=(0, 0), new_tokens=new, seed=3)
    got = _run(paged, pf)
    ref = []
    for b in range(2):
        f = {k: v[b:b + 1] for k, v in feeds.items()}
        f.update(attention_mask=np.ones((1, new), np.int64), use_cache_branch=np.array([False]))
        ref.append(_run(orig, f))
    _compare(got, ref, pf["block_tables"], (new, new))


@pytest.mark.parametrize("past_lens,new", [((7, 3), 1), ((0, 9), 1), ((5, 2), 3)])
def test_ragged_batch_matches_the_cache_branch(unit, unit_paged, past_lens, new):
    """Each sequence with its own past: the original's cache branch run once per sequence (a
    sequence with nothing cached too: the cache branch at past length 0)."""
    orig, paged = make_session(unit), make_session(unit_paged.model)
    feeds = _unit_feeds(np.random.default_rng(sum(past_lens)), 2, max(past_lens), new)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=new, seed=1)
    got = _run(paged, pf)
    ref = []
    for b, L in enumerate(past_lens):
        f = {k: (v[b:b + 1, :, :L] if k.startswith("past_") else v[b:b + 1]) for k, v in feeds.items()}
        f.update(attention_mask=np.ones((1, L + new), np.int64), use_cache_branch=np.array([True]))
        ref.append(_run(orig, f))
    _compare(got, ref, pf["block_tables"], [L + new for L in past_lens])


def test_head_size_16_keeps_the_if_and_says_why():
    """The cache branch of a head-size-16 decoder is not paged (PagedAttention's kernels): the If,
    the past inputs and the contiguous cache in both branches stay, verified on both branches,
    and the report gives the cache branch's reason, not 'no attention over the KV cache'."""
    proto = merged_from_kv(onnx.load(str(MODELS / "llama_kv_dynamo.onnx")))
    result = _o4(proto, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    ops = _ops(result.model)
    assert ops["If"] == 1 and ops["PagedAttention"] == 0 and ops["Attention"] + ops["FusedAttention"] == 2 * LAYERS
    assert [v.name for v in result.model.graph.inputs] == [v.name for v in proto.graph.input]
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "merged decoder, If on 'use_cache_branch' kept: in its cache branch" in notes[0], notes
    assert "PagedAttention's kernels take head sizes" in notes[0], notes
    assert "no attention over the KV cache" not in notes[0]


def test_plugin_ops_in_a_branch_run_in_verify():
    """With the paged rule off, the no-cache branch's attention becomes FusedAttention inside the
    If: verify runs it through the NumPy reference (ort_ops retargets ops in If bodies) and feeds
    unpadded masks for it, as for one in the main graph. Before: 'ONNX Runtime refuses the
    optimized model' (onnx_fuse:FusedAttention not registered), then logits off by 5 (padded masks)."""
    proto = merged_from_kv(onnx.load(str(MODELS / "llama64_kv_dynamo.onnx")))
    result = _o4(proto, verify=True, disable=["trt-paged-kv"])
    ops = _ops(result.model)
    assert ops["If"] == 1 and ops["FusedAttention"] == LAYERS, ops
    assert result.report.status == "PASSED", (result.report.status_reason, result.report.verify.get("error"))
    assert "masks unpadded: FusedAttention zeroes padded query rows by contract" in result.report.verify["notes"]


def test_precision_says_it_leaves_branches_float32(unit):
    """--precision converts the main graph only (passes/precision.py): a merged decoder that keeps
    its If (here ort) is not converted, and the report says so; paged, it has no If left."""
    kept = onnx_fuse.optimize(unit, level=3, target="ort", precision="fp16")
    notes = [w for w in kept.report.warnings if w.startswith("precision:")]
    assert notes and "float32 nodes inside If / Loop / Scan bodies stay float32" in notes[0], kept.report.warnings
    paged = onnx_fuse.optimize(unit, level=4, target="trt", precision="fp16")
    assert _ops(paged.model)["PagedAttention"] == LAYERS
    assert not [w for w in paged.report.warnings if w.startswith("precision:")], paged.report.warnings


def test_fuzzer_checks_a_paged_merged_decoder_on_both_branches(unit, monkeypatch):
    """tools/fuzz_differential.py run_one on a paged model: every feed set goes through the paged
    harness (which runs the original on it itself), the other branch's (use_cache_branch false, an
    empty past) too, and the first that is not ok decides ('feed set 1: ...')."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import fuzz_differential as fd

    rng = np.random.default_rng(4)
    feeds = _unit_feeds(rng, 2, 3, 2)
    feeds.update(attention_mask=np.ones((2, 5), np.int64), use_cache_branch=np.array([True]))
    alt = _unit_feeds(rng, 2, 0, 2)
    alt.update(attention_mask=np.ones((2, 2), np.int64), use_cache_branch=np.array([False]))
    names = [o.name for o in unit.graph.output]
    sess = fd._session(unit, ort_optimizations=False)
    ref, ref_alt = sess.run(names, feeds), sess.run(names, alt)
    seen, check = [], fd._check_paged

    def recording(original, optimized, run_feeds, *args, **kw):
        seen.append(bool(run_feeds["use_cache_branch"][0]))
        return check(original, optimized, run_feeds, *args, **kw)

    monkeypatch.setattr(fd, "_check_paged", recording)
    cls, detail, opt, fires = fd.run_one(unit, feeds, ref, 4, "trt", alt=[(alt, ref_alt)])
    assert fires.get("trt-paged-kv") and cls == "ok" and seen == [True, False], (cls, detail, seen)
    monkeypatch.setattr(fd, "_check_paged", lambda o, p, run_feeds, *a, **k: (
        ("ok", "") if run_feeds["use_cache_branch"][0] else ("wrong", "logits off")))
    cls, detail, _, _ = fd.run_one(unit, feeds, ref, 4, "trt", alt=[(alt, ref_alt)])
    assert (cls, detail) == ("wrong", "feed set 1: logits off")


def test_fuzzer_writes_decoder_steps_as_merged_decoders():
    """tools/fuzz_decoder.as_merged (a share of the fuzzer's decoder steps): the step in one branch,
    the same nodes over an empty past in the other, a second feed set for that branch; at O4 trt
    the case is paged and ok on both sets, at O3 ort ok with its If."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import fuzz_differential as fd
    from fuzz_motifs import make_decoder_case

    case = make_decoder_case(77, merged=True, head=64, kv_heads=1, heads=2, sinks=False, window=0, fp16=False,
                             kv_fp8=False, padded=True)
    (alt,) = case.alt_feeds
    assert "merged-decoder" in case.traps and case.spec["merged"]
    assert case.feeds["use_cache_branch"].all() and not alt["use_cache_branch"].any()
    assert alt["past_key_values.0.key"].shape[2] == 0 < case.feeds["past_key_values.0.key"].shape[2]
    results, _, _ = fd.fuzz_case(case, [3, 4], ["ort", "trt"])
    by = {(r["level"], r["target"]): r for r in results}
    assert all(r["cls"] == "ok" for r in results), [(k, r["cls"], r["detail"]) for k, r in by.items()]
    assert by[(4, "trt")]["fires"].get("trt-paged-kv") and not by[(3, "ort")]["fires"].get("trt-paged-kv")


def test_what_is_not_a_merged_decoder():
    base = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    found = find_cache_branch(ir.from_proto(merged_from_kv(base)))
    assert found is not None and found.take is True and len(found.pasts) == 2 * LAYERS
    # both branches read the past: the If chooses between two uses of it, not past or no past
    assert find_cache_branch(ir.from_proto(merged_from_kv(base, else_reads_past=True))) is None
    # the condition also read elsewhere: resolving it would change that reader
    proto = merged_from_kv(base)
    proto.graph.node.append(oh.make_node("Not", ["use_cache_branch"], ["no_cache"]))
    proto.graph.output.append(oh.make_tensor_value_info("no_cache", TensorProto.BOOL, [1]))
    assert find_cache_branch(ir.from_proto(proto)) is None
    result = _o4(proto)
    assert _ops(result.model)["If"] == 1 and _ops(result.model)["PagedAttention"] == 0


def test_cache_branch_in_the_else_branch():
    """Which branch holds the past is read from the graph, not from Optimum's convention: the
    same model with its branches swapped and the condition negated in meaning is resolved to
    the else branch."""
    proto = merged_from_kv(onnx.load(str(MODELS / "llama64_kv_dynamo.onnx")))
    node = proto.graph.node[0]
    branches = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    then_b, else_b = branches["then_branch"], branches["else_branch"]
    node.ClearField("attribute")
    node.attribute.extend([oh.make_attribute("then_branch", else_b), oh.make_attribute("else_branch", then_b)])
    assert find_cache_branch(ir.from_proto(proto)).take is False
    result = _o4(proto, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    assert _ops(result.model)["PagedAttention"] == LAYERS and _ops(result.model)["If"] == 0


# ---- the real Optimum merged decoder -----------------------------------------------------------


@pytest.fixture(scope="module")
def qwen2():
    entry = json.loads((MODELS / f"{QWEN2}.json").read_text())
    return entry, _o4(str(MODELS / f"{QWEN2}.onnx"), verify=True)


def test_optimum_merged_qwen2_is_paged_and_verified_on_both_branches(qwen2):
    entry, result = qwen2
    assert result.report.status == "PASSED", result.report.status_reason
    assert result.report.verify["cases"] == ["use_cache_branch=1", "use_cache_branch=0"]
    ops = _ops(result.model)
    assert ops["PagedAttention"] == entry["num_layers"] and ops["If"] == 0 and ops["Softmax"] == 0
    # Optimum's position_ids input stays (the caller's positions); the mask and the past go
    assert [v.name for v in result.model.graph.inputs] == ["input_ids", "position_ids", "block_tables", "seq_lens",
                                                          *_pools()]


def test_optimum_merged_qwen2_pages_as_its_with_past_export():
    """The merged file's cache branch pages to what the single with-past Optimum export of the
    same model (tests/data/models/qwen2_hd64__optimum__trained.onnx) pages to, op for op."""
    merged = _o4(str(MODELS / f"{QWEN2}.onnx")).model
    alone = _o4(str(MODELS / "qwen2_hd64__optimum__trained.onnx")).model
    assert _ops(merged) == _ops(alone)


@pytest.mark.parametrize("past_lens,new", [((6, 0), 1), ((0, 0), 4), ((3, 5), 2)])
def test_optimum_merged_qwen2_matches_its_branches(qwen2, past_lens, new):
    """Per sequence: nothing cached against the no-cache branch (empty past, mask over the new
    tokens), else the cache branch, the caller's positions fed as Optimum's caller does."""
    entry, result = qwen2
    orig, paged = make_session(onnx.load(str(MODELS / f"{QWEN2}.onnx"))), make_session(result.model)
    rng = np.random.default_rng(sum(past_lens) + new)
    feeds = {"input_ids": rng.integers(3, entry["vocab_size"], (2, new)).astype(np.int64)}
    for inp in entry["inputs"]:
        if inp["name"].startswith("past_key_values."):
            feeds[inp["name"]] = rng.standard_normal((2, inp["dims"][1], max(past_lens), inp["dims"][3])).astype(np.float32)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=new, seed=2)
    pf["position_ids"] = np.stack([np.arange(L, L + new) for L in past_lens]).astype(np.int64)
    got = _run(paged, pf)
    ref = []
    for b, L in enumerate(past_lens):
        f = {k: (v[b:b + 1, :, :L] if k.startswith("past_") else v[b:b + 1]) for k, v in feeds.items()}
        f.update(attention_mask=np.ones((1, L + new), np.int64), position_ids=np.arange(L, L + new)[None],
                 use_cache_branch=np.array([L > 0]))
        ref.append(_run(orig, f))
    _compare(got, ref, pf["block_tables"], [L + new for L in past_lens])
