"""TorchScript and Optimum exports whose dynamo twins always fused (issue 10, generality): the
same architectures, written with shape arithmetic that only folding makes constant (rotate-half
Slices ending at Shape(x)[-1] // 2, GPT-NeoX's partial-rotary split), and with other forms of the
same computations (GPT-J's rows of a sin/cos table gathered by position and repeat_interleave'd
with Tile, x^3 as x * (x * x) in the tanh GELU). Each file must fuse every attention layer, rotary
embedding and GELU on every target and still compute the original's numbers (optimize(verify=True):
whole model and each rewrite).
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import onnx_fuse

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "FusedAttention"}
GELU = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu"}

# (file stem, attention layers, rotary embeddings, GELUs) on every column below
CASES = [
    ("falcon__torchscript__trained", 2, 4, 2),
    ("gemma__torchscript__trained", 2, 4, 2),
    ("gemma__optimum__trained", 2, 4, 2),
    ("phi3__torchscript__trained", 2, 4, 0),
    ("phi3__optimum__trained", 2, 4, 0),
    ("gpt_neox__torchscript__trained", 2, 4, 2),
    ("gpt_neox__optimum__trained", 2, 4, 2),
    ("gptj__torchscript__trained", 2, 4, 2),
    ("gptj__optimum__trained", 2, 4, 2),
]
COLUMNS = [("ort", 3), ("onnx", 3), ("trt", 4)]


def _counts(result) -> tuple[int, int, int]:
    ops = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    return sum(ops[o] for o in ATTENTION), ops["RotaryEmbedding"], sum(ops[o] for o in GELU)


@pytest.mark.slow
@pytest.mark.parametrize("target,level", COLUMNS, ids=[f"{t}-O{lv}" for t, lv in COLUMNS])
@pytest.mark.parametrize("stem,attention,rotary,gelu", CASES, ids=[c[0] for c in CASES])
def test_attention_rope_gelu_fuse_and_verify(stem, attention, rotary, gelu, target, level):
    path = CORPUS / f"{stem}.onnx"
    result = onnx_fuse.optimize(str(path), level=level, target=target, verify=True)
    assert _counts(result) == (attention, rotary, gelu), result.report.rule_fires
    assert result.report.verify["passed"], result.report.verify
    assert result.report.verify["rewrites"]["rolled_back"] == 0, result.report.verify["rewrites"]
