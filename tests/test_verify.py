"""verify: comparison statistics, tolerance handling, input generation, failure detection."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_fuse.errors import UserError, VerificationError
from onnx_fuse.verify import compare_arrays, make_inputs, parse_shapes, verify


def _unary_model(op: str, **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_compare_passes_within_tolerance_and_reports_stats():
    ref = np.array([1.0, 2.0, -3.0], np.float32)
    got = ref + np.float32(1e-6)
    d = compare_arrays("y", ref, got, atol=1e-5, rtol=0)
    assert d.passed and 0 < d.max_abs < 2e-6


def test_compare_fails_over_tolerance_shape_dtype_and_nan():
    ref = np.array([1.0, 2.0], np.float32)
    assert not compare_arrays("y", ref, ref + 1, 1e-3, 1e-3).passed
    assert not compare_arrays("y", ref, ref[:1], 1e-3, 1e-3).passed
    assert not compare_arrays("y", ref, ref.astype(np.float64), 1e-3, 1e-3).passed
    nan = ref.copy()
    nan[0] = np.nan
    assert not compare_arrays("y", ref, nan, 1e-3, 1e-3).passed
    assert compare_arrays("y", nan, nan.copy(), 1e-3, 1e-3).passed  # NaN in the same place is equal


def test_compare_integers_exact():
    a = np.arange(4)
    assert compare_arrays("i", a, a.copy(), 0, 0).passed
    b = a.copy()
    b[2] += 1
    assert not compare_arrays("i", a, b, 10, 10).passed


def test_verify_detects_a_wrong_rewrite():
    original = _unary_model("Relu")
    wrong = _unary_model("Sigmoid")
    assert verify(original, original)["passed"]
    result = verify(original, wrong)
    assert not result["passed"] and result["outputs"][0]["max_abs"] > 0.1
    with pytest.raises(VerificationError, match="output 'y' differs"):
        verify(original, wrong, raise_on_failure=True)


def test_make_inputs_uses_symbolic_dims_consistently_and_is_seeded():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])])
    model = helper.make_model(graph)
    feeds = make_inputs(model, shapes={"batch": (3,), "seq": (5,)}, seed=1)
    assert feeds["a"].shape == feeds["b"].shape == (3, 5)
    again = make_inputs(model, shapes={"batch": (3,), "seq": (5,)}, seed=1)
    np.testing.assert_array_equal(feeds["a"], again["a"])


def test_parse_shapes():
    assert parse_shapes(["input_ids=2x16", "batch=4", "x=1,2,3"]) == {
        "input_ids": (2, 16), "batch": (4,), "x": (1, 2, 3)}
    with pytest.raises(UserError, match="bad --shape"):
        parse_shapes(["input_ids=2xq"])


def test_kv_cache_total_length_is_past_plus_new():
    """total_sequence = past_sequence + sequence, or a decoder's original model cannot run."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["mask"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "total_sequence"]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", 2, "past_sequence", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", "total_sequence"])])
    model = helper.make_model(graph)
    feeds = make_inputs(model, shapes={"past_sequence": (5,), "sequence": (1,)})
    assert feeds["mask"].shape == (2, 6) and feeds["past"].shape == (2, 2, 5, 4)
    assert make_inputs(model, shapes={"total_sequence": (3,)})["mask"].shape == (2, 3)  # user wins


def test_verify_runs_a_kv_cache_decoder_export():
    from pathlib import Path

    path = Path(__file__).parent / "data" / "models" / "llama_kv_dynamo.onnx"
    if not path.exists():
        pytest.skip("tests/data/models/llama_kv_dynamo.onnx is not there")
    model = onnx.load(path)
    assert verify(model, model)["passed"]


def test_changed_inputs_are_a_clear_user_error():
    original = _unary_model("Relu")
    renamed = _unary_model("Relu")
    renamed.graph.input[0].name = "x2"
    renamed.graph.node[0].input[0] = "x2"
    with pytest.raises(UserError, match=r"changed the model's inputs \(added x2; removed x\)"):
        verify(original, renamed)


def test_masks_unpadded_on_request():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["attention_mask"], ["y"])], "g",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 6])])
    model = helper.make_model(graph)
    assert make_inputs(model)["attention_mask"].min() == 0  # padded by default
    assert make_inputs(model, pad_masks=False)["attention_mask"].min() == 1


def test_index_inputs_stay_inside_the_embedding_table():
    """token_type_ids index a 2-row table: random ids in [0, 4) would crash the original model."""
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "token_type_ids"], ["y"])], "g",
        [helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 3])],
        [onnx.numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    ids = make_inputs(model)["token_type_ids"]
    assert ids.min() >= 0 and ids.max() <= 1 and len(np.unique(ids)) == 2
    assert verify(model, model)["passed"]


def test_inputs_the_original_cannot_run_are_a_user_error():
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UserError, match="fails to run the original model on these inputs.*--inputs"):
        verify(model, model, inputs={"x": np.zeros((2, 8), np.float32),
                                     "shape": np.array([3, 3], np.int64)})
