"""The ort target's contrib-op rules on bfloat16 graphs. ORT's SkipLayerNormalization,
SkipSimplifiedLayerNormalization, BiasGelu and FastGelu take bf16 (their schemas; CUDA kernels for
bf16, ORT's docs/OperatorKernels.md), and --precision bf16 already writes them in bf16, but
skip_norm.yaml and bias_gelu.yaml took float / float16 only, so a model exported in bf16 kept
Add + RMSNormalization / Add + Gelu at ort-O3 (LLaMA: 4 SkipSimplifiedLayerNormalization in fp32,
none in bf16). (The packed attention ops really are float / float16 only: packed_ort.yaml stays.)
ORT's CPU provider cannot run bf16, so the numbers are checked by verify's bf16 emulation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from onnx_fuse.verify import verify

D = 16
BF16 = TensorProto.BFLOAT16


def _skip_graph_bf16(h, kind, bias):
    n = h.node
    nodes, a = [], "x"
    if bias:
        nodes.append(n("Add", ["x", "bias"], ["xb"]))
        a = "xb"
    nodes.append(n("Add", ["r", a], ["s"]))
    if kind == "layer":
        nodes.append(n("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-5))
    else:
        nodes.append(n("RMSNormalization", ["s", "g"], ["y"], axis=-1, epsilon=1e-6))
    bf = lambda a: np.asarray(a).astype(ml_dtypes.bfloat16)  # noqa: E731
    inits = {"g": bf(1 + 0.1 * h.rng.standard_normal(D))}
    if kind == "layer":
        inits["beta"] = bf(0.1 * h.rng.standard_normal(D))
    if bias:
        inits["bias"] = bf(0.1 * h.rng.standard_normal(D))
    dims = ["batch", "seq", D]
    return h.make_model(nodes, [h.vi("x", dims, BF16), h.vi("r", dims, BF16)], [h.vi("y", dims, BF16)], inits)


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("bias", [False, True])
def test_bf16_skip_norm_fuses_for_ort_and_verifies(h, kind, bias):
    model = _skip_graph_bf16(h, kind, bias)
    out = h.fuse(model, "ort")
    op = "SkipLayerNormalization" if kind == "layer" else "SkipSimplifiedLayerNormalization"
    assert h.ops(out) == {f"com.microsoft::{op}": 1}, h.ops(out)
    assert out.graph.output[0].type.tensor_type.elem_type == BF16
    result = verify(model, out)
    assert result["passed"], result


@pytest.mark.parametrize("approximate,op,inputs", [("none", "BiasGelu", 2), ("tanh", "FastGelu", 2)])
def test_bf16_bias_gelu_fuses_for_ort_and_verifies(h, approximate, op, inputs):
    """Add(x, bias) -> Gelu-20 in bf16 (the dynamo exporter's BERT / GPT MLP)."""
    n = h.node
    nodes = [n("Add", ["x", "bias"], ["t"]), n("Gelu", ["t"], ["y"], approximate=approximate)]
    inits = {"bias": np.asarray(0.1 * h.rng.standard_normal(D)).astype(ml_dtypes.bfloat16)}
    dims = ["batch", "seq", D]
    model = h.make_model(nodes, [h.vi("x", dims, BF16)], [h.vi("y", dims, BF16)], inits)
    out = h.fuse(model, "ort")
    assert h.ops(out) == {f"com.microsoft::{op}": 1}, h.ops(out)
    assert len(out.graph.node[0].input) == inputs  # the bias moved into the op
    result = verify(model, out)
    assert result["passed"], result
