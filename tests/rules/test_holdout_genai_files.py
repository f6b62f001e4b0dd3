"""Hold-out 17's builder outputs end to end (tools/genai_holdout.py, tests/data/holdout_genai): a tiny
LLaMA through onnxruntime-genai 0.18's model builder, int4 for the CUDA provider (packed-QKV
GroupQueryAttention with do_rotary and the KV cache, MatMulNBits, SkipSimplifiedLayerNormalization) and
fp16 for the CPU provider (contrib RotaryEmbedding, repeat_kv, MultiHeadAttention over K/V joined with the
past, a causal attention_bias). The ort target keeps ORT's fused ops; onnx and trt keep none of them
(Attention-23, RotaryEmbedding-23, RMSNormalization, blocked DequantizeLinear) and match the builder's
graph in ONNX Runtime. Verify runs on the manifest's sizes: batch 1 (ORT's CPU GroupQueryAttention
refuses more with a past and several new tokens), the fp16 CPU form without a past (ORT 1.32 runs it
only so)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import onnx_fuse
from tests.rules.test_holdout_quant_files import _ops  # op histogram of a ModelProto

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/data/holdout_genai"
INT4, FP16 = "llama__genai_int4_cuda.onnx", "llama__genai_fp16_cpu.onnx"


def _feeds(name: str) -> dict:
    sys.path.insert(0, str(ROOT / "tools"))
    from export_corpus import feeds_from_manifest

    entry = json.loads((DATA / "manifest.json").read_text())["files"][name]
    return feeds_from_manifest(entry, entry["vocab_size"])


def test_manifest_lists_the_files():
    files = json.loads((DATA / "manifest.json").read_text())["files"]
    assert set(files) == {INT4, FP16}
    for name, entry in files.items():
        assert (DATA / name).stat().st_size == entry["bytes"] < 300_000


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_int4_gqa_builder_output(target, level):
    result = onnx_fuse.optimize(str(DATA / INT4), level=level, target=target, verify=True,
                                verify_inputs=_feeds(INT4), **({"float32_plugins": True} if target == "trt" else {}))
    ops = _ops(result.to_proto())
    assert result.report.passed, result.report.verify_failure
    contrib = {k for k in ops if k.startswith("com.microsoft::")}
    if target == "ort":
        assert ops["com.microsoft::GroupQueryAttention"] == 2
    else:
        assert not contrib, contrib
        assert ops["Attention"] == 2 and ops["RotaryEmbedding"] == 4 and ops["RMSNormalization"] == 5


def test_fp16_cpu_mha_builder_output():
    result = onnx_fuse.optimize(str(DATA / FP16), level=3, target="onnx", verify=True, verify_inputs=_feeds(FP16))
    ops = _ops(result.to_proto())
    assert result.report.passed, result.report.verify_failure
    assert not {k for k in ops if k.startswith("com.microsoft::")}
    assert ops["Attention"] == 2 and ops["RotaryEmbedding"] == 4
