"""Gemma-2's softcapped attention at --target trt: TensorRT's attention has no softcap, so the
canonical op is lowered to the plain ops (check-trt clean) instead of an Attention-23 that TensorRT
refuses (it was, on all five Gemma-2 corpus exports), and the numbers stay the original's."""

from __future__ import annotations

from pathlib import Path

import pytest

import onnx_fuse
from onnx_fuse.plugins.check_trt import check_model

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


@pytest.mark.parametrize("name,level", [("gemma2__dyn_mask__trained", 4), ("gemma2__kv__trained", 4),
                                        ("gemma2__static_nomask__trained", 3)])
def test_softcap_attention_is_lowered_to_plain_ops_for_trt(name, level):
    path = CORPUS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    result = onnx_fuse.optimize(path, level=level, target="trt", verify=True)
    assert result.report.verify["passed"]
    assert result.report.rule_fires.get("attention-trt-softcap") == 2
    proto = result.to_proto()
    ops = [n.op_type for n in proto.graph.node]
    assert "Attention" not in ops and ops.count("Softmax") == 2
    verdict = check_model(proto)
    assert verdict.supported and not verdict.issues, [str(i) for i in verdict.issues]


def test_without_softcap_trt_keeps_one_attention_op():
    result = onnx_fuse.optimize(CORPUS / "llama__dyn_mask__trained.onnx", level=3, target="trt")
    assert "attention-trt-softcap" not in result.report.rule_fires
    assert [n.op_type for n in result.to_proto().graph.node].count("Attention") == 2
