"""The per-rewrite check (rewrite/_local_check.py) on models at opset 13 / 14 (TorchScript and
tf2onnx exports): it runs each rewrite's cut-out at the model's own opsets, and its expansion of a
canonical Attention / Gelu into plain ops put the scale, softcap and mask constants in the input's
type with CastLike, an opset-15 op. ORT refused that cut-out ("invalid model ... CastLike"), so
with --verify every attention of such a model was rolled back at -O3 ort and stayed unfused (it
fused without --verify). The constants are now Cast to the input's known type (any opset)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnx_fuse
from onnx_fuse.rewrite._local_check import _expand_canonical, _expand_canonical_gelu
from tests.rules import test_attention as prefill
from tests.rules.test_attention_plain import _at

CONTRIB = ("com.microsoft::MultiHeadAttention", "com.microsoft::GroupQueryAttention")


@pytest.mark.parametrize("opset", [13, 14])
@pytest.mark.parametrize("form,kv_heads", [("sdpa", 2), ("eager", prefill.H)], ids=["sdpa-gqa", "eager-mha"])
def test_attention_at_opset_13_14_is_fused_and_verified(h, opset, form, kv_heads):
    model = _at(prefill._block(h, form=form, kv_heads=kv_heads), opset)
    result = onnx_fuse.optimize(model, level=3, target="ort", verify=True)
    rewrites = result.report.verify["rewrites"]
    assert result.report.status == "PASSED", result.report.status_reason
    assert rewrites["rolled_back"] == 0 and not rewrites["failed"], rewrites
    assert sum(result.report.ops_after.get(op, 0) for op in CONTRIB) == 1, result.report.ops_after
    assert dict(result.model.opset_imports)[""] == opset


@pytest.mark.parametrize("target,level", [("onnx", 3), ("trt", 4)])
def test_pinned_at_13_the_plain_chain_is_verified(h, target, level):
    model = _at(prefill._block(h, form="sdpa", kv_heads=2), 13)
    result = onnx_fuse.optimize(model, level=level, target=target, opset=13, verify=True)
    rewrites = result.report.verify["rewrites"]
    assert result.report.status == "PASSED" and rewrites["rolled_back"] == 0, rewrites
    fires = result.report.rule_fires
    assert fires.get("attention-plain", 0) + fires.get("attention-plain-grouped", 0) == 1, fires


def _op_types(nodes) -> set[str]:
    return {n.op_type for n in nodes}


def test_expansions_cast_constants_to_the_known_type():
    attn = oh.make_node("Attention", ["q", "k", "v", "m"], ["o"], name="a", domain="onnx_fuse.canonical",
                        scale=0.125, softcap=30.0, nan_rows_zero=1)
    nodes = _expand_canonical(attn, True, onnx.TensorProto.FLOAT16)
    assert "CastLike" not in _op_types(nodes)
    casts = [n for n in nodes if n.op_type == "Cast"]
    assert len(casts) == 5 and {oh.get_attribute_value(n.attribute[0]) for n in casts} == {onnx.TensorProto.FLOAT16}
    gelu = oh.make_node("Gelu", ["x"], ["y"], name="g", domain="onnx_fuse.canonical")
    assert "CastLike" not in _op_types(_expand_canonical_gelu(gelu, onnx.TensorProto.FLOAT))
    # the type unknown: CastLike, as before (the check then needs opset 15)
    assert "CastLike" in _op_types(_expand_canonical(attn, True)) and "CastLike" in _op_types(_expand_canonical_gelu(gelu))


def test_gelu_at_opset_13_is_verified(h):
    n = h.node
    nodes = [n("MatMul", ["x", "w"], ["xw"]), n("Div", ["xw", "sqrt2"], ["t"]), n("Erf", ["t"], ["e"]),
             n("Add", ["e", "one"], ["a"]), n("Mul", ["xw", "a"], ["m"]), n("Mul", ["m", "half"], ["y"])]
    inits = {"w": h.rng.standard_normal((8, 8)).astype(np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    model = h.make_model(nodes, [h.vi("x", ["b", 8])], [h.vi("y", ["b", 8])], inits, opset=13)
    for target in ("ort", "trt"):
        result = onnx_fuse.optimize(model, level=2, target=target, verify=True)
        rewrites = result.report.verify["rewrites"]
        assert result.report.status == "PASSED" and rewrites["rolled_back"] == 0, (target, rewrites)
