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


def test_mllama_takes_its_cross_attention_cache(monkeypatch):
    """Mllama's cross-attention layers read the image's keys / values from the cache layer of their own
    index: the decoder with past takes them as past_key_values.N.encoder.* (the seq2seq decoders' names)
    and returns only the self-attention layers' present. Fails before session 18: mllama_kv was no spec,
    and the example inputs read a shape from every cache layer (the skipped cross layer has none)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[18]})
    spec = ec.SPECS["mllama_kv"]
    assert ec.cross_layers(spec) == (1,) and ec.cross_layers(ec.SPECS["gemma3_kv"]) == ()
    _, model, _ = ec.build_model("mllama_kv", "trained")
    feeds, dims = ec.example_inputs("mllama_kv", "kv", model)
    assert [n for n in feeds if n.startswith("past")] == [
        "past_key_values.0.key", "past_key_values.0.value",
        "past_key_values.1.encoder.key", "past_key_values.1.encoder.value"]
    assert dims["past_key_values.1.encoder.key"] == ["batch", 1, "encoder_sequence", 16]
    names = list(feeds)
    wrapper = ec._Wrap.make(spec, model, "kv", 2)(names).eval()
    with torch.no_grad():
        logits, key, value = wrapper(*(feeds[n] for n in names))
        assert key.shape[2] == ec.PAST + ec.SEQ   # the self-attention layer's cache grew
        # the cross-attention layer reads the image's keys (its tanh gate is perturbed off zero)
        other = dict(feeds, **{"past_key_values.1.encoder.value": torch.randn_like(feeds["past_key_values.1.encoder.value"])})
        assert not torch.allclose(wrapper(*(other[n] for n in names))[0], logits)


def test_mllama_cross_attention_mask(monkeypatch):
    """mllama_kv_xmask: Mllama's cross-attention mask over the new tokens (the first sees no image: transformers
    zeroes that row's cross-attention MLP output), made into the additive mask and row gate in the graph: the
    logits change with it, the later tokens' (which see the image) with the cross cache."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ec = _export_corpus()
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **ec.HOLDOUT_SETS[18]})
    _, model, _ = ec.build_model("mllama_kv_xmask", "trained")
    feeds, dims = ec.example_inputs("mllama_kv_xmask", "kv", model)
    assert dims["cross_attention_mask"] == ["batch", "sequence", 1, 1]
    assert feeds["cross_attention_mask"][:, :, 0, 0].tolist()[0] == [0] + [1] * (ec.SEQ - 1)
    names = list(feeds)
    wrapper = ec._Wrap.make(ec.SPECS["mllama_kv_xmask"], model, "kv", 2)(names).eval()
    image = dict(feeds, **{"past_key_values.1.encoder.value": torch.randn_like(feeds["past_key_values.1.encoder.value"])})
    seen = dict(feeds, cross_attention_mask=torch.ones_like(feeds["cross_attention_mask"]))
    with torch.no_grad():
        a, b, c = (wrapper(*(f[n] for n in names))[0] for f in (feeds, image, seen))
    assert not torch.allclose(a[:, 0], c[:, 0]) and torch.allclose(a[:, 1:], c[:, 1:])
    assert not torch.allclose(a[:, 1:], b[:, 1:])
