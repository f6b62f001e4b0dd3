"""The ONNX checker on a model's structure only, without copying its weights.

``onnx.checker.check_model`` serializes the whole proto, weights included, and parses it again in
C++: on a 340 MB BERT that is seconds of copying to learn nothing about the weights, which
model_io already validated (external references) or which are plain bytes. Here main-graph
initializers become typed graph inputs instead, so nodes, attributes, types and op schemas are
checked at the cost of the graph alone.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir


def _initializers_as_inputs(graph: onnx.GraphProto, initializers) -> None:
    existing = {vi.name for vi in graph.input}
    for name, elem_type, dims in initializers:
        if name not in existing:
            graph.input.append(onnx.helper.make_tensor_value_info(name, elem_type, list(dims)))


def skeleton_from_proto(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose main-graph initializers are typed inputs (no tensor bytes)."""
    skeleton = onnx.ModelProto()
    skeleton.ir_version = proto.ir_version
    skeleton.opset_import.extend(proto.opset_import)
    skeleton.functions.extend(proto.functions)
    g, src = skeleton.graph, proto.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    _initializers_as_inputs(g, ((t.name, t.data_type, t.dims) for t in src.initializer))
    return skeleton


#: Location written into weight-less initializer placeholders (see ``skeleton_from_ir``).
PLACEHOLDER_LOCATION = "__onnx_fuse_weight_placeholder__"


def skeleton_from_ir(model: ir.Model, *, placeholders: bool = False) -> onnx.ModelProto:
    """The same skeleton, serialized from onnx-ir node by node without touching tensor data.

    With ``placeholders`` the initializers stay initializers, each an external-data reference to
    ``PLACEHOLDER_LOCATION`` with its real dtype and dims, and intermediate value types are kept:
    a graph that tools such as onnx's version converter can transform without copying weights
    (``restore_placeholders`` puts the real tensors back).
    """
    proto = onnx.ModelProto()
    proto.ir_version = model.ir_version
    for domain, version in model.opset_imports.items():
        proto.opset_import.append(onnx.helper.make_opsetid(domain, version))
    for func in model.functions.values():
        proto.functions.append(ir.serde.serialize_function(func))
    graph = model.graph
    g = proto.graph
    g.name = graph.name or "main"
    for value in graph.inputs:
        g.input.append(ir.serde.serialize_value(value))
    for value in graph.outputs:
        g.output.append(ir.serde.serialize_value(value))
    for node in graph:
        g.node.append(ir.serde.serialize_node(node))
    if placeholders:
        outputs = {v.name for v in graph.outputs}
        for node in graph:
            for out in node.outputs:
                if out.name and out.name not in outputs and (out.type is not None or out.shape is not None):
                    g.value_info.append(ir.serde.serialize_value(out))
        for name, value in graph.initializers.items():
            tensor = value.const_value
            t = g.initializer.add()
            t.name = name
            t.data_type = int(tensor.dtype if tensor is not None else value.dtype)
            t.dims.extend(tensor.shape.numpy() if tensor is not None else ())
            t.data_location = onnx.TensorProto.EXTERNAL
            t.external_data.add(key="location", value=PLACEHOLDER_LOCATION)
        return proto
    inits = []
    for name, value in graph.initializers.items():
        tensor = value.const_value
        dtype = (tensor.dtype if tensor is not None else value.dtype)
        dims = tensor.shape.numpy() if tensor is not None else ()
        inits.append((name, int(dtype), dims))
    _initializers_as_inputs(g, inits)
    return proto


def check_structure(proto: onnx.ModelProto) -> None:
    """Raise onnx.checker.ValidationError if the graph's structure, types or schemas are wrong."""
    onnx.checker.check_model(proto, full_check=False)


def restore_placeholders(new: ir.Model, old: ir.Model) -> None:
    """Give ``new``'s placeholder initializers (``skeleton_from_ir(..., placeholders=True)``) the
    tensors of the same-named initializers of ``old``."""
    for name, value in new.graph.initializers.items():
        tensor = value.const_value
        if getattr(tensor, "location", None) == PLACEHOLDER_LOCATION:
            value.const_value = old.graph.initializers[name].const_value
