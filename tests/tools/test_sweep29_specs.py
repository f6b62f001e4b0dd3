"""tools/holdout_specs.py HOLDOUT29 and export_corpus.py --holdout 41 (twenty-ninth sweep: transformers 5.25
families earlier sets passed over): the model types and config classes are new, the plan, the float16 plan (HALF29)
and the configs the specs lean on. No torch or transformers needed for the plan tests."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.tool_modules import load_tool, plan_new_set

NEW = ("textnet", "efficientnet", "mobilenet_v1", "pp_ocrv6_small_rec", "pp_ocrv6_tiny_rec", "glm5_next_vision",
       "qwen4_exp_vision", "blip_2_qformer", "metaclip_2_text")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep29")


def test_new_model_types_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[41]) == set(NEW)
    # nor does the corpus or an earlier set export one of their config classes (a model type can hide under another)
    earlier = {s["config_class"] for n, st in ec.HOLDOUT_SETS.items() if n < 41 for s in st.values()}
    earlier |= {s["config_class"] for s in ec.SPECS.values()}
    assert not {ec.HOLDOUT_SETS[41][a]["config_class"] for a in NEW} & earlier
    todo = plan_new_set(ec, 41, NEW, monkeypatch)
    assert len(todo) == 16 and {w for _, _, w in todo} == {"trained"}
    assert {s for _, s, _ in todo} == {"dyn_mask", "static_nomask", "torchscript"}


def test_float16_plan():
    ec = _export_corpus()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "41", "--dtype", "float16", "--list"]) == 0
    names = out.getvalue().split()
    assert {n.split("__")[0] for n in names} == ec.HALF29 and len(names) == 8
    assert all(n.endswith("__trained16.onnx") for n in names)


def test_configs_the_specs_lean_on():
    """EfficientNet's stem (32) and top (1280) channels are fixed in the model and only scaled by the width, so the
    spec's lists are given unscaled with width 0.25; TextNet's kernel and stride lists match its depths; the two
    PP-OCRv6 recognizers share the tiny PP-LCNetV4 backbone; BLIP-2's Q-Former takes its queries as query_embeds and
    the image's features as encoder_hidden_states (dyn_mask: a padding mask over the queries)."""
    pytest.importorskip("transformers")
    import transformers

    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[41]
    eff = hs["efficientnet"]["config"]
    assert eff["in_channels"][0] == 32 and eff["hidden_dim"] == 1280 * eff["width_coefficient"]
    tn = hs["textnet"]["config"]
    assert [len(k) for k in tn["conv_layer_kernel_sizes"]] == tn["depths"] == [len(s) for s in tn["conv_layer_strides"]]
    for arch in ("pp_ocrv6_small_rec", "pp_ocrv6_tiny_rec"):
        spec = hs[arch]
        config = getattr(transformers, spec["config_class"])(**spec["config"])
        assert config.backbone_config.model_type == "pp_lcnet_v4"
        assert config.backbone_config.stage_out_channels == [16, 16, 32, 32]

    pytest.importorskip("torch")
    import unittest.mock

    with unittest.mock.patch.object(ec, "SPECS", {**ec.SPECS, **hs}):
        feeds, dims = ec._example_inputs("blip_2_qformer", "dyn_mask", None, 2, 8, 0, 0)
    assert sorted(feeds) == ["attention_mask", "encoder_hidden_states", "query_embeds"]
    assert list(feeds["query_embeds"].shape) == [2, 8, 32] and list(feeds["encoder_hidden_states"].shape) == [2, 6, 32]
    assert dims["query_embeds"][:2] == ["batch", "sequence"] and feeds["attention_mask"][-1, 4:].sum() == 0
