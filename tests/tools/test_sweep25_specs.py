"""tools/holdout_specs.py HOLDOUT25 and export_corpus.py --holdout 37 (twenty-fifth sweep: transformers 5.25 families
with attention or norms no set had): the architectures are new (a class, or a class and part, no earlier set or
corpus spec exports), the plan, and the float16 plan (HALF25) wired into export_corpus (docs/holdout.md)."""

from __future__ import annotations

from tests.tool_modules import load_tool, plan_new_set

NEW = ("mbart_encoder", "pegasus_encoder", "blip_text", "granite4_vision_text", "convnext", "convnextv2",
       "dinov3_convnext", "focalnet", "mobilevitv2", "phi4mm_text", "phi4mm_audio", "rwkv", "rf_detr", "lw_detr",
       "perceiver", "xlstm")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep25")


def test_new_architectures_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[37]) == set(NEW)
    # the mBART / Pegasus decoders are in hold-out 1: their encoders (the model class with part encoder) are not
    todo = plan_new_set(ec, 37, NEW, monkeypatch, key=lambda s: (s["model_class"], s.get("part")))
    assert len(todo) == 34 and {w for _, _, w in todo} == {"trained"}
    kv = {a for a, s, _ in todo if s in ec.KV_STYLES}
    assert kv == {"phi4mm_text"}  # the one decoder with a cache; RWKV's / xLSTM's states are no KV cache
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript", "kv", "torchscript_kv", "optimum"}


def test_float16_plan_is_half25(monkeypatch):
    """--holdout 37 --dtype float16 exports HALF25's text models in their spec styles: before the set was wired into
    plan_holdout's float16 table, the plan was empty."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[37]})
    half = list(ec.plan_holdout(list(NEW), None, 37, "float16"))
    assert {a for a, _, _ in half} == ec.HALF25 and len(half) == 16
    assert not {a for a, _, _ in half} & {"convnext", "rf_detr", "rwkv", "phi4mm_audio"}
