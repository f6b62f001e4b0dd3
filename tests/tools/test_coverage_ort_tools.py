"""tools/coverage.py run_ort_tools: the heads / hidden size it hands ONNX Runtime's transformers optimizer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.tool_modules import load_tool


def _model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_missing_heads_and_hidden_go_as_zero(tmp_path, monkeypatch):
    """Vision manifests (holdout_specs.HOLDOUT19) record num_heads / hidden_size None; the column passes 0 (read
    from the graph) where None made the optimizer raise TypeError on 18 of hold-out 31's files."""
    pytest.importorskip("torch")  # ORT's optimize_model runs onnxruntime first, which imports torch (the CI venv has none)
    import onnxruntime.transformers.optimizer as ort_opt

    cov = load_tool("coverage", "coverage_ort_tools")
    seen = {}
    real = ort_opt.optimize_model

    def spy(path, **kw):
        seen.update(kw)
        return real(path, **kw)

    monkeypatch.setattr(ort_opt, "optimize_model", spy)
    path = str(tmp_path / "m.onnx")
    _model(path)
    entry = {"ort_model_type": "vit", "num_heads": None, "hidden_size": None, "inputs": [], "kind": "vision"}
    monkeypatch.setattr(cov, "_verify", lambda *a: {"passed": True})
    out = cov.run_ort_tools(path, entry)
    assert seen["num_heads"] == 0 and seen["hidden_size"] == 0
    assert out["counts"]["attn"] == 0 and out["model_type"] == "vit"
    entry.update(num_heads=4, hidden_size=64)  # recorded values pass through
    cov.run_ort_tools(path, entry)
    assert seen["num_heads"] == 4 and seen["hidden_size"] == 64
