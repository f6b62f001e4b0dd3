"""tools/holdout_specs.py HOLDOUT27 and export_corpus.py --holdout 39 (twenty-seventh sweep: transformers 5.25
families earlier sets passed over): the model types are new, the plan, the float16 plan (HALF27, which also names
hold-out 38's text models: HALF_FROM), and inputs_embeds in static_nomask (a model whose forward refuses ids).
No torch or transformers needed for the plan tests."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.tool_modules import load_tool, plan_new_set

NEW = ("qwen3_omni_code_predictor", "qwen3_omni_talker", "qwen2_5_omni_talker", "higgs_audio_v2", "blt_global",
       "granite_speech_plus_encoder", "poolformer", "xclip_vision", "owlv2_vision", "muse_spark_audio", "bit", "chmv2")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep27")


def test_new_model_types_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[39]) == set(NEW)
    todo = plan_new_set(ec, 39, NEW, monkeypatch)
    # nor does an earlier set export one of their config classes (a model type can hide under another name)
    earlier = {s["config_class"] for n, st in ec.HOLDOUT_SETS.items() if n < 39 for s in st.values()}
    assert not {ec.HOLDOUT_SETS[39][a]["config_class"] for a in NEW} & earlier
    assert len(todo) == 25 and {w for _, _, w in todo} == {"trained"}
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript"}


def test_float16_plan_reads_hold_out_38(monkeypatch):
    """--holdout 39 --dtype float16 plans HALF27, hold-out 38's text models among them: without HALF_FROM their
    specs are unknown to the --holdout 39 run (and without HALF27 in plan_holdout's table the plan is empty)."""
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", dict(ec.SPECS))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "39", "--dtype", "float16", "--list"]) == 0
    names = out.getvalue().split()
    archs = {n.split("__")[0] for n in names}
    assert archs == ec.HALF27 and all(n.endswith("__trained16.onnx") for n in names)
    assert {"hy_v4_vl_text", "siglip2_text"} <= archs and len(names) == 24
    assert "poolformer" not in archs  # vision / audio families stay float32


def test_static_embeds_replace_ids(monkeypatch):
    """A spec with embeds feeds inputs_embeds in static_nomask too (before: input_ids, which Qwen3-Omni's talker and
    BLT's global transformer refuse)."""
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[39]})
    for style, batch in (("static_nomask", 2), ("dyn_mask", "batch")):
        feeds, dims = ec._example_inputs("blt_global", style, None, 2, 8, 0, 0)
        assert "input_ids" not in feeds and list(feeds["inputs_embeds"].shape) == [2, 8, 32]
        assert dims["inputs_embeds"][0] == batch


def test_parameters_the_init_leaves_are_initialised(monkeypatch):
    """Qwen3-Omni's talker built alone leaves its experts' weights as torch.empty memory (NaN, 1e7 or denormals, run
    to run: exports failed 'ORT differs from torch: max abs nan' or kept garbage weights). build_model fills
    torch.empty with NaN while building, so those parameters are found and drawn normal(0, initializer_range)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ec = _export_corpus()
    with ec._nan_filled_empty():
        assert bool(torch.isnan(torch.empty(3)).all())
        layer = torch.nn.Linear(4, 4)
        layer.extra = torch.nn.Parameter(torch.empty(2, 3))
    assert ec._init_left_params(layer, 0.02) == ["extra"]
    extra = layer.extra.detach()
    assert bool(torch.isfinite(extra).all()) and 0 < float(extra.abs().max()) < 0.2
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[39]})
    weights = []
    for _ in range(2):
        _, model, _ = ec.build_model("qwen3_omni_talker", "trained")
        experts = {n: p.detach().clone() for n, p in model.named_parameters() if ".experts." in n}
        assert experts and all(bool(torch.isfinite(p).all()) and float(p.abs().max()) < 1 for p in experts.values())
        weights.append(experts)
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])  # the same model each build
