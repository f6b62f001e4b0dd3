"""Sparse initializers (graph.sparse_initializer): dense at load, as ONNX Runtime makes them.

onnx-ir reads none, so the values they name had no producer and every level failed the checker
(an internal error). Now the optimized model holds a dense initializer of the same values, and
the results equal the original's in ORT (which loads the sparse form itself)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx_fuse
from onnx_fuse.errors import UserError

V = helper.make_tensor_value_info


def _weight() -> np.ndarray:
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    w[np.abs(w) < 0.8] = 0
    return w


def _sparse(w: np.ndarray, coords: bool, name: str = "W") -> onnx.SparseTensorProto:
    nz = np.flatnonzero(w)
    idx = np.stack(np.unravel_index(nz, w.shape), 1) if coords else nz
    return helper.make_sparse_tensor(numpy_helper.from_array(w.reshape(-1)[nz], name),
                                     numpy_helper.from_array(idx.astype(np.int64), name + "_i"), list(w.shape))


def _model(sparse: onnx.SparseTensorProto, in_branch: bool = False) -> onnx.ModelProto:
    """y = Relu(x @ W) (+ x @ W again, so W has two consumers); W sparse, in the main graph or
    inside an If branch."""
    mm = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
          helper.make_node("MatMul", ["x", "W"], ["h2"]), helper.make_node("Add", ["r", "h2"], ["y"])]
    inputs = [V("x", TP.FLOAT, ["N", 8])]
    if not in_branch:
        g = helper.make_graph(mm, "g", inputs, [V("y", TP.FLOAT, ["N", 8])], sparse_initializer=[sparse])
    else:
        then_g = helper.make_graph(mm, "then", [], [V("y", TP.FLOAT, ["N", 8])], sparse_initializer=[sparse])
        else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                   [V("e", TP.FLOAT, ["N", 8])])
        g = helper.make_graph([helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g)],
                              "g", [*inputs, V("c", TP.BOOL, [])], [V("out", TP.FLOAT, ["N", 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("coords", [False, True], ids=["linear-indices", "coordinates"])
@pytest.mark.parametrize("in_branch", [False, True], ids=["main-graph", "if-branch"])
@pytest.mark.parametrize("source", ["proto", "path"])
def test_sparse_initializer_is_densified_and_computes_the_same(tmp_path, coords, in_branch, source):
    model = _model(_sparse(_weight(), coords), in_branch)
    before = model.SerializeToString()
    src = model
    if source == "path":
        src = tmp_path / "m.onnx"
        src.write_bytes(before)
    result = onnx_fuse.optimize(src, level=3, verify=True)
    assert result.report.verify["passed"], result.report.verify
    out = result.to_proto()
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
    if in_branch:
        feeds["c"] = np.array(True)
    np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)
    assert model.SerializeToString() == before   # the caller's proto is untouched


def _bad(mutate):
    s = _sparse(_weight(), coords=False)
    mutate(s)
    return _model(s)


@pytest.mark.parametrize("model, expect", [
    (lambda: _bad(lambda s: s.indices.CopyFrom(numpy_helper.from_array(
        np.array([0, 1, 999] + [2] * (s.values.dims[0] - 3), np.int64), "W_i"))), "w"),
    (lambda: _bad(lambda s: (s.ClearField("dims"), s.dims.extend([1 << 20, 1 << 20]))), "w"),
], ids=["index-outside-dims", "dense-form-too-large"])
def test_bad_sparse_initializer_is_one_line(model, expect):
    with pytest.raises(UserError) as e:
        onnx_fuse.optimize(model(), level=1)
    msg = str(e.value)
    assert "\n" not in msg and expect in msg.lower(), msg


def test_sparse_initializer_that_is_also_an_input_is_refused():
    m = _model(_sparse(_weight(), coords=False))
    m.graph.input.append(helper.make_tensor_value_info("W", TP.FLOAT, [8, 8]))
    with pytest.raises(UserError, match="also a graph input"):
        onnx_fuse.optimize(m, level=1)


@pytest.mark.parametrize("itype", [np.int8, np.int16, np.int32])
@pytest.mark.parametrize("source", ["proto", "path"])
def test_narrow_sparse_indices_as_onnx_runtime_saves_them(tmp_path, itype, source):
    """ORT's offline optimizer (SessionOptions.optimized_model_filepath) writes sparse indices in the
    narrowest integer type that holds them; ORT loads that back, the ONNX checker wants int64: load
    refused the model ("Sparse tensor indices () must have INT64 type", the fuzzer's --pretool ort1
    on its sparse-initializer graphs). They are widened before the checker now."""
    s = _sparse(_weight(), coords=False)
    s.indices.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(s.indices).astype(itype), "W_i"))
    model = _model(s)
    before = model.SerializeToString()
    src = model
    if source == "path":
        src = tmp_path / "m.onnx"
        src.write_bytes(before)
    out = onnx_fuse.optimize(src, level=2).to_proto()
    onnx.checker.check_model(out, full_check=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
    np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)
    assert model.SerializeToString() == before


def test_a_model_onnx_runtime_saved_with_sparse_weights_loads(tmp_path):
    """The same end to end: ORT's own saved file (its indices narrowed) is optimized and matches."""
    w = np.zeros((8, 8), np.float32)
    w[np.arange(8), np.arange(8)[::-1]] = np.arange(1, 9)
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    onnxruntime.InferenceSession(_model(_sparse(w, coords=False)).SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
    saved = onnx.load(tmp_path / "ort.onnx")
    narrowed = [s.indices.data_type for s in saved.graph.sparse_initializer]
    out = onnx_fuse.optimize(tmp_path / "ort.onnx", level=2).to_proto()
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)}
    np.testing.assert_allclose(_run(out, feeds)[0], _run(saved, feeds)[0], rtol=1e-5, atol=1e-5)
    assert narrowed == [TP.INT8]   # what ORT 1.32 writes for 8 indices
