"""tools/holdout_specs.py HOLDOUT19 and export_corpus.py --holdout 31 (nineteenth sweep: whole dense-prediction,
detection, matching and dual-encoder models): the plan, and the inputs a vision model takes beside its image
(export_corpus._vision_inputs; docs/holdout.md, nineteenth sweep)."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


@pytest.fixture()
def ec(monkeypatch):
    mod = load_tool("export_corpus", "export_corpus_sweep19")
    monkeypatch.setattr(mod, "SPECS", {**mod.SPECS, **mod.HOLDOUT_SETS[31]})
    return mod


def test_plan_is_dyn_mask_and_static_per_architecture(ec):
    hs = ec.HOLDOUT_SETS[31]
    todo = list(ec.plan_holdout(list(hs), None, 31))
    assert len(hs) == 25 and len(todo) == sum(len(s["styles"]) for s in hs.values()) == 54
    assert {style for _, style, _ in todo} == {"dyn_mask", "static_nomask", "torchscript"}
    assert {w for _, _, w in todo} == {"trained"}
    # torchscript only beside the dynamo styles, for the Swin / BEiT backbones dynamo cannot export
    assert sorted(a for a, s in hs.items() if "torchscript" in s["styles"]) == ["mask2former", "oneformer", "upernet",
                                                                                "zoedepth"]
    assert all(s["kind"] == "vision" and s.get("output") and s.get("attention_blocks") for s in hs.values())


def test_text_query_beside_the_image(ec):
    pytest.importorskip("torch")  # example_inputs makes torch tensors (the CI venv has none)
    feeds, dims = ec.example_inputs("owlv2", "dyn_mask")
    assert feeds["pixel_values"].shape == (ec.BATCH, 3, 32, 32)
    assert feeds["input_ids"].shape == (ec.BATCH, ec.SEQ) and int(feeds["input_ids"].min()) >= 3
    assert dims["input_ids"] == dims["attention_mask"] == ["batch", "sequence"]
    mask = feeds["attention_mask"]
    assert int(mask[:-1].min()) == 1 and int(mask[-1, ec.SEQ // 2:].max()) == 0  # the last row padded
    feeds, dims = ec.example_inputs("owlv2", "static_nomask")
    assert int(feeds["attention_mask"].min()) == 1 and dims["input_ids"] == [ec.BATCH, ec.SEQ]


def test_prompt_images_points_channels_and_frames(ec):
    pytest.importorskip("torch")  # example_inputs makes torch tensors (the CI venv has none)
    feeds, dims = ec.example_inputs("seggpt", "dyn_mask")
    assert feeds["pixel_values"].shape == feeds["prompt_masks"].shape == (ec.BATCH, 3, 32, 16)
    assert dims["prompt_pixel_values"] == ["batch", 3, 32, 16]
    points = ec.example_inputs("sam_hq", "dyn_mask")[0]["input_points"]
    assert points.shape == (ec.BATCH, 1, 2, 2) and 0 <= float(points.min()) and float(points.max()) < 64
    assert ec.example_inputs("vitmatte", "dyn_mask")[0]["pixel_values"].shape == (ec.BATCH, 4, 64, 64)
    assert ec.example_inputs("superglue", "dyn_mask")[0]["pixel_values"].shape == (ec.BATCH, 2, 3, 32, 32)
    assert ec.example_inputs("donut", "dyn_mask")[0]["decoder_input_ids"].shape == (ec.BATCH, ec.SEQ)


def test_unknown_input_kind_is_one_clear_error(ec, monkeypatch):
    pytest.importorskip("torch")  # example_inputs makes torch tensors (the CI venv has none)
    spec = dict(ec.SPECS["owlv2"], vision_inputs={"boxes": ("boxes", 4)})
    monkeypatch.setitem(ec.SPECS, "owlv2", spec)
    with pytest.raises(ValueError, match="vision_inputs boxes: unknown kind 'boxes'"):
        ec.example_inputs("owlv2", "dyn_mask")
