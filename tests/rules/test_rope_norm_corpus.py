"""Second tier for rules/rope and rules/norm: exports of the corpus (tests/data/corpus, made by
tools/export_corpus.py; a file not there yet skips). At -O2 --target onnx every rotary embedding
and every normalization must be fused (no Neg / ReduceMean left) and the result must verify."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import onnx_fuse

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"

# (file stem, rotary embeddings expected): static exports carry constant cos/sin tables
# (rotary_const.yaml / rotary_interleaved.yaml), *__default ones have all-ones norm scales that
# cleanup drops (the scale-less norm rules), partial and interleaved rotary have their own rules.
CASES = [
    ("llama__static_nomask__trained", 4),
    ("llama__dyn_mask__default", 4),
    ("mistral__static_nomask__trained", 4),
    ("qwen2__dyn_mask__default", 4),
    ("qwen2__static_nomask__trained", 4),
    ("falcon__static_nomask__trained", 4),
    ("qwen3__static_nomask__trained", 4),
    ("gemma__static_nomask__trained", 4),
    ("phi__static_nomask__trained", 4),
    ("phi__dyn_mask__trained", 4),
    ("gpt_neox__static_nomask__trained", 4),
    ("gpt_neox__dyn_mask__default", 4),
    ("gpt_neox__dyn_mask__trained", 4),
    ("gptj__static_nomask__trained", 4),
    ("gptj__dyn_mask__trained", 4),
    ("cohere__static_nomask__trained", 4),
    ("cohere__dyn_mask__trained", 4),
    ("stablelm__dyn_mask__trained", 4),
    ("olmo2__dyn_mask__default", 4),
    # cos/sin scaled by HF's attention_scaling (YaRN, LongRoPE: data-dependent long/short factors)
    ("llama_yarn__dyn_mask__trained", 4),
    ("phi3_longrope__dyn_mask__trained", 4),
    ("nemotron__dyn_mask__trained", 4),  # partial rotary, LayerNorm1P
    ("olmo__dyn_mask__trained", 4),  # non-parametric LayerNorm
    ("persimmon__dyn_mask__trained", 4),  # partial rotary, per-head qk LayerNorm
    ("deepseek_v3__dyn_mask__trained", 4),  # MLA: RoPE on an 8-wide slice, written half by half
    ("glm__dyn_mask__trained", 4),  # partial interleaved rotary
    ("glm__optimum__trained", 4),  # the same through TorchScript (GatherND repeat_interleave)
    ("smollm3__dyn_mask__trained", 2),  # every second layer without RoPE (NoPE)
]


@pytest.mark.parametrize("stem,rotary", CASES, ids=[c[0] for c in CASES])
def test_rope_and_norms_fuse_on_corpus_export(stem, rotary):
    path = CORPUS / f"{stem}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus yet (tools/export_corpus.py)")
    result = onnx_fuse.optimize(str(path), level=2, target="onnx", verify=True)
    ops = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert ops["RotaryEmbedding"] == rotary, (ops, result.report.rule_fires)
    assert "Neg" not in ops and "ReduceMean" not in ops, (ops, result.report.rule_fires)
    assert result.report.verify["passed"], result.report.verify
    assert result.report.verify["rewrites"]["rolled_back"] == 0, result.report.verify["rewrites"]


def test_torchscript_repeat_interleave_of_rank4_tables_is_canonicalized():
    """Optimum's GLM (transformers 4.57, TorchScript): repeat_interleave of the half tables
    [B, 1, S, D/2] as GatherND over an expanded rank-5 tensor, between two Transposes that cancel;
    rules/layout/repeat_interleave.yaml takes tables of any rank (it took rank 3 only) and composes
    a Transpose in front with its own, so the tables are as computed and the RoPE fuses."""
    path = CORPUS / "glm__optimum__trained.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus yet (tools/export_corpus.py)")
    result = onnx_fuse.optimize(str(path), level=2, target="onnx", verify=True)
    ops = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert result.report.rule_fires.get("repeat-interleave-gathernd") == 2, result.report.rule_fires
    assert "GatherND" not in ops and "Neg" not in ops, ops
    assert ops["RotaryEmbedding"] == 4, (ops, result.report.rule_fires)
    assert result.report.verify["passed"], result.report.verify
