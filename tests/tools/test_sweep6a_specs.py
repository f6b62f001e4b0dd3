"""tools/holdout_specs.py HOLDOUT6A and export_corpus.py --holdout 10 (sixth sweep part A: decoders of
transformers 5.24 no earlier set has): the plan, and that every architecture is new to the sets before it
(docs/holdout.md, sixth sweep part A). No torch needed."""

from __future__ import annotations

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep6a")


def test_sweep_architectures_are_new_decoders():
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[10]
    assert len(hs) == 20
    earlier = [ec.SPECS] + [s for n, s in ec.HOLDOUT_SETS.items() if n < 10]
    seen_classes = {s["config_class"] for specs in earlier for s in specs.values()}
    assert not seen_classes & {s["config_class"] for s in hs.values()}
    assert not {a for specs in earlier for a in specs} & set(hs)
    assert {s["kind"] for s in hs.values()} == {"decoder"}


def test_plan_is_the_corpus_styles(monkeypatch):
    """43 files, trained weights: every architecture with and without its cache, TorchScript's cache
    for the three dense ones."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[10]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[10]), None, 10))
    assert len(todo) == 43 and all(w == "trained" for _, _, w in todo)
    assert {s for _, s, _ in todo} == {"dyn_mask", "kv", "torchscript_kv"}
    assert {a for a, s, _ in todo if s == "torchscript_kv"} == {"youtu", "hyperclovax", "hrm_text"}
