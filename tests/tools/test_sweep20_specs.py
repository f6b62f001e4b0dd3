"""tools/holdout_specs.py HOLDOUT20 and export_corpus.py --holdout 32 (twentieth sweep: torch 2.15 exporter drift):
every spec pins torch 2.15.0 and keeps its corpus architecture's config, and every planned file has a torch 2.13
twin in the corpus's expected coverage, which the sweep compares it with (docs/holdout.md, twentieth sweep). No
torch or transformers needed."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from tests.tool_modules import load_tool

EXPECTED = Path(__file__).resolve().parents[1] / "data/corpus/expected_coverage.json"


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep20")


def test_specs_pin_torch_2_15_and_keep_the_corpus_config():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[32]
    assert len(hs) == 17
    for name, spec in hs.items():
        base, tag = name.rsplit("_pt", 1)
        assert tag == "2150" and spec["torch"] == "2.15.0", name
        assert spec["base_arch"] == base and spec["config"] == ec.SPECS[base]["config"], name
        assert "transformers" not in spec and "onnxscript" not in spec, name  # only torch differs


def test_every_planned_file_has_a_corpus_twin(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[32]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 32))
    assert len(todo) == 47 and {w for _, _, w in todo} == {"trained"}
    twins = json.loads(EXPECTED.read_text())
    missing = [f"{hs[a]['base_arch']}__{s}__trained.onnx" for a, s, _ in todo
               if f"{hs[a]['base_arch']}__{s}__trained.onnx" not in twins]
    assert not missing
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:
            assert ec.SPECS[arch]["kind"] in ("decoder", "seq2seq_decoder"), arch


def test_specs_hand_off_unless_this_process_runs_torch_2_15(monkeypatch):
    ec = _export_corpus()
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="5.24.0"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.13.0+cpu"))
    assert ec._pinned_elsewhere(ec.HOLDOUT_SETS[32]["llama_pt2150"])
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.15.0+cu132"))
    assert not ec._pinned_elsewhere(ec.HOLDOUT_SETS[32]["llama_pt2150"])
