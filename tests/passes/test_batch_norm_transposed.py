"""FoldBatchNormPass: an inference BatchNormalization between a Transpose that brings the last axis to 1 and
the inverse Transpose (BatchNorm1d over a [B, T, C] activation, PatchTST's norms after its residual Adds), which
no weight can take, becomes Mul(x, s) + t on the untransposed x."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.batch_norm_fold import FoldBatchNormPass
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from pass_testing import apply, check_same, ops

F, H = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
C = 8


def _model(*, perm=(0, 2, 1), back=None, rank=3, training=False, extra=None, dtype=np.float32):
    """x [B, T, C] (rank 3) or [B, G, T, C] (rank 4) plus a residual y, their sum transposed, BN, transposed back."""
    rng = np.random.default_rng(0)
    elem = F if dtype == np.float32 else H
    inits = [numpy_helper.from_array(a.astype(dtype), f"bn_{n}") for n, a in (
        ("scale", rng.uniform(0.5, 2.0, C)), ("bias", rng.standard_normal(C)),
        ("mean", rng.standard_normal(C)), ("var", rng.uniform(0.2, 3.0, C)))]
    back = list(np.argsort(perm)) if back is None else back
    bn_out = ["n", "n_mean", "n_var"] if training else ["n"]
    nodes = [oh.make_node("Add", ["x", "r"], ["s"]),   # the residual sum: no weight before the BN
             oh.make_node("Transpose", ["s"], ["t"], perm=list(perm)),
             oh.make_node("BatchNormalization", ["t", "bn_scale", "bn_bias", "bn_mean", "bn_var"], bn_out,
                          epsilon=1e-5, **({"training_mode": 1} if training else {})),
             oh.make_node("Transpose", ["n"], ["y"], perm=[int(i) for i in back]),
             oh.make_node("Relu", ["y"], ["z"])]
    dims = ["b", "t", C] if rank == 3 else ["b", 3, "t", C]
    outputs = [oh.make_tensor_value_info("z", elem, dims if list(back) == list(np.argsort(perm)) else
                                               [f"z{i}" for i in range(rank)])]
    if extra == "bn_out":
        nodes.append(oh.make_node("Neg", ["n"], ["neg"]))
        outputs.append(oh.make_tensor_value_info("neg", elem, [f"n{i}" for i in range(rank)]))
    if extra == "transposed":
        nodes.append(oh.make_node("Shape", ["t"], ["t_shape"]))
        outputs.append(oh.make_tensor_value_info("t_shape", onnx.TensorProto.INT64, [rank]))
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", elem, dims),
                                       oh.make_tensor_value_info("r", elem, dims)], outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15 if training else 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(proto):
    model, modified, p = apply(FoldBatchNormPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _feeds(shape, dtype=np.float32):
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal(shape).astype(dtype), "r": rng.standard_normal(shape).astype(dtype)}


@pytest.mark.parametrize("perm,rank,shape", [((0, 2, 1), 3, (2, 5, C)), ((0, 3, 1, 2), 4, (2, 3, 5, C)),
                                             ((0, 3, 2, 1), 4, (2, 3, 5, C))])
def test_bn_between_transposes_becomes_mul_add(perm, rank, shape):
    proto = _model(perm=perm, rank=rank)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"Add": 2, "Mul": 1, "Relu": 1}
    assert p.stats["BatchNormalization<>Transpose"] == 1
    check_same(proto, model, _feeds(shape))
    for n in (7, 1):  # other lengths: the constants broadcast along the last axis only
        check_same(proto, model, _feeds((*shape[:-2], n, C)))


def test_bn_between_transposes_float16():
    proto = _model(dtype=np.float16)
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Add": 2, "Mul": 1, "Relu": 1}
    check_same(proto, model, _feeds((2, 5, C), np.float16), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kw,why", [
    (dict(perm=(0, 2, 1), back=(0, 2, 1), rank=3, training=True), "training mode"),
    (dict(perm=(0, 3, 1, 2), back=(0, 3, 1, 2), rank=4), "the second Transpose is not the inverse"),
    (dict(perm=(0, 2, 3, 1), rank=4), "the channel at axis 1 is not x's last axis"),
    (dict(extra="bn_out"), "the BN's output read elsewhere"),
    (dict(extra="transposed"), "the transposed value read elsewhere (a Shape)"),
])
def test_near_misses_keep_the_bn(kw, why):
    proto = _model(**kw)
    model, modified, p = _run(proto)
    assert not modified and ops(model).get("BatchNormalization") == 1, why
    assert p.stats["BatchNormalization<>Transpose"] == 0
