"""tools/holdout_specs.py HOLDOUT11A and export_corpus.py --holdout 19 (eleventh sweep part A: transformers
5.25 model types that no earlier set or the corpus exported; docs/holdout.md, eleventh sweep part A)."""

from __future__ import annotations

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep11")


def _model_types(spec) -> set:
    """The model types a spec exports: its own and a composite config's text / encoder / decoder parts."""
    cfg = spec.get("config") or {}
    parts = [cfg.get(k) for k in ("text_config", "encoder", "decoder")]
    return {spec.get("model_type")} | {p["model_type"] for p in parts if isinstance(p, dict) and "model_type" in p}


def test_set_19_has_only_model_types_no_other_set_had():
    ec = _export_corpus()
    mine = ec.HOLDOUT_SETS[19]
    seen = set().union(*(_model_types(s) for s in ec.SPECS.values()))
    for n, specs in ec.HOLDOUT_SETS.items():
        if n != 19:
            seen |= set().union(*(_model_types(s) for s in specs.values()))
    assert {"ergo", "inkling2_text", "neomme", "openai_privacy_filter"} <= set().union(
        *(_model_types(s) for s in mine.values()))
    assert not seen & set().union(*(_model_types(s) for s in mine.values())), seen


def test_plan_is_the_corpus_styles_and_head_64_kv(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[19]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 19))
    assert {s for _, s, _ in todo} == {"dyn_mask", "kv", "static_nomask", "torchscript", "torchscript_kv"}
    hd64 = [(a, s) for a, s, _ in todo if a.endswith("_hd64")]
    assert hd64 and all(s == "kv" and hs[a]["config"]["head_dim"] == 64 for a, s in hd64)
