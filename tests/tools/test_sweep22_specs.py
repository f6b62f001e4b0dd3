"""tools/holdout_specs.py HOLDOUT22 and export_corpus.py --holdout 34 (twenty-second sweep: transformers 5.25 model types
no set had): the architectures are new, the plan's file count, and the manifest entries of Dia's per-part
`encoder_config` and of pi05's `vlm_config` (its language model's sizes); pi05's extra feeds (torch only there)."""

from __future__ import annotations

import pytest

from tests.tool_modules import identity_model, load_tool, plan_new_set

NEW = ("mistral4", "step3p5_text", "chameleon", "musicgen_decoder", "reformer_local", "glm_image_text",
       "hunyuan_vl_text", "dia_encoder", "pi05")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep22")


def test_new_architectures_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[34]
    assert set(hs) == set(NEW)
    todo = plan_new_set(ec, 34, NEW, monkeypatch)
    assert len(todo) == 29 and {w for _, _, w in todo} == {"trained"}


def test_entry_of_dia_encoder_config(monkeypatch, tmp_path):
    """Dia nests its parts as encoder_config / decoder_config (T5Gemma: encoder / decoder)."""
    ec = _export_corpus()
    path = tmp_path / "dia.onnx"
    identity_model(path, ["batch", "sequence"])
    spec = dict(ec.HOLDOUT_SETS[34]["dia_encoder"])
    spec.pop("attention_blocks")  # the count must come from the encoder's config
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "dia_encoder": spec})
    monkeypatch.setattr(ec, "ort_check", lambda path, entry: {"ok": True})
    entry = ec.make_entry("dia_encoder", "dyn_mask", "trained", path, {})
    assert entry["num_layers"] == 2 and entry["num_heads"] == 2 and entry["hidden_size"] == 32
    assert entry["head_dim"] == 16 and entry["vocab_size"] == 128 and "delay_pattern" in entry["config"]



def test_entry_of_a_decoder_beside_a_nested_encoder_config(monkeypatch, tmp_path):
    """Cohere ASR nests its encoder's config (encoder_config) but keeps its decoder's sizes top-level: the
    decoder's entry reads those (hold-out 27's cohere_asr_decoder failed with KeyError 'decoder_config')."""
    ec = _export_corpus()
    path = tmp_path / "cohere_asr_decoder.onnx"
    identity_model(path, ["batch", "sequence"])
    spec = ec.HOLDOUT_SETS[27]["cohere_asr_decoder"]
    assert isinstance(spec["config"]["encoder_config"], dict) and "decoder_config" not in spec["config"]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "cohere_asr_decoder": spec})
    monkeypatch.setattr(ec, "ort_check", lambda path, entry: {"ok": True})
    entry = ec.make_entry("cohere_asr_decoder", "dyn_mask", "trained", path, {})
    assert entry["vocab_size"] == spec["config"]["vocab_size"] and "vocab_size" not in spec["config"]["encoder_config"]
    assert entry["num_layers"] == 2 and entry["num_heads"] == 2 and entry["hidden_size"] == 32


def test_entry_of_pi05_reads_the_vlm_text_config(monkeypatch, tmp_path):
    ec = _export_corpus()
    path = tmp_path / "pi05.onnx"
    identity_model(path, ["batch", "sequence"])
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[34]})
    monkeypatch.setattr(ec, "ort_check", lambda path, entry: {"ok": True})
    entry = ec.make_entry("pi05", "dyn_mask", "trained", path, {})
    assert entry["num_layers"] == 2 and entry["num_heads"] == 4 and entry["num_kv_heads"] == 2
    assert entry["attention_blocks"] == 5 and entry["vocab_size"] == ec.HOLDOUT_SETS[34]["pi05"]["vlm"]["text_vocab"]


def test_pi05_feeds_an_action_chunk_and_a_timestep(monkeypatch):
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[34]})
    feeds, dims = ec.example_inputs("pi05", "dyn_mask")
    b = feeds["input_ids"].shape[0]
    assert tuple(feeds["noise"].shape) == (b, 4, 8) and dims["noise"] == ["batch", 4, 8]
    assert tuple(feeds["timestep"].shape) == (b,) and dims["timestep"] == ["batch"]
    assert 0 <= float(feeds["timestep"].min()) and float(feeds["timestep"].max()) < 1
    feeds, dims = ec.example_inputs("pi05", "static_nomask")
    assert dims["noise"] == [b, 4, 8] and "attention_mask" not in feeds
