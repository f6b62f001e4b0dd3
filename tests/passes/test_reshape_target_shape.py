"""A Reshape target that is a Shape read of a tensor with one dynamic dim folds to that tensor's static dims with -1
for the dynamic one (passes/_reshape_target.py, run by constant folding): a GroupNorm as dynamo exports it reshapes
the InstanceNormalization's output back by ``Reshape(norm, Shape(x))``, which kept one Shape per GroupNorm at ort-O3
in hold-out 39's BiT / PoolFormer (docs/holdout.md, twenty-seventh sweep); onnxscript 0.7 writes the constant."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes.constant_folding import ConstantFoldingPass, constant_tensor
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, check_same, ops, parse

GROUP_NORM = '''<ir_version: 9, opset_import: ["" : 18]>
g (float[B, 4, 3, 3] x) => (float[B, 4, 3, 3] y)
{
    t0 = Constant<value = int64[3] {0, 2, -1}>()
    r = Reshape(x, t0)
    sc = Constant<value = float[2] {1.5, 0.5}>()
    bi = Constant<value = float[2] {0.25, -0.5}>()
    n = InstanceNormalization<epsilon = 0.00001>(r, sc, bi)
    s = Shape(x)
    y = Reshape(n, s)
}'''

# Shape with an end: x [B, 4, 6, 1] read as [B, 4, 6] (end = -1) for a [B, 24] tensor
SLICED = '''<ir_version: 9, opset_import: ["" : 18]>
g (float[B, 4, 6, 1] x) => (float[B, 4, 6] y)
{
    t0 = Constant<value = int64[2] {0, 24}>()
    z = Reshape(x, t0)
    a = Relu(z)
    s = Shape<end = -1>(x)
    y = Reshape(a, s)
}'''

# two dynamic dims: the target stays computed (two entries cannot both be solved)
TWO_DYNAMIC = '''<ir_version: 9, opset_import: ["" : 18]>
g (float[B, S, 4] x) => (float[B, S, 4] y)
{
    t0 = Constant<value = int64[2] {0, -1}>()
    r = Reshape(x, t0)
    a = Relu(r)
    s = Shape(x)
    y = Reshape(a, s)
}'''


def _targets(model: ir.Model) -> list:
    out = []
    for node in model.graph:
        if node.op_type == "Reshape":
            t = constant_tensor(node.inputs[1])
            out.append(None if t is None else t.numpy().tolist())
    return out


def _check(proto, model, dims):
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        check_same(proto, model, {"x": rng.standard_normal((batch, *dims)).astype(np.float32)})


def test_group_norm_back_reshape_becomes_minus_one():
    proto = parse(GROUP_NORM)
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    assert modified and _targets(model) == [[0, 2, -1], [-1, 4, 3, 3]]
    assert "Shape" not in ops(model)
    _check(proto, model, (4, 3, 3))


def test_a_shape_read_with_an_end():
    proto = parse(SLICED)
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    assert modified and _targets(model) == [[0, 24], [-1, 4, 6]]
    assert "Shape" not in ops(model)
    _check(proto, model, (4, 6, 1))


def test_two_dynamic_dims_stay():
    proto = parse(TWO_DYNAMIC)
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    ConstantFoldingPass()(model)
    assert _targets(model) == [[0, -1], None] and "Shape" in ops(model)
