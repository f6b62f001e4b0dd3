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


def fold_layout(text: str, *, opset: int = 17, ir_version: int = 10):
    """fold-layout-chains once on the model of an ONNX text graph (shapes inferred first), then identity
    elimination and dead code: (original proto, model, modified, the pass)."""
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
    from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
    from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass

    proto = parse(f'<ir_version: {ir_version}, opset_import: ["" : {opset}]>\n' + text)
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, p


def ops_but_constants(model: ir.Model | onnx.ModelProto) -> dict[str, int]:
    """``ops`` without the Constant nodes (what a layout test counts)."""
    return {k: v for k, v in ops(model).items() if k != "Constant"}


def normal_feeds(seed: int, **shapes) -> dict[str, np.ndarray]:
    """float32 standard-normal inputs of the given shapes, from one seed."""
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def inferred_dims(proto: onnx.ModelProto, *values: str) -> dict[str, list]:
    """Each named value's dims after ShapeInferencePass (the dim-naming sweep): ints, or the symbols' text."""
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    model = ir.from_proto(proto)
    ShapeInferencePass()(model)
    found = {o.name: o for n in model.graph for o in n.outputs}
    return {v: [d if isinstance(d, int) else getattr(d, "value", None) for d in found[v].shape.dims]
            for v in values}


def runtime_shapes(proto: onnx.ModelProto, values, feeds) -> dict[str, tuple]:
    """The shapes ONNX Runtime (graph optimizations off) gives the named values on ``feeds``."""
    import onnxruntime as ort

    p = onnx.ModelProto()
    p.CopyFrom(proto)
    for v in values:
        if v not in [o.name for o in p.graph.output]:
            p.graph.output.append(onnx.helper.make_empty_tensor_value_info(v))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(p.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return dict(zip(values, (a.shape for a in sess.run(list(values), feeds))))
