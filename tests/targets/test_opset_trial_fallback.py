"""OpsetOnDemandRewritePass: when the run at the model's own opset leaves a canonical op that only a
lowering gated on the fusion opset takes (attention-trt needs opset 23), while the upgraded trial
lowered every one, the trial is the result, not an InternalError.

The two runs can differ: GPT-2's static decode (opset 20) is paged on the converted copy (no gated
rule fired, so the copy is dropped), and a value's stale reader (a node made by a pass and never
inserted, which the copy's serialization drops) kept Shape(present.0.key) alive at opset 20, so
trt-paged-kv refused ('present.0.key is still read'), attention-kv-trt made a canonical Attention
and no opset-20 lowering took it. The stale reader is made here on purpose, after the pass that
left one (size-one-axes, fixed), so the test holds whatever that pass does."""

from __future__ import annotations

import collections
from pathlib import Path

import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.errors import InternalError
from onnx_fuse.passes.size_one_axes import SizeOneAxesPass
from onnx_fuse.rewrite._rewriter import CanonicalLeftover
from tests.decode_models import static_decode


def _ops(model: ir.Model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph)


@pytest.fixture
def stale_present_reader(monkeypatch):
    """After size-one-axes, a node that reads Shape(present.0.key) but is in no graph."""
    original = SizeOneAxesPass.call
    made = []

    def call(self, model):
        result = original(self, model)
        for node in model.graph:
            if node.op_type == "Shape" and node.inputs[0] is not None and node.inputs[0].name == "present.0.key":
                made.append(ir.Node("", "Identity", [node.outputs[0]]))   # never inserted
        return result

    monkeypatch.setattr(SizeOneAxesPass, "call", call)
    return made


def test_own_opset_leftover_keeps_the_upgraded_trial(stale_present_reader):
    result = onnx_fuse.optimize(static_decode("gpt264_kv_dynamo"), level=4, target="trt", precision="fp16")
    assert stale_present_reader, "the graph no longer has Shape(present.0.key): the test needs a new reader"
    assert _ops(result.model)["PagedAttention"] == 2
    assert not any(n.domain == "onnx_fuse.canonical" for n in result.model.graph)
    assert dict(result.model.opset_imports)[""] == 23


def test_leftover_is_still_an_internal_error():
    """The exception the fallback catches stays an InternalError for every other caller."""
    assert issubclass(CanonicalLeftover, InternalError)
    exc = CanonicalLeftover("Attention", "attention-kv-trt")
    assert "canonical op Attention (made by rule 'attention-kv-trt') has no lowering" in str(exc)


@pytest.mark.parametrize("target", ["trt", "onnx"])
def test_unconvertible_model_leaves_the_unlowerable_idiom_unfused(target, monkeypatch):
    """Below opset 23 with a model the converter refuses, attention-trt / attention-onnx (opset 23)
    cannot fire: the canonical Attention takes the plain-ops lowering (attention-plain,
    rules/attention/lower_plain.yaml; before it, the recognizer was left out and attention stayed
    unfused), the norms still fused, verified, not an InternalError."""
    from onnx_fuse.targets import onnx as onnx_target

    def refuse(model, target_opset):
        raise RuntimeError("no adapter")

    monkeypatch.setattr(onnx_target, "upgraded_copy", refuse)
    path = Path(__file__).resolve().parents[1] / "data/corpus/gpt2__dyn_mask__trained.onnx"
    result = onnx_fuse.optimize(str(path), level=3, target=target, verify=True)
    ops = _ops(result.model)
    assert result.report.status == "PASSED", result.report.status_reason
    assert ops["Softmax"] == 2 and ops["LayerNormalization"] == 5 and ops["Attention"] == 0, ops
    assert result.report.rule_fires.get("attention-plain") == 2, result.report.rule_fires
    assert not any("left out" in w for w in result.report.warnings), result.report.warnings
    assert dict(result.model.opset_imports)[""] == 20
