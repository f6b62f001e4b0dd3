"""tools/holdout_specs.py HOLDOUT23 and export_corpus.py --holdout 35 (twenty-third sweep: transformers 5.25 model types
no set or corpus spec tried): the architectures are new, the plan, and two export_corpus fixes the set needed: a
manifest entry for Kosmos-2's text decoder (sizes spelled embed_dim / layers) and the forward's arguments of a class
the transformers top level does not export (spec["model_module"])."""

from __future__ import annotations

import pytest

from tests.tool_modules import identity_model, load_tool, plan_new_set

NEW = ("kosmos2_text", "kosmos2_5_text", "git_text", "musicgen_melody_decoder", "csm_depth", "paddleocr_vl_text",
       "deepseek_ocr2_text", "unlimited_ocr_text", "qwen2_5_omni_text", "qwen3_omni_moe_text", "ernie4_5_vl_moe_text",
       "layoutlmv3_text", "tapas", "dpr_question", "led_encoder", "pvt", "unispeech", "seamless_m4t_speech",
       "seamless_m4t_v2_speech", "voxtral_realtime_encoder", "kosmos2_vision", "idefics2_vision", "janus_vision",
       "idefics2_perceiver")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep23")


def test_new_architectures_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[35]
    assert set(hs) == set(NEW)
    earlier_classes = {spec["model_class"] for n, s in ec.HOLDOUT_SETS.items() if n != 35 for spec in s.values()}
    assert not {hs[a]["model_class"] for a in NEW} & earlier_classes
    todo = plan_new_set(ec, 35, NEW, monkeypatch)
    assert len(todo) == 46 and {w for _, _, w in todo} == {"trained"}
    half = list(ec.plan_holdout(list(NEW), ("dyn_mask", "kv"), 35, "float16"))  # HALF23: 4 heads x 2 + 3 text models
    assert len(half) == 11 and {a for a, _, _ in half} == ec.HALF23


@pytest.mark.parametrize("arch", ["kosmos2_text", "kosmos2_5_text"])
def test_entry_of_kosmos_text_sizes(monkeypatch, tmp_path, arch):
    """Kosmos-2's text config spells its width embed_dim and its depth layers: the entry read neither, and head_dim
    (hidden // heads) raised TypeError, so both files failed after a good export."""
    ec = _export_corpus()
    path = tmp_path / f"{arch}.onnx"
    identity_model(path, ["batch", "sequence"])
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[35]})
    monkeypatch.setattr(ec, "ort_check", lambda path, entry: {"ok": True})
    entry = ec.make_entry(arch, "kv", "trained", path, {})
    assert entry["num_layers"] == 2 and entry["num_heads"] == 2 and entry["hidden_size"] == 32
    assert entry["head_dim"] == 16 and entry["vocab_size"] == 128


def test_forward_args_of_a_class_outside_the_top_level():
    """Kosmos2TextForCausalLM lives in its module only: _forward_args looked it up on transformers (AttributeError)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ec = _export_corpus()
    args = ec._forward_args(ec.HOLDOUT_SETS[35]["kosmos2_text"])
    assert {"input_ids", "attention_mask", "image_embeds"} <= args
