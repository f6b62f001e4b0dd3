"""fused-attention-trt-below-23 (rules/attention/fused_attention_trt.yaml): at trt -O4 below opset 23
(``--opset N`` with N < 23, or a model the version converter refuses) canonical attention whose mask
is attention_mask's key padding over a causal band or nothing becomes onnx_fuse::FusedAttention, a
custom-domain op that needs no ai.onnx opset. Before, the plugin rules only read the Attention-23 that
opset 23 has, so every pinned model got lower_plain.yaml's MatMul / Softmax chain instead. Hand-built
masks (test_probed_fused_attention's transformers 4.x form) at opsets 17..22 and a transformers 5
dynamo export (GatherND mask, GQA) pinned at its own opset 20, compared with the original on
unpadded rows; near misses keep the plain chain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onnx_fuse
from tests.rules import test_probed_fused_attention as probed
from tests.rules.test_attention_plain import _at  # the same graph declared at another opset

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
OPSETS = [17, 18, 20, 22]


def _pinned(model, opset: int, **kw):
    result = onnx_fuse.optimize(model, level=4, target="trt", opset=opset, float32_plugins=True,
                                verify=True, **kw)
    assert result.report.status == "PASSED", result.report.status_reason
    assert dict(result.model.opset_imports)[""] == opset
    return result


def _attrs(result) -> list[dict]:
    return [{k: a.value for k, a in n.attributes.items()} for n in result.model.graph
            if n.op_type == "FusedAttention"]


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("causal,window", [(True, 0), (False, 0), (True, 3)], ids=["causal", "encoder", "window"])
def test_pinned_padding_mask_becomes_the_plugin(h, opset, causal, window):
    model = _at(probed._expand_mask_attention(h, causal=causal, window=window), opset)
    result = _pinned(model, opset)
    attrs = _attrs(result)
    assert len(attrs) == 1 and result.report.rule_fires.get("fused-attention-trt-below-23") == 1, h.ops(result.to_proto())
    assert attrs[0]["causal"] == int(causal) and attrs[0].get("window", 0) == window
    assert not any(n.op_type in ("Softmax", "Attention") for n in result.model.graph)
    f = probed._feeds(h)
    h.assert_close(model, result.to_proto(), f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])


def test_pinned_left_padding(h):
    model = _at(probed._expand_mask_attention(h), 20)
    result = _pinned(model, 20)
    f = {**probed._feeds(h), "attention_mask": np.array([(0, 1, 1, 1, 1, 1), (0, 0, 0, 1, 1, 1)], np.int64)}
    h.assert_close(model, result.to_proto(), f, atol=1e-4, rtol=1e-3, valid=f["attention_mask"])


def test_dynamo_export_pinned_at_its_own_opset():
    """transformers 5 LLaMA (GQA 2 heads over 1, head size 64), dynamo opset 20: the GatherND mask
    the structural rules prove at 23 is proven on its values here."""
    path = str(MODELS / "llama64_sdpa_dynamo.onnx")
    result = _pinned(path, 20)
    assert len(_attrs(result)) == 2 and all(a["causal"] == 1 for a in _attrs(result))
    assert not any(n.op_type == "Softmax" for n in result.model.graph)


def test_soft_fill_keeps_the_plain_chain(h):
    """-1e4 on padded keys only down-weights them: not the plugin's contract, attention-plain instead."""
    model = _at(probed._expand_mask_attention(h, fill=-1e4), 20)
    result = _pinned(model, 20)
    assert not _attrs(result) and result.report.rule_fires.get("attention-plain") == 1


def test_float32_without_float32_plugins_keeps_the_plain_chain(h):
    """As at opset 23 (where float32 keeps Attention-23): the plugin kernels take fp16 / bf16."""
    model = _at(probed._expand_mask_attention(h), 20)
    result = onnx_fuse.optimize(model, level=4, target="trt", opset=20)
    assert not _attrs(result) and result.report.rule_fires.get("attention-plain") == 1
    assert any("FusedAttention" in w for w in result.report.warnings), result.report.warnings


def test_fp16_pinned_is_the_plugin(h):
    model = _at(probed._expand_mask_attention(h), 20)
    result = onnx_fuse.optimize(model, level=4, target="trt", opset=20, precision="fp16")
    assert len(_attrs(result)) == 1 and dict(result.model.opset_imports)[""] == 20
