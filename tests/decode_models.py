"""The committed decoder exports (tests/data/models) as decode-only graphs, shared by the paged-KV,
fp8-pool and verify tests."""

from __future__ import annotations

from pathlib import Path

import onnx

MODELS = Path(__file__).resolve().parent / "data" / "models"


def static_decode(name: str) -> onnx.ModelProto:
    """tests/data/models/<name>.onnx with its query length (input_ids' second dim) fixed at 1: a
    decode-only graph (the optimizer folds Range(0, S) into the constant [0])."""
    proto = onnx.load(str(MODELS / f"{name}.onnx"))
    dim = next(i for i in proto.graph.input if i.name == "input_ids").type.tensor_type.shape.dim[1]
    dim.ClearField("dim_param")
    dim.dim_value = 1
    return proto
