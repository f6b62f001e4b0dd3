"""Shape and type inference with symbolic dimensions kept (onnx's inference through onnx-ir).

Large initializers are detached before inference (onnx-ir's ``call_onnx_api``) so a 4 GiB model is
never copied into a proto. Inference only adds facts: a value gains a type it lacked, a shape it
lacked, or a static dim where it had a symbolic or unknown one; a known dim is never overwritten.
The pass changes only value metadata, so it reports ``modified`` only when some value gained
something. Inference is best effort: when onnx raises, the model is left as it was, ``stats``
counts the failure and ``stats_reason`` carries the first line of the error for the report.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import _c_api_utils

from onnx_fuse.passes._infra import FusePass


def _merge_shape(old: ir.Shape | None, new: ir.Shape | None) -> tuple[ir.Shape | None, int]:
    """The better of two shapes for one value, and how many facts that adds."""
    if new is None:
        return old, 0
    if old is None:
        return new, 1
    if len(old) != len(new):
        return old, 0  # disagreement: keep what the model declared
    dims, gained = [], 0
    for o, n in zip(old, new):
        if not isinstance(o, int) and isinstance(n, int):
            dims.append(n)
            gained += 1
        elif not isinstance(o, int) and o.value is None and not isinstance(n, int) and n.value:
            dims.append(n)
            gained += 1
        else:
            dims.append(o)
    return (ir.Shape(dims), gained) if gained else (old, 0)


class ShapeInferencePass(FusePass):
    name = "shape-inference"

    def __init__(self, *, data_prop: bool = True) -> None:
        super().__init__()
        self.data_prop = data_prop
        self.stats_reason: str | None = None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
            return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                     data_prop=self.data_prop)

        try:
            inferred = ir.serde.deserialize_model(_c_api_utils.call_onnx_api(infer, model))
        except Exception as exc:  # best effort: a model onnx cannot infer still optimizes
            self.stats["failed"] += 1
            text = str(exc).strip()
            self.stats_reason = ("shape inference failed: " + (text.splitlines()[0] if text else
                                 type(exc).__name__))
            return ir.passes.PassResult(model, modified=False)
        gained = 0
        for graph, inferred_graph in zip(model.graphs(), inferred.graphs()):
            found = ir.convenience.create_value_mapping(inferred_graph)
            for name, value in ir.convenience.create_value_mapping(graph).items():
                other = found.get(name)
                if other is None:
                    continue
                if value.type is None and other.type is not None:
                    value.type = other.type
                    gained += 1
                value.shape, added = _merge_shape(value.shape, other.shape)
                gained += added
        if gained:
            self.stats["values-typed"] += gained
        return ir.passes.PassResult(model, modified=gained > 0)
