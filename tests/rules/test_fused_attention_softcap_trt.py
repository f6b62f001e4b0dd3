"""-O4 --target trt with Gemma 2's logit softcap: fused-attention-trt-softcap (fused_attention_trt.yaml)
turns softcapped canonical attention with the Hugging Face causal+padding mask into
onnx_fuse::FusedAttention(softcap) (the plugin's _sc kernels), and refuses what the plugin cannot
take (its head sizes, another mask), which attention-trt-softcap then lowers to plain ops.

The Gemma-2 graph is the committed LLaMA export (head size 64, tests/data/models) with a softcap
Div(c) -> Tanh -> Mul(c) put between each score MatMul and its mask Add, as Gemma 2 exports it; a
small cap makes the softcap change the logits a lot, so losing it cannot pass the numeric check.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_fuse
from onnx_fuse.plugins.check_trt import check_model

DATA = Path(__file__).resolve().parents[1] / "data"
MANIFEST = json.loads((DATA / "models" / "manifest.json").read_text())["models"]
CAP = 0.5


def _with_softcap(name: str, cap: float = CAP) -> onnx.ModelProto:
    model = onnx.load(str(DATA / "models" / f"{name}.onnx"))
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    g.initializer.append(onnx.numpy_helper.from_array(np.array(cap, np.float32), "softcap_c"))
    added = 0
    for i, sm in reversed(list(enumerate(g.node))):
        if sm.op_type != "Softmax":
            continue
        add = producer[sm.input[0]]
        mm_in = next(x for x in add.input if producer.get(x) is not None and producer[x].op_type == "MatMul")
        tag = f"sc{added}"
        add.input[list(add.input).index(mm_in)] = f"{tag}_capped"
        at = list(g.node).index(add)
        for j, node in enumerate([
                onnx.helper.make_node("Div", [mm_in, "softcap_c"], [f"{tag}_div"], name=f"{tag}_div"),
                onnx.helper.make_node("Tanh", [f"{tag}_div"], [f"{tag}_tanh"], name=f"{tag}_tanh"),
                onnx.helper.make_node("Mul", [f"{tag}_tanh", "softcap_c"], [f"{tag}_capped"], name=f"{tag}_mul")]):
            g.node.insert(at + j, node)
        added += 1
    assert added == 2
    onnx.checker.check_model(model)
    return model


def _reasons(model: onnx.ModelProto) -> list[str]:
    """explain() of fused-attention-trt-softcap on the model as `optimize -O4 --target trt` sees it."""
    from onnx_fuse.api import prepare_for_fusion
    from onnx_fuse.rewrite import explain, load_rule_set

    work = prepare_for_fusion(model, level=4, target="trt")
    rules = load_rule_set(target="trt", max_level=4)
    return [f"{r.status.value}: {r.reason}" for r in explain(work, rules, "fused-attention-trt-softcap")]


def _feeds(entry: dict) -> dict:
    rng = np.random.default_rng(0)
    b, s = entry["inputs"]["input_ids"]["shape"]
    f = {"input_ids": rng.integers(0, entry["config"]["vocab_size"], (b, s), dtype=np.int64),
         "attention_mask": np.ones((b, s), np.int64)}
    f["attention_mask"][-1, s * 3 // 4:] = 0  # right-padded last row
    return f


def test_softcapped_attention_becomes_fused_attention_with_softcap(h):
    entry = MANIFEST["llama64_sdpa_dynamo"]
    original = _with_softcap("llama64_sdpa_dynamo")
    fused = h.fuse(original, "trt", level=4)
    ops = h.ops(fused)
    assert ops["onnx_fuse::FusedAttention"] == entry["num_layers"], dict(ops)
    assert not {"Attention", "Softmax", "Tanh"} & set(ops), dict(ops)
    assert h.fired(fused)["fused-attention-trt-softcap"] > 0
    for node in fused.graph.node:
        if node.op_type == "FusedAttention":
            a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
            assert a["softcap"] == pytest.approx(CAP) and a["causal"] == 1
            assert (a["num_heads"], a["kv_num_heads"]) == (entry["num_heads"], entry["num_kv_heads"])
    feeds = _feeds(entry)
    valid = feeds["attention_mask"]
    h.assert_close(original, fused, feeds, atol=1e-4, rtol=1e-3, valid=valid)
    # the check can fail: the same model without its softcap is far from the softcapped one
    plain = onnx.load(str(DATA / "models" / "llama64_sdpa_dynamo.onnx"))
    ref, other = h.run(original, feeds)[0], h.run(plain, feeds)[0]
    assert np.abs(ref - other)[valid.astype(bool)].max() > 0.05


def test_softcapped_fp16_engine_input_passes_check_trt():
    """What `onnx-fuse optimize -O4 --target trt --precision fp16 --verify` writes for Gemma 2 is a
    graph check-trt accepts (the plugin's kernels are fp16/bf16) and that verifies."""
    result = onnx_fuse.optimize(_with_softcap("llama64_sdpa_dynamo"), level=4, target="trt",
                                precision="fp16", verify=True)
    assert result.report.verify["passed"]
    assert result.report.rule_fires.get("fused-attention-trt-softcap") == 2
    verdict = check_model(result.to_proto())
    assert verdict.supported and not verdict.issues, [str(i) for i in verdict.issues]
    assert verdict.plugin_nodes == 2


def test_unsupported_head_size_falls_back_to_plain_ops(h):
    """The Gemma-2 corpus exports have head size 16, which the kernels lack: refused with that
    reason (and the sliding-window layer for its mask), and lowered to the plain ops."""
    path = DATA / "corpus" / "gemma2__dyn_mask__trained.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    model = onnx.load(str(path))
    why = _reasons(model)  # layer 1: full attention, head size 16; layer 0: sliding-window mask
    assert len(why) == 2 and any("head sizes 64, 80, 96, 128 and 256" in r for r in why), why
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True, verify=True)
    assert result.report.verify["passed"]
    assert "fused-attention-trt-softcap" not in result.report.rule_fires
    assert result.report.rule_fires.get("attention-trt-softcap") == 2


def test_soft_mask_is_not_the_plugin_contract(h):
    """A mask that only down-weights padded keys (-1e4) is not seq_lens: plain ops, not the plugin."""
    model = _with_softcap("llama64_sdpa_dynamo")
    where = next(n for n in model.graph.node if n.op_type == "Where" and len(n.input) == 3
                 and any(i.name == n.input[2] for i in model.graph.initializer))
    init = next(i for i in model.graph.initializer if i.name == where.input[2])
    init.CopyFrom(onnx.numpy_helper.from_array(np.array(-1e4, np.float32), init.name))
    why = _reasons(model)
    assert why and all("(nearly) -inf" in r for r in why), why
    fused = h.fuse(model, "trt", level=4)
    ops = h.ops(fused)
    assert "onnx_fuse::FusedAttention" not in ops and ops["Softmax"] == 2 and ops["Tanh"] == 2
    h.assert_close(model, fused, _feeds(MANIFEST["llama64_sdpa_dynamo"]), atol=1e-4, rtol=1e-3)


def test_without_softcap_the_attention23_rule_takes_it(h):
    fused = h.fuse(onnx.load(str(DATA / "models" / "llama64_sdpa_dynamo.onnx")), "trt", level=4)
    assert h.fired(fused)["fused-attention-trt-softcap"] == 0
    for node in fused.graph.node:
        if node.op_type == "FusedAttention":
            assert {a.name: a.f for a in node.attribute}["softcap"] == 0.0
