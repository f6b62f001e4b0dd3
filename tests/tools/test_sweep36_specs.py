"""tools/holdout_specs.py HOLDOUT36 and export_corpus.py --holdout 48 (thirty-sixth sweep: GLM-5-Next's text model,
and popular decoders in the export styles they never had; docs/holdout.md, thirty-sixth sweep): the plan."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


@pytest.fixture
def ec(monkeypatch):
    mod = load_tool("export_corpus", "export_corpus_sweep36")
    monkeypatch.setattr(mod, "SPECS", {**mod.SPECS, **mod.HOLDOUT_SETS[48]})
    return mod


def test_plan(ec):
    hs = ec.HOLDOUT_SETS[48]
    todo = {(a, s) for a, s, _ in ec.plan_holdout(list(hs), None, 48)}
    new_styles = {(f"{a}_h48", s) for a in ("gpt_oss", "smollm3", "cohere2", "qwen3_moe", "glm4")
                  for s in ("torchscript_kv", "static_cache")}
    assert todo == {("glm5_next_text", s) for s in ("dyn_mask", "static_nomask", "torchscript")} | new_styles \
        | {("kyutai_stt_h48", "kv")}
    assert {a for a, _, _ in ec.plan_holdout(list(hs), None, 48, dtype="float16")} == set(hs)


def test_new_style_specs_are_their_corpus_architecture(ec):
    hs = ec.HOLDOUT_SETS[48]
    src = {a: s for n in sorted(ec.HOLDOUT_SETS) if n != 48 for a, s in ec.HOLDOUT_SETS[n].items()}
    src.update(ec.SPECS)
    for arch in ("gpt_oss", "smollm3", "cohere2", "qwen3_moe", "glm4"):
        spec = hs[f"{arch}_h48"]
        assert spec["base_arch"] == arch and spec["model_type"] == src[arch]["model_type"]
        assert spec["config"] == src[arch]["config"]          # the same tiny config, only the styles differ
        assert not set(spec["styles"]) & set(src[arch]["styles"])   # styles the architecture never had
    glm = hs["glm5_next_text"]["config"]
    assert glm["qk_rope_head_dim"] == 0 and glm["indexer_types"] == ["full", "shared"]


def test_kv_past_of_ids_channels_decoder(ec):
    """Kyutai's decoder (ids [B, T, 3]) in style kv: the past is drawn from 3-D ids as the inputs' own (2-D ids made
    the forward that reads the cache's shapes fail: the embedding sums over the channel axis)."""
    pytest.importorskip("torch")
    _, model, _ = ec.build_model("kyutai_stt_h48", "trained")
    feeds, dims = ec.example_inputs("kyutai_stt_h48", "kv", model)
    assert tuple(feeds["input_ids"].shape) == (ec.BATCH, ec.SEQ, 3) and dims["input_ids"][2] == 3
    keys = [n for n in feeds if n.startswith("past_key_values.")]
    assert len(keys) == 2 * model.config.num_hidden_layers
    assert all(feeds[n].shape[2] == ec.PAST for n in keys)   # [batch, kv heads, past, head_dim]
    assert tuple(feeds["attention_mask"].shape) == (ec.BATCH, ec.PAST + ec.SEQ)
