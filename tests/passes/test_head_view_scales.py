"""FoldHeadViewScalesPass: a constant per-channel scale on a projection's head view (TimesFM's per-dim query
scale softplus(s)[D] * c on q viewed [B, S, H, D]) joins the projection's weight and bias."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_fuse
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.head_view_scales import FoldHeadViewScalesPass
from pass_testing import apply, check_same, ops

F, H16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
B, S, K, H, D = 2, 5, 16, 2, 8
N = H * D


def _scale(shape, seed=3, dtype=np.float32):
    """softplus(s) * c of a trained-like s: different per channel."""
    s = np.random.default_rng(seed).standard_normal(shape)
    return (np.log1p(np.exp(s)) * 1.442695 / np.sqrt(D)).astype(dtype)


def _model(tail, inits, *, out_shape=(B, H, S, D), dtype=F, extra_inputs=(), extra_outputs=()):
    """x @ W + b viewed [B, S, H, D] (Reshape), then ``tail`` (nodes reading "view"), output "y"."""
    np_dtype = np.float16 if dtype == H16 else np.float32
    rng = np.random.default_rng(0)
    arrays = {"W": (0.3 * rng.standard_normal((K, N))).astype(np_dtype),
              "b": (0.1 * rng.standard_normal(N)).astype(np_dtype),
              "heads": np.array([0, 0, H, D], np.int64), **inits}
    nodes = [oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Add", ["xw", "b"], ["t"]),
             oh.make_node("Reshape", ["t", "heads"], ["view"]), *tail]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", dtype, [B, S, K]), *extra_inputs],
                          [oh.make_tensor_value_info("y", dtype, list(out_shape)), *extra_outputs],
                          [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(proto):
    model, modified, p = apply(FoldHeadViewScalesPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _feeds(dtype=np.float32, **more):
    return {"x": np.random.default_rng(1).standard_normal((B, S, K)).astype(dtype), **more}


def _transposed(scale_op="Mul", operands=("qt", "c")):
    return [oh.make_node("Transpose", ["view"], ["qt"], perm=[0, 2, 1, 3]),
            oh.make_node(scale_op, list(operands), ["y"])]


def test_per_dim_scale_after_the_head_transpose():
    """TimesFM (dynamo): Mul(Transpose(Reshape(x @ W + b)), c [1, 1, 1, D]) -> the views of x @ W' + b'."""
    proto = _model(_transposed(), {"c": _scale((1, 1, 1, D))})
    model, modified, p = _run(proto)
    assert modified and p.stats["folded"] == 1
    assert ops(model) == {"MatMul": 1, "Add": 1, "Reshape": 1, "Transpose": 1}
    check_same(proto, model, _feeds())


def test_scale_first_on_the_reshape_and_a_division():
    """Mul(c [D], view) with c first, on the [B, S, H, D] view itself; and Div(view, c)."""
    for tail in ([oh.make_node("Mul", ["c", "view"], ["y"])], [oh.make_node("Div", ["view", "c"], ["y"])]):
        proto = _model(tail, {"c": _scale((D,))}, out_shape=(B, S, H, D))
        model, modified, _ = _run(proto)
        assert modified and ops(model) == {"MatMul": 1, "Add": 1, "Reshape": 1}, tail[0].op_type
        check_same(proto, model, _feeds())


def test_any_reshape_whose_last_axis_is_the_scaled_one():
    """The scale reads the view's last axis, at row position i mod D whatever the Reshape does to the
    others: a [B * S * H, D] flattening folds as well (checked numerically)."""
    proto = _model([oh.make_node("Mul", ["view", "c"], ["y"])],
                   {"c": _scale((1, D)), "heads": np.array([-1, D], np.int64)}, out_shape=(B * S * H, D))
    model, modified, _ = _run(proto)
    assert modified and "Mul" not in ops(model)
    check_same(proto, model, _feeds())


def test_float16_projection():
    proto = _model(_transposed(), {"c": _scale((1, 1, 1, D), dtype=np.float16)}, dtype=H16)
    model, modified, _ = _run(proto)
    assert modified and "Mul" not in ops(model)
    check_same(proto, model, _feeds(np.float16))


def test_dim_readers_of_the_view_stay():
    """A Shape of the unscaled view reads its dims only (TorchScript's Shape beside the head view)."""
    tail = [*_transposed(), oh.make_node("Shape", ["qt"], ["dims"])]
    proto = _model(tail, {"c": _scale((1, 1, 1, D))},
                   extra_outputs=[oh.make_tensor_value_info("dims", onnx.TensorProto.INT64, [4])])
    model, modified, _ = _run(proto)
    assert modified and "Mul" not in ops(model)
    check_same(proto, model, _feeds())


def _unchanged(proto, feeds=None):
    model, modified, p = _run(proto)
    assert not modified and p.stats["folded"] == 0
    assert ops(model) == dict(collections.Counter(n.op_type for n in proto.graph.node))
    check_same(proto, model, feeds or _feeds())


def test_weight_read_by_another_projection_is_kept():
    """A tied weight (another MatMul reads W) would be duplicated: refused, the graph as it was."""
    tail = [*_transposed()[:1], oh.make_node("Mul", ["qt", "c"], ["y0"]), oh.make_node("MatMul", ["x", "W"], ["other"]),
            oh.make_node("Reshape", ["other", "heads"], ["ov"]),
            oh.make_node("Transpose", ["ov"], ["ot"], perm=[0, 2, 1, 3]), oh.make_node("Add", ["y0", "ot"], ["y"])]
    _unchanged(_model(tail, {"c": _scale((1, 1, 1, D))}))


def test_scale_along_another_axis_or_uniform_or_not_constant_is_kept():
    # per head ([1, H, 1, 1] on [B, H, S, D]): not the last axis
    _unchanged(_model(_transposed(), {"c": _scale((1, H, 1, 1))}))
    # per position ([1, 1, S, 1]) likewise
    _unchanged(_model(_transposed(), {"c": _scale((1, 1, S, 1))}))
    # one number (uniform): the attention's scale (attention-q-scale)
    _unchanged(_model(_transposed(), {"c": np.full((1, 1, 1, D), 0.25, np.float32)}))
    # a scale fed at run time
    c_in = oh.make_tensor_value_info("c", F, [D])
    _unchanged(_model(_transposed(), {}, extra_inputs=[c_in]), _feeds(c=_scale((D,))))


def test_transpose_moving_the_last_axis_is_kept():
    """A Transpose that moves D off the last axis: the scale's axis is no longer the projection's columns mod D."""
    tail = [oh.make_node("Transpose", ["view"], ["qt"], perm=[0, 2, 3, 1]), oh.make_node("Mul", ["qt", "c"], ["y"])]
    _unchanged(_model(tail, {"c": _scale((1, 1, 1, S))}, out_shape=(B, H, D, S)))


def test_unscaled_view_or_projection_read_elsewhere_is_kept():
    """The unscaled view (or the projection) read by another op: folding would scale what it reads."""
    extra = [oh.make_tensor_value_info("z", F, [B, H, S, D])]
    tail = [*_transposed(), oh.make_node("Neg", ["qt"], ["z"])]
    _unchanged(_model(tail, {"c": _scale((1, 1, 1, D))}, extra_outputs=extra))
    extra = [oh.make_tensor_value_info("z", F, [B, S, N])]
    tail = [*_transposed(), oh.make_node("Neg", ["t"], ["z"])]
    _unchanged(_model(tail, {"c": _scale((1, 1, 1, D))}, extra_outputs=extra))


def test_timesfm_like_attention_fuses_without_the_scale_at_ort():
    """End to end (ort-O3): q = (x @ Wq + bq) viewed [B, H, S, D] times softplus(s)[D] * c, then attention;
    the scale joins Wq, so the q / k / v projections reach the packed Attention whole (no Mul left)."""
    rng = np.random.default_rng(5)
    w = {f"W{n}": (0.3 * rng.standard_normal((K, N))).astype(np.float32) for n in "qkv"}
    w.update({f"b{n}": (0.1 * rng.standard_normal(N)).astype(np.float32) for n in "qkv"})
    w.update(heads=np.array([0, 0, H, D], np.int64), merge=np.array([0, 0, N], np.int64), c=_scale((1, 1, 1, D)))
    nodes = []
    for n in "qkv":
        nodes += [oh.make_node("MatMul", ["x", f"W{n}"], [f"{n}w"]), oh.make_node("Add", [f"{n}w", f"b{n}"], [f"{n}p"]),
                  oh.make_node("Reshape", [f"{n}p", "heads"], [f"{n}v"]),
                  oh.make_node("Transpose", [f"{n}v"], [f"{n}t"], perm=[0, 2, 1, 3])]
    nodes += [oh.make_node("Mul", ["qt", "c"], ["qs"]), oh.make_node("Transpose", ["kt"], ["kT"], perm=[0, 1, 3, 2]),
              oh.make_node("MatMul", ["qs", "kT"], ["sc"]), oh.make_node("Softmax", ["sc"], ["p"], axis=-1),
              oh.make_node("MatMul", ["p", "vt"], ["o"]), oh.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              oh.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, ["batch", "seq", K])],
                          [oh.make_tensor_value_info("y", F, ["batch", "seq", N])],
                          [numpy_helper.from_array(a, n) for n, a in w.items()])
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    proto.ir_version = 9
    result = onnx_fuse.optimize(proto, level=3, target="ort", verify=True)
    assert result.report.passed
    out = collections.Counter(n.op_type for n in result.to_proto().graph.node)
    assert out["Mul"] == 0 and out["Attention"] + out["MultiHeadAttention"] == 1, out
