"""tools/holdout_specs.py HOLDOUT5C and export_corpus.py --holdout 8 (torch.onnx exporter drift): the plan,
the specs' torch pins, which specs hand off to another venv, and the hand-off's error when a torch venv is
missing (docs/holdout.md, fifth sweep part C). No torch or transformers needed."""

from __future__ import annotations

import sys
import types

import pytest
from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_torch_drift")


def test_every_drift_spec_pins_a_torch_and_keeps_the_corpus_config():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[8]
    assert hs is ec.HOLDOUT5C and len(hs) == 2 * len(ec.SPECS.keys() & {s["base_arch"] for s in hs.values()})
    for name, spec in hs.items():
        base, tag = name.rsplit("_pt", 1)
        assert spec["torch"] == {"291": "2.9.1", "2141": "2.14.1"}[tag], name
        assert spec["base_arch"] == base and spec["config"] == ec.SPECS[base]["config"], name
        assert "transformers" not in spec, name  # the corpus's transformers: only the exporter differs


def test_plan_holds_cache_styles_for_decoders_only(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT5C})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT5C), None, 8))
    assert len(todo) == 126 and all(w == "trained" for _, _, w in todo)
    assert {s for _, s, _ in todo} == {"dyn_mask", "kv", "torchscript", "torchscript_kv", "noopt",
                                         "latest_opset", "kv_latest_opset", "static_nomask"}
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:
            assert ec.SPECS[arch]["kind"] in ("decoder", "seq2seq_decoder"), arch
    assert ("llama_pt291", "noopt", "trained") in todo and ("llama_pt2141", "torchscript_kv", "trained") in todo
    # 2.9.1 alone adds static exports (its dynamic-shape export of transformers 5.24 fails)
    assert ("llama_pt291", "static_nomask", "trained") in todo and ("llama_pt2141", "static_nomask", "trained") not in todo


def _fake_versions(monkeypatch, torch_version, transformers_version):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__=torch_version))
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__=transformers_version))


def test_a_spec_hands_off_when_its_torch_or_transformers_pin_is_not_this_process(monkeypatch):
    ec = _export_corpus()
    _fake_versions(monkeypatch, "2.13.0+cpu", "5.24.0")
    assert not ec._pinned_elsewhere(ec.SPECS["llama"])
    assert ec._pinned_elsewhere(ec.HOLDOUT5C["llama_pt291"]) and ec._pinned_elsewhere(ec.HOLDOUT5C["llama_pt2141"])
    assert ec._pinned_elsewhere(ec.HOLDOUT4B["llama_tf438"])
    _fake_versions(monkeypatch, "2.14.1+cu130", "5.24.0")  # inside the 2.14.1 venv: export here
    assert not ec._pinned_elsewhere(ec.HOLDOUT5C["llama_pt2141"]) and ec._pinned_elsewhere(ec.HOLDOUT5C["llama_pt291"])


def test_missing_torch_venv_is_a_clear_error(tmp_path, monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT5C})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    with pytest.raises(RuntimeError, match=r"no torch 2\.9\.1 venv .*torch291 .*tools/export_venv\.sh --torch 2\.9\.1"):
        ec.export_legacy("llama_pt291", "dyn_mask", "trained", tmp_path / "x.onnx")


def test_violated_dims_reads_torch_exports_constraint_error_through_the_exporters_wrapping():
    ec = _export_corpus()
    inner = ValueError("Constraints violated (batch, sequence)! For more information, run with TORCH_LOGS=...")
    outer = RuntimeError("Failed to export the model with torch.export.")
    outer.__cause__ = inner
    assert ec._violated_dims(outer) == {"batch", "sequence"}
    assert ec._violated_dims(RuntimeError("name 'L' is not defined")) == set()
