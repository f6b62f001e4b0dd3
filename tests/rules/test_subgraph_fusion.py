"""Fusion inside If branches sees what it sees in the main graph (Optimum's merged decoders put
every layer in the branches of an If on ``use_cache_branch``; their shape constants and weights are
initializers of the main graph that both branches read).

Found by the differential fuzzer (seed 187, O3 ort): a GQA attention inside a branch lowered to
Attention-23 with a Max / IsInf / Where mask beside it, where the same nodes in a main graph became
GroupQueryAttention: onnx infers a body with the outer scope's types only, so a Reshape target read
from an outer initializer was an unknown tensor there, the head views lost their dims, and the GQA
lowering's "as many keys as queries" check could not be proven.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

import onnx_fuse
from onnx_fuse.verify import make_session

F32 = TensorProto.FLOAT


def _attention_nodes(scale: str) -> list[onnx.NodeProto]:
    """softmax(q k^T / scale + mask) v with 4 query heads over 2 repeated K/V heads of size 8,
    every shape constant read from the outer scope."""
    nodes = [oh.make_node("MatMul", ["h", w], [f"{t}3"]) for t, w in (("q", "wq"), ("k", "wk"), ("v", "wv"))]
    for t, shape in (("q", "qs"), ("k", "ks"), ("v", "ks")):
        nodes += [oh.make_node("Reshape", [f"{t}3", shape], [f"{t}r"]),
                  oh.make_node("Transpose", [f"{t}r"], [f"{t}4"], perm=[0, 2, 1, 3])]
    for t in ("k", "v"):
        nodes += [oh.make_node("Unsqueeze", [f"{t}4", "ax2"], [f"{t}u"]),
                  oh.make_node("Expand", [f"{t}u", "rep"], [f"{t}x"]),
                  oh.make_node("Reshape", [f"{t}x", "kvm"], [f"{t}r4"])]
    return nodes + [
        oh.make_node("Transpose", ["kr4"], ["kt"], perm=[0, 1, 3, 2]),
        oh.make_node("MatMul", ["q4", "kt"], ["sc"]), oh.make_node("Div", ["sc", scale], ["sd"]),
        oh.make_node("Add", ["sd", "mask"], ["sm"]), oh.make_node("Softmax", ["sm"], ["p"], axis=-1),
        oh.make_node("MatMul", ["p", "vr4"], ["o"]), oh.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        oh.make_node("Reshape", ["ot", "merge"], ["y"])]


def merged_model(dims=("batch", "seq")) -> onnx.ModelProto:
    """An If on a bool input whose two branches hold the same GQA attention (the same value names
    in both, as Optimum's merge leaves them) with different scales; weights and shape constants
    are main-graph initializers; the branches read h = x W from the outer scope. ``dims``: x's batch
    and length (None: unnamed, so h's are names onnx makes up, which state no fact: only the
    shape constants then relate q's, k's and v's lengths, as in fuzz seed 187)."""
    batch, seq = dims
    rng = np.random.default_rng(0)
    i64 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.int64), n)  # noqa: E731
    f32 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    inits = [f32("w0", rng.standard_normal((32, 32)) / 6), f32("wq", rng.standard_normal((32, 32)) / 6), f32("wk", rng.standard_normal((32, 16)) / 6),
             f32("wv", rng.standard_normal((32, 16)) / 6), i64("qs", [0, 0, 4, 8]), i64("ks", [0, 0, 2, 8]),
             i64("ax2", [2]), i64("rep", [1, 1, 2, 1, 1]), i64("kvm", [0, 4, -1, 8]), i64("merge", [0, 0, 32]),
             f32("s1", [np.sqrt(8)]), f32("s2", [2.0])]
    out = [oh.make_tensor_value_info("y", F32, [batch, seq, 32])]
    then_g = oh.make_graph(_attention_nodes("s1"), "with_past", [], out)
    else_g = oh.make_graph(_attention_nodes("s2"), "no_past", [], out)
    nodes = [oh.make_node("MatMul", ["x", "w0"], ["h"]),
             oh.make_node("If", ["use_cache_branch"], ["out"], then_branch=then_g, else_branch=else_g)]
    inputs = [oh.make_tensor_value_info("x", F32, [batch, seq, 32]),
              oh.make_tensor_value_info("mask", F32, [batch, 1, seq, seq]),
              oh.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])]
    graph = oh.make_graph(nodes, "merged", inputs, [oh.make_tensor_value_info("out", F32, [batch, seq, 32])],
                          initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def _ops(proto: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(ir.from_proto(proto).graph))


def _run(proto: onnx.ModelProto, feeds: dict, ort_opt: bool) -> np.ndarray:
    return make_session(proto, threads=1, ort_optimizations=ort_opt).run(["out"], feeds)[0]


@pytest.mark.parametrize("dims", [("batch", "seq"), (None, None)])
@pytest.mark.parametrize("target, fused", [("ort", "GroupQueryAttention"), ("onnx", "Attention"),
                                           ("trt", "Attention")])
def test_gqa_in_both_branches_fuses_as_in_a_main_graph(target, fused, dims):
    model = merged_model(dims)
    optimized = onnx_fuse.optimize(model, level=3, target=target).to_proto()
    ops = _ops(optimized)
    assert ops[fused] == 2 and ops["Softmax"] == 0
    # no mask leftovers of the Attention-23 fallback (keep-masked-rows) beside a GQA
    if target == "ort":
        assert ops["Max"] == ops["IsInf"] == ops["Where"] == ops["Attention"] == 0
    rng = np.random.default_rng(1)
    for branch in (True, False):
        feeds = {"x": rng.standard_normal((2, 3, 32)).astype(np.float32),
                 "mask": np.where(rng.random((2, 1, 3, 3)) < 0.2, -1e4, 0).astype(np.float32),
                 "use_cache_branch": np.array([branch])}
        ref = _run(model, feeds, ort_opt=False)
        for ort_opt in (False, True):
            np.testing.assert_allclose(_run(optimized, feeds, ort_opt), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dims", [("batch", "seq"), (None, None)])
def test_gqa_branch_matches_its_main_graph_twin(dims):
    """The same attention lifted into a main graph (its outer reads: h an input, the constants
    initializers) fuses the same."""
    model = merged_model(dims)
    branch = next(a.g for a in model.graph.node[1].attribute if a.name == "then_branch")
    h = oh.make_tensor_value_info("h", F32, ["h0", "h1", 32])
    lifted = oh.make_graph(list(branch.node), "lifted", [h, model.graph.input[1]], list(branch.output),
                           initializer=list(model.graph.initializer))
    lifted_ops = _ops(onnx_fuse.optimize(oh.make_model(lifted, opset_imports=model.opset_import, ir_version=9),
                                         level=3, target="ort").to_proto())
    ops = _ops(onnx_fuse.optimize(model, level=3, target="ort").to_proto())
    assert lifted_ops["GroupQueryAttention"] == 1 and ops["GroupQueryAttention"] == 2
