"""Static pre-flight data: which ONNX nodes TensorRT's ONNX parser accepts, without TensorRT.

The data lives in ``plugins/data/trt_onnx_ops.yaml`` for one stated parser version: the op set
(from the parser's own ``supports_operator``), the tensor element types it converts, and per-op
restrictions that can be decided from the graph alone. Each restriction is one of a few kinds:

``max_outputs: N``            at most N non-empty outputs
``attr: NAME`` + ``allowed``  the attribute (or its ``default``) must be one of the values
``attr_absent: NAME``         the attribute must not be set
``const_input: I``            input I, when given, must be a build-time constant (initializer,
                              Constant, or a subgraph of those)
``input_dtypes: I`` + ``allowed`` / ``denied``   element type of input I
``absent_input: I``           input I must not be given
``not_graph_input: [I, ...]`` those inputs must not be network inputs
``even_volume: I``            input I must have an even number of elements (when static)
``same_shape: [I, J]``        inputs I and J must have the same shape (checked when both known)
``needs_plugin_library``      the parser implements the op with a plugin TensorRT-RTX lacks
``attr_each: NAME`` + ``allowed``  every element of a list attribute must be one of the values
``input_rank: I`` + ``allowed``    rank of input I (checked when known)
``when: {ATTR: VALUE}``       makes any of the above conditional on an attribute value (schema
                              defaults count)
``when_input_dtype: {index: I, in: [...]}``  ... or on the element type of an input

A restriction may carry ``backends: [tensorrt-rtx]`` to apply only to one library.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Iterator

import onnx
import yaml

from onnx_fuse.errors import InternalError

__all__ = ["SupportData", "Issue", "load_support_data", "check_node", "GraphInfo"]


@dataclass(frozen=True)
class Issue:
    """Why one node will not parse."""

    node: str          # node name, or "#index" when unnamed
    op: str            # domain-qualified op type
    reason: str
    graph: str = ""    # subgraph path, "" for the main graph

    def __str__(self) -> str:
        where = f" in {self.graph}" if self.graph else ""
        return f"{self.node} ({self.op}){where}: {self.reason}"


@dataclass
class SupportData:
    library: str
    version: str
    ops: dict[str, list[dict]]            # op type (ai.onnx) -> restrictions
    dtypes_supported: set[str]
    dtypes_io_only: dict[str, dict]       # e.g. UINT8 -> {ops: [...], reason}
    raw: dict


@functools.lru_cache(maxsize=None)
def load_support_data() -> SupportData:
    text = resources.files("onnx_fuse.plugins").joinpath("data/trt_onnx_ops.yaml").read_text()
    raw = yaml.safe_load(text)
    try:
        ops = {name: list((spec or {}).get("restrictions") or [])
               for name, spec in raw["ops"].items()}
        return SupportData(library=raw["parser"]["library"], version=str(raw["parser"]["version"]),
                           ops=ops, dtypes_supported=set(raw["dtypes"]["supported"]),
                           dtypes_io_only=dict(raw["dtypes"].get("io_only") or {}), raw=raw)
    except (KeyError, TypeError) as exc:
        raise InternalError(f"plugins/data/trt_onnx_ops.yaml is malformed: {exc}") from None


# --------------------------------------------------------------------------- graph facts

class GraphInfo:
    """Types, shapes and constness of values in one (sub)graph, plus those of outer scopes."""

    def __init__(self, graph: onnx.GraphProto, outer: "GraphInfo | None" = None):
        self.outer = outer
        self.types: dict[str, int] = {}
        self.shapes: dict[str, list] = {}
        self.const: set[str] = {t.name for t in graph.initializer}
        self.const.update(t.values.name for t in graph.sparse_initializer)
        self.inputs = {vi.name for vi in graph.input} - self.const
        self.outputs = {vi.name for vi in graph.output}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            self._record(vi)
        for t in graph.initializer:
            self.types.setdefault(t.name, t.data_type)
            self.shapes.setdefault(t.name, list(t.dims))
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for o in node.output:
                if o:
                    self.producer[o] = node
            for i in node.input:
                if i:
                    self.consumers.setdefault(i, []).append(node)
        # Constant folding as the parser does it: a node whose inputs are all constant.
        for node in graph.node:
            if node.op_type in _NEVER_CONST or node.domain not in ("", "ai.onnx"):
                continue
            # Shape/Size of a static tensor is not treated as constant: the parser's
            # build-time constant check does not fold through them.
            if node.op_type not in ("Shape", "Size") and all((not i) or self.is_const(i)
                                                             for i in node.input):
                self.const.update(o for o in node.output if o)

    def _record(self, vi: onnx.ValueInfoProto) -> None:
        tt = vi.type.tensor_type
        kind = vi.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type", "map_type", "sparse_tensor_type"):
            self.types[vi.name] = _NON_TENSOR[kind]
        if vi.type.HasField("tensor_type"):
            if tt.elem_type:
                self.types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                        for d in tt.shape.dim]

    def all_inputs(self) -> set[str]:
        return self.inputs | (self.outer.all_inputs() if self.outer else set())

    def _static(self, name: str) -> bool:
        shape = self.shape(name)
        return shape is not None and all(isinstance(d, int) for d in shape)

    def is_const(self, name: str) -> bool:
        if name in self.const:
            return True
        if name in self.inputs or name in self.producer:
            return False
        return self.outer.is_const(name) if self.outer else False

    def dtype(self, name: str) -> int | None:
        if name in self.types:
            return self.types[name]
        return self.outer.dtype(name) if self.outer else None

    def shape(self, name: str) -> list | None:
        if name in self.shapes:
            return self.shapes[name]
        return self.outer.shape(name) if self.outer else None


# Pseudo element types for values that are not dense tensors (the parser has none of them).
_NON_TENSOR = {"sequence_type": -1, "optional_type": -2, "map_type": -3, "sparse_tensor_type": -4}
_NON_TENSOR_NAMES = {-1: "SEQUENCE", -2: "OPTIONAL", -3: "MAP", -4: "SPARSE_TENSOR"}

_NEVER_CONST = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                "Bernoulli", "Multinomial", "If", "Loop", "Scan"}


def _dtype_name(code: int | None) -> str:
    if code is None:
        return "?"
    if code < 0:
        return _NON_TENSOR_NAMES[code]
    return onnx.TensorProto.DataType.Name(code)


def _attr_value(node: onnx.NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            v = onnx.helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return None


def _schema_default(node: onnx.NodeProto, name: str, opset: int | None):
    try:
        schema = onnx.defs.get_schema(node.op_type, opset or onnx.defs.onnx_opset_version(),
                                      node.domain)
    except onnx.defs.SchemaError:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    v = onnx.helper.get_attribute_value(attr.default_value)
    return v.decode() if isinstance(v, bytes) else v


def _matches_when(node: onnx.NodeProto, r: dict, info: "GraphInfo", opset: int | None) -> bool:
    cond = r.get("when_input_dtype")
    if cond:
        name = _input(node, cond["index"])
        if not name or _dtype_name(info.dtype(name)) not in cond["in"]:
            return False
    when = r.get("when")
    if not when:
        return True
    for attr, want in when.items():
        got = _attr_value(node, attr)
        if got is None:
            got = _schema_default(node, attr, opset)
        if got is None:
            return False
        if isinstance(want, list) and not isinstance(got, list):
            if got not in want:
                return False
        elif got != want:
            return False
    return True


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if index < len(node.input) else ""


def _restriction_issue(node: onnx.NodeProto, r: dict, info: GraphInfo, library: str,
                       opset: int | None = None) -> str | None:
    """The reason the node breaks restriction ``r``, or None."""
    if r.get("backends") and library not in r["backends"]:
        return None
    if not _matches_when(node, r, info, opset):
        return None
    reason = r.get("reason", "")
    if "max_outputs" in r:
        n = sum(1 for o in node.output if o)
        return reason if n > r["max_outputs"] else None
    if "attr" in r:
        value = _attr_value(node, r["attr"])
        if value is None:
            value = r.get("default")
        if isinstance(value, float):
            value = round(value, 6)
        return reason if value not in r["allowed"] else None
    if "attr_each" in r:
        value = _attr_value(node, r["attr_each"])
        return reason if value is not None and any(v not in r["allowed"] for v in value) else None
    if "input_rank" in r:
        name = _input(node, r["input_rank"])
        shape = info.shape(name) if name else None
        return reason if shape is not None and len(shape) not in r["allowed"] else None
    if "attr_absent" in r:
        return reason if _attr_value(node, r["attr_absent"]) is not None else None
    if "const_input" in r:
        name = _input(node, r["const_input"])
        return reason if name and not info.is_const(name) else None
    if "not_graph_input" in r:
        bad = [i for i in r["not_graph_input"] if _input(node, i) in info.all_inputs()]
        return reason if bad else None
    if "even_volume" in r:
        name = _input(node, r["even_volume"])
        shape = info.shape(name) if name else None
        if shape is None or any(not isinstance(d, int) for d in shape):
            return None
        volume = 1
        for d in shape:
            volume *= d
        return reason if volume % 2 else None
    if "absent_input" in r:
        return reason if _input(node, r["absent_input"]) else None
    if "input_dtypes" in r:
        name = _input(node, r["input_dtypes"])
        dt = info.dtype(name) if name else None
        if dt is None:
            return None
        dn = _dtype_name(dt)
        if "allowed" in r and dn not in r["allowed"]:
            return f"{reason} (got {dn})"
        if "denied" in r and dn in r["denied"]:
            return f"{reason} (got {dn})"
        return None
    if "same_shape" in r:
        a, b = (_input(node, i) for i in r["same_shape"])
        sa, sb = (info.shape(a) if a else None), (info.shape(b) if b else None)
        if sa is None or sb is None or len(sa) != len(sb):
            return None
        return reason if any(x is not None and y is not None and x != y
                             for x, y in zip(sa, sb)) else None
    if r.get("needs_plugin_library"):
        return reason
    raise InternalError(f"trt_onnx_ops.yaml: restriction of unknown kind: {r}")


def check_node(node: onnx.NodeProto, info: GraphInfo, data: SupportData,
               opset: int | None = None) -> Iterator[str]:
    """Reasons the parser will reject this standard-domain node (nothing when it is fine)."""
    op = node.op_type
    if op not in data.ops:
        yield f"not supported by the {data.library} {data.version} ONNX parser"
        return
    for r in data.ops[op]:
        why = _restriction_issue(node, r, info, data.library, opset)
        if why:
            yield why


def check_value_types(info: GraphInfo, graph: onnx.GraphProto, data: SupportData,
                      nodes: list[onnx.NodeProto]) -> Iterator[tuple[onnx.NodeProto | None, str]]:
    """Element types the parser cannot convert, reported against the node that touches them."""
    seen: set[str] = set()

    def bad(name: str) -> str | None:
        dn = _dtype_name(info.dtype(name))
        if dn == "?" or dn in data.dtypes_supported:
            return None
        io_only = data.dtypes_io_only.get(dn)
        if io_only is None:
            return f"tensor {name!r} has element type {dn}, which TensorRT cannot represent"
        allowed = set(io_only.get("ops", []))
        at_edge = name in info.inputs or name in info.outputs
        users = info.consumers.get(name, [])
        prod = info.producer.get(name)
        at_edge = at_edge or name in info.const
        ok = at_edge and all(u.op_type in allowed for u in users) and (
            prod is None or prod.op_type in allowed)
        return None if ok else f"tensor {name!r} is {dn}: {io_only.get('reason', '')}".rstrip()

    for name in sorted(info.inputs):
        why = bad(name)
        if why:
            seen.add(name)
            users = info.consumers.get(name) or [None]
            yield users[0], why
    for node in nodes:
        for name in (*node.input, *node.output):
            if name and name not in seen:
                why = bad(name)
                if why:
                    seen.add(name)
                    yield node, why
