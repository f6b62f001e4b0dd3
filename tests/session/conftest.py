"""Shared fixtures of the InferenceSession tests: an isolated cache folder and small models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own default cache folder; nothing lands in ~/.cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ONNX_FUSE_CACHE_DIR", str(cache))
    return cache


def small_model(seed: int = 0, hidden: int = 8) -> onnx.ModelProto:
    """x[batch, 4] -> MatMul W -> Add b (b is an overridable initializer) -> Relu -> y, plus z = x*2
    through an Identity (something cleanup removes); z's dims are undeclared, which shape
    inference could refine. Metadata that get_modelmeta reports."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, hidden)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
        helper.make_node("Add", ["xw", "b"], ["xb"], name="add"),
        helper.make_node("Relu", ["xb"], ["y"], name="relu"),
        helper.make_node("Identity", ["x"], ["xi"], name="id"),
        helper.make_node("Mul", ["xi", "two"], ["z"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes, "small_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, None])],
        [w, b, two], doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="session-tests", producer_version="1.2")
    model.ir_version = 9
    model.domain = "test.domain"
    model.model_version = 7
    model.doc_string = "a small model"
    helper.set_model_props(model, {"author": "tests", "purpose": "drop-in"})
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.fixture
def small_bytes() -> bytes:
    return small_model().SerializeToString()


@pytest.fixture
def demo_bytes() -> bytes:
    from onnx_fuse.demo_model import build_demo_model

    return build_demo_model().SerializeToString()


def demo_feeds(batch: int = 2, seq: int = 5, hidden: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq // 2:] = 0
    return {"hidden_states": rng.standard_normal((batch, seq, hidden)).astype(np.float32),
            "attention_mask": mask}
