"""tools/holdout_specs.py HOLDOUT10C and export_corpus.py --holdout 18 (tenth sweep part C: the language
models of VLMs with a KV cache, as Optimum's and genai's VLM exports split them): the plan, and the inputs
such a decoder takes beside the cache (inputs_embeds, Gemma 3's token types over past + new, M-RoPE
positions after the past) (docs/holdout.md, tenth sweep part C)."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool


def _export_corpus():
    return load_tool("export_corpus", "export_corpus_sweep10c")


def test_plan_is_cache_styles(monkeypatch):
    ec = _export_corpus()
    hs = ec.HOLDOUT_SETS[18]
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(hs), None, 18))
    assert {s for _, s, _ in todo} == {"kv", "torchscript_kv"}
    assert all(ec.named_kv(hs[a]) for a, _, _ in todo)
    # the corpus's own decoders keep the positional (input_ids, attention_mask, *past) wrapper
    assert not ec.named_kv(ec.SPECS["llama"])


def test_cache_inputs_of_a_vlm_decoder(monkeypatch):
    """Fails before 10c: the cache branch returned before the extra inputs, so Gemma 3's decoder had no
    token_type_ids and Qwen2-VL's no M-RoPE positions; and input_ids stood where inputs_embeds go."""
    pytest.importorskip("torch")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[18]})
    past, seq = ec.PAST, ec.SEQ
    model = _Cache([(2, 2, past, 16)] * 2)
    feeds, dims = ec.example_inputs("gemma3_kv", "kv", model)
    assert "input_ids" not in feeds and dims["inputs_embeds"] == ["batch", "sequence", 32]
    types = feeds["token_type_ids"]
    assert dims["token_type_ids"] == ["batch", "total_sequence"] and types.shape[-1] == past + seq
    # the image straddles the past / new boundary (a chunked prefill): the new tokens' mask reads it
    assert types[0].tolist().index(1) == past - 2 and int(types[0].sum()) == 4
    feeds, dims = ec.example_inputs("qwen2_vl_kv", "kv", model)
    pos = feeds["position_ids"]
    assert dims["position_ids"] == [3, "batch", "sequence"] and int(pos.min()) == past
    assert pos[1, 0, :4].tolist() == [past, past, past + 1, past + 1]  # the image's rows
    # without a cache the positions start at 0, as HOLDOUT9B's qwen2_vl_text_mrope had them
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[16]})
    feeds, _ = ec.example_inputs("qwen2_vl_text_mrope", "dyn_mask")
    assert int(feeds["position_ids"].min()) == 0


class _Cache:
    """Stands in for a model in example_inputs: its past shapes, a float32 parameter."""

    def __init__(self, shapes):
        self.shapes = shapes

    def past_shapes(self, ids):
        return [(s, s) for s in self.shapes]

    def parameters(self):
        torch = pytest.importorskip("torch")  # tests reach torch only through importorskip (test_packaging)
        yield torch.zeros(1)
