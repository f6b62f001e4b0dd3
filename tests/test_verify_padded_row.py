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



def _spread_nan(model: onnx.ModelProto, tilt: float = 1.0) -> onnx.ModelProto:
    """``model`` with its output plus 0 * sum(output), times ``tilt``: a NaN anywhere reaches every
    element, as a keyless row's NaN reaches the whole padded sequence through the next layer's p v
    (and further rows through a window that leaves half-padded rows keyless: hold-out 14's hw_sliding kv)."""
    g = model.graph
    out = g.output[0].name
    g.initializer.append(numpy_helper.from_array(np.array(tilt, np.float32), "tilt"))
    g.node.extend([oh.make_node("ReduceSum", [out], ["tot"], keepdims=1),
                   oh.make_node("Mul", ["tot", "zero"], ["tot0"]),
                   oh.make_node("Add", [out, "tot0"], ["pre"]),
                   oh.make_node("Mul", ["pre", "tilt"], ["spread"])])
    g.output[0].name = "spread"
    return model


def test_an_output_nan_throughout_on_the_padded_row_case_is_not_compared():
    original = _spread_nan(_masked_attention(float("-inf")))
    fused = _spread_nan(_masked_attention(FMIN))   # a keyless row's mean of V: numbers where the original has NaN
    result = verify(original, fused)
    assert PADDED_ROW in result["cases"]
    assert result["passed"], result["outputs"]
    assert [o["name"] for o in result["outputs"]] == ["spread"]   # the first case compared it
    assert any(f"[{PADDED_ROW}]: NaN throughout" in n for n in result["notes"])


def test_the_first_case_still_fails_a_wrong_value_where_the_padded_case_is_nan_throughout():
    original = _spread_nan(_masked_attention(float("-inf")))
    result = verify(original, _spread_nan(_masked_attention(float("-inf")), tilt=1.1))
    assert not result["passed"]
    assert [o["name"] for o in result["outputs"] if not o["passed"]] == ["spread"]
