"""tools/corpus_specs.py head_dim_64: every KV64_ARCHS decoder has a head-size-64 config (the smallest
head size the PagedAttention kernels take), GPT-OSS with its sliding and full layers and sinks kept
(export_corpus.py --head-dim 64 --only gpt_oss --styles kv; docs/paged_kv.md)."""

from __future__ import annotations

from tests.tool_modules import load_tool


def _specs():
    return load_tool("corpus_specs", "corpus_specs_hd64")


def _head_size(cfg: dict) -> int:
    heads = next(cfg[k] for k in ("num_attention_heads", "n_head", "n_heads") if k in cfg)
    hidden = next(cfg[k] for k in ("hidden_size", "n_embd", "d_model") if k in cfg)
    return cfg.get("head_dim") or hidden // heads


def test_every_kv64_architecture_has_head_size_64():
    cs = _specs()
    for arch in cs.KV64_ARCHS:
        assert _head_size(cs.head_dim_64(arch)) == 64, arch


def test_gpt_oss_at_head_size_64_keeps_its_layers_window_and_grouping():
    cs = _specs()
    assert "gpt_oss" in cs.KV64_ARCHS
    cfg, base = cs.head_dim_64("gpt_oss"), cs.SPECS["gpt_oss"]["config"]
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (128, 2, 1, 64)
    assert cfg["layer_types"] == base["layer_types"] == ["sliding_attention", "full_attention"]
    assert cfg["sliding_window"] == base["sliding_window"] == 4
    assert "kv" in cs.SPECS["gpt_oss"]["styles"]
