"""tools/holdout_specs.py HOLDOUT6B and export_corpus.py --holdout 11 (onnxscript drift, bf16 decoders): the
plan, the onnxscript pins, which specs hand off to an onnxscript venv and which venv, and the bf16 plan
(docs/holdout.md, sixth sweep part B). No torch or transformers needed."""

from __future__ import annotations

import sys
import types

import pytest
from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_onnxscript_drift")


def _fake_versions(monkeypatch, onnxscript_version):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.13.0+cpu"))
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="5.24.0"))
    monkeypatch.setitem(sys.modules, "onnxscript", types.SimpleNamespace(__version__=onnxscript_version))


def test_every_spec_pins_an_onnxscript_and_keeps_the_corpus_config_and_exporter():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[11]
    assert hs is ec.HOLDOUT6B
    for name, spec in hs.items():
        base, tag = name.rsplit("_os", 1)
        assert spec["onnxscript"] == {"060": "0.6.0", "062": "0.6.2"}[tag], name
        assert spec["base_arch"] == base and spec["config"] == ec.SPECS[base]["config"], name
        assert "torch" not in spec and "transformers" not in spec, name  # only onnxscript differs


def test_plan_is_dynamo_styles_only_and_bf16_plans_decoders_in_the_main_venv(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT6B})
    todo = list(ec.plan_holdout(list(ec.SPECS), None, 11))
    assert len(todo) == 46 and {a for a, _, _ in todo} == set(ec.HOLDOUT6B)
    assert not {s for _, s, _ in todo} & {"torchscript", "torchscript_kv", "optimum"}  # no onnxscript there
    assert ("llama_os060", "noopt", "trained") in todo and ("bart_decoder_os062", "kv", "trained") in todo
    bf16 = list(ec.plan_holdout(list(ec.SPECS), None, 11, "bfloat16"))
    assert ("llama", "kv", "trained") in bf16 and ("bert", "dyn_mask", "trained") in bf16 and len(bf16) == 10
    assert all("onnxscript" not in ec.SPECS[a] for a, _, _ in bf16)  # the main venv's exporter
    assert all(ec.SPECS[a]["kind"] == "decoder" for a, s, _ in bf16 if s == "kv")


def test_a_spec_hands_off_when_its_onnxscript_is_not_this_process(monkeypatch):
    ec = _export_corpus()
    _fake_versions(monkeypatch, "0.7.2")
    assert not ec._pinned_elsewhere(ec.SPECS["llama"])
    assert ec._pinned_elsewhere(ec.HOLDOUT6B["llama_os060"]) and ec._pinned_elsewhere(ec.HOLDOUT6B["llama_os062"])
    _fake_versions(monkeypatch, "0.6.0")  # inside the 0.6.0 venv: export here
    assert not ec._pinned_elsewhere(ec.HOLDOUT6B["llama_os060"]) and ec._pinned_elsewhere(ec.HOLDOUT6B["llama_os062"])


def test_missing_onnxscript_venv_is_a_clear_error_naming_the_venv_beside_this_torch(tmp_path, monkeypatch):
    ec = _export_corpus()
    _fake_versions(monkeypatch, "0.7.2")
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT6B})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    with pytest.raises(RuntimeError, match=r"no onnxscript 0\.6\.0 venv .*torch2130_os060 .*export_venv\.sh "
                                           r"--onnxscript 0\.6\.0"):
        ec.export_legacy("llama_os060", "dyn_mask", "trained", tmp_path / "x.onnx")
