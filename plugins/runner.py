"""Backend of ``onnx-fuse run``: run a MODEL in ONNX Runtime or a PLAN in TensorRT, optionally
comparing against a reference with Polygraphy's comparator.

- ``ort``: ONNX Runtime on the CPU with its graph optimizations on (what a deployment runs); our
  ``onnx_fuse`` ops run through their NumPy references. ``--compare`` checks it against ORT with
  graph optimizations off (the model as written).
- ``trt``: a ``.plan`` (or a model, built first through the engine cache) deserialized and run
  with the TensorRT runtime, device buffers through ``polygraphy.cuda``. ``--compare`` checks it
  against the ONNX model in ORT (optimizations off); for a plan the model comes from ``--model``
  or the plan's sidecar (its sha256 must match).

Inputs come from an ``.npz`` file or are random with a seed (dynamic dims: ``--shape`` values,
else the plan's OPT profile shapes, else small defaults).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from onnx_fuse.errors import UserError

__all__ = ["RunResult", "run", "is_plan", "compare_outputs", "pool_aliases"]


@dataclass
class RunResult:
    backend: str
    outputs: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    seconds: float
    reference: dict[str, np.ndarray] | None = None
    reference_name: str = ""
    comparison: list[dict] = field(default_factory=list)
    passed: bool | None = None       # None: no comparison was asked for
    notes: list[str] = field(default_factory=list)


def is_plan(path: str | os.PathLike) -> bool:
    p = Path(path)
    if p.suffix.lower() in (".plan", ".engine", ".trt"):
        return True
    if p.suffix.lower() == ".onnx":
        return False
    return Path(str(p) + ".json").exists()


# --------------------------------------------------------------------------- inputs

_TRT_TO_NP = {"FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT64": np.int64,
              "INT8": np.int8, "BOOL": np.bool_, "UINT8": np.uint8, "DOUBLE": np.float64}


def _plan_inputs(sidecar: dict, shapes: dict, seed: int) -> dict[str, np.ndarray]:
    """Random inputs for a plan from its sidecar: OPT shapes of the first profile."""
    rng = np.random.default_rng(seed)
    profile = (sidecar.get("profiles") or [{}])[0]
    feeds = {}
    for spec in sidecar.get("inputs", []):
        name = spec["name"]
        dtype = _TRT_TO_NP.get(spec["dtype"])
        if dtype is None:
            raise UserError(f"input {name!r} has TensorRT type {spec['dtype']}; give --inputs")
        shape = list(shapes.get(name) or profile.get(name, {}).get("opt") or spec["shape"])
        if any(d < 0 for d in shape):
            raise UserError(f"input {name!r} has dynamic shape {spec['shape']} and no profile; "
                            f"give --shape {name}=DIMS")
        if dtype == np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = (np.ones(shape, dtype) if "mask" in name.lower()
                           else rng.integers(0, 4, size=shape, dtype=dtype))
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _model_inputs(proto: onnx.ModelProto, shapes: dict, seed: int) -> dict[str, np.ndarray]:
    from onnx_fuse.verify import make_inputs

    return make_inputs(proto, shapes=shapes, seed=seed)


def _check_feeds(feeds: dict, expected: list[str], what: str) -> None:
    missing = [n for n in expected if n not in feeds]
    if missing:
        raise UserError(f"inputs file lacks {', '.join(missing)} (needed by {what}; has "
                        f"{', '.join(feeds) or 'nothing'})")


# --------------------------------------------------------------------------- ONNX Runtime

def _load_model(path: str | os.PathLike) -> onnx.ModelProto:
    from onnx_fuse.model_io import load_model
    import onnx_ir as ir

    return ir.to_proto(load_model(path))


def run_ort(proto: onnx.ModelProto, feeds: dict, *, optimized: bool) -> tuple[dict, float]:
    from onnx_fuse.verify import make_session

    from onnx_fuse.verify import _first_line

    try:   # quiet: ORT's log would repeat the error above our one line
        sess = make_session(proto, ort_optimizations=optimized, quiet=True)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise UserError(f"ONNX Runtime cannot load the model: {_first_line(exc)}") from None
    names = [o.name for o in sess.get_outputs()]
    inputs = {i.name for i in sess.get_inputs()}
    _check_feeds(feeds, sorted(inputs), "the model")
    t0 = time.perf_counter()
    try:
        outs = sess.run(names, {k: v for k, v in feeds.items() if k in inputs})
    except Exception as exc:  # noqa: BLE001 - the model fails on these inputs (a bad --shape, a Reshape)
        raise UserError(f"ONNX Runtime fails to run the model on these inputs ({_first_line(exc)}); "
                        "give inputs with --inputs FILE.npz or dims with --shape") from None
    return dict(zip(names, (np.asarray(o) for o in outs))), time.perf_counter() - t0


# --------------------------------------------------------------------------- TensorRT

_POOL_OUT = re.compile(r"kv_pool_([kv])_out\.(.+)")


def pool_aliases(inputs: dict[str, tuple], outputs: dict[str, tuple]) -> dict[str, str]:
    """``{output: input}`` for the paged-KV pools an engine updates in place: output
    ``kv_pool_{k,v}_out.N`` and input ``kv_pool_{k,v}.N`` (the names the paged-KV rewrite gives
    them, docs/paged_kv.md). ``inputs`` / ``outputs`` map names to ``(shape, dtype)``; a pair whose
    shape or dtype differ cannot share one buffer and is a UserError."""
    aliases = {}
    for out, (shape, dtype) in outputs.items():
        m = _POOL_OUT.fullmatch(out)
        src = f"kv_pool_{m.group(1)}.{m.group(2)}" if m else None
        if src not in inputs:
            continue
        in_shape, in_dtype = inputs[src]
        if tuple(in_shape) != tuple(shape) or np.dtype(in_dtype) != np.dtype(dtype):
            raise UserError(f"--alias-pools: {out} ({_spec(shape, dtype)}) cannot share the "
                            f"buffer of {src} ({_spec(in_shape, in_dtype)})")
        aliases[out] = src
    return aliases


def _spec(shape, dtype) -> str:
    return f"{'x'.join(map(str, shape)) or 'scalar'} {np.dtype(dtype)}"


def run_plan(plan_path: Path, feeds: dict, backend_name: str | None = None, *,
             alias_pools: bool = False) -> tuple[dict, float]:
    """Run a serialized engine on GPU 0. Needs the TensorRT runtime and an NVIDIA GPU.

    By default every output gets its own buffer. ``alias_pools`` binds each paged-KV pool output
    to its input's buffer (:func:`pool_aliases`), as a server does so that PagedAttention's
    in-place update is the zero-copy path; that output's result is then the input buffer read
    back after the run (the host feeds are never changed)."""
    from onnx_fuse.plugins.engine_builder import _capture, _errors, _logger, read_sidecar
    from onnx_fuse.plugins.trt_backend import gpu_identity, load_backend

    backend = load_backend(backend_name)
    gpu = gpu_identity()
    if gpu == "none":
        raise UserError(f"running a plan needs an NVIDIA GPU and none was found; {backend.label} "
                        "can build plans here but not run them")
    if backend.is_rtx and "sm_90" in gpu:
        raise UserError(f"{backend.label}'s runtime does not support {gpu} (compute capability "
                        "9.0); run the plan with full TensorRT")
    sidecar = read_sidecar(plan_path) or {}
    if sidecar.get("plugins"):
        import importlib

        from onnx_fuse.plugins.engine_builder import PLUGIN_OPS

        for p in sidecar["plugins"]:   # JIT plugin layers need the Python definitions loaded
            if p["name"] in PLUGIN_OPS:
                importlib.import_module(PLUGIN_OPS[p["name"]]).register_plugin(backend)
    from polygraphy import cuda

    trt = backend.module
    with _capture() as messages:
        runtime = trt.Runtime(_logger(backend))
        engine = runtime.deserialize_cuda_engine(plan_path.read_bytes())
        if engine is None:
            errs = _errors(messages)
            raise UserError(f"{plan_path}: TensorRT could not load the plan: "
                            f"{errs[-1] if errs else 'unknown error'}")
        context = engine.create_execution_context()
        stream = cuda.Stream()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        _check_feeds(feeds, inputs, str(plan_path))
        buffers = {}
        for name in inputs:
            arr = np.ascontiguousarray(feeds[name])
            context.set_input_shape(name, arr.shape)
            dev = cuda.DeviceArray(shape=arr.shape, dtype=arr.dtype)
            dev.copy_from(arr, stream)
            context.set_tensor_address(name, dev.ptr)
            buffers[name] = dev
        specs = {name: (tuple(context.get_tensor_shape(name)),
                        np.dtype(trt.nptype(engine.get_tensor_dtype(name))))
                 for name in names if name not in inputs}
        aliases = pool_aliases({n: (buffers[n].shape, buffers[n].dtype) for n in inputs},
                               specs) if alias_pools else {}
        outs = {}
        for name, (shape, dtype) in specs.items():
            if name in aliases:   # the same address as the pool input: updated in place
                dev = buffers[aliases[name]]
            else:
                dev = buffers[name] = cuda.DeviceArray(shape=shape, dtype=dtype)
            context.set_tensor_address(name, dev.ptr)
            outs[name] = dev
        t0 = time.perf_counter()
        if not context.execute_async_v3(stream.ptr):
            errs = _errors(messages)
            raise UserError(f"{plan_path}: execution failed: {errs[-1] if errs else 'unknown'}")
        stream.synchronize()
        seconds = time.perf_counter() - t0
        result = {n: d.numpy() for n, d in outs.items()}
        for b in buffers.values():
            b.free()
    return result, seconds


# --------------------------------------------------------------------------- comparison

def compare_outputs(ref: dict, got: dict, *, ref_name: str, got_name: str,
                    rtol: float | None, atol: float | None) -> tuple[bool, list[dict]]:
    """Compare with Polygraphy's simple comparator (per-dtype default tolerances)."""
    from polygraphy.comparator import Comparator, IterationResult, RunResults
    from polygraphy.logger import G_LOGGER

    from onnx_fuse.verify import DEFAULT_TOLERANCE

    common = [n for n in ref if n in got]
    if not common:
        raise UserError(f"{got_name} and {ref_name} share no output names")
    rows = []
    ok = True
    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.ERROR
    try:
        for name in common:
            r, g = np.asarray(ref[name]), np.asarray(got[name])
            d_atol, d_rtol = DEFAULT_TOLERANCE.get(r.dtype, (1e-4, 1e-3))
            a = d_atol if atol is None else atol
            t = d_rtol if rtol is None else rtol
            results = RunResults([
                (got_name, [IterationResult({name: g}, runner_name=got_name)]),
                (ref_name, [IterationResult({name: r}, runner_name=ref_name)]),
            ])
            acc = Comparator.compare_accuracy(results, compare_func=_simple_compare(t, a))
            passed = bool(acc)
            same_shape = r.shape == g.shape
            diff = (np.abs(g.astype(np.float64) - r.astype(np.float64))
                    if same_shape and r.size else np.zeros(1))
            rows.append({"name": name, "passed": passed, "atol": a, "rtol": t,
                         "max_abs": float(diff.max()) if same_shape else float("inf"),
                         "shape": list(g.shape), "ref_shape": list(r.shape)})
            ok &= passed
    finally:
        G_LOGGER.module_severity = old
    return ok, rows


def _simple_compare(rtol: float, atol: float):
    try:  # Polygraphy >= 0.50; CompareFunc.simple is deprecated
        from polygraphy.comparator import SimpleCompareFunc

        return SimpleCompareFunc(rtol=rtol, atol=atol, check_shapes=True)
    except ImportError:
        from polygraphy.comparator import CompareFunc

        return CompareFunc.simple(rtol=rtol, atol=atol, check_shapes=True)


# --------------------------------------------------------------------------- entry point

def _sha256(path: Path) -> str:
    from onnx_fuse.fileio import sha256_file

    return sha256_file(path)


def run(source: str | os.PathLike, *, backend: str = "ort", inputs: str | None = None,
        seed: int = 0, shapes: dict | None = None, compare: bool = False,
        model: str | None = None, rtol: float | None = None, atol: float | None = None,
        build_options=None, trt_backend: str | None = None,
        alias_pools: bool = False) -> RunResult:
    from onnx_fuse.verify import load_npz

    src = Path(source)
    if not src.exists():
        raise UserError(f"{src}: no such file")
    shapes = dict(shapes or {})
    plan = is_plan(src)
    notes: list[str] = []
    if backend not in ("ort", "trt"):
        raise UserError(f"--backend {backend!r}: use ort or trt")
    if alias_pools and backend != "trt":
        raise UserError("--alias-pools binds TensorRT buffers; it needs --backend trt")
    if plan and backend == "ort":
        raise UserError(f"{src} is a TensorRT plan; run it with --backend trt (or give the ONNX "
                        "model for --backend ort)")

    if backend == "ort":
        proto = _load_model(src)
        feeds = load_npz(inputs) if inputs else _model_inputs(proto, shapes, seed)
        outs, secs = run_ort(proto, feeds, optimized=True)
        result = RunResult("ort", outs, feeds, secs, notes=notes)
        if compare:
            # --model names the reference (e.g. the original of an optimized model); without it
            # the same model runs with ORT's graph optimizations off.
            ref_proto = _load_model(model) if model else proto
            ref, _ = run_ort(ref_proto, feeds, optimized=False)
            result.reference = ref
            result.reference_name = (f"{model} in ort (graph optimizations off)" if model
                                     else "ort (graph optimizations off)")
            result.passed, result.comparison = compare_outputs(
                ref, outs, ref_name=result.reference_name, got_name="ort", rtol=rtol, atol=atol)
        return result

    from onnx_fuse.plugins.engine_builder import BuildOptions, build_engine, read_sidecar

    model_path: Path | None = None
    if plan:
        plan_path = src
        sidecar = read_sidecar(plan_path) or {}
        if model:
            model_path = Path(model)
        elif compare:
            recorded = (sidecar.get("model") or {}).get("path")
            if not recorded or not Path(recorded).exists():
                raise UserError(f"--compare needs the ONNX model of {plan_path}: its sidecar "
                                "does not name an existing one; pass --model MODEL.onnx")
            model_path = Path(recorded)
            if _sha256(model_path) != sidecar["model"].get("sha256"):
                notes.append(f"{model_path} changed since the plan was built (sha256 differs)")
    else:
        model_path = src
        plan_path = src.with_suffix(".plan")
        built = build_engine(src, plan_path, build_options or BuildOptions())
        notes.append(f"plan {plan_path} ({'cache hit' if built.cache_hit else 'built'})")
        sidecar = built.meta
    proto = _load_model(model_path) if model_path else None
    if inputs:
        feeds = load_npz(inputs)
    elif proto is not None and not plan:
        feeds = _model_inputs(proto, shapes, seed)
    else:
        feeds = _plan_inputs(sidecar, shapes, seed)
    outs, secs = run_plan(plan_path, feeds, trt_backend, alias_pools=alias_pools)
    result = RunResult("trt", outs, feeds, secs, notes=notes)
    if compare:
        ref, _ = run_ort(proto, feeds, optimized=False)
        result.reference, result.reference_name = ref, "ort"
        result.passed, result.comparison = compare_outputs(
            ref, outs, ref_name="ort", got_name="trt", rtol=rtol, atol=atol)
    return result
