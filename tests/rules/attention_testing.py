"""Shared helpers of the attention rule tests that build models with onnx.helper: fuse at a target and read
back the attention nodes' head counts."""

from __future__ import annotations

import onnx

import onnx_fuse


def fuse(model: onnx.ModelProto, target: str, disable=()) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The model optimized for ``target`` (O4 at trt, float32 plugins; O3 elsewhere) and the rules that fired
    (the report's counts: recognizers too)."""
    level = 4 if target == "trt" else 3
    out = onnx_fuse.optimize(model, level=level, target=target, float32_plugins=True, disable=list(disable))
    return out.to_proto(), dict(out.report.rule_fires)


def attention_heads(model: onnx.ModelProto) -> list[int]:
    """The head count of every attention node: its num_heads / q_num_heads, else q's dim 1 (4-D)."""
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in [*m.graph.value_info, *m.graph.input]}
    found = []
    for n in m.graph.node:
        if "Attention" not in n.op_type:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        heads = a.get("num_heads", a.get("q_num_heads"))
        if heads is None and len(shapes.get(n.input[0], [])) == 4:
            heads = shapes[n.input[0]][1]
        found.append(heads)
    return found
