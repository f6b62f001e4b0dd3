"""fold-layout-chains' transpose-sunk over a region (passes/_transpose_region.py): Transposes sunk
through last-axis norms, Concat, Softmax and elementwise ops with several entries, Shape reads
picked through the permutation; refused where the layout matters."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same, fold_layout, normal_feeds
from pass_testing import ops_but_constants as ops


def _run(text: str, opset: int = 17):
    return fold_layout(text, opset=opset)


def _feeds(**shapes):
    return normal_feeds(5, **shapes)


def _node(model, op):
    return next(n for n in model.graph if n.op_type == op)


@pytest.mark.parametrize("norm", ["RMSNormalization", "LayerNormalization"])
def test_joint_attention_q_normed_and_concatenated_in_heads_layout_cancels(norm):
    # SD3's joint attention: image and text q viewed [B, S, H, D], transposed to [B, H, S, D], each
    # normalized over D (trained-like scales), concatenated over S and transposed back for the merge
    opset = 23 if norm == "RMSNormalization" else 17
    bias = ", b" if norm == "LayerNormalization" else ""
    proto, model, modified, p = _run(f"""
        g (float[B, 6, 2, 4] img, float[B, 3, 2, 4] txt) => (float[B, 9, 2, 4] y) {{
            w = Constant <value = float[4] {{0.9, 1.1, 1.3, 0.7}}> ()
            b = Constant <value = float[4] {{0.1, -0.2, 0.05, 0.3}}> ()
            ti = Transpose <perm = [0, 2, 1, 3]> (img)
            tt = Transpose <perm = [0, 2, 1, 3]> (txt)
            ni = {norm} <axis = -1, epsilon = 0.000001> (ti, w{bias})
            nt = {norm} <axis = -1, epsilon = 0.000001> (tt, w{bias})
            c = Concat <axis = 2> (ni, nt)
            y = Transpose <perm = [0, 2, 1, 3]> (c)
        }}""", opset)
    assert modified and p.stats["transpose-sunk"] == 1
    assert "Transpose" not in ops(model)
    assert _node(model, "Concat").attributes["axis"].value == 1
    check_same(proto, model, _feeds(img=(2, 6, 2, 4), txt=(2, 3, 2, 4)))


def test_norm_whose_axis_the_permutation_moves_is_refused():
    # [0, 1, 3, 2] swaps the normalized axis: the norm would run over the other one
    proto, model, modified, _ = _run("""
        g (float[B, S, 4, 4] x) => (float[B, S, 4, 4] y) {
            w = Constant <value = float[4] {0.9, 1.1, 1.3, 0.7}> ()
            t = Transpose <perm = [0, 1, 3, 2]> (x)
            n = LayerNormalization <axis = -1> (t, w)
            y = Transpose <perm = [0, 1, 3, 2]> (n)
        }""")
    assert not modified and ops(model)["Transpose"] == 2


def test_norm_over_two_trailing_axes_kept_in_place_sinks():
    proto, model, modified, _ = _run("""
        g (float[B, S, 3, 4] x) => (float[S, B, 4, 3] y) {
            w = Constant <value = float[3, 4] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.}> ()
            t = Transpose <perm = [1, 0, 2, 3]> (x)
            n = LayerNormalization <axis = 2> (t, w)
            e = Sigmoid (n)
            y = Transpose <perm = [0, 1, 3, 2]> (e)
        }""")
    assert modified and ops(model) == {"LayerNormalization": 1, "Sigmoid": 1, "Transpose": 1}
    assert list(_node(model, "Transpose").attributes["perm"].value) == [1, 0, 3, 2]
    check_same(proto, model, _feeds(x=(2, 5, 3, 4)))


def test_softmax_axis_moves_with_the_permutation():
    proto, model, modified, _ = _run("""
        g (float[B, S, H, D] x) => (float[B, S, H, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            s = Softmax <axis = 2> (t)
            y = Transpose <perm = [0, 2, 1, 3]> (s)
        }""")
    assert modified and ops(model) == {"Softmax": 1}
    assert _node(model, "Softmax").attributes["axis"].value == 1
    check_same(proto, model, _feeds(x=(2, 5, 3, 4)))


def test_softmax_before_opset_13_flattens_and_is_refused():
    _, model, modified, _ = _run("""
        g (float[B, S, H, D] x) => (float[B, S, H, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            s = Softmax <axis = 3> (t)
            y = Transpose <perm = [0, 2, 1, 3]> (s)
        }""", opset=11)
    assert not modified and ops(model)["Transpose"] == 2


@pytest.mark.parametrize("start, end, gathers", [(None, None, 1), (0, 1, 0), (1, 3, 1), (3, 4, 0)])
def test_shape_of_the_middle_reads_through_the_permutation(start, end, gathers):
    # Shape(Transpose(k, p)) = Gather(Shape(k), p): the pair cancels, the size reads stay right
    # (a dynamic view's sizes read off the transposed key)
    attrs = "" if start is None else f" <start = {start}, end = {end}>"
    n = 4 if start is None else end - start
    proto, model, modified, _ = _run(f"""
        g (float[B, S, H, D] k) => (float[B, S, H, D] y, int64[{n}] s) {{
            t = Transpose <perm = [0, 2, 1, 3]> (k)
            s = Shape{attrs} (t)
            y = Transpose <perm = [0, 2, 1, 3]> (t)
        }}""")
    assert modified and "Transpose" not in ops(model)
    assert ops(model).get("Gather", 0) == gathers
    check_same(proto, model, _feeds(k=(2, 5, 3, 4)))


def test_entry_read_elsewhere_stays_for_that_reader():
    # t is also a MatMul operand: it stays, the Relu reads x, and the exit pair cancels (2 -> 1)
    proto, model, modified, _ = _run("""
        g (float[B, S, H, D] x, float[B, H, D, S] z) => (float[B, S, H, D] y, float[B, H, S, S] m) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            m = MatMul (t, z)
            r = Relu (t)
            y = Transpose <perm = [0, 2, 1, 3]> (r)
        }""")
    assert modified and ops(model) == {"Transpose": 1, "MatMul": 1, "Relu": 1}
    check_same(proto, model, _feeds(x=(2, 5, 3, 4), z=(2, 3, 4, 5)))


def test_no_transpose_saved_is_left():
    # normalized then read by a MatMul: sinking would only move the Transpose after the norm
    _, model, modified, _ = _run("""
        g (float[B, S, H, D] x, float[B, H, D, S] z) => (float[B, H, S, S] m) {
            w = Constant <value = float[4] {0.9, 1.1, 1.3, 0.7}> ()
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            n = LayerNormalization <axis = -1> (t, w)
            m = MatMul (n, z)
        }""")
    assert not modified and ops(model)["Transpose"] == 1


def test_region_value_read_as_a_norm_scale_is_refused():
    _, model, modified, _ = _run("""
        g (float[B, S, H, D] x, float[B, H, S, D] u) => (float[B, S, H, D] y, float[B, H, S, D] v) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            r = Relu (t)
            v = LayerNormalization <axis = -1> (u, r)
            y = Transpose <perm = [0, 2, 1, 3]> (r)
        }""")
    assert not modified and ops(model)["Transpose"] == 2


def test_concat_with_an_untransposed_operand_is_refused():
    _, model, modified, _ = _run("""
        g (float[B, S, H, D] x, float[B, H, 3, D] u) => (float[B, S, H, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            c = Concat <axis = 2> (t, u)
            y = Transpose <perm = [0, 2, 1, 3]> (c)
        }""")
    assert not modified and ops(model)["Transpose"] == 2


def test_concat_with_a_constant_operand_permutes_it():
    proto, model, modified, _ = _run("""
        g (float[2, S, 3, 4] x) => (float[2, S, 3, 4] y) {
            c = Constant <value = float[2, 3, 1, 4] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.,
                                                    13., 14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24.}> ()
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            k = Concat <axis = 2> (t, c)
            y = Transpose <perm = [0, 2, 1, 3]> (k)
        }""")
    assert modified and ops(model) == {"Concat": 1}
    out = ir.to_proto(model)
    assert [d.dim_value for d in out.graph.output[0].type.tensor_type.shape.dim][2:] == [3, 4]
    check_same(proto, model, _feeds(x=(2, 5, 3, 4)))


def test_entry_read_inside_a_subgraph_is_kept_for_it():
    # an If branch reads Shape(t): the branch is not rewritten from the main graph, t stays for it,
    # the Relu reads x and the pair around it cancels
    import onnx
    from onnx import TensorProto, helper

    def branch(name, body):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.INT64, [4])
        return helper.make_graph(body(f"{name}_out"), name, [], [out])

    then_g = branch("then", lambda o: [helper.make_node("Shape", ["t"], [o])])
    else_g = branch("else", lambda o: [helper.make_node("Shape", ["x"], [o])])
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), helper.make_node("Relu", ["t"], ["r"]),
         helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3]),
         helper.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 3, 4]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 3, 4]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(proto, full_check=True)
    model, modified, _ = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    assert modified and ops(model) == {"Transpose": 1, "Relu": 1, "If": 1, "Shape": 2}
    feeds = _feeds(x=(2, 5, 3, 4))
    for c in (True, False):
        check_same(proto, model, {**feeds, "c": np.array(c)})


def test_shape_read_before_opset_15_gets_no_slice_attributes():
    # Shape has no start / end before opset 15: a read picked whole stays a plain Shape (an identity
    # entry's, here; its exit keeps the other permutation)
    proto, model, modified, _ = _run("""
        g (float[B, S, H, D] k) => (float[B, H, S, D] y, int64[4] s) {
            t = Transpose <perm = [0, 1, 2, 3]> (k)
            s = Shape (t)
            y = Transpose <perm = [0, 2, 1, 3]> (t)
        }""", opset=13)
    assert modified and ops(model) == {"Shape": 1, "Transpose": 1}
    assert all(not n.attributes for n in model.graph if n.op_type == "Shape")
    check_same(proto, model, _feeds(k=(2, 5, 3, 4)))
