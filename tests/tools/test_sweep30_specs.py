"""tools/holdout_specs.py HOLDOUT30 and export_corpus.py --holdout 42 (thirtieth sweep: decoders of transformers 5.25
model types earlier sets passed over): the model types and config classes are new, the plan, the float16 plan
(HALF30), the cross-attention decoders' encoder states (a width other than hidden_size for PP-FormulaNet's d_model)."""

from __future__ import annotations

import contextlib
import io
import unittest.mock

import pytest

from tests.tool_modules import load_tool, plan_new_set

NEW = ("clvp_decoder", "canary_decoder", "pp_formulanet_text", "diffusion_gemma_text")


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep30")


def test_new_model_types_are_in_no_earlier_set(monkeypatch):
    ec = _export_corpus()
    assert set(ec.HOLDOUT_SETS[42]) == set(NEW)
    # nor does the corpus or an earlier set export one of their config classes (a model type can hide under another)
    earlier = {s["config_class"] for n, st in ec.HOLDOUT_SETS.items() if n < 42 for s in st.values()}
    earlier |= {s["config_class"] for s in ec.SPECS.values()}
    assert not {ec.HOLDOUT_SETS[42][a]["config_class"] for a in NEW} & earlier
    todo = plan_new_set(ec, 42, NEW, monkeypatch)
    assert len(todo) == 10 and {w for _, _, w in todo} == {"trained"}
    assert {a for a, s, _ in todo if s == "kv"} == {"clvp_decoder"}


def test_float16_plan():
    ec = _export_corpus()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ec.main(["--holdout", "42", "--dtype", "float16", "--list"]) == 0
    names = out.getvalue().split()
    assert {n.split("__")[0] for n in names} == ec.HALF30
    assert all(n.endswith("__trained16.onnx") for n in names)


def test_encoder_states_of_the_cross_attention_decoders():
    """Canary's decoder takes states of its hidden_size; PP-FormulaNet's config has no hidden_size (d_model), so
    its spec names the width."""
    pytest.importorskip("torch")
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[42]
    assert "hidden_size" not in hs["pp_formulanet_text"]["config"]
    with unittest.mock.patch.object(ec, "SPECS", {**ec.SPECS, **hs}):
        for arch, width in (("canary_decoder", hs["canary_decoder"]["config"]["hidden_size"]),
                            ("pp_formulanet_text", hs["pp_formulanet_text"]["config"]["d_model"])):
            feeds, dims = ec._example_inputs(arch, "dyn_mask", None, 2, 8, 0, 0)
            assert sorted(feeds) == ["attention_mask", "encoder_hidden_states", "input_ids"], arch
            assert list(feeds["encoder_hidden_states"].shape) == [2, 6, width], arch
