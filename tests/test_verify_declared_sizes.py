"""verify feeds what the model declares: an input dim written as a number (Optimum's symbol "1")
is that size, and when the original's outputs on the random feeds contradict a size the model
declares for them (Optimum's decoder-with-past: logits [batch_size, "1", vocab], a graph traced at
one new token), the harness's input symbol that set it is fed the declared size, with a note.
Moonshine's decoder (transformers 4.57) failed verify so: fed 8 new tokens, its optimized model was
refused by ORT, while at the declared 1 it matches."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from onnx_fuse.verify import make_inputs, verify


def _model(nodes, inits, x_dims, y_dims) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, x_dims)],
                         [h.make_tensor_value_info("y", T.FLOAT, y_dims)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _ints(name, values):
    return h.make_tensor(name, T.INT64, [len(values)], values)


def test_input_dims_written_as_numbers_are_fed_as_declared():
    model = _model([h.make_node("Relu", ["x"], ["y"])], [], ["batch", "1", 1, "s"], ["batch", "1", 1, "s"])
    assert make_inputs(model)["x"].shape == (2, 1, 1, 8)


# The original is exact only at one new token: y = x + x declared [batch, "1"]; the "optimized"
# one read the first token only (what a rewrite trusting the declared length may do).
ORIGINAL = _model([h.make_node("Add", ["x", "x"], ["y"])], [], ["batch", "s"], ["batch", "1"])


def _first_token_times(c: float) -> onnx.ModelProto:
    nodes = [h.make_node("Slice", ["x", "zero", "one", "one"], ["x0"]),
             h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.FLOAT, [], [c])),
             h.make_node("Mul", ["x0", "c"], ["y"])]
    return _model(nodes, [_ints("zero", [0]), _ints("one", [1])], ["batch", "s"], ["batch", "1"])


def test_a_declared_output_size_sets_the_feeds():
    result = verify(ORIGINAL, _first_token_times(2.0))
    assert result["passed"], result
    assert result["inputs"]["x"] == [2, 1]
    assert any(n.startswith("declared sizes:") and "fed s=1" in n for n in result["notes"]), result["notes"]


def test_at_the_declared_size_a_wrong_model_still_fails():
    result = verify(ORIGINAL, _first_token_times(3.0))
    assert not result["passed"] and result["inputs"]["x"] == [2, 1]
    assert not all(o["passed"] for o in result["outputs"])


def test_the_users_shape_wins_and_the_contradiction_is_said():
    result = verify(ORIGINAL, _first_token_times(2.0), shapes={"s": (8,)})
    assert not result["passed"] and result["inputs"]["x"] == [2, 8]
    assert any("no input dim the harness chose sets it" in n for n in result["notes"]), result["notes"]


def test_no_declared_size_no_change():
    model = _model([h.make_node("Add", ["x", "x"], ["y"])], [], ["batch", "s"], ["batch", "s"])
    result = verify(model, model)
    assert result["passed"] and result["inputs"]["x"] == [2, 8]
    assert not any(n.startswith("declared sizes:") for n in result["notes"])
    assert np.array_equal(make_inputs(model)["x"].shape, (2, 8))
