"""tools/holdout_specs.py HOLDOUT26 and export_corpus.py --holdout 38 (twenty-sixth sweep: transformers 5.25 families
earlier sets passed over): the model types are new (no earlier set or corpus spec has them), the plan exports cache
styles of decoders only, and kind features takes a univariate series [batch, T] (TimesFM 2.5) when its spec names no
bins. No torch or transformers needed for the plan tests."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool, plan_new_set

NEW = ("hy_v4_vl_text", "inkling2_loop", "zamba", "mamba2", "siglip2_text",
       "aimv2_text", "videoprism_text", "sam3_lite_text", "nemotron35_asr", "omniasr_audio", "timesfm2_5",
       "swiftformer", "clap_audio")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep26")


def test_new_model_types_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[38]) == set(NEW)
    todo = plan_new_set(ec, 38, NEW, monkeypatch)
    assert len(todo) == 26 and {w for _, _, w in todo} == {"trained"}
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript"}


def test_features_without_bins_is_a_series(monkeypatch):
    torch = pytest.importorskip("torch")
    ec = _export_corpus()
    spec = ec.HOLDOUT_SETS[38]["timesfm2_5"]
    name, frames, bins = spec["features_input"]
    assert bins is None
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "timesfm2_5": spec})
    for style, batch in (("static_nomask", 2), ("dyn_mask", "batch")):
        feeds, dims = ec._example_inputs("timesfm2_5", style, None, 2, 8, 0, 0)
        assert list(feeds) == [name] and feeds[name].dtype == torch.float32
        assert list(feeds[name].shape) == [2, frames] and dims[name] == [batch, frames]


def test_entry_of_per_stage_heads_without_stage_widths(monkeypatch, tmp_path):
    """CLAP's audio tower (HTSAT) has per-stage heads but neither embed_dim nor hidden_sizes: the entry takes its
    hidden_size (a KeyError on hidden_sizes before)."""
    import onnx
    from onnx import TensorProto, helper

    ec = _export_corpus()
    path = tmp_path / "clap.onnx"
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 32, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 32, 16])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "clap_audio": ec.HOLDOUT_SETS[38]["clap_audio"]})
    entry = ec.make_entry("clap_audio", "dyn_mask", "trained", path, {})
    assert entry["attention_blocks"] == 2 and entry["num_heads"] == 2 and entry["hidden_size"] == 32
