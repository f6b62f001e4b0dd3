"""Shape and type inference with symbolic dimensions kept (onnx's inference through onnx-ir).

Large initializers are detached before inference so a 4 GiB model is never copied into a proto.
The pass changes only value metadata, never the graph, so it reports ``modified`` only when some
value gained a type or shape it lacked.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass as _IrShapeInference

from onnx_fuse.passes._infra import FusePass


def _known(model: ir.Model) -> int:
    known = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for out in node.outputs:
            known += (out.type is not None) + (out.shape is not None)
    return known


class ShapeInferencePass(FusePass):
    name = "shape-inference"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = _known(model)
        try:
            _IrShapeInference(check_type=False, strict_mode=False, data_prop=True)(model)
        except Exception as exc:  # inference is best effort: a model it cannot infer still optimizes
            self.stats["failed"] += 1
            self.stats_reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return ir.passes.PassResult(model, modified=False)
        gained = _known(model) - before
        self.stats["values-typed"] += max(gained, 0)
        return ir.passes.PassResult(model, modified=gained > 0)
