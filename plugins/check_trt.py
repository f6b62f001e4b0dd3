"""``onnx-fuse check-trt``: will TensorRT's ONNX parser take this model? Decided without TensorRT.

Every node must be either

- a standard ONNX op the parser supports (``plugins/data/trt_onnx_ops.yaml``) whose attributes,
  constant inputs and element types meet the stated restrictions, or
- one of our registered plugins (domain ``onnx_fuse``, op type = plugin name, ``plugin_version``
  and ``plugin_namespace`` attributes) with attributes and inputs valid per its contract.

Nodes that call a model-local function are checked through the function body (the parser
inlines local functions). Subgraphs (If / Loop / Scan bodies) are checked recursively.
The result lists each offender with its reason; the CLI exits 0 when there are none, 1 otherwise.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field

import onnx

from onnx_fuse.errors import UserError
from onnx_fuse.plugins.engine_builder import PLUGIN_DOMAIN, PLUGIN_OPS
from onnx_fuse.plugins.trt_support import (GraphInfo, Issue, SupportData, check_node,
                                           check_value_types, load_support_data)

__all__ = ["CheckResult", "check_model", "plugin_module"]


@dataclass
class CheckResult:
    library: str
    version: str
    nodes: int = 0
    plugin_nodes: int = 0
    issues: list[Issue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def supported(self) -> bool:
        return not self.issues

    def as_json(self) -> dict:
        return {"parser": {"library": self.library, "version": self.version},
                "supported": self.supported, "nodes": self.nodes,
                "plugin_nodes": self.plugin_nodes,
                "issues": [vars(i) for i in self.issues], "notes": self.notes}


def plugin_module(op_type: str):
    """The onnx_fuse.plugins module that defines plugin ``op_type`` (imports without TensorRT)."""
    return importlib.import_module(PLUGIN_OPS[op_type])


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index}"


def _qualified(node: onnx.NodeProto) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _load(source) -> onnx.ModelProto:
    if isinstance(source, onnx.ModelProto):
        return source
    from onnx_fuse.model_io import load_proto

    proto, _ = load_proto(source, check=False)
    return proto


def _infer(proto: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False,
                                                 data_prop=True)
    except Exception as exc:  # noqa: BLE001 - inference is best effort; declared types remain
        notes.append(f"shape inference failed ({type(exc).__name__}); dtype checks use the "
                     "declared types only")
        return proto


class _Checker:
    def __init__(self, proto: onnx.ModelProto, data: SupportData, result: CheckResult):
        self.data = data
        self.result = result
        self.functions = {(f.domain, f.name): f for f in proto.functions}
        self.opset = next((o.version for o in proto.opset_import
                           if o.domain in ("", "ai.onnx")), None)

    def issue(self, node, index, reason, graph_path):
        self.result.issues.append(Issue(_node_label(node, index), _qualified(node), reason,
                                        graph_path))

    def graph(self, graph: onnx.GraphProto, outer: GraphInfo | None, path: str) -> None:
        info = GraphInfo(graph, outer)
        self.nodes(list(graph.node), info, path)
        seen = set()
        for node, why in check_value_types(info, graph, self.data, list(graph.node)):
            key = (node.name if node is not None else "", why)
            if key in seen:
                continue
            seen.add(key)
            if node is None:
                self.result.issues.append(Issue("<graph>", "-", why, path))
            else:
                self.issue(node, list(graph.node).index(node), why, path)

    def nodes(self, nodes: list[onnx.NodeProto], info: GraphInfo, path: str) -> None:
        for index, node in enumerate(nodes):
            self.result.nodes += 1
            func = self.functions.get((node.domain, node.op_type))
            if func is not None:
                # The parser inlines local functions; check the body (types unknown there).
                self.result.nodes -= 1
                body = onnx.GraphProto(node=func.node)
                self.nodes(list(func.node), GraphInfo(body, info), f"{path}/{func.name}".strip("/"))
                continue
            if node.domain in ("", "ai.onnx"):
                for why in check_node(node, info, self.data, self.opset):
                    self.issue(node, index, why, path)
            elif node.domain == PLUGIN_DOMAIN or node.op_type in PLUGIN_OPS:
                self.result.plugin_nodes += 1
                if node.op_type not in PLUGIN_OPS:
                    self.issue(node, index, f"no onnx-fuse plugin named {node.op_type!r} (known: "
                               f"{', '.join(PLUGIN_OPS)})", path)
                    continue
                for why in plugin_module(node.op_type).check_node(node, info):
                    self.issue(node, index, why, path)
            else:
                self.issue(node, index, f"domain {node.domain!r} is not ONNX and the op is not an "
                           "onnx-fuse plugin; TensorRT would look for a plugin of that name and "
                           "fail", path)
            for attr in node.attribute:
                sub = f"{path}/{_node_label(node, index)}.{attr.name}".strip("/")
                if attr.type == onnx.AttributeProto.GRAPH:
                    self.graph(attr.g, info, sub)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for i, g in enumerate(attr.graphs):
                        self.graph(g, info, f"{sub}[{i}]")


def check_model(source: str | os.PathLike | bytes | onnx.ModelProto) -> CheckResult:
    """Check a model (path, bytes or proto; external data is never loaded)."""
    data = load_support_data()
    proto = _load(source)
    if not proto.graph.output:
        # ONNX and ORT accept it, but TensorRT builds no network without an output.
        what = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "model"
        raise UserError(f"{what}: the graph has no outputs, so TensorRT has nothing to build; "
                        "declare the outputs you want in graph.output")
    result = CheckResult(library=data.library, version=data.version)
    proto = _infer(proto, result.notes)
    _Checker(proto, data, result).graph(proto.graph, None, "")
    if result.plugin_nodes:
        result.notes.append(f"{result.plugin_nodes} onnx_fuse plugin node(s): building needs full "
                            "TensorRT (TensorRT-RTX has no plugin layers)")
    return result
