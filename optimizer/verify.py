"""Numeric verification: run the original and the optimized model in ONNX Runtime (CPU) on the
same inputs and compare every output.

ORT's own graph optimizations are turned off on both sides, so we compare our rewrite with the
original graph rather than ORT's rewrite with ORT's rewrite. Graphs holding our own ops (domain
``onnx_fuse``) run through their NumPy reference implementations (onnx_fuse.reference.ort_ops).
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.errors import UserError, VerificationError

from onnx_fuse.plugin_ids import PLUGIN_DOMAIN as OUR_DOMAIN

# Default tolerances per output dtype: fused kernels reorder float sums, so bit equality is not
# expected; these bound the error of a correct rewrite on random inputs.
DEFAULT_TOLERANCE = {
    np.dtype(np.float64): (1e-9, 1e-7),
    np.dtype(np.float32): (1e-4, 1e-3),
    np.dtype(np.float16): (1e-2, 1e-2),
}

_ONNX_TO_NP = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.INT16: np.int16, onnx.TensorProto.UINT16: np.uint16, onnx.TensorProto.BOOL: np.bool_,
    onnx.TensorProto.UINT32: np.uint32, onnx.TensorProto.UINT64: np.uint64,
}


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
           onnx.TensorProto.DOUBLE)


def to_proto(model: ir.Model | onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """A self-contained proto for ORT: weights stored outside are read in (ORT, given bytes,
    resolves external files against the current directory, not the model's folder)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, ir.Model):
        from onnx_fuse.model_io import load_model

        model = load_model(model)
    proto = ir.to_proto(model)
    external = {name: v.const_value for g in model.graphs() for name, v in g.initializers.items()
                if isinstance(v.const_value, ir.ExternalTensor)}
    if external:
        for t in proto.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL and t.name in external:
                t.raw_data = external[t.name].tobytes()
                t.data_location = onnx.TensorProto.DEFAULT
                del t.external_data[:]
    return proto


def uses_our_ops(proto: onnx.ModelProto) -> bool:
    """Whether an onnx_fuse op is in the model: the main graph, an If / Loop / Scan body (a merged
    decoder's branches) or a function."""
    from onnx_fuse.reference.ort_ops import all_nodes

    return any(n.domain == OUR_DOMAIN for n in all_nodes(proto.graph)) or any(
        f.domain == OUR_DOMAIN for f in proto.functions)


def _session_options(*, threads: int | None = None, ort_optimizations: bool = False,
                     quiet: bool = False):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if not ort_optimizations:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
    opts.log_severity_level = 4 if quiet else 3  # quiet: failures we expect and report ourselves
    return opts


def make_session(model: ir.Model | onnx.ModelProto, *, threads: int | None = None,
                 ort_optimizations: bool = False, quiet: bool = False):
    """An ORT CPU session for ``model``; our own ops run through their NumPy references."""
    import onnxruntime as ort

    proto = to_proto(model)
    opts = _session_options(threads=threads, ort_optimizations=ort_optimizations, quiet=quiet)
    if uses_our_ops(proto):
        from onnx_fuse.reference.ort_ops import prepare_session

        proto = prepare_session(proto, opts)
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def parse_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``NAME=2x16`` or ``NAME=2,16`` -> {NAME: (2, 16)}; a bare ``batch=2`` names a symbolic dim."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition("=")
        if not sep or not name or not re.fullmatch(r"\d+([x,]\d+)*", dims.strip()):
            raise UserError(f"bad --shape {spec!r}: expected NAME=DIMS such as input_ids=2x16 "
                            "or a symbolic dim such as batch=2")
        shapes[name.strip()] = tuple(int(d) for d in re.split(r"[x,]", dims.strip()))
    return shapes


def check_shapes(shapes: Any) -> dict[str, tuple[int, ...]]:
    """optimize(shapes=...) as parse_shapes returns it: name -> dims, each dims an int or a
    sequence of ints >= 0; anything else is refused here, not as a ValueError deep in numpy."""
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise UserError(f"shapes must map input or symbolic dim names to dims, not {type(shapes).__name__}")
    out = {}
    for name, dims in shapes.items():
        dims = (dims,) if isinstance(dims, (int, np.integer)) else dims
        try:
            out[str(name)] = tuple(operator.index(d) for d in dims)
        except TypeError:
            raise UserError(f"shapes[{name!r}]: expected integer dims, got {dims!r}") from None
        if any(d < 0 for d in out[str(name)]):
            raise UserError(f"shapes[{name!r}]: negative dim in {dims!r}")
    return out


def check_feeds(inputs: Any) -> Any:
    """optimize(verify_inputs=...): a .npz path, or a mapping of input name -> numeric array."""
    if inputs is None or isinstance(inputs, (str, os.PathLike)):
        return inputs
    if not isinstance(inputs, Mapping):
        raise UserError("verify_inputs must be a .npz path or a mapping of input name -> array, "
                        f"not {type(inputs).__name__}")
    feeds = {}
    for name, value in inputs.items():
        arr = np.asarray(value)
        if arr.dtype.kind not in "biufc":
            raise UserError(f"verify_inputs[{name!r}]: not a numeric or bool array (dtype {arr.dtype})")
        feeds[name] = arr
    return feeds


def check_shape_names(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """A --shape must name a graph input or one of their symbolic dims: a typo would otherwise
    leave the defaults in place and verify other shapes than the ones asked for."""
    inputs = [vi.name for vi in model.graph.input]
    symbols = sorted({d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim
                      if d.dim_param})
    unknown = sorted(set(shapes) - set(inputs) - set(symbols))
    if unknown:
        raise UserError(f"--shape {unknown[0]}: the model has no input or symbolic input dim of that "
                        f"name (inputs: {', '.join(inputs) or 'none'}; symbolic dims: "
                        f"{', '.join(symbols) or 'none'})")


def check_input_size(name: str, shape: Sequence[int], dtype: np.dtype) -> None:
    """Refuse, before allocating, a random input larger than the machine's memory (--shape
    batch=99999999999), which numpy would fail on with a MemoryError or the kernel with a kill."""
    count = 1
    for d in shape:
        count *= int(d)
    nbytes = count * np.dtype(dtype).itemsize
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 1 << 40
    if nbytes > memory:
        raise UserError(f"input {name!r} of shape {'x'.join(map(str, shape))} would take "
                        f"{nbytes / 1e9:.3g} GB, more than this machine's memory ({memory / 1e9:.3g} GB); "
                        "give smaller dims with --shape")


# A sliding window (Mistral, Gemma 2: key j is kept for query i when j > i - W) is an integer
# constant added to or subtracted from positions on their way to a comparison, whichever exporter
# wrote it, or the diagonal of a Trilu (older transformers: Mistral's triu(mask, diagonal=-W),
# Gemma 2's tril(ones, diagonal=-W), or an offset P - W). Decoders get a past longer than the
# largest such constant, so a rewrite that loses the band changes the numbers. Larger constants
# are not windows worth that much memory.
_COMPARISONS = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
_INDEX_OPS = {"Add", "Sub", "Unsqueeze", "Squeeze", "Cast", "Reshape", "Expand", "Neg"}
_MAX_WINDOW = 8192


def _index_graph(model: onnx.ModelProto | ir.Model) -> tuple[list[tuple[str, list[str], list[str]]], dict[str, int]]:
    """(op_type, inputs, outputs) of the nodes of the graph and its subgraphs (an Optimum merged
    decoder holds every layer in If branches) and their readable integer scalars (initializers
    held inline or in onnx-ir, Constant nodes; never a weight file read)."""
    scalars: dict[str, int] = {}

    def keep(name: str, arr: Any) -> None:
        arr = np.asarray(arr)
        if arr.size == 1 and arr.dtype in (np.int64, np.int32):
            scalars[name] = int(arr.ravel()[0])

    if isinstance(model, onnx.ModelProto):
        nodes = []

        def walk(g: onnx.GraphProto) -> None:
            tensors = [(t.name, t) for t in g.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
            for n in g.node:
                nodes.append((n.op_type, list(n.input), list(n.output)))
                tensors += [(n.output[0], a.t) for a in n.attribute
                            if n.op_type == "Constant" and n.output and a.name == "value"]
                for a in n.attribute:
                    for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                        walk(sub)
            for name, t in tensors:
                if np.prod(t.dims, dtype=np.int64) == 1:
                    keep(name, onnx.numpy_helper.to_array(t))

        walk(model.graph)
        return nodes, scalars
    nodes = []
    for g in model.graphs():
        nodes += [(n.op_type, [x.name if x is not None else "" for x in n.inputs], [o.name for o in n.outputs])
                  for n in g]
        for name, v in g.initializers.items():
            if v.const_value is not None and v.const_value.size == 1:
                keep(name, v.const_value.numpy())
        for n in g:
            if n.op_type == "Constant" and "value" in n.attributes and n.attributes["value"].value.size == 1:
                keep(n.outputs[0].name, n.attributes["value"].value.numpy())
    return nodes, scalars


def window_constant(model: onnx.ModelProto | ir.Model) -> int:
    """The largest integer scalar (2.._MAX_WINDOW; a negative one by its magnitude, a window
    added as ``Add(q_idx, -W)``) that an Add, Sub, comparison or Trilu takes and whose result
    reaches a Less/Greater comparison or a Trilu's diagonal within four index ops (the diagonal
    itself counts); 0 when there is none."""
    return band_constant(*_index_graph(model))


def band_constant(nodes: Sequence[tuple[str, Sequence[str], Sequence[str]]], scalars: Mapping[str, int]) -> int:
    """window_constant over ``nodes`` ((op_type, inputs, outputs), value names any strings) and
    ``scalars`` (the integer scalars among their inputs): the per-rewrite check reads it of a
    cut-out."""
    uses: dict[str, list[tuple[str, list[str], list[str]]]] = {}
    for n in nodes:
        for x in n[1]:
            uses.setdefault(x, []).append(n)
    def band_end(m: tuple[str, Sequence[str], Sequence[str]], via: str) -> bool:
        return m[0] in _COMPARISONS or (m[0] == "Trilu" and len(m[1]) > 1 and m[1][1] == via)

    best = 0
    for n in nodes:
        if n[0] not in _COMPARISONS and n[0] not in ("Add", "Sub", "Trilu"):
            continue
        for x in n[1]:
            c = abs(scalars[x]) if x in scalars else None
            if c is None or not max(best, 1) < c <= _MAX_WINDOW:
                continue
            frontier = [(n, x)]   # (node, the value it was reached through)
            for _ in range(5):
                if any(band_end(m, via) for m, via in frontier):
                    best = c
                    break
                frontier = [(u, o) for m, _ in frontier if m is n or m[0] in _INDEX_OPS
                            for o in m[2] for u in uses.get(o, [])]
    return best


def _contrib_head_sizes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """A KV cache's symbolic head size that its com.microsoft GroupQueryAttention / MultiHeadAttention
    fixes (onnxruntime-genai's ``kv_cache_dim``: a guess would make the original fail), unless the
    user gave it (passes/contrib_head_size.py)."""
    if not any(n.domain == "com.microsoft" and n.op_type in ("GroupQueryAttention", "MultiHeadAttention")
               for n in model.graph.node):
        return {}
    from onnx_fuse.passes.contrib_head_size import head_size_bindings

    return {k: v for k, v in head_size_bindings(ir.from_proto(model).graph).items() if k not in shapes}


def _symbol_values(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]],
                   window: int | None = None) -> dict[str, int]:
    """A value for every symbolic input dim: the user's (--shape batch=2), else small defaults
    that are not 1, so broadcasting bugs show (2 for a leading, batch-like dim, 5 for a past
    length, 8 otherwise: past and new lengths differ, so mixing them up shows too). A past is
    longer than any window constant of the graph (window_constant), so the band is exercised.

    The past length is the dim on a past input's past axis, whatever the exporter named it
    (``past_sequence_length``, ``p``); a decoder's mask length is past + new (length_ties), or
    the original model itself fails to run on the random inputs.
    """
    from onnx_fuse.rewrite._local_check import _eval_dim

    values: dict[str, int] = dict(_contrib_head_sizes(model, shapes))
    past = max(5, (window_constant(model) if window is None else window) + 1)
    past_dims = {d for vi in _pasts(model) if isinstance(d := _dim(vi, _past_axis(vi)), str)}
    formulas: list[tuple[str, int]] = []
    for vi in model.graph.input:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.dim_param and d.dim_param not in values:
                if d.dim_param.isdigit():   # Optimum writes one new token per step as the symbol "1"
                    values[d.dim_param] = int(d.dim_param)
                    continue
                given = shapes.get(d.dim_param)
                if not given and not d.dim_param.isidentifier():
                    formulas.append((d.dim_param, i))   # '2*batch' (BLOOM 4.38's cache): after its names
                    continue
                is_past = d.dim_param in past_dims or d.dim_param.lower().startswith("past")
                default = 2 if i == 0 else past if is_past else 8
                values[d.dim_param] = given[0] if given else default
    for name, i in formulas:
        if name not in values:
            v = _eval_dim(name, values)
            values[name] = v if v is not None and v > 0 else 2 if i == 0 else 8
    for name, terms in length_ties(model).items():
        if name not in shapes:
            values[name] = sum(x if isinstance(x, int) else values.get(x, 8) for x in terms)
    return values


def _concrete_shape(vi: onnx.ValueInfoProto, shapes: Mapping[str, tuple[int, ...]],
                    symbols: Mapping[str, int]) -> list[int]:
    if vi.name in shapes:
        return list(shapes[vi.name])
    return [d.dim_value if d.HasField("dim_value") else symbols.get(d.dim_param) or (2 if i == 0 else 8)
            for i, d in enumerate(vi.type.tensor_type.shape.dim)]


def _gather_bound(model: onnx.ModelProto, name: str) -> int:
    """Rows of the smallest constant table that input ``name`` indexes directly through Gather
    (a huge number when it indexes none)."""
    tables = {t.name: t for t in model.graph.initializer}
    bound = 1 << 62
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
            table = tables.get(node.input[0])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if table is not None and table.dims:
                bound = min(bound, table.dims[axis % len(table.dims)])
    return bound


# --- decoders with a KV cache -------------------------------------------------------------------
# Names as exporters write them: dynamo and Optimum ``past_key_values.N.key/value``, older
# exports ``past_key.N``/``past_value.N`` or ``past.N``; Optimum's merged decoder adds a bool
# ``use_cache_branch`` that picks the If branch with or without the past.

_NEW_TOKENS = ("input_ids", "decoder_input_ids", "inputs_embeds")


def _is_past(vi: onnx.ValueInfoProto) -> bool:
    t = vi.type.tensor_type
    return (vi.name.lower().startswith("past") and t.elem_type in _FLOATS
            and len(t.shape.dim) >= 3)


def _is_cross(vi: onnx.ValueInfoProto, model: onnx.ModelProto) -> bool:
    """An input sized by the encoder, not by the decoder's past (the cross-attention cache and the
    encoder mask of a seq2seq decoder): named for the encoder, or a symbolic length of it is also
    a dim of a float input that is not a past (encoder_hidden_states)."""
    if "encoder" in vi.name.lower():
        return True
    syms = {d.dim_param for d in list(vi.type.tensor_type.shape.dim)[1:] if d.dim_param}
    others = {d.dim_param for o in model.graph.input if o.name != vi.name and not _is_past(o)
              and o.type.tensor_type.elem_type in _FLOATS
              for d in list(o.type.tensor_type.shape.dim)[1:] if d.dim_param}
    return bool(syms & others)


def _past_axis(vi: onnx.ValueInfoProto) -> int:
    """The past-length axis of a past input: a dim named like a length, else 4-D [B, H, P, D]'s 2."""
    dims = list(vi.type.tensor_type.shape.dim)
    for i, d in enumerate(dims[1:], 1):
        if d.dim_param and re.search(r"past|seq|len|cache", d.dim_param, re.I):
            return i
    return 2 if len(dims) == 4 else len(dims) - 2


def cache_branch_input(model: onnx.ModelProto) -> str | None:
    """The bool input that picks an If branch with or without the past (Optimum's
    ``use_cache_branch``), if the model has one."""
    conds = {n.input[0] for n in model.graph.node if n.op_type == "If" and n.input}
    for vi in model.graph.input:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.BOOL and (
                vi.name == "use_cache_branch" or (vi.name in conds and "cache" in vi.name.lower())):
            return vi.name
    return None


def _dim(vi: onnx.ValueInfoProto, axis: int) -> int | str | None:
    """Dim ``axis`` of an input: its size, its symbol, or None (unnamed, or no such axis)."""
    dims = vi.type.tensor_type.shape.dim
    if not -len(dims) <= axis < len(dims):
        return None
    d = dims[axis]
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)


def _real(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _pasts(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The self-attention past inputs (a seq2seq decoder's cross cache left out)."""
    return [vi for vi in _real(model) if _is_past(vi) and not _is_cross(vi, model)]


def _new_tokens_input(model: onnx.ModelProto) -> onnx.ValueInfoProto | None:
    """The input carrying a decoder step's new tokens on its axis 1: the token ids or embeddings
    (input_ids, inputs_embeds), else the first other input of rank >= 2 that is neither a past, a
    mask nor sized by the encoder (a hidden state [B, S, H], position ids [B, S])."""
    real = [vi for vi in _real(model) if len(vi.type.tensor_type.shape.dim) >= 2]
    named = next((vi for vi in real if vi.name in _NEW_TOKENS), None)
    return named or next((vi for vi in real if not _is_past(vi) and "mask" not in vi.name.lower()
                          and not _is_cross(vi, model)), None)


def length_ties(model: onnx.ModelProto | ir.Model) -> dict[str, tuple[int | str, int | str]]:
    """{mask dim: (past dim, new-token dim)}: input dims that must be the sum of two others for a
    decoder with a KV cache to run. Its attention mask spans the cached and the new tokens,
    whatever the exporter named that length (``total_sequence``, ``t``) or the others; the dims
    are found by where they sit: the past axis of a past input, axis 1 of the new tokens'
    input (_new_tokens_input), and the last dim of a mask input when nothing else fixes it (no
    past, new-token or float input other than a mask has it). Dims are sizes or symbols; an onnx-ir model is read
    through its graph inputs."""
    if isinstance(model, ir.Model):
        inputs = [onnx.helper.make_tensor_value_info(
            v.name, int(v.dtype) if v.dtype is not None else 0,
            None if v.shape is None else [d if isinstance(d, int) else d.value for d in v.shape.dims])
            for v in model.graph.inputs if v.name not in model.graph.initializers]
        model = onnx.helper.make_model(onnx.helper.make_graph([], "inputs", inputs, []))
    pasts, new = _pasts(model), _new_tokens_input(model)
    if not pasts or new is None:
        return {}
    p, s = _dim(pasts[0], _past_axis(pasts[0])), _dim(new, 1)
    if p is None or s is None:
        return {}
    fixed = {_dim(vi, i) for vi in _real(model) for i in range(len(vi.type.tensor_type.shape.dim))
             if _is_past(vi) or vi is new or (vi.type.tensor_type.elem_type in _FLOATS
                                                and "mask" not in vi.name.lower())}
    ties: dict[str, tuple[int | str, int | str]] = {}
    for vi in _real(model):
        t = _dim(vi, -1)
        if ("mask" in vi.name.lower() and len(vi.type.tensor_type.shape.dim) >= 2 and isinstance(t, str)
                and t not in fixed and not _is_cross(vi, model)):
            ties[t] = (p, s)
    return ties


def _decoder_lengths(model: onnx.ModelProto, real: list[onnx.ValueInfoProto],
                     shapes: Mapping[str, tuple[int, ...]], symbols: Mapping[str, int]) -> tuple[int, int] | None:
    """(past length, new tokens) of a decoder with a KV cache, or None."""
    past = [vi for vi in real if _is_past(vi) and not _is_cross(vi, model)]
    if not past:
        return None
    past_len = _concrete_shape(past[0], shapes, symbols)[_past_axis(past[0])]
    new = _new_tokens_input(model)
    if new is None:
        return None
    return past_len, _concrete_shape(new, shapes, symbols)[1]


def make_inputs(model: onnx.ModelProto, *, shapes: Mapping[str, tuple[int, ...]] | None = None,
                seed: int = 0, pad_masks: bool = True, cache_branch: bool = True,
                window: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs for every real graph input (initializer-backed inputs are left alone).

    Integer inputs named like masks are ones, with the second half of the last row padded (0)
    when ``pad_masks``, so mask handling is exercised. In a decoder with a KV cache (past inputs
    beside the new tokens' ids, embeddings or hidden state) the mask spans past + new tokens
    (length_ties: found by where the dims sit, not by their names), ``position_ids`` and ``cache_position``
    count from the past length, and ``cache_branch=False`` feeds a merged decoder's no-cache
    branch: ``use_cache_branch`` false, an empty past, a mask over the new tokens only. ``window``:
    the graph's window constant when the caller has read it (window_constant of a model whose
    weights ``model`` lacks); the past is longer than it."""
    rng = np.random.default_rng(seed)
    shapes = shapes or {}
    check_shape_names(model, shapes)
    inits = {i.name for i in model.graph.initializer}
    symbols = _symbol_values(model, shapes, window)
    real = [vi for vi in model.graph.input if vi.name not in inits]
    lengths = _decoder_lengths(model, real, shapes, symbols)
    ties = length_ties(model)
    branch = cache_branch_input(model)
    past_len = None
    if lengths is not None:
        past_len = lengths[0] if cache_branch or branch is None else 0
    # Optimum's merge declares the mask as its no-cache decoder's, [batch, sequence_length]; the
    # cache branch still reads it over past + new tokens
    new_vi = _new_tokens_input(model) if branch is not None else None
    new_dim = _dim(new_vi, 1) if new_vi is not None else None
    feeds: dict[str, np.ndarray] = {}
    for vi in real:
        if not vi.type.HasField("tensor_type"):
            raise UserError(f"input {vi.name!r} is not a tensor; give inputs with --inputs FILE.npz")
        elem = vi.type.tensor_type.elem_type
        if elem not in _ONNX_TO_NP:
            raise UserError(f"input {vi.name!r} has dtype {onnx.TensorProto.DataType.Name(elem)}, "
                            "which random inputs do not cover; give --inputs FILE.npz")
        dtype = np.dtype(_ONNX_TO_NP[elem])
        shape = _concrete_shape(vi, shapes, symbols)
        lname = vi.name.lower()
        dims = vi.type.tensor_type.shape.dim
        symbolic_last = bool(dims) and not dims[-1].HasField("dim_value") and vi.name not in shapes
        tied_last = symbolic_last and (not dims[-1].dim_param or (dims[-1].dim_param in ties
                                                                   and dims[-1].dim_param not in shapes)
                                       or (new_dim is not None and dims[-1].dim_param == new_dim))
        if past_len is not None and vi.name not in shapes and not _is_cross(vi, model):
            new_tokens = lengths[1]
            if _is_past(vi):
                shape[_past_axis(vi)] = past_len
            elif "mask" in lname and len(shape) == 2 and tied_last:
                shape[-1] = past_len + new_tokens          # the mask covers past + new tokens
            elif ("position" in lname) and shape and symbolic_last:
                shape[-1] = new_tokens
        check_input_size(vi.name, shape, dtype)
        if vi.name == branch:
            arr = np.full(shape, cache_branch, np.bool_)
        elif dtype == np.bool_:
            arr = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            if "mask" in lname:
                arr = np.ones(shape, dtype)
                if pad_masks and arr.ndim >= 2 and arr.shape[-1] > 1 and arr.shape[0] > 1:
                    arr[-1, _first_padded(model, arr.shape[-1], window):] = 0  # exercises mask handling
            elif "position" in lname and shape:
                start = past_len or 0                  # new tokens come after the past
                arr = np.broadcast_to(np.arange(start, start + shape[-1], dtype=dtype), shape).copy()
            else:
                # Token ids and type ids index embedding tables: stay inside the smallest.
                high = min(4, _gather_bound(model, vi.name))
                arr = rng.integers(0, max(high, 1), size=shape, dtype=dtype)
        else:
            arr = rng.standard_normal(shape).astype(dtype)
        feeds[vi.name] = np.asarray(arr)  # a rank-0 comparison is a numpy scalar, which ORT refuses
    return feeds


def _first_padded(model: onnx.ModelProto, length: int, window: int | None) -> int:
    """Where the padding of the padded mask row starts: its second half. In a half-precision
    model with a sliding window, fewer than W positions, so no query row has all of its window
    in the padding: such a row's output is set by the precision in which a runtime adds the
    float16 mask minimum (ORT CPU adds it in float32 and softmaxes the raw scores, a fused fp16
    kernel gives uniform weights), not by the graph. Float32 keeps the half: there the rows agree."""
    start = length // 2
    # half weights or inputs count too: a model converted to fp16 with keep_io_types (float32
    # inputs and outputs, Casts at the edges) adds the same float16 minimum inside
    half = _half_floor(model) is not None or any(
        o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
        for o in model.graph.output)
    w = (window if window is not None else window_constant(model)) if half else 0
    return pad_start(length, w)


def pad_start(length: int, window: int) -> int:
    """Where a padded mask row's padding starts: its second half, or, where a half-precision model
    has a sliding window (``window`` > 0), its last W - 1 positions at most (_first_padded says why;
    the per-rewrite checks feed the same rows)."""
    start = length // 2
    return max(start, length - (window - 1)) if window else start


PADDED_ROW = "padded-row"
PADDED_ROW_NOTE = (f"[{PADDED_ROW}]: the first row of each integer mask input all zeros (a fully padded sequence), "
                   "the other feeds as in the first case")


def _integer_masks(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[onnx.ValueInfoProto]:
    """The inputs named like a mask that ``feeds`` gives as an integer [B, T] array."""
    return [vi for vi in model.graph.input if "mask" in vi.name.lower() and vi.name in feeds
            and np.issubdtype(np.asarray(feeds[vi.name]).dtype, np.integer) and np.ndim(feeds[vi.name]) == 2]


def padded_row_case(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[str, dict[str, np.ndarray]] | None:
    """``feeds`` with the first batch row of every integer [B, T] mask input all zeros: a sequence with no
    kept key, whose query rows a rewrite must treat as the original does (a finite fill gives the mean of
    V, -inf gives NaN rows, which compare_arrays' nan_rows rule accepts, a guard gives 0). None without
    such an input of two rows or more (the last row stays half padded, so one row keeps keys), and for a
    half-precision model: there such a row has no exact form (the float16 Adds absorb the scores into
    the mask's floor, a fused op adds in float32; docs/holdout.md "Masked rows (session 14)")."""
    if _half_floor(model) is not None or any(
            o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
            for o in model.graph.output):
        return None
    names = [vi.name for vi in _integer_masks(model, feeds) if np.shape(feeds[vi.name])[0] > 1]
    if not names:
        return None
    out = dict(feeds)
    for name in names:
        arr = np.array(feeds[name])
        arr[0] = 0
        out[name] = arr
    return PADDED_ROW, out


LONGER_MASK = "longer-mask"
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a symbol of a dim name ('past + sequence', '2*batch')
LONGER_MASK_NOTE = (f"[{LONGER_MASK}]: each integer mask input declared with a length of its own fed 2 columns "
                    "longer (kept), which the original takes (it reads the keys' columns only)")


def longer_mask_case(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[str, dict[str, np.ndarray]] | None:
    """``feeds`` with every integer [B, T] mask input whose T is a symbol no other input or output
    declares (a length of its own: transformers 5's decoders read the first P + S columns of it)
    2 columns longer, kept: a rewrite that rebuilds a mask from the whole input must still take it.
    None without such an input; the caller keeps the case only where the original runs on it."""
    declared = collections.Counter(d.dim_param for vi in (*model.graph.input, *model.graph.output)
                                   for d in vi.type.tensor_type.shape.dim if d.dim_param)

    def own(dim: str) -> bool:
        # named once, and no symbol of it named elsewhere: 'sequence + 6' over an input declared [B, sequence]
        # is that input's length plus 6 (a drafter's mask over 6 context states and the block), which the
        # optimizer may read off either input (passes/_dim_sums.py), not a length of its own
        symbols = set(_SYMBOL.findall(dim))
        return declared.get(dim) == 1 and not any(symbols & set(_SYMBOL.findall(other))
                                                  for other in declared if other != dim)

    names = [vi.name for vi in _integer_masks(model, feeds) if len(vi.type.tensor_type.shape.dim) == 2
             and own(vi.type.tensor_type.shape.dim[1].dim_param)]
    if not names:
        return None
    out = dict(feeds)
    for name in names:
        arr = np.asarray(feeds[name])
        out[name] = np.concatenate([arr, np.ones((arr.shape[0], 2), arr.dtype)], axis=1)
    return LONGER_MASK, out


def input_cases(model: onnx.ModelProto, *, shapes: Mapping[str, tuple[int, ...]] | None = None,
                seed: int = 0, pad_masks: bool = True,
                window: int | None = None) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Labelled random feeds: one set, or for a merged decoder one per branch (with and without
    the past), so both branches of its If are verified."""
    branch = cache_branch_input(model)
    if branch is None:
        return [("", make_inputs(model, shapes=shapes, seed=seed, pad_masks=pad_masks, window=window))]
    return [(f"{branch}={int(flag)}", make_inputs(model, shapes=shapes, seed=seed, pad_masks=pad_masks,
                                                  cache_branch=flag, window=window)) for flag in (True, False)]


def _runs(sess: Any, names: list[str], feeds: Mapping[str, np.ndarray]) -> bool:
    try:
        sess.run(names, dict(feeds))
    except Exception:  # noqa: BLE001 - the model's contract refuses these feeds: no case
        return False
    return True


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    if not os.fspath(path):   # Path("") is ".", which would be "a folder"
        raise UserError("the inputs path is empty")
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a folder; give the inputs as a .npz file")
    if not p.is_file():
        raise UserError(f"{p}: inputs file not found")
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):  # else numpy says it holds pickled data
        raise UserError(f"{p}: not a .npz file (np.savez writes a zip archive of arrays by name)")
    try:
        with np.load(p, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:
        raise UserError(f"{p}: not a readable .npz file ({exc})") from None


@dataclasses.dataclass
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float
    mean_abs: float
    passed: bool
    reason: str = ""


def nan_rows(ref: np.ndarray) -> np.ndarray:
    """Positions of ``ref`` on rows (all of the last axis) that are NaN throughout, among rows
    that are not: a query row of attention with no kept key (every score filled with -inf, so
    softmax divides 0 by 0) is NaN over its whole feature axis, [B, S, H*D] or [B, H, S, D]
    alike, and so is the projection of it. Such a row is undefined output: a fused op may give
    numbers there (ONNX Attention-23 gives 0). Outputs below rank 2, and outputs NaN
    everywhere (nothing left to compare), have none."""
    if ref.ndim < 2 or ref.shape[-1] == 0:
        return np.zeros(ref.shape, bool)
    rows = np.isnan(ref).all(axis=-1, keepdims=True)
    if rows.all():
        return np.zeros(ref.shape, bool)
    return np.broadcast_to(rows, ref.shape)


def saturate(ref: np.ndarray, got: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """``ref`` and ``got`` as float64 with the reference's finite values beyond +-``bound`` (the
    finite range of the type the optimized model computes in: --precision fp16's 65504) set to the
    bound, and ``got``'s values there at or past the bound, of the same sign (infinities included),
    too: a low-precision model can only give the bound (constants are clipped to it) or overflow to
    infinity where the original gives finfo(float32).min as a mask fill. Where an op scales that fill
    before the output (Where(causal, s, min) * scale: the original's -9.8e37, the clipped fill's
    -65504 * 0.29), the low model gives the same computation on the clipped fill, ``ref * bound /
    finfo(float32).max`` (float16's rtol 1e-2): counted as the bound too (fuzz 25001, seed 3123461614)."""
    r, g = ref.astype(np.float64), got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        over = np.isfinite(r) & (np.abs(r) > bound)
        clipped = np.sign(r) * bound
        scaled = r * (bound / float(np.finfo(np.float32).max))   # a clipped finfo.min fill, scaled alike
        near = np.abs(g - scaled) <= 1e-2 * np.abs(scaled)
        g = np.where(over & ((np.abs(g) >= bound) | near) & (np.sign(g) == np.sign(r)), clipped, g)
    return np.where(over, clipped, r), g


def compare_arrays(name: str, ref: np.ndarray, got: np.ndarray, atol: float, rtol: float,
                   bound: float | None = None) -> OutputDiff:
    """Elementwise |got-ref| <= atol + rtol*|ref|; NaNs must sit in the same places, except on
    rows the original has NaN throughout (``nan_rows``), where any value is accepted. ``bound``:
    the finite range of the optimized model's compute type (``saturate``), None for none."""
    if ref.shape != got.shape:
        return OutputDiff(name, float("inf"), float("inf"), float("inf"), False,
                          f"shape {got.shape} != {ref.shape}")
    if ref.dtype != got.dtype:
        return OutputDiff(name, float("inf"), float("inf"), float("inf"), False,
                          f"dtype {got.dtype} != {ref.dtype}")
    if ref.size == 0:
        return OutputDiff(name, 0.0, 0.0, 0.0, True)
    if not np.issubdtype(ref.dtype, np.floating):
        equal = bool(np.array_equal(ref, got))
        diff = 0.0 if equal else float(np.max(np.abs(ref.astype(np.float64) - got.astype(np.float64))))
        return OutputDiff(name, diff, diff, diff, equal, "" if equal else "integer outputs differ")
    r, g = saturate(ref, got, bound) if bound is not None else (ref.astype(np.float64), got.astype(np.float64))
    nan_ref, nan_got = np.isnan(r), np.isnan(g)
    undefined = nan_rows(r)
    if not np.array_equal(nan_ref & ~undefined, nan_got & ~undefined):
        return OutputDiff(name, float("nan"), float("nan"), float("nan"), False, "NaN positions differ")
    finite = ~nan_ref
    err = np.abs(g[finite] - r[finite])
    err = np.where(np.isnan(err), 0.0, err)  # inf - inf in matching places
    rel = err / np.maximum(np.abs(r[finite]), 1e-12)
    ok = bool(np.all(err <= atol + rtol * np.abs(r[finite]))) if err.size else True
    return OutputDiff(name, float(err.max(initial=0.0)), float(rel.max(initial=0.0)),
                      float(err.mean()) if err.size else 0.0, ok)


def _real_inputs(model: onnx.ModelProto) -> set[str]:
    inits = {t.name for t in model.graph.initializer}
    return {vi.name for vi in model.graph.input if vi.name not in inits}


# Domains whose ops ONNX Runtime (CPU) has kernels for; ours run through their references.
_ORT_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc",
                "ai.onnx.preview.training", OUR_DOMAIN}
# Above this many bytes of weights, ORT loads a model from a temporary file with external data
# instead of from one in-memory protobuf (which cannot exceed 2 GB and costs copies).
_INLINE_LIMIT = 256 << 20


def _custom_op(model: onnx.ModelProto) -> str | None:
    """``domain::Op`` of the first node ORT has no kernel for (functions of the model aside)."""
    local = {(f.domain, f.name) for f in model.functions}

    def walk(graph: onnx.GraphProto) -> str | None:
        for n in graph.node:
            if n.domain not in _ORT_DOMAINS and (n.domain, n.op_type) not in local:
                return f"{n.domain}::{n.op_type}"
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    found = walk(g)
                    if found:
                        return found
        return None

    return walk(model.graph)


# Ops of quantized models: ORT's graph optimizations rewrite DequantizeLinear + MatMul into integer
# kernels that quantize the activations too (or int4 ones into MatMulNBits), which moves the outputs.
_QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                        "ConvInteger", "MatMulNBits", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"})


def _quantized(model: onnx.ModelProto) -> bool:
    def walk(graph: onnx.GraphProto) -> bool:
        for n in graph.node:
            if n.op_type in _QUANT_OPS or n.op_type.startswith("QLinear"):
                return True
            for a in n.attribute:
                if any(walk(g) for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)):
                    return True
        return False

    return walk(model.graph)


def _quantized_drift(side: "_Side", sess_off, names: list[str], feeds: dict, first, label: str) -> str | None:
    """For a quantized model (original or optimized): the note saying how far ORT's default graph
    optimizations move its outputs when that is beyond tolerance (then the optimized model is
    compared with them off, the same graph semantics on both sides), else None (the usual
    comparison stands). ``first``: (feeds, outputs with them off) already computed, or None."""
    try:
        if first is not None and feeds is first[0]:
            off = first[1]
        else:
            off = (sess_off or side.session(ort_optimizations=False)).run(names, feeds)
        moved = side.session(ort_optimizations=True).run(names, feeds)
    except Exception:  # noqa: BLE001 - the comparison below reports what fails to run
        return None
    floor = _half_floor(side.skeleton)
    worst = None
    for name, r, g in zip(names, off, moved):
        r, g = np.asarray(r), np.asarray(g)
        atol, rtol = DEFAULT_TOLERANCE.get(r.dtype, (1e-4, 1e-3))
        if floor is not None and r.dtype.kind == "f":
            atol, rtol = max(atol, floor[0]), max(rtol, floor[1])
        d = compare_arrays(name, r, g, atol, rtol)
        if not d.passed and (worst is None or d.max_abs > worst.max_abs):
            worst = d
    if worst is None:
        return None
    return (f"quantized {label}: ONNX Runtime's own graph optimizations move its output '{worst.name}' "
            f"by up to {worst.max_abs:.3g} (QDQ / int4 fusions), so the optimized model ran with them off "
            "too (it was also loaded and run with them on)")


def _qdq_hint(exc: BaseException) -> str:
    """What ORT's known refusal of int8 QDQ graphs at opset >= 21 is, when it is that one."""
    text = str(exc)
    if "output_dtype" in text and "y_zero_point" in text:
        return (" (ONNX Runtime's QDQ propagation + int8-to-uint8 rewrite at opset >= 21, onnxruntime "
                "issue 25526; the fused ops raised the opset: the model loads with "
                "disabled_optimizers=['QDQPropagationTransformer'], or quantize activations as uint8)")
    return ""


def _unoptimized(opt: "_Side", notes: list[str]):
    """The optimized model's session with ORT's graph optimizations off, or None when it still fails
    to load. Not merely less QDQPropagationTransformer: with the rest on, ORT's QDQ fusions moved
    gpt2 fp16_qdq's logits by 0.42 at opset 23, where the graph itself is within 0.003."""
    try:
        sess = opt.session(ort_optimizations=False)
    except Exception:  # noqa: BLE001 - the caller reports the first refusal
        return None
    notes.append("the optimized model runs outside ONNX Runtime (trt); ORT refuses its int8 QDQ at opset >= 21 "
                 "with its graph optimizations on (QDQPropagationTransformer, onnxruntime issue 25526), so it "
                 "ran with them off")
    return sess


def _output_steps(ref: "_Side") -> dict[str, float]:
    """Outputs the original computes as DequantizeLinear(QuantizeLinear(...)): values on a grid of
    step ``scale``, where a difference in the last float bit before the QuantizeLinear (a fused op's
    summation order) flips a rounding and moves the output by one whole step. Output name -> the
    largest step (per-channel scales: their max); scales not stored inline are not read."""
    steps: dict[str, float] = {}
    if ref.ir is not None:
        for out in ref.ir.graph.outputs:
            node = out.producer()
            if node is not None and node.op_type == "DequantizeLinear" and len(node.inputs) > 1 \
                    and node.inputs[1] is not None and node.inputs[1].const_value is not None:
                steps[out.name] = float(np.max(np.abs(node.inputs[1].const_value.numpy())))
        return steps
    return dequantized_output_steps(ref.skeleton)


def dequantized_output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """``_output_steps`` on a ModelProto (the fuzzer's tolerance reads it too, tools/fuzz_differential.py):
    output name -> the step of the DequantizeLinear that computes it, its scale an initializer
    (not external; sparse too) or a Constant node."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL}
    inits.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                  for a in n.attribute if a.name == "value"})
    # a sparse scale's largest entry is among its stored values (the rest are 0)
    inits.update({sp.values.name: sp.values for sp in graph.sparse_initializer
                  if sp.values.data_location != onnx.TensorProto.EXTERNAL})
    producers = {o: n for n in graph.node for o in n.output}
    steps: dict[str, float] = {}
    for out in graph.output:
        node = producers.get(out.name)
        if node is not None and node.op_type == "DequantizeLinear" and len(node.input) > 1 \
                and node.input[1] in inits:
            scale = onnx.numpy_helper.to_array(inits[node.input[1]])
            steps[out.name] = float(np.max(np.abs(scale), initial=0.0))
    return steps


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)[:limit]


def _weights_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None)


class _Side:
    """One model of a comparison: a skeleton proto (no weight bytes) to build inputs from, and
    the way ORT loads it: from bytes when small, else from a file with external data (a path
    given by the user is loaded as it is; an in-memory model over the limit is saved to ``tmp``)."""

    def __init__(self, model: Any, tmp: str, tag: str):
        self.tmp, self.tag = Path(tmp), tag
        self.path: Path | None = None
        self.proto: onnx.ModelProto | None = None
        self.ir: ir.Model | None = None
        if isinstance(model, (str, os.PathLike)):
            from onnx_fuse.model_io import load_proto

            self.skeleton, _ = load_proto(model)      # checks external data; reads no weights
            if uses_our_ops(self.skeleton):   # our ops are retargeted on a copy, never in place
                from onnx_fuse.model_io import load_model

                self.ir = load_model(model)
            else:
                self.path = Path(model)
        elif isinstance(model, onnx.ModelProto):
            self.skeleton = self.proto = model
        else:
            from onnx_fuse.structure_check import skeleton_from_ir

            self.ir = model
            self.skeleton = skeleton_from_ir(model, placeholders=True)

    def session(self, *, ort_optimizations: bool):
        import onnxruntime as ort

        if self.path is None and (self.proto is not None or _weights_bytes(self.ir) <= _INLINE_LIMIT):
            return make_session(self.proto if self.proto is not None else self.ir,
                                ort_optimizations=ort_optimizations, quiet=True)
        # quiet: every load or run failure is reported in verify's own one line; ORT's log would
        # add its copy above it (a StringNormalizer's missing locale printed three lines)
        opts = _session_options(ort_optimizations=ort_optimizations, quiet=True)
        path = self.path
        if path is None:
            path = self.tmp / f"{self.tag}.onnx"
            if not path.exists():
                ir.save(self.ir, path, external_data=f"{self.tag}.onnx.data", size_threshold_bytes=1024)
                proto = onnx.load(path, load_external_data=False)
                if uses_our_ops(proto):
                    from onnx_fuse.reference.ort_ops import prepare_session

                    onnx.save(prepare_session(proto, opts), path)
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def verify(original, optimized, *, inputs: Mapping[str, np.ndarray] | str | None = None,
           shapes: Mapping[str, tuple[int, ...]] | None = None, seed: int = 0,
           atol: float | None = None, rtol: float | None = None, raise_on_failure: bool = False,
           precision: str | None = None, ort_runtime: bool = True) -> dict[str, Any]:
    """Compare ``optimized`` with ``original`` in ORT; return a JSON-friendly summary.

    ``ort_runtime=False``: the optimized model runs elsewhere (target trt), ORT only checks its
    numbers, so ORT's known refusal of int8-activation QDQ at opset >= 21 (_qdq_hint) is met by
    running it with ORT's graph optimizations off (the graph's own semantics), with a note, instead
    of failing.

    ``atol`` / ``rtol`` replace every per-output tolerance. ``precision`` ("fp16" / "bf16": the
    optimized model was converted by --precision) raises each float output's to
    ``VERIFY_TOLERANCE[precision]``, which fp8 pools then add their bound to (fp8_tolerance).

    The original runs with ORT's graph optimizations off (the oracle); the optimized model runs
    the way users run it, with ORT's default graph optimizations, so a model ORT's own optimizer
    then refuses or breaks fails verification. A quantized original whose outputs ORT's own
    optimizations already move beyond tolerance (_quantized_drift) is the exception: the optimized
    model is loaded and run with them on, and compared with them off; so is a quantized optimized
    model that they move. Models are paths, protos or onnx-ir models; big ones are loaded by ORT
    from files with external data, never inlined into one protobuf.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="onnx-fuse-verify-") as tmp:
        ref, opt = _Side(original, tmp, "original"), _Side(optimized, tmp, "optimized")
        # the skeleton (no weight bytes) says whether the original is bf16: only then is anything loaded
        pair = _emulate_bf16_pair(original, optimized) if _bf16_valued(ref.skeleton) else None
        if pair is not None:
            ref, opt = _Side(pair[0], tmp, "original"), _Side(pair[1], tmp, "optimized")
        nbits = pair is None and (_nbits_accuracy(ref.skeleton) or _nbits_accuracy(opt.skeleton))
        if nbits:
            ref = _Side(_nbits_float_activations(original), tmp, "original")
            opt = _Side(_nbits_float_activations(optimized), tmp, "optimized")
        result = _verify(ref, opt, inputs=inputs, shapes=shapes, seed=seed, atol=atol, rtol=rtol,
                         precision=precision, bf16=pair is not None, ort_runtime=ort_runtime)
        if nbits:
            result.setdefault("notes", []).append(NBITS_NOTE)
    if raise_on_failure and not result["passed"]:
        raise VerificationError(failure_summary(result))
    return result


NBITS_NOTE = ("MatMulNBits with accuracy_level > 0 (onnxruntime-genai's CPU int4: the kernel may quantize "
              "its activations to int8, a permission, not the op's value): both models compared with it "
              "at 0, float activations")


def _nbits_accuracy(proto: onnx.ModelProto) -> bool:
    """Does a com.microsoft MatMulNBits of the model carry accuracy_level > 0 (any graph)?"""
    def walk(graph) -> bool:
        for n in graph.node:
            if n.op_type == "MatMulNBits" and n.domain == "com.microsoft" and any(
                    a.name == "accuracy_level" and a.i > 0 for a in n.attribute):
                return True
            if any(walk(a.g) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH):
                return True
        return False
    return walk(proto.graph)


def _nbits_float_activations(model: Any) -> onnx.ModelProto:
    """A copy of ``model`` whose MatMulNBits say accuracy_level 0: ORT's CPU kernel then multiplies
    float activations, so its own int8 rounding of A (level 4, which the onnx / trt lowering to
    DequantizeLinear + MatMul has no counterpart of) is not read as the optimizer's difference."""
    if isinstance(model, (str, os.PathLike)):
        proto = onnx.load(str(model))
    elif isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    else:
        proto = ir.to_proto(model)

    def walk(graph) -> None:
        for n in graph.node:
            if n.op_type == "MatMulNBits" and n.domain == "com.microsoft":
                for a in n.attribute:
                    if a.name == "accuracy_level":
                        a.i = 0
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(proto.graph)
    return proto


BF16_NOTE = ("bfloat16 model: ONNX Runtime's CPU provider has no bf16 MatMul / Add, so both models ran "
             "through emulate_bf16 (float32 math, every bf16 value rounded to bf16)")


def _bf16_valued(model: Any) -> bool:
    """The model holds a bfloat16 weight, input or typed value in its main graph."""
    bf16 = onnx.TensorProto.BFLOAT16
    if isinstance(model, ir.Model):
        g = model.graph
        return any(v.dtype == ir.DataType.BFLOAT16 for v in (*g.initializers.values(), *g.inputs)) or any(
            o.dtype == ir.DataType.BFLOAT16 for n in g for o in n.outputs)
    g = model.graph
    return any(t.data_type == bf16 for t in g.initializer) or any(
        v.type.tensor_type.elem_type == bf16 for v in (*g.input, *g.value_info, *g.output))


def _emulate_bf16_pair(original: Any, optimized: Any) -> tuple[onnx.ModelProto, onnx.ModelProto] | None:
    """ORT's CPU provider cannot run a bf16 model (no bf16 MatMul, Add, Softmax...), so an original
    holding bf16 values is compared through emulate_bf16 on both sides: float32 arithmetic with every
    bf16 value rounded to bf16, the rounding both graphs store. None for a model whose weights do not
    fit in one protobuf (it is left as it is: ORT then says it cannot load it)."""
    from onnx_fuse.passes.precision import emulate_bf16

    pair = []
    for model in (original, optimized):
        try:
            proto = to_proto(model)
            if isinstance(model, ir.Model):   # values a rewrite made untyped get their types
                proto = onnx.shape_inference.infer_shapes(proto)
            pair.append(emulate_bf16(proto))
        except (ValueError, OverflowError, onnx.shape_inference.InferenceError):
            return None
    return pair[0], pair[1]


def failure_summary(result: Mapping[str, Any]) -> str:
    """One line saying why a verify result failed."""
    if result.get("error"):
        return result["error"]
    bad = next((o for o in result["outputs"] if not o["passed"]), None)
    if bad is None:
        return result.get("skipped") or "nothing was compared"
    return (f"output {bad['name']!r} differs: max abs {bad['max_abs']:.3g}, max rel "
            f"{bad['max_rel']:.3g} {bad['reason']}").strip()


_PAGED_BLOCK = 4   # not a divisor of the default past + new length: a sequence spans a partial block
FP8_NOTE = ("fp8 KV pools: the original runs on its past rounded to e4m3 (per kv head scales); "
            "the op's rounding of the new tokens' K/V adds to each output's bound (the first "
            "layer's presents: 2^-4 relative, the rest 0.1 plus 0.1 x the output's magnitude); "
            "each fp8 attention's output is checked against the exact attention of its own inputs "
            "within what e4m3's rounding of its new tokens allows ('attention ... (fp8 pools)' rows)")


def _run_paged(ref_sess, opt_sess, ref: "_Side", opt: "_Side", names: list[str], ref_out: list,
               feeds: dict, seed: int) -> tuple[list[tuple], bool, dict, list]:
    """Run the paged-KV rewrite on the original's feeds turned into pool feeds
    (targets/paged_kv_feeds.py, the fuzzer's harness too); pair its outputs with the original's,
    present.* read back out of the pools. On fp8 pools the original reruns on its past rounded
    to e4m3, as the pools hold it. Returns (pairs, fp8, {present output: its fp8 pool's scales},
    the fp8 attention checks: _fp8_attention)."""
    from onnx_fuse.targets import paged_kv_feeds as pk

    total = pk.total_length(opt.skeleton, ref_out, feeds)
    ref_feeds, run_feeds = pk.paged_feeds(ref.skeleton, opt.skeleton, feeds, total=total,
                                          block_size=_PAGED_BLOCK, seed=seed)
    if any(ref_feeds[k] is not feeds[k] for k in feeds):
        ref_out = ref_sess.run(names, ref_feeds)
    got = pk.run_paged(opt_sess, opt.skeleton, run_feeds)
    paired = pk.paired_outputs(ref.skeleton, opt.skeleton, ref_out, got, run_feeds, total)
    if isinstance(paired, str):
        raise _PagedMismatch(paired)
    fp8 = pk.is_fp8(opt.skeleton)
    checks = _fp8_attention(opt, run_feeds) if fp8 else []
    return list(zip(*paired)), fp8, pk.pool_scales(ref.skeleton, opt.skeleton, run_feeds), checks


def _fp8_attention(opt: "_Side", run_feeds: dict) -> list["OutputDiff"] | str:
    """Each PagedAttention on fp8 pools against the exact attention of its own inputs, within
    what the op's e4m3 rounding of its new tokens allows (targets/fp8_attention_check.py): one
    OutputDiff each, or why it was not run (a model past the inline limit is not copied)."""
    from onnx_fuse.targets import fp8_attention_check as fc
    from onnx_fuse.targets import paged_kv_feeds as pk

    proto = opt.proto
    if proto is None and opt.ir is not None and _weights_bytes(opt.ir) <= _INLINE_LIMIT:
        proto = ir.serde.serialize_model(opt.ir)
    if proto is None:
        return "the fp8 attention check needs the model in memory (over 256 MB of weights: skipped)"
    try:   # each op's inputs read where it reads them (float32, after prepare_session's Casts)
        got, entries, probe = fc.run_probe(proto, run_feeds)
    except Exception as exc:  # the model itself ran: the copy with the extra outputs is ours
        return f"the fp8 attention check could not run its copy of the model ({_first_line(exc)})"
    out = []
    for e in entries:
        r = fc.check_attention(e, got, run_feeds, probe)
        out.append(OutputDiff(r.name, r.max_abs, r.max_rel, r.mean_abs, r.passed,
                              f"{r.ratio:.3g} x the bound of e4m3's rounding of its new tokens"))
    return out


class _PagedMismatch(Exception):
    """The paged model's outputs do not line up slot by slot with the original's."""


def _half_floor(model: onnx.ModelProto) -> tuple[float, float] | None:
    """float16's tolerance when the model computes in half precision (a float16 or bfloat16
    weight or input), else None. Its float32 outputs (type promotion: Optimum's Gemma 2 casts the
    attention output up) carry the rounding of the float16 steps before them, which a rewrite
    that reorders those steps changes by about float16's epsilon."""
    half = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    if any(t.data_type in half for t in model.graph.initializer) or any(
            i.type.tensor_type.elem_type in half for i in model.graph.input):
        return DEFAULT_TOLERANCE[np.dtype(np.float16)]
    return None


# A prefill longer than the largest window attribute costs a full forward pass of that length.
_LONG_PREFILL_CAP = 2048


def _attention_nodes(model: onnx.ModelProto, ops=("FusedAttention", "PagedAttention")) -> list[onnx.NodeProto]:
    """Our FusedAttention / PagedAttention nodes (``ops``), subgraphs (an If's branches) included."""
    from onnx_fuse.reference.ort_ops import all_nodes

    return [n for n in all_nodes(model.graph) if n.domain == OUR_DOMAIN and n.op_type in ops]


def window_attribute(model: onnx.ModelProto) -> int:
    """The largest ``window`` of our FusedAttention / PagedAttention nodes (subgraphs included)."""
    return max((int(a.i) for n in _attention_nodes(model) for a in n.attribute if a.name == "window"),
               default=0)


def _has_fused_attention(model: onnx.ModelProto) -> bool:
    """Whether the model holds one of them (in a branch too, like window_attribute)."""
    return bool(_attention_nodes(model))


def _long_prefill_cases(model: onnx.ModelProto, fused_window: int, shapes: Mapping[str, tuple[int, ...]] | None,
                        base: Mapping[str, np.ndarray], **kw: Any) -> tuple[list[tuple[str, dict[str, np.ndarray]]], str]:
    """Feeds whose new tokens outnumber ``fused_window`` (W + 3: the last three queries lose keys
    to the band), so a wrong window shows; none, with why, when the length is fixed, set by the
    user or above _LONG_PREFILL_CAP, and none without a note when ``base`` already exceeds W."""
    window = fused_window
    shapes = dict(shapes or {})
    vi = _new_tokens_input(model)
    dims = vi.type.tensor_type.shape.dim if vi is not None else []
    name = dims[1].dim_param if len(dims) >= 2 else ""
    length = window + 3
    if vi is not None and vi.name in base and np.ndim(base[vi.name]) >= 2 and base[vi.name].shape[1] > window:
        return [], ""   # the default case already exceeds it
    if not name or name in shapes or (vi is not None and vi.name in shapes):
        return [], f"window {window} in the optimized graph: the new tokens' length is fixed, so it is not exceeded"
    if length > _LONG_PREFILL_CAP:
        return [], (f"window {window} in the optimized graph: a prefill longer than it exceeds the "
                    f"{_LONG_PREFILL_CAP}-token cap, so the band is not exercised")
    shapes[name] = (length,)
    cases = input_cases(model, shapes=shapes, **kw)
    label = f"{name}={length}"
    return ([(f"{label}, {lab}" if lab else label, feeds) for lab, feeds in cases],
            f"window {window} in the optimized graph: also verified on {length} new tokens "
            f"({label}; cap {_LONG_PREFILL_CAP}), so a wrong window shows")


def _declared_size(d) -> int | None:
    """A dim's declared size: its value, or a symbol that is a number (Optimum's "1")."""
    if d.HasField("dim_value"):
        return d.dim_value
    return int(d.dim_param) if d.dim_param.isdigit() else None


def _contradictions(model: onnx.ModelProto, names: Sequence[str], outs: Sequence) -> list[tuple[str, int, int, int]]:
    """(output, axis, declared size, actual size) where the original's outputs on the feeds
    differ from a size the model declares for them."""
    declared = {o.name: o for o in model.graph.output}
    found = []
    for name, arr in zip(names, outs):
        dims = declared[name].type.tensor_type.shape.dim if name in declared else []
        shape = np.shape(arr)
        if len(dims) != len(shape):
            continue
        for axis, (d, got) in enumerate(zip(dims, shape)):
            size = _declared_size(d)
            if size is not None and size != got:
                found.append((name, axis, size, got))
    return found


def _feed_declared_sizes(ref_sess, model: onnx.ModelProto, names: list[str], feeds: dict,
                         shapes: Mapping[str, tuple[int, ...]], remake) -> tuple[dict, list, list, str | None]:
    """Feeds whose original outputs have the sizes the model declares.

    An export can declare a size it holds only at (Optimum's decoder-with-past declares logits
    [batch_size, "1", vocab]: one new token per step, and a graph traced at that length may only
    be right there). When the original's outputs on the feeds contradict a declared size, an input
    symbol the harness chose (not the user's --shape) that was fed the contradicted size is set to
    the declared one, if that makes the outputs agree. Returns (shapes, the first case's feeds,
    its original outputs, a note or None); ``remake(shapes)`` makes the first case's feeds."""
    outs = ref_sess.run(names, feeds)
    found = _contradictions(model, names, outs)
    if not found:
        return dict(shapes), feeds, outs, None
    name, axis, size, got = found[0]
    fed: dict[str, int] = {}
    for vi in _real(model):
        if vi.name in feeds and vi.name not in shapes:
            for d, n in zip(vi.type.tensor_type.shape.dim, np.shape(feeds[vi.name])):
                if d.dim_param and not d.dim_param.isdigit() and d.dim_param not in shapes:
                    fed.setdefault(d.dim_param, n)
    said = f"the model declares {name}'s axis {axis} as {size}, the original gives {got} on the random feeds"
    for sym in [k for k, n in fed.items() if n == got][:4]:
        tried = {**shapes, sym: (size,)}
        try:
            new_feeds = remake(tried)
            new_outs = ref_sess.run(names, new_feeds)
        except Exception:  # noqa: BLE001 - this symbol does not set that size: try the next
            continue
        if not _contradictions(model, names, new_outs):
            return tried, new_feeds, new_outs, (f"declared sizes: {said}; fed {sym}={size}, as declared "
                                                f"(--shape {sym}=N feeds another size)")
    return dict(shapes), feeds, outs, (f"declared sizes: {said}, and no input dim the harness chose "
                                       "sets it; the model may hold only at the declared size: give "
                                       "--shape or --inputs that match it")


def _verify(ref: _Side, opt: _Side, *, inputs, shapes, seed, atol, rtol, precision=None,
            bf16=False, ort_runtime=True) -> dict[str, Any]:
    from onnx_fuse.targets.paged_kv_feeds import is_paged_rewrite

    ref_inputs, opt_inputs = _real_inputs(ref.skeleton), _real_inputs(opt.skeleton)
    paged = inputs is None and is_paged_rewrite(ref_inputs, opt_inputs)
    if ref_inputs != opt_inputs and not paged:
        added = ", ".join(sorted(opt_inputs - ref_inputs)) or "none"
        removed = ", ".join(sorted(ref_inputs - opt_inputs)) or "none"
        paged_hint = (" (a paged-KV model is verified from random inputs only: drop --inputs, or "
                      "compare with onnx_fuse.targets.paged_kv_feeds)"
                      if is_paged_rewrite(ref_inputs, opt_inputs) else "")
        raise UserError(f"cannot verify: optimization changed the model's inputs (added {added}; "
                        f"removed {removed}), so the two cannot run on the same feeds{paged_hint}")
    custom = _custom_op(ref.skeleton)
    if custom is not None:
        raise UserError(f"cannot verify: the model uses the custom op {custom}, which ONNX Runtime "
                        "has no kernel for here; optimize without --verify and check the result "
                        "where that op's library is registered")
    try:
        ref_sess = ref.session(ort_optimizations=False)
    except Exception as exc:
        raise UserError(f"cannot verify: ONNX Runtime cannot load the original model "
                        f"({_first_line(exc)})") from None
    names = [o.name for o in ref_sess.get_outputs()]
    notes = []
    long_labels: set[str] = set()   # the extra case past a window attribute (_long_prefill_cases)
    first: tuple[dict, list] | None = None   # the first case's feeds and the original's outputs
    if isinstance(inputs, (str, os.PathLike)):
        cases = [("", load_npz(inputs))]
    elif inputs is None:
        # FusedAttention's contract writes zeros in padded query rows, where the original graph
        # computes values nobody reads: random masks stay unpadded so the comparison is fair.
        pad = not paged and not _attention_nodes(opt.skeleton, ("FusedAttention",))
        if paged:
            notes.append("paged KV: the original's past fed as shuffled blocks of a pool "
                         f"(block size {_PAGED_BLOCK}), its present.* compared with the pools read back")
        elif not pad:
            notes.append("masks unpadded: FusedAttention zeroes padded query rows by contract")
        # the skeleton of an onnx-ir model holds no constant values: read them from the model
        window = window_constant(ref.ir if ref.ir is not None else ref.skeleton)
        # the rewrite's window attribute, which a rule may have got wrong: a prefill exceeds it too
        fused_window = window_attribute(opt.skeleton)
        if _has_fused_attention(opt.skeleton):   # a rule that dropped the band leaves no attribute
            fused_window = max(fused_window, window)
        decoder = any(_is_past(vi) for vi in ref.skeleton.graph.input)
        cases = input_cases(ref.skeleton, shapes=shapes, seed=seed, pad_masks=pad, window=window)
        try:   # the outputs' declared sizes: feed what the model declares (_feed_declared_sizes)
            shapes, feeds0, outs0, declared = _feed_declared_sizes(
                ref_sess, ref.skeleton, names, cases[0][1], shapes or {},
                lambda s: input_cases(ref.skeleton, shapes=s, seed=seed, pad_masks=pad, window=window)[0][1])
        except Exception:  # noqa: BLE001 - the run below reports an original that refuses its feeds
            declared = None
        else:
            if declared is not None:
                notes.append(declared)
                if feeds0 is not cases[0][1]:
                    cases = input_cases(ref.skeleton, shapes=shapes, seed=seed, pad_masks=pad, window=window)
                    cases[0] = (cases[0][0], feeds0)
            first = (feeds0, outs0)
        if window and decoder:
            notes.append(f"window constant {window} in the graph: the past is longer than it "
                         "(unless --shape sets it), so a banded mask is exercised")
        if len(cases) > 1:
            notes.append("merged decoder: both If branches verified (" +
                         ", ".join(label for label, _ in cases) + ")")
        if fused_window and not decoder:   # a prefill's 8 tokens would not show a wrong window
            extra, why = _long_prefill_cases(ref.skeleton, fused_window, shapes, cases[0][1], seed=seed,
                                             pad_masks=pad, window=window)
            long_labels = {label for label, _ in extra}
            cases += extra
            notes += [why] if why else []
        padded_row = padded_row_case(ref.skeleton, cases[0][1]) \
            if pad and precision is None and not bf16 else None
        if padded_row is not None:
            cases.append(padded_row)
            notes.append(PADDED_ROW_NOTE)
        longer = longer_mask_case(ref.skeleton, cases[0][1]) if pad else None
        if longer is not None and _runs(ref_sess, names, longer[1]):
            cases.append(longer)
            notes.append(LONGER_MASK_NOTE)
    else:
        cases = [("", dict(inputs))]
    result: dict[str, Any] = {
        "atol": atol if atol is not None else "per-dtype",
        "rtol": rtol if rtol is not None else "per-dtype",
        "seed": seed,
        "precision": precision,
        "inputs": {k: list(v.shape) for k, v in cases[0][1].items()},
        "cases": [label for label, _ in cases if label],
        "ort_optimizations": {"original": "off", "optimized": "default"},
        "outputs": [],
        "passed": False,
        "notes": notes,
    }
    # ORT's QDQ / int4 fusions move a quantized model's numbers: on the original (the oracle) or on
    # the optimized model (DequantizeLinear + MatMul it makes a MatMulNBits of, quantizing A too)
    drift = _quantized_drift(ref, ref_sess, names, cases[0][1], first, "original") \
        if _quantized(ref.skeleton) else None
    if drift is None and not paged and _quantized(opt.skeleton):
        drift = _quantized_drift(opt, None, names, cases[0][1], None, "optimized model")
    try:
        opt_sess = opt.session(ort_optimizations=True)
    except Exception as exc:  # what a user would hit when loading the optimized model
        opt_sess = None if ort_runtime or not _qdq_hint(exc) else _unoptimized(opt, notes)
        if opt_sess is None:
            result["error"] = (f"ONNX Runtime refuses the optimized model with its default graph "
                               f"optimizations: {_first_line(exc)}{_qdq_hint(exc)}")
            return result
        result["ort_optimizations"]["optimized"] = "off (refused with them on: see notes)"
        drift = None   # compared with them off already
    if drift is not None:   # the oracle itself moves under ORT's optimizations: compare with them off
        if not paged:       # (paged feeds are made in the loop; loading was checked above)
            try:
                opt_sess.run(names, cases[0][1])
            except Exception as exc:
                result["error"] = (f"ONNX Runtime fails to run the optimized model with its default "
                                   f"graph optimizations: {_first_line(exc)}")
                return result
        opt_sess = opt.session(ort_optimizations=False)
        result["ort_optimizations"]["optimized"] = "off (quantized: see notes)"
        notes.append(drift)
    diffs: list[OutputDiff] = []
    steps = _output_steps(ref) if _quantized(ref.skeleton) else {}
    if steps:
        notes.append("quantized outputs (" + ", ".join(f"{k}: step {v:.3g}" for k, v in steps.items()) +
                     "): one rounding step of the last QuantizeLinear added to their atol")
    floor = _half_floor(ref.skeleton)
    if floor is not None and any(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
                                 for o in ref.skeleton.graph.output):
        notes.append("half-precision model (float16 weights or inputs): its float32 outputs are "
                     "compared at float16's tolerance")
    if bf16:   # emulated on both sides (_emulate_bf16_pair): bf16's rounding bounds the difference
        from onnx_fuse.passes.precision import VERIFY_TOLERANCE

        floor = VERIFY_TOLERANCE["bf16"]
        notes.append(BF16_NOTE + f"; float outputs compared at atol {floor[0]:g}, rtol {floor[1]:g}")
    if precision is not None:   # the conversion's own bound (it is at least float16's)
        from onnx_fuse.passes.precision import VERIFY_TOLERANCE

        p_atol, p_rtol = VERIFY_TOLERANCE[precision]
        floor = (max(p_atol, floor[0]), max(p_rtol, floor[1])) if floor else (p_atol, p_rtol)
        notes.append(f"--precision {precision}: float outputs compared at atol {p_atol:g}, rtol "
                     f"{p_rtol:g} or their dtype's, the looser")
    # float16 compute saturates: where the original gives more than 65504 (a float32 min mask fill
    # that is an output), the converted model gives the bound or an infinity of that sign
    bound = float(np.finfo(np.float16).max) if precision == "fp16" else None
    for label, feeds in cases:
        try:
            ref_out = first[1] if first is not None and feeds is first[0] else ref_sess.run(names, feeds)
        except Exception as exc:  # the inputs do not suit the model: the user has to give them
            if label in long_labels:   # lengths tied some way the feeds do not know: say so
                notes.append(f"the original refuses the long case [{label}] ({_first_line(exc)}): not verified")
                continue
            raise UserError(f"cannot verify: ONNX Runtime fails to run the original model on these "
                            f"inputs ({_first_line(exc)}); give inputs with --inputs FILE.npz or dims "
                            "with --shape") from None
        suffix = f" [{label}]" if label else ""
        fp8, scales, checks = False, {}, []
        try:
            if paged:
                pairs, fp8, scales, checks = _run_paged(ref_sess, opt_sess, ref, opt, names, ref_out, feeds,
                                                        seed)
            else:
                pairs = list(zip(names, ref_out, opt_sess.run(names, feeds)))
        except _PagedMismatch as exc:
            result["error"] = f"the paged model's outputs do not line up with the original's{suffix}: {exc}"
            return result
        except Exception as exc:
            result["error"] = f"ONNX Runtime fails to run the optimized model{suffix}: {_first_line(exc)}"
            if any(n.startswith("declared sizes:") for n in notes):   # the likelier cause: say it here
                result["error"] += "; " + next(n for n in notes if n.startswith("declared sizes:"))
            return result
        if fp8 and FP8_NOTE not in notes:
            notes.append(FP8_NOTE)
        for name, r, g in pairs:
            r, g = np.asarray(r), np.asarray(g)
            if (label == PADDED_ROW and r.dtype.kind == "f" and r.size and np.isnan(r).all()
                    and g.shape == r.shape and g.dtype == r.dtype):
                # the keyless row's NaN spread over the whole output (the next layer's p v, a
                # window that leaves the half-padded row keyless too): nothing defined to compare
                # here, and the first case compared this output (its shape and dtype are defined)
                notes.append(f"{name} [{PADDED_ROW}]: NaN throughout in the original, not compared")
                continue
            d_atol, d_rtol = DEFAULT_TOLERANCE.get(r.dtype, (1e-4, 1e-3))
            if floor is not None and r.dtype.kind == "f":
                d_atol, d_rtol = max(d_atol, floor[0]), max(d_rtol, floor[1])
            if name in steps and r.dtype.kind == "f":   # one rounding flip of the output's grid
                d_atol += steps[name]
            if fp8 and r.dtype.kind == "f":   # e4m3's bound on top of the one without fp8 pools
                from onnx_fuse.targets.paged_kv_feeds import fp8_pool_tolerance, fp8_tolerance

                d_atol, d_rtol = (fp8_pool_tolerance(scales[name], (d_atol, d_rtol)) if name in scales
                                  else fp8_tolerance(r, (d_atol, d_rtol)))
            diffs.append(compare_arrays(name + suffix, r, g, d_atol if atol is None else atol,
                                        d_rtol if rtol is None else rtol, bound=bound))
        if isinstance(checks, str):
            notes.append(checks)
        else:   # after the case's outputs: each fp8 attention against its own inputs
            diffs += [dataclasses.replace(d, name=d.name + suffix) for d in checks]
    result["outputs"] = [dataclasses.asdict(d) for d in diffs]
    if not diffs:
        result["skipped"] = "the model has no outputs to compare"
    result["passed"] = all(d.passed for d in diffs)   # nothing compared: "skipped" says so
    return result
