"""mha-joined-past (passes/mha_joined_past.py): MultiHeadAttention's past_key / past_value whose
presents nobody reads, split into heads by the export ([B, P, N*H] -> [B, N, P, H]), joined to its
3-D key / value instead, so fold-layout-chains cancels the head-split Transposes (SD3's joint
attention at ort-O3)."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from onnx_fuse.passes.mha_joined_past import MhaJoinedPastPass
from pass_testing import apply, check_same
from pass_testing import ops as _ops
from tests.passes.test_attention_3d import _feeds, _joint_sdpa

B, S, L, P, H, D = 2, 5, 4, 3, 2, 8


def _mha(*, presents_read: bool = False, unidirectional: int = 0, past_split: bool = True) -> onnx.ModelProto:
    """q [B, S, H*D], k / v [B, L, H*D]; past_key / past_value the heads of c [B, P, H*D] (RMSNorm on
    the keys' in that layout, as SD3) or, without ``past_split``, inputs [B, H, P, D]."""
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, H, D]),
             helper.make_tensor("g", TensorProto.FLOAT, [D], rng.uniform(0.5, 1.5, D).tolist())]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, s, H * D]) for n, s in (("q", S), ("k", L), ("v", L))]
    nodes = []
    if past_split:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [B, P, H * D]))
        inputs.append(helper.make_tensor_value_info("cv", TensorProto.FLOAT, [B, P, H * D]))
        nodes += [helper.make_node("Reshape", ["c", "split"], ["cs"]),
                  helper.make_node("Transpose", ["cs"], ["ct"], perm=[0, 2, 1, 3]),
                  helper.make_node("RMSNormalization", ["ct", "g"], ["pk"], epsilon=1e-6),
                  helper.make_node("Reshape", ["cv", "split"], ["cvs"]),
                  helper.make_node("Transpose", ["cvs"], ["pv"], perm=[0, 2, 1, 3])]
    else:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, P, D]) for n in ("pk", "pv")]
    nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"],
                                  ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=H,
                                  unidirectional=unidirectional))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H * D])]
    if presents_read:
        outputs.append(helper.make_tensor_value_info("present_k", TensorProto.FLOAT, [B, H, P + L, D]))
    graph = helper.make_graph(nodes, "mha", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def _mha_feeds(past_split: bool = True) -> dict:
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((B, s, H * D), dtype=np.float32) for n, s in (("q", S), ("k", L), ("v", L))}
    if past_split:
        feeds.update(c=rng.standard_normal((B, P, H * D), dtype=np.float32),
                     cv=rng.standard_normal((B, P, H * D), dtype=np.float32))
    else:
        feeds.update(pk=rng.standard_normal((B, H, P, D), dtype=np.float32),
                     pv=rng.standard_normal((B, H, P, D), dtype=np.float32))
    return feeds


def _run(model):
    ir_model, modified, p = apply(MhaJoinedPastPass, model, shape_inference=True)
    for _ in range(3):  # the cleanup that follows at ort: the Transposes meet, the glue goes
        FoldLayoutChainsPass(max_rank=None)(ir_model)
        IdentityEliminationPass()(ir_model)
        DeadCodeEliminationPass()(ir_model)
    return ir_model, modified, p


def test_an_unread_past_is_joined_and_its_transposes_cancel():
    model = _mha()
    ir_model, modified, p = _run(model)
    assert modified and p.stats["MultiHeadAttention"] == 1
    got = _ops(ir_model)
    assert "Transpose" not in got and got["Concat"] == 2, got
    mha = next(n for n in ir_model.graph if n.op_type == "MultiHeadAttention")
    assert len(mha.inputs) <= 6 and len(mha.outputs) == 1, mha  # no past, no presents
    check_same(model, ir_model, _mha_feeds())


@pytest.mark.parametrize("case", ["presents_read", "unidirectional", "past_not_split"])
def test_left_alone(case):
    """A read present is a real cache; a causal band is offset by the past length; a past that no
    Transpose of the export's made would only gain Transposes."""
    model = _mha(presents_read=case == "presents_read", unidirectional=int(case == "unidirectional"),
                 past_split=case != "past_not_split")
    _, modified, p = apply(MhaJoinedPastPass, model, shape_inference=True)
    assert not modified and p.stats["MultiHeadAttention"] == 0


def test_joint_attention_at_ort_keeps_no_transpose():
    """SD3 / SD 3.5's joint attention at ort-O3: the text stream's keys / values (the recognized
    "past") joined to the image stream's, no Transpose left (the old code kept two: the past key's
    through its RMSNorm and the past value's)."""
    model = _joint_sdpa()
    result = onnx_fuse.optimize(model, target="ort", level=3, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["MultiHeadAttention"] == 1 and ops["Softmax"] == 0, ops
    assert ops["Transpose"] == 0, ops
    check_same(model, result.model, _feeds())
