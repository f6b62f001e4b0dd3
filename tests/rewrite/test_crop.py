"""crop_length(kept, past) (optimizer/rewrite/_crop.py): how many last tokens a Slice of the past keeps,
from its constant start or, when its bounds are computed from shapes, from their values at several
past lengths; anything that is not a fixed crop of axis 2 is refused with the reason."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._crop import crop_length
from onnx_fuse.rewrite._expr import EvalFailure

BIG = 2 ** 63 - 1


def _graph(start: list[str] | list[int], end: int = BIG, axes=(2,), steps=None, kept_dim="kept_len") -> dict:
    """past [B, 2, P, 16] -> Slice(past, start, end, axes[, steps]). ``start`` an int list (a
    constant) or ["minus", n] (Shape(past)[2] - n) or ["half"] (Shape(past)[2] / 2: not fixed)."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes, inits = [], [i64("ends", [end]), i64("axes", list(axes))]
    if isinstance(start[0], int):
        inits.append(i64("starts", start))
    else:
        nodes += [helper.make_node("Shape", ["past"], ["len"], start=2, end=3)]
        if start[0] == "minus":
            inits.append(i64("n", [start[1]]))
            nodes.append(helper.make_node("Sub", ["len", "n"], ["starts"]))
        else:
            inits.append(i64("two", [2]))
            nodes.append(helper.make_node("Div", ["len", "two"], ["starts"]))
    args = ["past", "starts", "ends", "axes"]
    if steps is not None:
        inits.append(i64("steps", steps))
        args.append("steps")
    nodes.append(helper.make_node("Slice", args, ["kept"]))
    g = helper.make_graph(nodes, "crop", [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["b", 2, "p", 16])],
                          [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["b", 2, kept_dim, 16])], inits)
    proto = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    model = ir.serde.deserialize_model(proto)
    vals = {v.name: v for v in model.graph.inputs}
    vals.update({v.name: v for n in model.graph for v in n.outputs})
    return vals


def test_constant_start_gives_n_whatever_the_declared_dim_is_named():
    v = _graph([-3])
    assert crop_length(None, v["kept"], v["past"]) == 3
    assert crop_length(None, v["past"], v["past"]) == 0
    v = _graph([-3], kept_dim=3)
    assert crop_length(None, v["kept"], v["past"]) == 3
    v = _graph([-3], axes=(-2,), steps=[1])
    assert crop_length(None, v["kept"], v["past"]) == 3


@pytest.mark.parametrize("kw, why", [
    (dict(start=[-3], kept_dim=4), "keeps its last 3 positions but is declared 4"),
    (dict(start=[-3], axes=(3,)), "not a step-1 slice of axis 2"),
    (dict(start=[-3], steps=[2]), "not a step-1 slice of axis 2"),
    (dict(start=[-3], end=-1), "not its last positions"),
    (dict(start=[2]), "not its last positions"),
])
def test_other_slices_are_refused(kw, why):
    v = _graph(**kw)
    with pytest.raises(EvalFailure, match=why):
        crop_length(None, v["kept"], v["past"])


def test_a_start_computed_from_the_past_length_is_probed():
    v = _graph(["minus", 5])     # Shape(past)[2] - 5: the last 5 at every P >= 5
    assert crop_length(None, v["kept"], v["past"]) == 5
    v = _graph(["half"])         # P / 2: the last half, a different count at each P
    with pytest.raises(EvalFailure, match="not a fixed crop"):
        crop_length(None, v["kept"], v["past"])


def test_not_a_slice_of_the_past():
    v = _graph([-3])
    with pytest.raises(EvalFailure, match="is not a Slice of"):
        crop_length(None, v["past"], v["kept"])
