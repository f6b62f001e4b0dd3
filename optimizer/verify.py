"""Numeric verification: run the original and the optimized model in ONNX Runtime (CPU) on the
same inputs and compare every output.

ORT's own graph optimizations are turned off on both sides, so we compare our rewrite with the
original graph rather than ORT's rewrite with ORT's rewrite. Graphs holding our own ops (domain
``onnx_fuse``) run through their NumPy reference implementations (onnx_fuse.reference.ort_ops).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnx_fuse.errors import UserError, VerificationError

OUR_DOMAIN = "onnx_fuse"

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
    return any(n.domain == OUR_DOMAIN for n in proto.graph.node) or any(
        f.domain == OUR_DOMAIN for f in proto.functions)


def make_session(model: ir.Model | onnx.ModelProto, *, threads: int | None = None,
                 ort_optimizations: bool = False, quiet: bool = False):
    """An ORT CPU session for ``model``; our own ops run through their NumPy references."""
    import onnxruntime as ort

    proto = to_proto(model)
    opts = ort.SessionOptions()
    if not ort_optimizations:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
    opts.log_severity_level = 4 if quiet else 3  # quiet: failures we expect and report ourselves
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


def _symbol_values(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """A value for every symbolic input dim: the user's (--shape batch=2), else small defaults
    that are not 1, so broadcasting bugs show (2 for a leading, batch-like dim, 8 otherwise).

    Decoder exports with a KV cache name their mask's length ``total_<x>`` beside ``past_<x>`` and
    ``<x>`` (Hugging Face's dynamo exports do); it must equal their sum, or the original model
    itself fails to run on the random inputs.
    """
    values: dict[str, int] = {}
    for vi in model.graph.input:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.dim_param and d.dim_param not in values:
                given = shapes.get(d.dim_param)
                values[d.dim_param] = given[0] if given else (2 if i == 0 else 8)
    for name in values:
        base = name.removeprefix("total_")
        if base != name and name not in shapes and base in values and f"past_{base}" in values:
            values[name] = values[base] + values[f"past_{base}"]
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


def make_inputs(model: onnx.ModelProto, *, shapes: Mapping[str, tuple[int, ...]] | None = None,
                seed: int = 0, pad_masks: bool = True) -> dict[str, np.ndarray]:
    """Random inputs for every real graph input (initializer-backed inputs are left alone).

    Integer inputs named like masks are ones, with the second half of the last row padded (0)
    when ``pad_masks``, so mask handling is exercised."""
    rng = np.random.default_rng(seed)
    shapes = shapes or {}
    inits = {i.name for i in model.graph.initializer}
    symbols = _symbol_values(model, shapes)
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            raise UserError(f"input {vi.name!r} is not a tensor; give inputs with --inputs FILE.npz")
        elem = vi.type.tensor_type.elem_type
        if elem not in _ONNX_TO_NP:
            raise UserError(f"input {vi.name!r} has dtype {onnx.TensorProto.DataType.Name(elem)}, "
                            "which random inputs do not cover; give --inputs FILE.npz")
        dtype = np.dtype(_ONNX_TO_NP[elem])
        shape = _concrete_shape(vi, shapes, symbols)
        lname = vi.name.lower()
        if dtype == np.bool_:
            arr = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            if "mask" in lname:
                arr = np.ones(shape, dtype)
                if pad_masks and arr.ndim >= 2 and arr.shape[-1] > 1 and arr.shape[0] > 1:
                    arr[-1, arr.shape[-1] // 2:] = 0  # one padded row exercises mask handling
            elif "position" in lname and shape:
                arr = np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
            else:
                # Token ids and type ids index embedding tables: stay inside the smallest.
                high = min(4, _gather_bound(model, vi.name))
                arr = rng.integers(0, max(high, 1), size=shape, dtype=dtype)
        else:
            arr = rng.standard_normal(shape).astype(dtype)
        feeds[vi.name] = arr
    return feeds


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: inputs file not found")
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


def compare_arrays(name: str, ref: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> OutputDiff:
    """Elementwise |got-ref| <= atol + rtol*|ref|; NaNs must sit in the same places."""
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
    r = ref.astype(np.float64)
    g = got.astype(np.float64)
    nan_ref, nan_got = np.isnan(r), np.isnan(g)
    if not np.array_equal(nan_ref, nan_got):
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


def verify(original, optimized, *, inputs: Mapping[str, np.ndarray] | str | None = None,
           shapes: Mapping[str, tuple[int, ...]] | None = None, seed: int = 0,
           atol: float | None = None, rtol: float | None = None, raise_on_failure: bool = False) -> dict[str, Any]:
    """Compare ``optimized`` with ``original`` in ORT; return a JSON-friendly summary."""
    ref_proto = to_proto(original)
    opt_proto = to_proto(optimized)
    ref_inputs, opt_inputs = _real_inputs(ref_proto), _real_inputs(opt_proto)
    if ref_inputs != opt_inputs:
        added = ", ".join(sorted(opt_inputs - ref_inputs)) or "none"
        removed = ", ".join(sorted(ref_inputs - opt_inputs)) or "none"
        raise UserError(f"cannot verify: optimization changed the model's inputs (added {added}; "
                        f"removed {removed}), so the two cannot run on the same feeds; the paged-KV "
                        "rewrite does this at -O4 --target trt (skip it with --disable "
                        "trt-paged-kv, or compare with onnx_fuse.targets.paged_kv_feeds)")
    notes = []
    if isinstance(inputs, (str, os.PathLike)):
        feeds = load_npz(inputs)
    elif inputs is None:
        # FusedAttention's contract writes zeros in padded query rows, where the original graph
        # computes values nobody reads: random masks stay unpadded so the comparison is fair.
        pad = not any(n.domain == OUR_DOMAIN and n.op_type == "FusedAttention"
                      for n in opt_proto.graph.node)
        if not pad:
            notes.append("masks unpadded: FusedAttention zeroes padded query rows by contract")
        feeds = make_inputs(ref_proto, shapes=shapes, seed=seed, pad_masks=pad)
    else:
        feeds = dict(inputs)
    try:
        ref_sess = make_session(ref_proto)
    except Exception as exc:
        raise UserError(f"ONNX Runtime cannot run the original model: {str(exc).splitlines()[0]}") from None
    opt_sess = make_session(opt_proto)
    names = [o.name for o in ref_sess.get_outputs()]
    try:
        ref_out = ref_sess.run(names, feeds)
    except Exception as exc:  # the inputs do not suit the model: the user has to give them
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot verify: ONNX Runtime fails to run the original model on these "
                        f"inputs ({first[:300]}); give inputs with --inputs FILE.npz or dims with "
                        "--shape") from None
    opt_out = opt_sess.run(names, feeds)
    diffs = []
    for name, r, g in zip(names, ref_out, opt_out):
        r, g = np.asarray(r), np.asarray(g)
        d_atol, d_rtol = DEFAULT_TOLERANCE.get(r.dtype, (1e-4, 1e-3))
        diffs.append(compare_arrays(name, r, g, d_atol if atol is None else atol,
                                    d_rtol if rtol is None else rtol))
    result = {
        "atol": atol if atol is not None else "per-dtype",
        "rtol": rtol if rtol is not None else "per-dtype",
        "seed": seed,
        "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "outputs": [dataclasses.asdict(d) for d in diffs],
        "passed": all(d.passed for d in diffs),
        "notes": notes,
    }
    if raise_on_failure and not result["passed"]:
        bad = next(d for d in diffs if not d.passed)
        raise VerificationError(f"output {bad.name!r} differs: max abs {bad.max_abs:.3g}, max rel "
                                f"{bad.max_rel:.3g} {bad.reason}".strip())
    return result
