"""tools/holdout_specs.py HOLDOUT18 and export_corpus.py --holdout 30 (eighteenth sweep: Optimum's exporter on
the later hold-out architectures): the plan, and the example inputs for the symbolic dims Optimum's exports
declare (docs/holdout.md, eighteenth sweep)."""

from __future__ import annotations

import numpy as np

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep18")


def test_plan_is_one_optimum_file_per_architecture(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[30]
    # a copy: SPECS is shared with the other spec tests, and hold-out 30 reuses corpus names (whisper_encoder, ...)
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 30))
    assert len(todo) == len(hs) == 42
    assert {style for _, style, _ in todo} == {"optimum"} and {w for _, _, w in todo} == {"trained"}
    # encoders of encoder-decoders are exported through their generation task (encoder_model.onnx)
    assert hs["mt5_encoder"]["model_class"] == "MT5ForConditionalGeneration"
    assert hs["mt5_encoder"]["optimum_task"] == "text2text-generation"
    assert hs["gemma3_text"]["config_class"] == "Gemma3TextConfig" and "text_config" not in hs["gemma3_text"]["config"]


def _entry(kind, inputs, **config):
    return {"kind": kind, "style": "optimum", "config": config,
            "inputs": [{"name": n, "dtype": t, "dims": d} for n, t, d in inputs]}


def test_symbolic_dims_take_the_model_sizes():
    ec = _export_corpus()
    f = ec.feeds_from_manifest
    img = f(_entry("vision", [("pixel_values", "float32", ["batch_size", "num_channels", "height", "width"])],
                   image_size=64))
    assert img["pixel_values"].shape == (ec.BATCH, 3, 64, 64)
    ts = f(_entry("features", [("past_values", "float32", ["batch_size", "sequence_length", 3])],
                  context_length=32))
    assert ts["past_values"].shape == (ec.BATCH, 32, 3)
    vis = f(_entry("encoder", [("visual_embeds", "float32", ["batch_size", "visual_seq_length",
                                                             "visual_embedding_dim"])], visual_embedding_dim=24))
    assert vis["visual_embeds"].shape[2] == 24
    wav = f(dict(_entry("audio", [("input_values", "float32", ["batch_size", "encoder_sequence_length"])]),
                 audio_samples=4000))
    assert wav["input_values"].shape == (ec.BATCH, 4000)
    box = f(_entry("encoder", [("bbox", "int64", ["batch_size", "sequence_length", 4])]))["bbox"]
    assert box.min() >= 0 and box.max() < 64 and np.all(box[..., 2:] >= box[..., :2])
    # without those config entries the defaults stay
    plain = f(_entry("vision", [("pixel_values", "float32", ["batch_size", "num_channels", "height", "width"])]))
    assert plain["pixel_values"].shape[2:] == (ec.DIM_VALUES["height"], ec.DIM_VALUES["width"])
