"""tools/genai_holdout.py's pure parts: the checkpoint sizes keep clear of the model builder's LM-head
trap (any Linear with vocab_size outputs is taken for the LM head), and the manifest sizes the
builder's symbolic dims so that ONNX Runtime's CPU contrib ops run the example feeds."""

from __future__ import annotations

import pytest

from tests.tool_modules import load_tool

genai = load_tool("genai_holdout", "genai_holdout_under_test")


@pytest.mark.parametrize("arch", list(genai.ARCHS))
def test_vocabulary_differs_from_every_projection(arch):
    cfg = genai._config(arch)
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    widths = {cfg["hidden_size"], cfg["intermediate_size"], 2 * cfg["intermediate_size"], heads * d, kv * d,
              (heads + 2 * kv) * d}
    assert cfg["vocab_size"] not in widths
    rotary = d * cfg.get("partial_rotary_factor", 1.0)
    assert (rotary // 2) % 8 == 0, "ORT's GroupQueryAttention wants the half rotary width a multiple of 8"


def test_manifest_dims():
    ios = [{"name": "past_key_values.0.key", "dtype": "float32",
            "dims": ["batch_size", 2, "past_sequence_length", "kv_cache_dim"]},
           {"name": "attention_mask", "dtype": "int64", "dims": ["batch_size", "total_sequence_length"]}]
    decode = genai._manifest_dims(ios, "fp32_cpu", 16)
    assert decode[0]["dims"] == [1, 2, "past_sequence_length", 16]
    assert decode[1]["dims"] == [1, "past_sequence_length + sequence_length"]
    prefill = genai._manifest_dims(ios, "fp16_cpu", 16)
    assert prefill[0]["dims"] == [1, 2, 0, 16] and prefill[1]["dims"] == [1, "sequence_length"]


def test_head_dim_must_keep_the_rotary_width(tmp_path, capsys):
    """--head-dim 64 builds the size trt-paged-kv pages; a size ORT's rotary refuses is a one-line error."""
    assert genai.main(["--out", str(tmp_path), "--head-dim", "20"]) == 2
    assert "--head-dim" in capsys.readouterr().err
    assert genai.BASE["head_dim"] == genai.HEAD_DIM and genai.EXAMPLE_DIMS["kv_cache_dim"] == genai.HEAD_DIM
