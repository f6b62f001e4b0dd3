"""optimizer/passes/reshape_dims.py: Resize outputs sized from a shape-valued sizes input.

DETR's backbone (TorchScript) resizes a mask it built at run time, ``interpolate(ones(B, H, W)[None],
size=feature_map.shape[-2:])``, with sizes ``Concat(Shape(m)[0:2], [h, w])``. onnx sizes a Resize from
constant sizes only, so the batch became an invented dim; the position embedding made from that mask
was added to q and k, the head split's -1 could not be sized, and Conditional DETR's encoder attention
stayed unfused (4/6). The sizes are the output dims: the batch reaches the head split again.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

from onnx_fuse.passes.shape_inference import ShapeInferencePass

I64, F32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT


def _model(*, sizes=True, policy=None, axes=None):
    """pixels [B,3,8,8] -> m = ones(B, 8, 8)[None] -> Resize to [1, B, 4, 4] (sizes from Shape(m)[0:2]
    and [4, 4], or constant scales [1, 1, .5, .5]) -> m[0] flattened [B, 16, 1] + q [B, 16, 32] ->
    Reshape(., [B, 16, -1, 16]) (the head split; -1 is the 2 heads)."""
    n = oh.make_node
    nodes = [n("Shape", ["pixels"], ["bdim"], start=0, end=1),
             n("Concat", ["bdim", "hw8"], ["mshape"], axis=0),
             n("ConstantOfShape", ["mshape"], ["m"], value=oh.make_tensor("one", F32, [1], [1.0])),
             n("Unsqueeze", ["m", "ax0"], ["m4"])]
    attrs = {}
    if policy:
        attrs["keep_aspect_ratio_policy"] = policy
    if axes:
        attrs["axes"] = axes
    if sizes:
        nodes += [n("Shape", ["m4"], ["ms"]), n("Slice", ["ms", "zero1", "two1"], ["lead"]),
                  n("Concat", ["lead", "hw4"], ["target"], axis=0) if not axes else
                  n("Identity", ["hw4"], ["target"]),
                  n("Resize", ["m4", "", "", "target"], ["rz"], mode="nearest", **attrs)]
    else:
        nodes.append(n("Resize", ["m4", "", "scales"], ["rz"], mode="nearest"))
    nodes += [n("Gather", ["rz", "zero0"], ["g"], axis=0), n("Flatten", ["g"], ["f"], axis=1),
              n("Unsqueeze", ["f", "ax2"], ["f3"]), n("Add", ["q", "f3"], ["qp"]),
              n("Concat", ["bdim", "split_tail"], ["split"], axis=0), n("Reshape", ["qp", "split"], ["heads"])]
    inits = [oh.make_tensor("hw8", I64, [2], [8, 8]), oh.make_tensor("hw4", I64, [2], [4, 4]),
             oh.make_tensor("ax0", I64, [1], [0]), oh.make_tensor("ax2", I64, [1], [2]),
             oh.make_tensor("zero1", I64, [1], [0]), oh.make_tensor("two1", I64, [1], [2]),
             oh.make_tensor("zero0", I64, [], [0]), oh.make_tensor("split_tail", I64, [3], [16, -1, 16]),
             oh.make_tensor("scales", F32, [4], [1.0, 1.0, 0.5, 0.5])]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("pixels", F32, ["batch", 3, 8, 8]),
                                   oh.make_tensor_value_info("q", F32, ["batch", 16, 32])],
                      [oh.make_tensor_value_info("heads", F32, None)], inits)
    return ir.serde.deserialize_model(oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)]))


def _infer(model):
    """Inference as the pipeline runs it: once before cleanup and again after (optimizer/levels.py);
    the Resize's dims reach the Add in the first run's second round, the head split in the next run."""
    ShapeInferencePass()(model)
    ShapeInferencePass()(model)


def _dims(model, name):
    v = next(o for node in model.graph for o in node.outputs if o.name == name)
    return None if v.shape is None else [d if isinstance(d, int) else (d.value or "?") for d in v.shape]


@pytest.mark.parametrize("sizes", [True, False])
def test_resize_keeps_the_batch_and_the_heads_are_sized(sizes):
    model = _model(sizes=sizes)
    _infer(model)
    assert _dims(model, "rz") == [1, "batch", 4, 4]
    assert _dims(model, "qp") == ["batch", 16, 32]
    assert _dims(model, "heads") == ["batch", 16, 2, 16]


def test_not_stretched_sizes_state_nothing():
    """keep_aspect_ratio_policy not_larger scales every axis by one factor: sizes are a bound, not the dims."""
    model = _model(policy="not_larger", axes=[2, 3])
    _infer(model)
    dims = _dims(model, "rz")
    assert dims is None or (dims[2] != 4 and dims[3] != 4)


def test_sizes_for_some_axes_leave_the_others():
    model = _model(axes=[2, 3])
    _infer(model)
    assert _dims(model, "rz") == [1, "batch", 4, 4]
    assert _dims(model, "heads") == ["batch", 16, 2, 16]
