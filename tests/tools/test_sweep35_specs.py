"""tools/holdout_specs.py HOLDOUT35 and export_corpus.py --holdout 47 (thirty-fifth sweep: text decoders no set
covered): the plan and the spec keys the set added (docs/holdout.md, thirty-fifth sweep): context_mask (a mask over
[n context states; the sequence], a derived torch.export dim), ids_channels, no_mask, fixed_dims."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


@pytest.fixture
def ec(monkeypatch):
    mod = load_tool("export_corpus", "export_corpus_sweep35")
    monkeypatch.setattr(mod, "SPECS", {**mod.SPECS, **mod.HOLDOUT_SETS[47]})
    return mod


def test_plan(ec):
    hs = ec.HOLDOUT_SETS[47]
    todo = list(ec.plan_holdout(list(hs), None, 47))
    assert {(a, s) for a, s, _ in todo} == {("muse_glimmer_assistant", "dyn_mask"), ("moshi_depth", "torchscript"),
                                            ("blt_local_decoder", "dyn_mask"), ("dia_decoder", "dyn_mask"),
                                            ("dia_decoder", "torchscript"), ("kyutai_stt", "dyn_mask"),
                                            ("kyutai_stt", "torchscript")}
    assert {a for a, _, _ in ec.plan_holdout(list(hs), None, 47, dtype="float16")} == set(hs)


def test_context_mask_spans_context_and_sequence(ec):
    pytest.importorskip("torch")  # example_inputs makes torch tensors (the CI venv has none)
    feeds, dims = ec.example_inputs("muse_glimmer_assistant", "dyn_mask")
    assert list(feeds) == ["attention_mask", "noise_embeds", "context_hidden_states"]
    assert tuple(feeds["attention_mask"].shape) == (ec.BATCH, 6 + ec.SEQ)
    assert feeds["attention_mask"][-1, :3].sum() == 0 and feeds["attention_mask"][0].all()   # a padded context
    assert dims["attention_mask"] == ["batch", "sequence+6"] and dims["noise_embeds"][1] == "sequence"
    assert ec.dim_value("sequence_len + 6") == ec.SEQ + 6   # the name torch writes for the derived dim
    shapes = ec._dynamic_shapes(dims, kv=False)[0]
    seq = shapes[1][1]
    assert seq.__name__ == "sequence_len"   # 'sequence' is a sympy function: torch would sympify it
    assert str(shapes[0][1]) == "sequence_len + 6"


def test_ids_channels_no_mask_and_fixed_dims(ec):
    pytest.importorskip("torch")  # example_inputs makes torch tensors (the CI venv has none)
    feeds, dims = ec.example_inputs("dia_decoder", "dyn_mask")
    assert tuple(feeds["input_ids"].shape) == (ec.BATCH, ec.SEQ, 2) and dims["input_ids"] == ["batch", "sequence", 2]
    assert tuple(feeds["encoder_hidden_states"].shape) == (ec.BATCH, 6, 32)
    feeds, dims = ec.example_inputs("blt_local_decoder", "dyn_mask")
    assert "attention_mask" not in feeds and set(feeds) == {"inputs_embeds", "patch_embeds"}
    feeds, dims = ec.example_inputs("moshi_depth", "torchscript")
    assert all(isinstance(d, int) for ds in dims.values() for d in ds)   # fixed_dims "all"
    assert dims["last_hidden_state"] == [ec.BATCH, 1, 48]
