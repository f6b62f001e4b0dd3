"""tools/holdout_specs.py HOLDOUT5B and export_corpus.py --holdout 7 (fifth sweep part B: encoders, vision,
audio, seq2seq parts): the plan, that every architecture is new to the sets before it, and the features kind's
inputs (docs/holdout.md, fifth sweep part B). The plan tests need no torch."""

from __future__ import annotations

import pytest
from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_encoder_sweep")


def test_sweep_architectures_are_new_and_not_decoders():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[7]
    assert len(hs) == 18
    hold = load_tool("holdout_specs", "holdout_specs_encoder_sweep")
    seen = set(ec.SPECS) | set(hold.HOLDOUT) | set(hold.HOLDOUT2) | set(hold.HOLDOUT3)
    assert not seen & set(hs)
    assert {s["kind"] for s in hs.values()} == {"encoder", "vision", "audio", "features", "seq2seq_decoder"}
    for name, spec in hs.items():
        assert (spec["kind"] == "features") == ("features_input" in spec), name


def test_plan_keeps_cache_styles_for_the_seq2seq_decoder(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[7]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[7]), None, 7))
    assert len(todo) == 33 and all(w == "trained" for _, _, w in todo)
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:
            assert ec.SPECS[arch]["kind"] == "seq2seq_decoder", arch
    assert ("umt5_decoder", "torchscript_kv", "trained") in todo and ("swinv2", "static_nomask", "trained") in todo


def test_features_kind_feeds_frames_by_bins(monkeypatch):
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[7]})
    feeds, dims = ec.example_inputs("speech_to_text_encoder", "dyn_mask")
    assert list(feeds) == ["input_features"] and tuple(feeds["input_features"].shape) == (ec.BATCH, 32, 16)
    assert dims["input_features"] == ["batch", 32, 16]
    feeds, dims = ec.example_inputs("audio_spectrogram_transformer", "static_nomask")
    assert dims == {"input_values": [ec.BATCH, 32, 16]}
