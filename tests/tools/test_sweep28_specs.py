"""tools/holdout_specs.py HOLDOUT28 and export_corpus.py --holdout 40 (twenty-eighth sweep: transformers 5.25
families earlier sets passed over): the model types and config classes are new, the plan, the float16 plan (HALF28)
and the inputs the specs lean on (Voxtral Realtime's t_cond, Gemma 4's constant position grid).
No torch or transformers needed for the plan tests."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.tool_modules import load_tool, plan_new_set

NEW = ("voxtral_realtime_text", "cohere_compass_vision", "glm_ocr_vision", "muse_spark_vision", "pp_ocrv5_mobile_rec",
       "efficientloftr", "gemma4_vision", "flava_text", "t5gemma2_text", "step3p7_vision", "ovis2_vision",
       "mobilenet_v2", "regnet")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep28")


def test_new_model_types_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[40]) == set(NEW)
    # nor does the corpus or an earlier set export one of their config classes (a model type can hide under another)
    earlier = {s["config_class"] for n, st in ec.HOLDOUT_SETS.items() if n < 40 for s in st.values()}
    earlier |= {s["config_class"] for s in ec.SPECS.values()}
    assert not {ec.HOLDOUT_SETS[40][a]["config_class"] for a in NEW} & earlier
    todo = plan_new_set(ec, 40, NEW, monkeypatch)
    assert len(todo) == 22 and {w for _, _, w in todo} == {"trained"}
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript"}


def test_float16_plan():
    ec = _export_corpus()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "40", "--dtype", "float16", "--list"]) == 0
    names = out.getvalue().split()
    assert {n.split("__")[0] for n in names} == ec.HALF28 and len(names) == 7
    assert all(n.endswith("__trained16.onnx") for n in names)


def test_inputs_the_specs_lean_on(monkeypatch):
    """Voxtral Realtime's decoder layers read t_cond (the delay's time embedding) from the forward's kwargs: dyn_mask
    feeds it [batch, 1, hidden]; Gemma 4's vision tower gets its (x, y) positions as a constant 4 x 4 grid per row."""
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[40]})
    feeds, dims = ec._example_inputs("voxtral_realtime_text", "dyn_mask", None, 2, 8, 0, 0)
    assert list(feeds["t_cond"].shape) == [2, 1, 32] and dims["t_cond"][0] == "batch"
    feeds, dims = ec._example_inputs("gemma4_vision", "static_nomask", None, 2, 8, 0, 0)
    assert list(feeds) == ["pixel_values"] and list(feeds["pixel_values"].shape) == [2, 16, 48]
    grid = ec.SPECS["gemma4_vision"]["call_kw"]["pixel_position_ids"]
    assert len(grid) == 1 and sorted(map(tuple, grid[0])) == [(x, y) for x in range(4) for y in range(4)]
