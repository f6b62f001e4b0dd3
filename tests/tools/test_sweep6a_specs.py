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
    assert len(hs) == 21
    earlier = [ec.SPECS] + [s for n, s in ec.HOLDOUT_SETS.items() if n < 10]
    seen_classes = {s["config_class"] for specs in earlier for s in specs.values()}
    assert not seen_classes & {s["config_class"] for s in hs.values()}
    assert not {a for specs in earlier for a in specs} & set(hs)
    assert {s["kind"] for s in hs.values()} == {"decoder"}


def test_plan_is_the_corpus_styles(monkeypatch):
    """42 files, trained weights: with and without the cache, TorchScript's cache for the three dense
    ones, static_nomask alone for the three whose dynamic export specializes the sequence (linear
    attention)."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[10]})
    todo = list(ec.plan_holdout(list(ec.HOLDOUT_SETS[10]), None, 10))
    assert len(todo) == 42 and all(w == "trained" for _, _, w in todo)
    assert {s for _, s, _ in todo} == {"dyn_mask", "kv", "torchscript", "torchscript_kv", "static_nomask"}
    assert {a for a, s, _ in todo if s == "static_nomask"} == {"qwen3_5_text", "lara_mini", "olmo_hybrid"}
    assert {a for a, s, _ in todo if s == "torchscript_kv"} == {"youtu", "hyperclovax", "hrm_text", "inkling_text"}


def test_looped_decoders_count_every_attention_run():
    """Dory runs its recurrent block twice, HRM its one-layer stack four times: the manifest's expected
    attention count is the runs (4), not the configured layers (3 and 1)."""
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[10]
    assert hs["dory"]["attention_blocks"] == 4 and hs["hrm_text"]["attention_blocks"] == 4
