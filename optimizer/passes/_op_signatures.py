"""Type constraints of ops, per input and output slot: the ONNX schemas, ONNX Runtime's contrib
schemas, and the machine-readable contracts of our plugin ops (plugins/<op>.yaml). The precision
pass asks them which slots may change type and types outputs that onnx inference skipped."""

from __future__ import annotations

import collections
import functools

import onnx
import onnx_ir as ir

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN  # noqa: F401 - precision.py imports it from here

TYPE_STR = {ir.DataType.FLOAT16: "tensor(float16)", ir.DataType.BFLOAT16: "tensor(bfloat16)"}

#: Plugin ops of domain ``onnx_fuse`` whose machine-readable contract (plugins/<file>.yaml) gives
#: their dtypes: they are LOW for every low type the kernels take (``dtype_combinations.kernel``).
PLUGIN_CONTRACTS = {"FusedAttention": "fused_attention.yaml", "PagedAttention": "paged_attention.yaml"}


@functools.cache
def _ort_schemas() -> dict[tuple[str, str], list]:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C
    except ImportError:  # no ORT: contrib ops are simply kept in float32
        return {}
    index: dict[tuple[str, str], list] = collections.defaultdict(list)
    for s in C.get_all_operator_schema():
        index[(s.domain, s.name)].append(s)
    return index


_ONNX_TYPE_STR = {"float32": "tensor(float)", "float": "tensor(float)",
                  "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)",
                  "int32": "tensor(int32)", "int64": "tensor(int64)"}


@functools.cache
def _plugin_contract(op_type: str) -> dict | None:
    """The parsed plugins/<op>.yaml contract of an ``onnx_fuse`` op, or None (unknown / unreadable)."""
    fname = PLUGIN_CONTRACTS.get(op_type)
    if fname is None:
        return None
    try:
        from importlib import resources

        import yaml

        return yaml.safe_load(resources.files("onnx_fuse.plugins").joinpath(fname).read_text())
    except Exception:  # noqa: BLE001 - no contract: the op is kept in float32, as unknown ops are
        return None


def _plugin_signature(op_type: str):
    """``signature`` for an ``onnx_fuse`` op from its contract's per-slot dtypes, or None.

    A slot typed ``T`` takes every type of ``dtype_combinations`` (kernel and reference); a slot
    with a concrete dtype (``int32``: seq_lens, block_tables) takes only that one.
    """
    c = _plugin_contract(op_type)
    try:
        combos = c["dtype_combinations"]
        t_types = {_ONNX_TYPE_STR[t] for k in ("kernel", "reference") for t in combos.get(k, ())}

        def formals(params):
            out = []
            for p in params:
                dt = str(p["dtype"])
                out.append((t_types if dt == "T" else {_ONNX_TYPE_STR[dt]}, False, dt))
            return out

        return formals(c["inputs"]), formals(c["outputs"])
    except (TypeError, KeyError, AttributeError):
        return None


def plugin_low_ops(low: ir.DataType) -> frozenset[str]:
    """``onnx_fuse`` ops whose kernels take ``low`` (per their contracts): always LOW, like MatMul."""
    out = set()
    for op in PLUGIN_CONTRACTS:
        c = _plugin_contract(op)
        try:
            kernel = {_ONNX_TYPE_STR[t] for t in c["dtype_combinations"]["kernel"]}
        except (TypeError, KeyError, AttributeError):
            continue
        if TYPE_STR[low] in kernel and _plugin_signature(op) is not None:
            out.add(op)
    return frozenset(out)


@functools.cache
def signature(domain: str, op_type: str, version: int):
    """``(inputs, outputs)``: per formal ``(allowed type strings, variadic, type var)``; or None."""
    domain = "" if domain == "ai.onnx" else domain
    if domain == PLUGIN_DOMAIN:
        return _plugin_signature(op_type)
    try:
        s = onnx.defs.get_schema(op_type, version, domain)
        constraints = {t.type_param_str: set(t.allowed_type_strs) for t in s.type_constraints}

        def formals(params):
            return [(constraints.get(p.type_str, {p.type_str}),
                     p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic, p.type_str)
                    for p in params]

        return formals(s.inputs), formals(s.outputs)
    except onnx.defs.SchemaError:
        pass
    candidates = [s for s in _ort_schemas().get((domain, op_type), []) if s.since_version <= version]
    if not candidates:
        return None
    s = max(candidates, key=lambda c: c.since_version)
    constraints = {t.type_param_str: set(t.allowed_type_strs) for t in s.type_constraints}

    def ort_formals(params):
        return [(constraints.get(p.typeStr, {p.typeStr}), "Variadic" in str(p.option), p.typeStr)
                for p in params]

    return ort_formals(s.inputs), ort_formals(s.outputs)


def _formal(formals, index: int):
    if index < len(formals):
        return formals[index]
    return formals[-1] if formals and formals[-1][1] else None


def fill_output_types(graph: ir.Graph, opsets: dict[str, int]) -> bool:
    """Type outputs that onnx inference skipped (contrib ops) from the schema's type variables."""
    filled = False
    for node in graph:
        if all(v.dtype is not None for v in node.outputs):
            continue
        domain = "" if node.domain == "ai.onnx" else node.domain
        sig = signature(domain, node.op_type, node.version or opsets.get(domain, 1))
        if sig is None:
            continue
        bound = {}
        for i, v in enumerate(node.inputs):
            f = _formal(sig[0], i)
            if v is not None and v.dtype is not None and f is not None:
                bound.setdefault(f[2], v.dtype)
        for i, v in enumerate(node.outputs):
            f = _formal(sig[1], i)
            if v.dtype is None and f is not None and f[2] in bound:
                v.dtype = bound[f[2]]
                filled = True
    return filled


def slot_allows(formals, index: int, type_str: str) -> bool:
    if index < len(formals):
        return type_str in formals[index][0]
    return bool(formals) and formals[-1][1] and type_str in formals[-1][0]
