"""tools/holdout_specs.py HOLDOUT4B and export_corpus.py --holdout 5 (older transformers): the plan,
the specs' version pins and configs, and the venv hand-off's error when a version's venv is missing
(docs/holdout.md, fourth sweep part B). No torch or transformers needed."""

from __future__ import annotations

import pytest
from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_legacy")


def test_every_legacy_spec_pins_a_version_and_its_name_says_which():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[5]
    assert hs is ec.HOLDOUT4B and len(hs) == 41
    for name, spec in hs.items():
        tag = name.rsplit("_tf", 1)[1]
        assert spec["transformers"] == ec.LEGACY_VERSIONS[tag], name
        assert spec["base_arch"] == name.rsplit("_tf", 1)[0] and set(spec["styles"]) <= set(ec.LEGACY_ATTN), name
        cfg = spec["config"]
        if spec["base_arch"] != "gemma":   # before 4.46 Llama-style models ignore head_dim
            assert "head_dim" not in cfg or cfg.get("num_key_value_heads", 1) == 1, name


def test_plan_holds_cache_styles_for_decoders_only(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT4B})  # the shared corpus dict stays as it is
    todo = list(ec.plan_holdout(list(ec.HOLDOUT4B), None, 5))
    assert len(todo) == 71 and all(w == "trained" for _, _, w in todo)
    for arch, style, _ in todo:
        assert style in ec.LEGACY_ATTN
        if style.endswith("_kv"):
            assert ec.SPECS[arch]["kind"] == "decoder" and style in ec.KV_STYLES
    assert ("phi3_tf445", "legacy_sdpa_kv", "trained") in todo and not any(a == "phi3_tf438" for a, _, _ in todo)


def test_missing_version_venv_is_a_clear_error(tmp_path, monkeypatch):
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT4B})
    monkeypatch.setattr(ec, "LEGACY_VENVS", tmp_path)
    with pytest.raises(RuntimeError, match=r"no transformers 4\.38\.2 venv .*export_venv\.sh --transformers 4\.38\.2"):
        ec.export_legacy("llama_tf438", "legacy_kv", "trained", tmp_path / "x.onnx")
