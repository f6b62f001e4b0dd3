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


def _cut_when_padded(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (a _spread_nan one) with its output's first batch row cut off where some row of
    attention_mask keeps no key: a rewrite whose output shape depends on the padding."""
    g = model.graph
    g.node[-1].output[0] = "spread_full"
    g.initializer.extend([numpy_helper.from_array(np.array([1], np.int64), "one1"),
                          numpy_helper.from_array(np.array([1 << 30], np.int64), "big"),
                          numpy_helper.from_array(np.array([0], np.int64), "ax0")])
    g.node.extend([oh.make_node("ReduceMax", ["attention_mask", "ax1"], ["kept"], keepdims=0),
                   oh.make_node("ReduceMin", ["kept"], ["least"], keepdims=1),
                   oh.make_node("Sub", ["one1", "least"], ["start"]),
                   oh.make_node("Slice", ["spread_full", "start", "big", "ax0"], ["spread"])])
    return model


def test_an_output_nan_throughout_is_still_compared_for_its_shape():
    """The padded-row case skips an output NaN throughout in the original (7cba9df), but one the
    rewrite gives in another shape there is a wrong output, not an undefined one (trust31)."""
    original = _spread_nan(_masked_attention(float("-inf")))
    result = verify(original, _cut_when_padded(_spread_nan(_masked_attention(float("-inf")))))
    assert not result["passed"]
    bad = [o for o in result["outputs"] if not o["passed"]]
    assert [o["name"] for o in bad] == [f"spread [{PADDED_ROW}]"] and "shape" in bad[0]["reason"], bad


def _two_outputs(fill: float, tilt: float = 1.0) -> onnx.ModelProto:
    """_spread_nan's output (NaN throughout on the padded-row case with a -inf fill) and the unspread
    attention output times ``tilt`` where the first mask row keeps no key."""
    model = _spread_nan(_masked_attention(fill))
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(np.array(tilt, np.float32), "tilt2"),
                          numpy_helper.from_array(np.array(1.0, np.float32), "one_f")])
    g.node.extend([oh.make_node("ReduceMax", ["attention_mask", "ax1"], ["kept"], keepdims=0),
                   oh.make_node("ReduceMin", ["kept"], ["least"], keepdims=1),
                   oh.make_node("Cast", ["least"], ["least_f"], to=TensorProto.FLOAT),
                   oh.make_node("Sub", ["one_f", "least_f"], ["padded"]),   # 1 where a row keeps no key
                   oh.make_node("Mul", ["padded", "tilt2"], ["t0"]),
                   oh.make_node("Sub", ["one_f", "padded"], ["t1"]),
                   oh.make_node("Add", ["t0", "t1"], ["factor"]),            # tilt there, else 1
                   oh.make_node("Where", ["keep", "x", "zero"], ["xk"]),    # finite: no softmax
                   oh.make_node("Mul", ["xk", "factor"], ["second"])])
    # keep [B, S] -> [B, S, 1] for x [B, S, 4]
    g.node[-2].input[0] = "keep3"
    g.node.insert(len(g.node) - 2, oh.make_node("Unsqueeze", ["keep", "axm1"], ["keep3"]))
    g.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "axm1"))
    g.output.append(oh.make_tensor_value_info("second", TensorProto.FLOAT, ["batch", "seq", 4]))
    return model


def test_other_outputs_of_the_padded_row_case_are_still_compared():
    """One output NaN throughout on the padded-row case is skipped; a second output, finite there
    and wrong only there, still fails."""
    original = _two_outputs(float("-inf"))
    assert verify(original, _two_outputs(float("-inf")))["passed"]
    result = verify(original, _two_outputs(float("-inf"), tilt=1.5))
    assert not result["passed"]
    assert [o["name"] for o in result["outputs"] if not o["passed"]] == [f"second [{PADDED_ROW}]"]
    assert any(f"spread [{PADDED_ROW}]: NaN throughout" in n for n in result["notes"])


def test_an_original_nan_throughout_on_the_first_case_too_is_compared_there():
    """The skip is the padded-row case's only: an original NaN everywhere on the first feeds needs the
    rewrite NaN everywhere too (nan_rows gives no undefined rows in an all-NaN output)."""
    nan_always = _spread_nan(_masked_attention(float("-inf")), tilt=float("nan"))
    result = verify(nan_always, _spread_nan(_masked_attention(float("-inf"))))
    assert not result["passed"]
    assert [o["name"] for o in result["outputs"] if not o["passed"]] == ["spread"]
    assert verify(nan_always, nan_always)["passed"]
