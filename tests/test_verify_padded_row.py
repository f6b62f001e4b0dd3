"""verify's padded-row case: the first batch row of every integer mask input all zeros (a fully padded
sequence), beside the first case's half-padded last row (verify.padded_row_case).

A rewrite that handles a query row with no kept key unlike the original (a finite fill made -inf: NaN
where the export gives the mean of V, the class 86ba711 fixed in the mask probe) passed verify before,
whose feeds always kept a key in every row."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper as oh, numpy_helper

from onnx_fuse.verify import PADDED_ROW, padded_row_case, verify

FMIN = float(np.finfo(np.float32).min)


def _masked_attention(fill: float, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """softmax(x x^T + where(m, 0, fill)) x over x [B, S, 4] and attention_mask [B, S] (int64)."""
    np_dtype = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[dtype]
    nodes = [
        oh.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        oh.make_node("MatMul", ["x", "xt"], ["s"]),
        oh.make_node("Cast", ["attention_mask"], ["keep"], to=TensorProto.BOOL),
        oh.make_node("Where", ["keep", "zero", "fill"], ["b2"]),
        oh.make_node("Unsqueeze", ["b2", "ax1"], ["bias"]),
        oh.make_node("Add", ["s", "bias"], ["sb"]),
        oh.make_node("Softmax", ["sb"], ["p"], axis=-1),
        oh.make_node("MatMul", ["p", "x"], ["out"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np_dtype), "zero"), numpy_helper.from_array(np.array(fill, np_dtype), "fill"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", dtype, ["batch", "seq", 4]),
                                       oh.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
                          [oh.make_tensor_value_info("out", dtype, ["batch", "seq", 4])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def test_the_case_zeros_the_first_row_of_an_integer_mask():
    feeds = {"x": np.ones((2, 3, 4), np.float32), "attention_mask": np.array([[1, 1, 1], [1, 1, 0]], np.int64)}
    label, got = padded_row_case(_masked_attention(FMIN), feeds)
    assert label == PADDED_ROW
    np.testing.assert_array_equal(got["attention_mask"], [[0, 0, 0], [1, 1, 0]])
    assert got["x"] is feeds["x"] and feeds["attention_mask"][0].all()   # the first case's feeds untouched


def test_no_case_for_one_row_or_a_half_precision_model():
    one = {"x": np.ones((1, 3, 4), np.float32), "attention_mask": np.ones((1, 3), np.int64)}
    assert padded_row_case(_masked_attention(FMIN), one) is None
    two = {"x": np.ones((2, 3, 4), np.float16), "attention_mask": np.ones((2, 3), np.int64)}
    assert padded_row_case(_masked_attention(-1e4, TensorProto.FLOAT16), two) is None   # no exact form there


@pytest.mark.parametrize("fill", [FMIN, -1e4])
def test_a_finite_fill_made_minus_inf_fails_on_the_fully_padded_row(fill):
    original = _masked_attention(fill)
    wrong = _masked_attention(float("-inf"))
    result = verify(original, wrong)
    assert PADDED_ROW in result["cases"]
    assert not result["passed"]
    failed = [o["name"] for o in result["outputs"] if not o["passed"]]
    assert failed == [f"out [{PADDED_ROW}]"], failed   # the half-padded first case keeps a key per row
    assert verify(original, original)["passed"]


def test_a_minus_inf_fill_gives_nan_rows_that_any_value_matches():
    # the original has NaN throughout the padded row: undefined there (verify.nan_rows), a guard's 0 passes
    original = _masked_attention(float("-inf"))
    assert verify(original, _masked_attention(FMIN))["passed"]
