"""tools/holdout_specs.py HOLDOUT7A and export_corpus.py --holdout 12 (seventh sweep part A: encoders,
seq2seq parts, speech and vision towers of transformers 5.24 no earlier set has): the plan, that every
architecture is new to the sets before it, and the example inputs the new spec fields ask for
(docs/holdout.md, seventh sweep part A)."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep7a")


def test_sweep_architectures_are_new():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[12]
    earlier = [ec.SPECS] + [s for n, s in ec.HOLDOUT_SETS.items() if n < 12]
    # a model's part is what is new: Marian's, M2M-100's and Moonshine's decoders are in earlier sets, their
    # encoders in none
    seen = {(s["config_class"], s["part"]) for specs in earlier for s in specs.values()}
    assert not seen & {(s["config_class"], s["part"]) for s in hs.values()}
    assert not {a for specs in earlier for a in specs} & set(hs)
    assert {s["kind"] for s in hs.values()} == {"encoder", "seq2seq_decoder", "decoder", "audio", "features",
                                                "vision"}


def test_plan_is_the_corpus_styles(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[12]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[12]), None, 12))
    assert all(w == "trained" for _, _, w in todo)
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript", "torchscript_kv"}
    # a decoder without a mask at static shapes (Jamba: its Mamba layers specialize the sequence)
    assert {s for a, s, _ in todo if a == "jamba"} == {"static_nomask"}
    # T5-likes whose dynamo export cannot view the non-contiguous heads: TorchScript, with the cache
    assert {s for a, s, _ in todo if a == "pix2struct_text"} == {"torchscript", "torchscript_kv"}


def test_example_inputs_of_the_new_spec_fields(monkeypatch):
    """Hiera's [H, W] image size and Moonshine's longer waveform (audio_samples) reach the inputs."""
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[2], **ec.HOLDOUT_SETS[12]})
    feeds, dims = ec.example_inputs("hiera", "dyn_mask")
    assert list(feeds["pixel_values"].shape) == [2, 3, 64, 64] and dims["pixel_values"] == ["batch", 3, 64, 64]
    feeds, dims = ec.example_inputs("moonshine_encoder", "static_nomask")
    assert list(feeds["input_values"].shape) == [2, 4000] and dims["input_values"] == [2, 4000]
    feeds, _ = ec.example_inputs("wav2vec2", "dyn_mask")  # the second sweep's audio keeps its 400 samples
    assert feeds["input_values"].shape[-1] == ec.AUDIO_SAMPLES == 400
