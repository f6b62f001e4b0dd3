"""Shared helpers of the pass tests: build from ONNX text, run one pass on a copy, check it.

Every rewrite test checks three things: the exact op counts after the pass, the full ONNX checker,
and the outputs against the original model in ONNX Runtime (graph optimizations off, fixed seed).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir

from onnx_fuse.verify import verify


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


def ops(model: ir.Model | onnx.ModelProto) -> dict[str, int]:
    """Op counts over the main graph and every subgraph."""
    if isinstance(model, onnx.ModelProto):
        model = ir.from_proto(model)
    return dict(collections.Counter(n.op_type for n in ir.traversal.RecursiveGraphIterator(model.graph)))


def apply(pass_cls, proto: onnx.ModelProto, *, shape_inference: bool = False):
    """Run ``pass_cls`` once on a copy of ``proto``; return (ir model, modified, pass)."""
    model = ir.from_proto(proto)
    if shape_inference:
        from onnx_fuse.passes.shape_inference import ShapeInferencePass

        ShapeInferencePass()(model)
    p = pass_cls()
    result = p(model)
    assert result.model is model
    return model, result.modified, p


def check_same(original: onnx.ModelProto, model: ir.Model, inputs: dict[str, np.ndarray] | None = None,
               **kw) -> onnx.ModelProto:
    """Full checker on the rewritten model and equal outputs in ORT; returns the proto."""
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    assert [o.name for o in proto.graph.output] == [o.name for o in original.graph.output]
    result = verify(original, proto, inputs=inputs, seed=0, **kw)
    assert result["passed"], result["outputs"]
    return proto
