"""tools/holdout_specs.py HOLDOUT21 and export_corpus.py --holdout 33 (twenty-first sweep: transformers 5.25 drift and
architectures no set had): the drift specs pin transformers 5.25.0 and keep their corpus architecture's config, every
drift file has a transformers 5.24 twin in the corpus's expected coverage, the new architectures are in no earlier set,
and the manifest entry of a per-stage config spelled `depth` (CvT) counts its blocks. No torch or transformers needed."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from tests.tool_modules import load_tool, plan_new_set

EXPECTED = Path(__file__).resolve().parents[1] / "data/corpus/expected_coverage.json"
NEW = ("exaone", "imagegpt", "bark_semantic", "bark_coarse", "clvp_encoder", "cvt", "swin2sr", "mgp_str", "glpn",
       "llama4_vision")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep21")


def _drift(hs):
    return {name: spec for name, spec in hs.items() if name.endswith("_tf525")}


def test_drift_specs_pin_transformers_5_25_and_keep_the_corpus_config():
    ec = _export_corpus()
    drift = _drift(ec.HOLDOUT_SETS[33])
    h32 = {s["base_arch"]: s["styles"] for s in ec.HOLDOUT_SETS[32].values()}  # hold-out 32's plan
    assert {name: spec["styles"] for name, spec in drift.items()} == {f"{a}_tf525": st for a, st in h32.items()}
    for name, spec in drift.items():
        base = name[: -len("_tf525")]
        assert spec["transformers"] == "5.25.0" == ec.LEGACY_VERSIONS["525"], name
        assert spec["base_arch"] == base and spec["config"] == ec.SPECS[base]["config"], name
        assert "torch" not in spec and "onnxscript" not in spec, name  # only transformers differs


def test_every_drift_file_has_a_corpus_twin(monkeypatch):
    ec = _export_corpus()
    drift = _drift(ec.HOLDOUT_SETS[33])
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[33]})
    todo = list(ec.plan_holdout(list(drift), None, 33))
    assert len(todo) == 47 and {w for _, _, w in todo} == {"trained"}
    twins = json.loads(EXPECTED.read_text())
    assert not [a for a, s, _ in todo if f"{drift[a]['base_arch']}__{s}__trained.onnx" not in twins]


def test_new_architectures_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[33]
    assert set(hs) - set(_drift(hs)) == {*NEW, "falcon_alibi"}
    assert hs["falcon_alibi"]["config"]["alibi"] and "transformers" not in hs["falcon_alibi"]  # both venvs export it
    assert len(plan_new_set(ec, 33, NEW, monkeypatch)) == 33


def test_drift_specs_hand_off_unless_this_process_runs_transformers_5_25(monkeypatch):
    ec = _export_corpus()
    spec = ec.HOLDOUT_SETS[33]["llama_tf525"]
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.13.0+cpu"))
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="5.24.0"))
    assert ec._pinned_elsewhere(spec)
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(__version__="5.25.0"))
    assert not ec._pinned_elsewhere(spec)


def test_entry_of_a_per_stage_depth_config(monkeypatch, tmp_path):
    """CvT spells its per-stage block counts `depth` (Swin / Segformer: `depths`) and its widths `embed_dim`, a list."""
    import onnx
    from onnx import TensorProto, helper

    ec = _export_corpus()
    path = tmp_path / "cvt.onnx"
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 32, 32])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    spec = dict(ec.HOLDOUT_SETS[33]["cvt"])
    spec.pop("attention_blocks")  # the count must come from the config itself
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, "cvt": spec})
    entry = ec.make_entry("cvt", "dyn_mask", "trained", path, {})
    assert entry["attention_blocks"] == 3 and entry["num_heads"] == 1 and entry["hidden_size"] == 16
    assert entry["head_dim"] == 16
