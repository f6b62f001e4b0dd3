"""A Loop that may run zero times: ONNX Runtime makes its scan outputs' symbolic dims 0 ([0, 2, 0, 0]
where onnx's inference names them [M, 2, H, W] after the body), so shape inference must not leave
the body's names on them; a Loop that provably runs keeps them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply


def _loop_model(trip: int | None, cond: bool | None = True) -> onnx.ModelProto:
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Unsqueeze", ["X", "ax"], ["y1"]),
         h.make_node("Concat", ["y1", "y1"], ["y"], axis=0)],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y", T.FLOAT, None)],
        [h.make_tensor("ax", T.INT64, [1], [0])])
    inputs = [h.make_tensor_value_info("X", T.FLOAT, ["H", "W"])]
    inits = []
    if trip is None:
        inputs.insert(0, h.make_tensor_value_info("M", T.INT64, []))
    else:
        inits.append(h.make_tensor("M", T.INT64, [], [trip]))
    if cond is None:
        inputs.append(h.make_tensor_value_info("c", T.BOOL, []))
    else:
        inits.append(h.make_tensor("c", T.BOOL, [], [cond]))
    g = h.make_graph([h.make_node("Loop", ["M", "c"], ["out"], body=body),
                      h.make_node("Shape", ["out"], ["s"])], "g", inputs,
                     [h.make_tensor_value_info("out", T.FLOAT, None),
                      h.make_tensor_value_info("s", T.INT64, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _out_dims(model) -> list:
    value = next(v for v in model.graph.outputs if v.name == "out")
    return [d if isinstance(d, int) else d.value for d in value.shape]


@pytest.mark.parametrize("trip, cond", [(None, True), (0, True), (3, None), (3, False)])
def test_a_loop_that_may_not_run_names_no_body_dims(trip, cond):
    model, _, p = apply(ShapeInferencePass, _loop_model(trip, cond))
    dims = _out_dims(model)
    assert len(dims) == 4 and dims[1] == 2, dims   # static dims stay: ORT keeps them at zero trips
    assert "H" not in dims and "W" not in dims, dims
    assert p.stats["zero-trip-dims-cleared"] >= 1
    assert not ShapeInferencePass()(model).modified   # cleared once, not at every run


def test_ort_makes_the_named_dims_zero_on_zero_trips():
    # the fact the pass relies on: what ORT returns for a zero-trip Loop
    sess = ort.InferenceSession(_loop_model(None).SerializeToString(), providers=["CPUExecutionProvider"])
    out, shape = sess.run(None, {"M": np.array(0, np.int64), "X": np.ones((5, 3), np.float32)})
    assert out.shape == (0, 2, 0, 0) and shape.tolist() == [0, 2, 0, 0]


def test_a_loop_that_runs_keeps_the_body_dims():
    model, _, p = apply(ShapeInferencePass, _loop_model(3, True))
    assert _out_dims(model)[1:] == [2, "H", "W"]
    assert p.stats["zero-trip-dims-cleared"] == 0


def _with_users(trip: int | None) -> onnx.ModelProto:
    """_loop_model plus values computed from its scan output (Relu of it, X reshaped to its Shape, a
    Loop reading it in its body) and one from X alone."""
    model = _loop_model(trip)
    g = model.graph
    inner = h.make_graph([h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("Neg", ["out"], ["ny"])],
                         "inner", [h.make_tensor_value_info("i", T.INT64, []),
                                   h.make_tensor_value_info("cond_in", T.BOOL, [])],
                         [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("ny", T.FLOAT, None)])
    g.initializer.append(h.make_tensor("one", T.INT64, [], [1]))
    g.node.extend([h.make_node("Relu", ["out"], ["z"]),
                   h.make_node("Tile", ["out", "s"], ["tiled"]),
                   h.make_node("Loop", ["one", ""], ["again"], body=inner),
                   h.make_node("Add", ["X", "X"], ["x2"])])
    g.output.extend([h.make_tensor_value_info(n, T.FLOAT, None) for n in ("z", "tiled", "again", "x2")])
    return model


def _dims(model, name) -> list:
    value = next(v for v in model.graph.outputs if v.name == name)
    return [d if isinstance(d, int) else d.value for d in value.shape]


def test_values_computed_from_a_zero_trip_scan_output_name_no_body_dims():
    """onnx infers Relu(scan output) as [M, 2, H, W] again from the body (trust31: 3f36d2f cleared the
    scan output only); ORT gives [0, 2, 0, 0] there too."""
    model, _, p = apply(ShapeInferencePass, _with_users(None))
    for name in ("z", "again"):
        dims = _dims(model, name)
        assert dims[-3] == 2 and "H" not in dims and "W" not in dims, (name, dims)
    tiled = next(v for v in model.graph.outputs if v.name == "tiled").shape
    assert tiled is None or not {"H", "W"} & {getattr(d, "value", d) for d in tiled}, tiled
    assert _dims(model, "x2") == ["H", "W"]   # X's own names stay
    assert not ShapeInferencePass()(model).modified
    sess = ort.InferenceSession(_with_users(None).SerializeToString(), providers=["CPUExecutionProvider"])
    z, again = sess.run(["z", "again"], {"M": np.array(0, np.int64), "X": np.ones((5, 3), np.float32)})
    assert z.shape == (0, 2, 0, 0) and again.shape == (1, 0, 2, 0, 0)


def test_values_computed_from_a_loop_that_runs_keep_the_body_dims():
    model, _, _ = apply(ShapeInferencePass, _with_users(3))
    assert _dims(model, "z")[1:] == [2, "H", "W"]
