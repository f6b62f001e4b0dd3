"""Run graphs holding our ``onnx_fuse`` ops in ONNX Runtime (CPU) through their NumPy references.

ONNX Runtime finds onnxruntime-extensions Python custom ops only in domain ``ai.onnx.contrib``,
and a Python custom op has a fixed input count and attribute set. So ``prepare_session`` rewrites
a copy of the model: every ``onnx_fuse::Op`` node becomes ``ai.onnx.contrib::OnnxFuse_<Op>_<n>``
(``n`` = its input count, so optional inputs map to distinct registrations), gets every
attribute of the op's contract filled with the contract default where absent, and loses the
TensorRT-only attributes (``plugin_version``, ``plugin_namespace``). The Python ops call
onnx_fuse.reference.attention, the oracle of docs/ops.md.

The Python ops are registered with float32 signatures only: onnxruntime-extensions 0.15 declares
``PyCustomOpDef.dt_float16`` but its runtime rejects it ("Type float16 not supported by python
customops api", microsoft/onnxruntime-extensions#812, and aborts the process), so dtype-specific
registrations are not possible. A node's float16 or bfloat16 tensors are instead wrapped:
``prepare_session`` inserts ``Cast(-> float32)`` on its float inputs and ``Cast(-> T)`` on its
float outputs around the float32 registration. That is the kernels' numerics (T storage, at least
fp32 accumulation; the references compute in float64) with T-rounded results. ORT's CPU Cast
handles float16 and bfloat16; the rest of a bf16 graph usually is not runnable on ORT CPU, see
``onnx_fuse.passes.precision.emulate_bf16``.

Covered ops (float32, float16 or bfloat16 tensors; integer inputs int32):
  FusedAttention(query, key, value[, seq_lens])                       -> output
  PagedAttention(query, key, value, key_cache, value_cache, block_tables, seq_lens
                 [, k_scale, v_scale] [, sinks])     -> output, key_cache_out, value_cache_out

A PagedAttention with sinks but no scales (inputs 7 and 8 empty, the 16-bit pool form) runs as
the 8-input registration ``OnnxFuse_PagedAttention_8`` (the empty slots dropped).

The 9-input PagedAttention also takes float8e4m3fn caches (an fp8 pool) with float32 scales.
The Python op API has no float8 type either, so those caches are wrapped the same way: Cast to
float32 (every e4m3 value, NaN bytes included, is exact in float32, and ORT's Cast back gives
the same byte) around a separate registration, ``OnnxFuse_PagedAttention_9_fp8``, whose body
reads its float32 caches as e4m3 values (the reference's fp8 form: append quantizes, attention
dequantizes) and returns the new caches as float32 e4m3 values.

ONNX's Cast takes float8 from opset 19 on, so a model importing an older default opset (TorchScript
exports at 17) gets its copy raised to opset 19 with ONNX's version converter where float8 Casts
go in (``_raise_opset_for_float8``: its adapters rewrite what changed, e.g. ReduceMean's axes
attribute becoming an input at 18); the model's weights stay out of the converter's copy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import onnx

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN as OUR_DOMAIN
from onnx_fuse.plugin_ids import TRT_ONLY_ATTRS

ORT_CONTRIB_DOMAIN = "ai.onnx.contrib"

__all__ = ["prepare_session", "all_nodes", "OUR_DOMAIN", "ORT_CONTRIB_DOMAIN"]


@dataclasses.dataclass(frozen=True)
class _OpSpec:
    """One registration: op name, input dtypes, output dtypes, attributes with defaults."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, str, object], ...]  # (name, "int"|"float", default)
    body: Callable
    output_like: tuple[int, ...] = (0,)   # per output: the input whose element type it has
    variant: str = ""                      # "fp8": the caches are float8e4m3fn

    @property
    def registered_name(self) -> str:
        return f"OnnxFuse_{self.op}_{len(self.inputs)}" + (f"_{self.variant}" if self.variant else "")


#: The first default-domain opset whose Cast takes float8 types.
_FLOAT8_CAST_OPSET = 19

#: Float element types run by wrapping the float32 registration in Casts.
_WRAPPED_FLOATS = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                   onnx.TensorProto.FLOAT8E4M3FN)


def _fused_attention(query, key, value, seq_lens=None, *, num_heads, kv_num_heads, scale, causal,
                     softcap, window):
    from onnx_fuse.reference.attention import fused_attention_op

    return fused_attention_op(query, key, value, seq_lens, num_heads=int(num_heads),
                              kv_num_heads=int(kv_num_heads) or None, scale=float(scale),
                              causal=int(causal), softcap=float(softcap), window=int(window))


def _paged_attention(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                     k_scale=None, v_scale=None, *, num_heads, kv_num_heads, scale, window):
    from onnx_fuse.reference.attention import paged_attention_op

    return paged_attention_op(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                              k_scale, v_scale, num_heads=int(num_heads),
                              kv_num_heads=int(kv_num_heads) or None, scale=float(scale),
                              window=int(window))


def _paged_attention_sinks(query, key, value, key_cache, value_cache, block_tables, seq_lens, sinks,
                           *, num_heads, kv_num_heads, scale, window):
    """The 16-bit (here float32) pool form with attention sinks and no scales."""
    return _paged_attention_with(query, key, value, key_cache, value_cache, block_tables, seq_lens, None,
                                 None, sinks, num_heads=num_heads, kv_num_heads=kv_num_heads,
                                 scale=scale, window=window)


def _paged_attention_scales_sinks(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                                  k_scale, v_scale, sinks, *, num_heads, kv_num_heads, scale, window):
    return _paged_attention_with(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                                 k_scale, v_scale, sinks, num_heads=num_heads,
                                 kv_num_heads=kv_num_heads, scale=scale, window=window)


def _paged_attention_with(query, key, value, key_cache, value_cache, block_tables, seq_lens, k_scale,
                          v_scale, sinks, *, num_heads, kv_num_heads, scale, window):
    from onnx_fuse.reference.attention import paged_attention_op

    return paged_attention_op(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                              k_scale, v_scale, sinks, num_heads=int(num_heads),
                              kv_num_heads=int(kv_num_heads) or None, scale=float(scale),
                              window=int(window))


def _paged_attention_fp8(query, key, value, key_cache, value_cache, block_tables, seq_lens,
                         k_scale, v_scale, sinks=None, *, num_heads, kv_num_heads, scale, window):
    """The caches arrive as float32 e4m3 values (Cast from float8e4m3fn) and leave as such."""
    import ml_dtypes
    import numpy as np

    e4m3 = ml_dtypes.float8_e4m3fn
    out, kc, vc = _paged_attention_with(query, key, value, np.asarray(key_cache).astype(e4m3),
                                        np.asarray(value_cache).astype(e4m3), block_tables, seq_lens,
                                        k_scale, v_scale, sinks, num_heads=num_heads,
                                        kv_num_heads=kv_num_heads, scale=scale, window=window)
    return out.astype(np.float32), kc.astype(np.float32), vc.astype(np.float32)


_ATTN_ATTRS = (("num_heads", "int", None), ("kv_num_heads", "int", 0), ("scale", "float", 0.0),
               ("window", "int", 0))
_PAGED_INPUTS = ("float", "float", "float", "float", "float", "int32", "int32")
_SPECS = (
    _OpSpec("FusedAttention", ("float", "float", "float"), ("float",),
            _ATTN_ATTRS + (("causal", "int", 0), ("softcap", "float", 0.0)), _fused_attention),
    _OpSpec("FusedAttention", ("float", "float", "float", "int32"), ("float",),
            _ATTN_ATTRS + (("causal", "int", 0), ("softcap", "float", 0.0)), _fused_attention),
    _OpSpec("PagedAttention", _PAGED_INPUTS, ("float", "float", "float"), _ATTN_ATTRS,
            _paged_attention, output_like=(0, 3, 4)),
    _OpSpec("PagedAttention", _PAGED_INPUTS + ("float", "float"), ("float", "float", "float"),
            _ATTN_ATTRS, _paged_attention, output_like=(0, 3, 4)),
    _OpSpec("PagedAttention", _PAGED_INPUTS + ("float", "float"), ("float", "float", "float"),
            _ATTN_ATTRS, _paged_attention_fp8, output_like=(0, 3, 4), variant="fp8"),
    # attention sinks: 7 inputs + sinks (the scale slots empty and dropped), or all ten
    _OpSpec("PagedAttention", _PAGED_INPUTS + ("float",), ("float", "float", "float"), _ATTN_ATTRS,
            _paged_attention_sinks, output_like=(0, 3, 4)),
    _OpSpec("PagedAttention", _PAGED_INPUTS + ("float",) * 3, ("float", "float", "float"),
            _ATTN_ATTRS, _paged_attention_scales_sinks, output_like=(0, 3, 4)),
    _OpSpec("PagedAttention", _PAGED_INPUTS + ("float",) * 3, ("float", "float", "float"),
            _ATTN_ATTRS, _paged_attention_fp8, output_like=(0, 3, 4), variant="fp8"),
)
_SPEC_BY_KEY = {(s.op, len(s.inputs), s.variant): s for s in _SPECS}
_registered: set[str] = set()


def _register(spec: _OpSpec) -> None:
    """Register the Python op once per process (onnxruntime-extensions keeps a global table).

    prepare_session registers every op before the first session that uses one: a registration
    after a session with Python ops exists left that session's ops dangling (destroying it later
    segfaulted inside ORT, e.g. a FusedAttention session made before the first PagedAttention
    one, once the freed memory was reused: tests/reference/test_ort_ops.py has the sequence)."""
    if spec.registered_name in _registered:
        return
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    dt = {"float": PyCustomOpDef.dt_float, "int32": PyCustomOpDef.dt_int32,
          "int64": PyCustomOpDef.dt_int64}
    at = {"int": PyCustomOpDef.dt_int64, "float": PyCustomOpDef.dt_float}
    onnx_op(op_type=spec.registered_name, inputs=[dt[t] for t in spec.inputs],
            outputs=[dt[t] for t in spec.outputs],
            attrs={name: at[kind] for name, kind, _ in spec.attrs})(spec.body)
    _registered.add(spec.registered_name)


def _retarget(node: onnx.NodeProto, types: dict[str, int]) -> _OpSpec:
    n_inputs = len(node.input)
    while n_inputs and not node.input[n_inputs - 1]:
        n_inputs -= 1  # trailing omitted optional inputs
    if node.op_type == "PagedAttention" and n_inputs == 10 and not node.input[7] and not node.input[8]:
        del node.input[7:9]  # sinks without scales: the 8-input registration
        n_inputs = 8
    fp8 = (node.op_type == "PagedAttention" and len(node.input) > 3
           and types.get(node.input[3]) == onnx.TensorProto.FLOAT8E4M3FN)
    if fp8 and n_inputs not in (9, 10):
        raise ValueError(f"node {node.name!r}: onnx_fuse::PagedAttention over float8e4m3fn caches "
                         f"needs k_scale and v_scale (9 inputs, or 10 with sinks; got {n_inputs})")
    spec = _SPEC_BY_KEY.get((node.op_type, n_inputs, "fp8" if fp8 else ""))
    if spec is None:
        known = sorted({f"{s.op}/{len(s.inputs)}" for s in _SPECS})
        raise ValueError(f"node {node.name!r}: no NumPy reference for onnx_fuse::{node.op_type} with "
                         f"{n_inputs} inputs (have: {', '.join(known)})")
    if any(not name for name in node.input[:n_inputs]):
        raise ValueError(f"node {node.name!r}: onnx_fuse::{node.op_type} reference needs every input "
                         "up to the last one given")
    present = {a.name: a for a in node.attribute}
    kept = []
    for name, kind, default in spec.attrs:
        if name in present:
            kept.append(present[name])
        elif default is None:
            raise ValueError(f"node {node.name!r}: onnx_fuse::{node.op_type} needs attribute {name!r}")
        else:
            kept.append(onnx.helper.make_attribute(name, default))
    extra = set(present) - {n for n, _, _ in spec.attrs} - set(TRT_ONLY_ATTRS)
    if extra:
        raise ValueError(f"node {node.name!r}: unknown attributes {sorted(extra)} on onnx_fuse::{node.op_type}")
    del node.input[n_inputs:]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.domain = ORT_CONTRIB_DOMAIN
    node.op_type = spec.registered_name
    return spec


def _bodies(graph: onnx.GraphProto):
    """``graph`` and every graph nested in its nodes' attributes (If / Loop / Scan bodies)."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for body in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                         a.graphs if a.type == onnx.AttributeProto.GRAPHS else []):
                yield from _bodies(body)


def all_nodes(graph: onnx.GraphProto):
    """The nodes of ``graph`` and of every body nested in it."""
    for g in _bodies(graph):
        yield from g.node


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Element type per value name (subgraphs too: a merged decoder's branches share their names,
    with the same types): declared types, else ONNX shape inference (best effort)."""
    def collect(m):
        t = {}
        for g in _bodies(m.graph):
            t.update({v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]
                      if v.type.tensor_type.elem_type})
            t.update({i.name: i.data_type for i in g.initializer})
        return t

    types = collect(proto)
    if any(n.domain == OUR_DOMAIN and any(i and i not in types for i in n.input)
           for n in all_nodes(proto.graph)):
        try:
            types = {**collect(onnx.shape_inference.infer_shapes(proto)), **types}
        except Exception:  # noqa: BLE001 - unknown types fall back to float32
            pass
    return types


def prepare_session(proto: onnx.ModelProto, opts) -> onnx.ModelProto:
    """A copy of ``proto`` whose onnx_fuse ops run as onnxruntime-extensions Python ops.

    Registers those Python ops (once per process) and the extensions' custom-op library on
    ``opts`` (an ``onnxruntime.SessionOptions``). A node's float16, bfloat16 or float8e4m3fn
    tensors reach the float32 registration through Casts (and its outputs are Cast back). Raises ValueError for an onnx_fuse op or input count that
    has no reference. Nodes inside If / Loop / Scan bodies are retargeted too (a merged decoder
    keeps its layers in If branches); nodes inside functions are not.
    """
    import onnxruntime_extensions

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    types = _elem_types(out) if any(n.domain == OUR_DOMAIN for n in all_nodes(out.graph)) else {}
    used = float8 = False
    # innermost bodies first: rewriting a graph's node list copies its nodes, bodies included
    for graph in reversed(list(_bodies(out.graph))):
        graph_used, graph_float8 = _retarget_graph(graph, types)
        used |= graph_used
        float8 |= graph_float8
    if used:
        imports = [o for o in out.opset_import if o.domain != OUR_DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(imports)
        if not any(o.domain == ORT_CONTRIB_DOMAIN for o in imports):
            out.opset_import.append(onnx.helper.make_opsetid(ORT_CONTRIB_DOMAIN, 1))
        if float8:
            out = _raise_opset_for_float8(out)
        opts.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    return out


def _retarget_graph(graph: onnx.GraphProto, types: dict[str, int]) -> tuple[bool, bool]:
    """prepare_session on the nodes of one graph (not its bodies): (any op retargeted, float8)."""
    used = float8 = False
    nodes = []
    for node in graph.node:
        if node.domain != OUR_DOMAIN:
            nodes.append(node)
            continue
        spec = _retarget(node, types)
        for every in _SPECS:   # all at once, before the first session: see _register
            _register(every)
        used = True
        # float16/bfloat16/float8e4m3fn values: Cast to float32, run the float32 op, Cast the
        # outputs back to the type of the input they follow (spec.output_like).
        # (an input of unknown type is taken to have the query's, as before the fp8 form)
        elems = [types.get(name, types.get(node.input[0])) for name in node.input]
        for i, t in enumerate(spec.inputs):
            if t == "float" and i < len(node.input) and elems[i] in _WRAPPED_FLOATS:
                wide = f"{node.input[i]}__{node.name}__ref_f32_{i}"
                nodes.append(onnx.helper.make_node("Cast", [node.input[i]], [wide],
                                                   to=onnx.TensorProto.FLOAT,
                                                   name=f"{node.name}__ref_cast_in_{i}"))
                node.input[i] = wide
                float8 |= elems[i] == onnx.TensorProto.FLOAT8E4M3FN
        after = []
        for i, t in enumerate(spec.outputs):
            elem = elems[spec.output_like[i]]
            if t == "float" and i < len(node.output) and node.output[i] and elem in _WRAPPED_FLOATS:
                tag = onnx.TensorProto.DataType.Name(elem).lower()
                wide = f"{node.output[i]}__{node.name}__ref_f32_{i}"
                after.append(onnx.helper.make_node("Cast", [wide], [node.output[i]], to=elem,
                                                   name=f"{node.name}__ref_cast_out_{i}_{tag}"))
                node.output[i] = wide
        nodes += [node, *after]
    if used:
        del graph.node[:]
        graph.node.extend(nodes)
    return used, float8


def _raise_opset_for_float8(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` at a default opset whose Cast takes float8 (19) when it imports an older one.

    The version converter serializes its input, so the weights' bytes are lifted out of the copy
    it sees (names, types and dims stay, which is all it reads) and put back into its result:
    a model past protobuf's 2 GB converts too."""
    version = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if version is None or version >= _FLOAT8_CAST_OPSET:
        return proto
    from onnx import version_converter

    lifted: dict[str, bytes] = {}
    for t in proto.graph.initializer:
        if t.HasField("raw_data"):
            lifted[t.name] = t.raw_data
            t.ClearField("raw_data")
    try:
        raised = version_converter.convert_version(proto, _FLOAT8_CAST_OPSET)
    except Exception as exc:  # noqa: BLE001 - reported with what it was for
        raise ValueError(f"float8 caches need Cast-{_FLOAT8_CAST_OPSET}, and ONNX's version converter "
                         f"could not raise this opset-{version} model to it: {exc}") from exc
    finally:
        for t in proto.graph.initializer:
            if t.name in lifted:
                t.raw_data = lifted[t.name]
    for t in raised.graph.initializer:
        if t.name in lifted:
            t.raw_data = lifted[t.name]
    return raised
