"""A Reshape target Concat'ed from positive constants and one computed entry folds to the constant
with -1 there (passes/_reshape_target.py, run by constant folding): onnxscript 0.6's ViT patch
embedding, Reshape(Conv(pixels), Concat(Shape(pixels)[:1], 8, 4)), allowzero = 1 as dynamo writes it
(docs/holdout.md, sixth sweep part B; onnxscript 0.7 writes [-1, 8, 4])."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes.constant_folding import ConstantFoldingPass, constant_tensor
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, check_same, ops, parse

PATCHES = '''<ir_version: 9, opset_import: ["" : 18]>
g (float[B, 3, 8, 8] pixels, float[C, 2] other) => (float[B, 4, 8] y)
{
    w = Constant<value = float[8, 3, 4, 4] {WEIGHTS}>()
    c = Conv<kernel_shape = [4, 4], strides = [4, 4]>(pixels, w)
    s = Shape<start = 0, end = 1>(SOURCE)
    e = Constant<value = int64[2] {ENTRIES}>()
    t = Concat<axis = 0>(s, e)
    r = Reshape<allowzero = ALLOWZERO>(c, t)
    y = Transpose<perm = [0, 2, 1]>(r)
}'''


def _text(source="pixels", entries="8, 4", allowzero=1):
    weights = ", ".join(f"{(k % 7) / 7.0 - 0.4:.4f}" for k in range(8 * 3 * 16))
    return (PATCHES.replace("WEIGHTS", weights).replace("SOURCE", source).replace("ENTRIES", entries)
            .replace("ALLOWZERO", str(allowzero)))


def _target(model: ir.Model):
    node = next(n for n in model.graph if n.op_type == "Reshape")
    t = constant_tensor(node.inputs[1])
    return (None if t is None else t.numpy().tolist()), node.attributes["allowzero"].value


@pytest.mark.parametrize("allowzero", [0, 1])
def test_batch_read_from_the_pixels_becomes_minus_one(allowzero):
    proto = parse(_text(allowzero=allowzero))
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    assert modified and _target(model) == ([-1, 8, 4], allowzero)
    assert "Shape" not in ops(model) and "Concat" not in ops(model)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        check_same(proto, model, {"pixels": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32),
                                  "other": rng.standard_normal((2, 2)).astype(np.float32)})


def test_the_entry_need_not_be_proven_a_size():
    # the read is of another tensor entirely: whatever it holds where the original runs, the element
    # count leaves the same length (here C = B, the only inputs the original accepts)
    proto = parse(_text(source="other"))
    model, modified, _ = apply(ConstantFoldingPass, proto, shape_inference=True)
    assert modified and _target(model) == ([-1, 8, 4], 1)
    rng = np.random.default_rng(0)
    check_same(proto, model, {"pixels": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
                              "other": rng.standard_normal((2, 2)).astype(np.float32)})


@pytest.mark.parametrize("entries", [
    "0, 32",     # a literal 0: a copy (allowzero = 0) or an empty dim (1), and -1 beside it is invalid
    "-1, 32",    # a -1 already: two entries to solve
])
def test_targets_with_a_zero_or_a_minus_one_stay(entries):
    proto = parse(_text(entries=entries))
    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    ConstantFoldingPass()(model)
    assert _target(model)[0] is None and "Concat" in ops(model)
