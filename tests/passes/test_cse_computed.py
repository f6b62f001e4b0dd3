"""CommonSubexpressionEliminationPass on large initializers: tensors the optimizer computed
(NumPy-backed, e.g. per-layer RoPE caches made by a rule) merge at any size when equal; loaded
weights over 64 KiB are never read for it; equal probes with different contents stay apart."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes.cse import MAX_DEDUP_BYTES, CommonSubexpressionEliminationPass


def _model(arrays: dict[str, np.ndarray], computed: bool) -> ir.Model:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([64, 1024]))
    graph = ir.Graph([x], [], nodes=[], name="g", opset_imports={"": 18})
    last = x
    for name, arr in arrays.items():
        t = ir.tensor(arr, name=name)
        if not computed:   # a weight as loaded: the proto-backed tensor type
            t = ir.serde.TensorProtoTensor(ir.serde.serialize_tensor(t))
        w = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(arr.shape),
                     const_value=t)
        graph.register_initializer(w)
        node = ir.node("Add", [last, w], num_outputs=1)
        graph.append(node)
        last = node.outputs[0]
    last.name = "y"
    graph.outputs.append(last)
    return ir.Model(graph, ir_version=9)


def _big(seed=0):
    a = np.random.default_rng(seed).standard_normal((64, 1024)).astype(np.float32)
    assert a.nbytes > MAX_DEDUP_BYTES
    return a


def test_equal_large_computed_tensors_merge():
    a = _big()
    model = _model({"c1": a, "c2": a.copy(), "c3": a.copy()}, computed=True)
    result = CommonSubexpressionEliminationPass()(model)
    assert result.modified and list(model.graph.initializers) == ["c1"]


def test_equal_probe_different_contents_stay_apart():
    a = _big()
    b = a.copy()
    b[30, 500] += 1.0   # same first/last elements, different middle
    model = _model({"c1": a, "c2": b}, computed=True)
    CommonSubexpressionEliminationPass()(model)
    assert sorted(model.graph.initializers) == ["c1", "c2"]


def test_large_loaded_weights_are_not_read_for_merging():
    a = _big()
    model = _model({"w1": a, "w2": a.copy()}, computed=False)
    result = CommonSubexpressionEliminationPass()(model)
    assert not result.modified and sorted(model.graph.initializers) == ["w1", "w2"]
