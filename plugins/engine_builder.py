"""Build a serialized TensorRT engine (plan) from an ONNX model, with a cache that skips rebuilds.

    result = build_engine("model.onnx", "model.plan",
                          BuildOptions(profiles=parse_profiles(["input_ids:1x1,4x128,8x512"])))

Steps, each failing with a one-line :class:`UserError` that names what is wrong:

1. load the model with onnx-fuse's safe loader (external data validated, not read);
2. find our plugin nodes (domain ``onnx_fuse``) *before* the TensorRT parser sees them: TensorRT-RTX
   aborts the whole process on a plugin node, so without full TensorRT the build is refused here;
3. validate the optimization profiles against the model inputs (names, ranks, fixed dims,
   min <= opt <= max, one range per named dim) and require one for every dynamic input;
4. look the engine up in the cache (key: model sha256 + options + library + version + GPU); an
   entry whose checksum does not match is reported and rebuilt;
5. parse (errors name the node, its op and the reason), configure (optimization level, workspace,
   version/hardware compatibility, timing cache where the library has one), build with a progress
   display, and write the plan, its ``<plan>.json`` sidecar and the cache entry atomically.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import onnx

from onnx_fuse.errors import InternalError, UserError
from onnx_fuse.fileio import user_write
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN
from onnx_fuse.plugins.build_profiles import (InputRange, Profile, model_inputs, parse_profiles,
                                              parse_size, validate_profiles)
from onnx_fuse.plugins.engine_cache import (EngineCache, atomic_write, default_cache_dir, sha256_hex,
                                            write_json)
from onnx_fuse.plugins.trt_backend import TrtBackend, gpu_identity, load_backend

__all__ = ["BuildOptions", "BuildResult", "Profile", "InputRange", "build_engine", "parse_profiles",
           "parse_size", "plugin_nodes", "prepare_for_tensorrt", "default_cache_dir",
           "model_inputs", "PLUGIN_DOMAIN", "PLUGIN_OPS"]

# Plugin op type -> module under onnx_fuse.plugins that registers it (lazily, on first use).
PLUGIN_OPS = {
    "FusedAttention": "onnx_fuse.plugins.fused_attention_plugin",
    "PagedAttention": "onnx_fuse.plugins.paged_attention_plugin",
}
SIDECAR_SCHEMA = 1
# Bump when the way plans are built changes in a way the cache key does not otherwise capture.
_BUILDER_REVISION = 1
# Ampere and newer compute capabilities TensorRT-RTX 1.7 can target (it has no sm_90 target).
_RTX_AMPERE_PLUS = ("SM80", "SM86", "SM89", "SM120", "SM121")


# --------------------------------------------------------------------------- options and results

@dataclass(frozen=True)
class BuildOptions:
    profiles: Sequence[Profile] = ()
    opt_level: int | None = None          # builder optimization level 0..5 (library default: 3)
    workspace: int | None = None          # bytes
    version_compatible: bool = False
    hardware_compatible: bool = False
    plugins: bool = True                  # False: refuse models with plugin nodes
    timing_cache: str | None = None       # file; read if present, written after the build
    cache_dir: str | None = None          # None: default_cache_dir(); "" disables the cache
    progress: bool = True
    backend: str | None = None            # force "tensorrt" or "rtx"

    def key_fields(self) -> dict:
        """What changes the plan (the cache key); paths and display options are excluded."""
        return {
            "profiles": [p.as_json() for p in self.profiles],
            "opt_level": self.opt_level,
            "workspace": self.workspace,
            "version_compatible": self.version_compatible,
            "hardware_compatible": self.hardware_compatible,
            "plugins": self.plugins,
        }


@dataclass
class BuildResult:
    plan: Path
    sidecar: Path
    meta: dict
    cache_hit: bool
    seconds: float                        # wall time of this call (build or cache copy)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- model inspection

def _load(source: str | os.PathLike | bytes) -> tuple[onnx.ModelProto, Path | None, str]:
    """The model (external data validated, not loaded), its path and a sha256 over its bytes and
    the bytes of every external-data file it names."""
    from onnx_fuse.fileio import hash_stream, open_regular
    from onnx_fuse.model_io import load_proto

    proto, base_dir = load_proto(source, check=False)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return proto, None, hashlib.sha256(bytes(source)).hexdigest()
    path = Path(source).resolve()
    h = hashlib.sha256()
    with open_regular(path) as f:
        hash_stream(f, h)
    for loc in sorted(_external_locations(proto)):
        h.update(b"\0" + loc.encode())
        with open_regular(Path(base_dir) / loc, nofollow=True) as f:
            hash_stream(f, h)
    return proto, path, h.hexdigest()


def _external_locations(proto: onnx.ModelProto) -> set[str]:
    locs = set()
    for t in proto.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            locs.update(e.value for e in t.external_data if e.key == "location")
    return locs


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _all_nodes(g)


def plugin_nodes(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes TensorRT would map to a plugin: domain ``onnx_fuse`` or one of our plugin op types."""
    functions = {(f.domain, f.name) for f in proto.functions}
    out = []
    for node in _all_nodes(proto.graph):
        if (node.domain, node.op_type) in functions:
            continue
        if node.domain == PLUGIN_DOMAIN or (node.op_type in PLUGIN_OPS
                                            and node.domain not in ("", "ai.onnx")):
            out.append(node)
    return out


# --------------------------------------------------------------------------- logging and progress

class _Sink(threading.local):
    def __init__(self):
        self.stack: list[list[tuple[str, str]]] = []


_sink = _Sink()
# Builds in progress on any thread, newest last: messages TensorRT logs from its own worker
# threads go to the newest one.
_active: list[list[tuple[str, str]]] = []
_logger_lock = threading.Lock()
_loggers: dict[int, object] = {}


def _logger(backend: TrtBackend):
    """One logger per process and library: TensorRT keeps the first logger it is given and
    ignores later ones, so messages are routed to whichever build is running on this thread."""
    with _logger_lock:
        got = _loggers.get(id(backend.module))
        if got is not None:
            return got
        trt = backend.module

        class _RoutingLogger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)

            def log(self, severity, msg):
                target = _sink.stack[-1] if _sink.stack else (_active[-1] if _active else None)
                if target is not None:
                    target.append((str(severity).rsplit(".", 1)[-1], msg))

        got = _loggers[id(backend.module)] = _RoutingLogger()
        return got


@contextlib.contextmanager
def _capture():
    messages: list[tuple[str, str]] = []
    _sink.stack.append(messages)
    with _logger_lock:
        _active.append(messages)
    try:
        yield messages
    finally:
        _sink.stack.pop()
        with _logger_lock:
            _active.remove(messages)


def _errors(messages) -> list[str]:
    return [m for sev, m in messages if sev in ("ERROR", "INTERNAL_ERROR")]


def _make_progress_monitor(backend: TrtBackend, progress):
    """A TensorRT IProgressMonitor that drives a rich Progress (one bar per build phase)."""
    trt = backend.module

    class _Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)
            self.tasks: dict[str, tuple[object, int]] = {}

        def phase_start(self, phase_name, parent_phase, num_steps):
            depth = self.tasks[parent_phase][1] + 1 if parent_phase in self.tasks else 0
            task = progress.add_task("  " * depth + phase_name, total=max(int(num_steps), 1))
            self.tasks[phase_name] = (task, depth)

        def step_complete(self, phase_name, step):
            if phase_name in self.tasks:
                progress.update(self.tasks[phase_name][0], completed=int(step) + 1)
            return True  # False would cancel the build

        def phase_finish(self, phase_name):
            got = self.tasks.pop(phase_name, None)
            if got is not None:
                progress.update(got[0], completed=progress.tasks[got[0]].total, visible=False)

    return _Monitor()


@contextlib.contextmanager
def _progress(enabled: bool, label: str):
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"[bold]{label}[/bold] {{task.description}}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                  transient=True) as progress:
        yield progress


# --------------------------------------------------------------------------- the build

def _plugin_summary(nodes: list[onnx.NodeProto]) -> list[dict]:
    counts: Counter = Counter()
    for node in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        version = attrs.get("plugin_version", b"")
        namespace = attrs.get("plugin_namespace", node.domain.encode())
        counts[(node.op_type, _s(version), _s(namespace))] += 1
    return [{"name": n, "version": v, "namespace": ns, "nodes": c}
            for (n, v, ns), c in sorted(counts.items())]


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _check_plugins(nodes, options: BuildOptions, backend: TrtBackend) -> None:
    if not nodes:
        return
    summary = ", ".join(f"{p['name']} x{p['nodes']}" for p in _plugin_summary(nodes))
    if not options.plugins:
        raise UserError(f"model has onnx_fuse plugin nodes ({summary}) and --no-plugins was "
                        "given; optimize it with --target onnx or ort instead")
    unknown = sorted({n.op_type for n in nodes if n.op_type not in PLUGIN_OPS})
    if unknown:
        raise UserError(f"model has nodes in domain {PLUGIN_DOMAIN!r} that are not onnx-fuse "
                        f"plugins: {', '.join(unknown)} (known: {', '.join(PLUGIN_OPS)})")
    if not backend.plugins:
        raise UserError(f"model has onnx_fuse plugin nodes ({summary}) but {backend.label} cannot "
                        "build plugin layers (and its ONNX parser aborts the process on them); "
                        "install full TensorRT, or optimize with --target onnx for TensorRT-RTX")


def prepare_for_tensorrt(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``proto`` whose plugin nodes carry what the TensorRT plugins need (contract
    attribute defaults, ``aot`` (PagedAttention: 1 only where its query length is statically
    1), a computed seq_lens where FusedAttention has none). Returns (copy, number of nodes
    changed). Main graph only; plugin nodes in subgraphs are left as they are."""
    import importlib

    from onnx_fuse.plugins.check_trt import _infer
    from onnx_fuse.plugins.trt_support import GraphInfo

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    names = {n for node in _all_nodes(out.graph) for n in (*node.input, *node.output)}
    names |= {t.name for t in out.graph.initializer} | {v.name for v in out.graph.input}
    counter = [0]

    def fresh(base: str) -> str:
        while True:
            counter[0] += 1
            name = f"{base}__trt{counter[0]}"
            if name not in names:
                names.add(name)
                return name

    new_nodes, changed, info = [], 0, None
    for node in out.graph.node:
        if node.domain == PLUGIN_DOMAIN and node.op_type in PLUGIN_OPS:
            before = node.SerializeToString()
            if info is None:  # shapes as check-trt sees them
                info = GraphInfo(_infer(out, []).graph)
            extra = importlib.import_module(PLUGIN_OPS[node.op_type]).prepare_node(node, fresh,
                                                                                   info)
            new_nodes.extend(extra)
            changed += node.SerializeToString() != before
        new_nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    return out, changed


def _register_plugins(nodes, backend: TrtBackend) -> None:
    import importlib

    for op in sorted({n.op_type for n in nodes}):
        importlib.import_module(PLUGIN_OPS[op]).register_plugin(backend)


def _format_parser_errors(parser, what: str) -> str:
    parts = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        desc = " ".join(line.strip() for line in str(e.desc()).splitlines() if line.strip())
        node = e.node()
        if node is not None and int(node) >= 0:
            name = e.node_name() or f"#{node}"
            parts.append(f"node {name!r} ({e.node_operator()}): {desc}")
        else:
            parts.append(desc)
    if not parts:
        parts = ["unknown parser error"]
    more = f" (+{len(parts) - 3} more)" if len(parts) > 3 else ""
    return f"{what}: TensorRT's ONNX parser rejected the model: " + "; ".join(parts[:3]) + more


def _configure(builder, network, config, options: BuildOptions, backend: TrtBackend,
               notes: list[str]) -> dict:
    trt = backend.module
    applied: dict = {}
    if options.opt_level is not None:
        if not 0 <= options.opt_level <= 5:
            raise UserError(f"--opt-level {options.opt_level}: must be 0..5")
        config.builder_optimization_level = options.opt_level
    applied["opt_level"] = int(config.builder_optimization_level)
    if options.workspace is not None:
        if options.workspace <= 0:
            raise UserError("--workspace must be positive")
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace)
    applied["workspace_bytes"] = int(config.get_memory_pool_limit(trt.MemoryPoolType.WORKSPACE))
    if options.version_compatible:
        if not backend.version_compatible:
            raise UserError(f"--version-compatible: {backend.label} has no version-compatible "
                            "engines")
        if backend.is_rtx and not _rtx_has_lean_runtime(backend):
            raise UserError("--version-compatible: TensorRT-RTX needs its lean runtime "
                            "(libnvinfer_lean.so.1) to build version-compatible engines, and the "
                            "tensorrt-rtx wheel does not ship it")
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    if options.hardware_compatible:
        if backend.is_rtx:
            # RTX ignores hardware compatibility levels; the equivalent of AMPERE_PLUS is to
            # target every Ampere-or-newer compute capability it knows.
            ccs = [c for c in _RTX_AMPERE_PLUS if hasattr(trt.ComputeCapability, c)]
            config.num_compute_capabilities = len(ccs)
            for i, c in enumerate(ccs):
                config.set_compute_capability(getattr(trt.ComputeCapability, c), i)
            applied["compute_capabilities"] = ccs
            notes.append("hardware-compatible on TensorRT-RTX: targets " + ", ".join(ccs)
                         + " (RTX has no sm_90 target and ignores compatibility levels)")
        elif backend.hardware_compatible:
            config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
        else:
            raise UserError(f"--hardware-compatible: {backend.label} has no hardware "
                            "compatibility levels")
    for p in options.profiles:
        profile = builder.create_optimization_profile()
        for name, rng in p.inputs.items():
            profile.set_shape(name, rng.min, rng.opt, rng.max)
        config.add_optimization_profile(profile)
    return applied


def _rtx_has_lean_runtime(backend: TrtBackend) -> bool:
    import importlib

    try:
        libs = importlib.import_module("tensorrt_rtx_libs")
    except ImportError:
        return False
    folder = Path(getattr(libs, "__file__", "")).parent
    return any(folder.glob("*lean*"))


def _timing_cache(config, options: BuildOptions, backend: TrtBackend, notes: list[str]):
    """Load the timing cache into the config; returns a function that saves it after the build."""
    path = options.timing_cache
    if not path:
        return lambda: {}
    if not backend.timing_cache:
        notes.append(f"timing cache {path}: not used, {backend.label}'s timing cache calls are "
                     "no-ops (the file is neither read nor written)")
        return lambda: {"path": str(path), "used": False,
                        "reason": f"{backend.name} timing cache is a no-op"}
    p = Path(path)
    data = p.read_bytes() if p.exists() else b""
    cache = config.create_timing_cache(data)
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        notes.append(f"timing cache {path}: does not match this TensorRT/GPU; starting a new one")
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, ignore_mismatch=False)

    def save() -> dict:
        blob = config.get_timing_cache().serialize()
        atomic_write(p, memoryview(blob))
        return {"path": str(p), "used": True, "loaded_bytes": len(data), "saved_bytes": blob.nbytes}

    return save


def _io_desc(network) -> tuple[list[dict], list[dict]]:
    def desc(t):
        return {"name": t.name, "dtype": str(t.dtype).rsplit(".", 1)[-1],
                "shape": [int(d) for d in t.shape]}
    return ([desc(network.get_input(i)) for i in range(network.num_inputs)],
            [desc(network.get_output(i)) for i in range(network.num_outputs)])


def _cache_key(model_sha: str, options: BuildOptions, backend: TrtBackend, gpu: str,
               plugins: list[dict]) -> tuple[str, str]:
    opts = json.dumps(options.key_fields(), sort_keys=True)
    options_hash = hashlib.sha256(opts.encode()).hexdigest()
    key_src = json.dumps({"model": model_sha, "options": options_hash, "library": backend.name,
                          "version": backend.version, "parser": backend.parser_version,
                          "gpu": gpu, "plugins": plugins, "rev": _BUILDER_REVISION},
                         sort_keys=True)
    return hashlib.sha256(key_src.encode()).hexdigest(), options_hash


def build_engine(source: str | os.PathLike | bytes, output: str | os.PathLike,
                 options: BuildOptions = BuildOptions(), *,
                 on_note: Callable[[str], None] | None = None) -> BuildResult:
    """Build (or fetch from the cache) the plan for ``source`` and write ``output`` + sidecar."""
    t0 = time.perf_counter()
    from onnx_fuse.model_io import check_output_path

    out = Path(output)
    check_output_path(out, what="plan")
    what = "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)
    proto, model_path, model_sha = _load(source)
    backend = load_backend(options.backend)
    nodes = plugin_nodes(proto)
    _check_plugins(nodes, options, backend)          # before any parser sees the model
    validate_profiles(proto, options.profiles)
    plugins = _plugin_summary(nodes)
    gpu = gpu_identity()
    key, options_hash = _cache_key(model_sha, options, backend, gpu, plugins)
    notes: list[str] = []

    def note(msg: str) -> None:
        notes.append(msg)
        if on_note:
            on_note(msg)

    cache = None
    if options.cache_dir != "":
        root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
        if root.exists() and not root.is_dir():   # else "internal error: NotADirectoryError"
            raise UserError(f"{root}: the engine cache folder is a file; give a folder with "
                            "--cache-dir, or --no-cache")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{root}: cannot create the engine cache folder ({exc.strerror or exc}); "
                            "give another with --cache-dir, or --no-cache") from None
        cache = EngineCache(root)
    lock = cache.lock(key) if cache else contextlib.nullcontext()
    with lock:
        if cache:
            data, meta, why = cache.get(key)
            if why:
                note(why + "; rebuilding")
                cache.drop(key)
            if data is not None:
                sidecar = dict(meta["sidecar"], plan=out.name,
                               model={"path": str(model_path) if model_path else None,
                                      "sha256": model_sha},
                               cache={"key": key, "hit": True, "dir": str(cache.root)})
                with user_write(out, "plan"):
                    atomic_write(out, data)
                    side = _write_sidecar(out, sidecar)
                return BuildResult(out, side, sidecar, True, time.perf_counter() - t0, notes)
        plan, sidecar = _build(proto, model_path, what, options, backend, nodes, note)
        sidecar.update(
            plan=out.name, plan_bytes=plan.nbytes, plan_sha256=sha256_hex(plan),
            model={"path": str(model_path) if model_path else None, "sha256": model_sha},
            gpu=gpu, plugins=plugins, options=options.key_fields(), options_hash=options_hash,
            cache={"key": key, "hit": False, "dir": str(cache.root) if cache else None},
        )
        sidecar = _ordered(sidecar)
        with user_write(out, "plan"):   # a full disk is one line, not an internal error
            atomic_write(out, memoryview(plan))
            side = _write_sidecar(out, sidecar)
        if cache:
            cache.put(key, memoryview(plan), {"plan_bytes": plan.nbytes,
                                              "plan_sha256": sidecar["plan_sha256"],
                                              "sidecar": sidecar})
    return BuildResult(out, side, sidecar, False, time.perf_counter() - t0, notes)


_ORDER = ("schema", "plan", "plan_bytes", "plan_sha256", "builder", "gpu", "model", "profiles",
          "plugins", "options", "options_hash", "applied", "timing_cache", "inputs", "outputs",
          "build_seconds", "cache", "created", "onnx_fuse_version", "notes")


def _ordered(d: dict) -> dict:
    return {k: d[k] for k in (*_ORDER, *sorted(set(d) - set(_ORDER))) if k in d}


def _write_sidecar(plan: Path, sidecar: dict) -> Path:
    side = plan.with_name(plan.name + ".json")
    write_json(side, _ordered(sidecar))
    return side


def _build(proto, model_path: Path | None, what: str, options: BuildOptions,
           backend: TrtBackend, nodes, note) -> tuple[object, dict]:
    trt = backend.module
    if nodes:
        _register_plugins(nodes, backend)
    logger = _logger(backend)
    t_build = time.perf_counter()
    with _capture() as messages:
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if nodes:
            prepared, _ = prepare_for_tensorrt(proto)
            ok = parser.parse(prepared.SerializeToString(),
                              str(model_path) if model_path is not None else None)
        elif model_path is not None:
            ok = parser.parse_from_file(str(model_path))
        else:
            ok = parser.parse(proto.SerializeToString())
        if not ok:
            raise UserError(_format_parser_errors(parser, what))
        shape_inputs = [network.get_input(i).name for i in range(network.num_inputs)
                        if network.get_input(i).is_shape_tensor]
        if shape_inputs:
            raise UserError(f"{what}: input(s) {', '.join(shape_inputs)} are shape tensors "
                            "(their values set shapes); onnx-fuse build cannot give them value "
                            "ranges yet: fold them into constants or make them ordinary inputs")
        config = builder.create_builder_config()
        local_notes: list[str] = []
        decomposable = _allow_attention_decomposition(trt, network)
        if decomposable:
            local_notes.append(f"{decomposable} attention layer(s) marked decomposable: TensorRT "
                               "uses its fused kernel where one exists for the shapes and dtype, "
                               "else plain layers")
        if any(n.op_type == "PagedAttention" for n in nodes):
            # The cache outputs alias the cache inputs (in-place update).
            feature = getattr(trt.PreviewFeature, "ALIASED_PLUGIN_IO_10_03", None)
            if feature is None:
                raise UserError(f"PagedAttention updates its KV cache in place, which needs "
                                f"aliased plugin I/O; {backend.label} does not offer it")
            config.set_preview_feature(feature, True)
        applied = _configure(builder, network, config, options, backend, local_notes)
        save_timing = _timing_cache(config, options, backend, local_notes)
        for n in local_notes:
            note(n)
        inputs, outputs = _io_desc(network)
        with _progress(options.progress, f"building {Path(what).name}") as progress:
            if progress is not None and backend.progress_monitor:
                config.progress_monitor = _make_progress_monitor(backend, progress)
            plan = builder.build_serialized_network(network, config)
        if plan is None:
            errs = _errors(messages)
            detail = errs[-1] if errs else "no error message from TensorRT"
            raise UserError(f"{what}: TensorRT could not build the engine: "
                            f"{' '.join(detail.split())}")
        timing = save_timing()
    seconds = time.perf_counter() - t_build
    from onnx_fuse import __version__

    sidecar = {
        "schema": SIDECAR_SCHEMA,
        "builder": {"library": backend.name, "version": backend.version,
                    "onnx_parser": backend.parser_version},
        "profiles": [p.as_json() for p in options.profiles],
        "applied": applied,
        "timing_cache": timing or None,
        "inputs": inputs,
        "outputs": outputs,
        "build_seconds": round(seconds, 4),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "onnx_fuse_version": __version__,
        "notes": list(local_notes),
    }
    if plan.nbytes == 0:
        raise InternalError("TensorRT returned an empty plan")
    return plan, sidecar


def _allow_attention_decomposition(trt, network) -> int:
    """Mark every IAttention decomposable; return how many.

    The parser maps Attention-23 (what the trt target emits at O3) to IAttention, which by default
    must run on a dedicated fused kernel: an fp32 graph or an unsupported head size then fails the
    whole build ("Attention operation was not supported by a dedicated kernel"). Decomposable
    attention still takes the fused kernel when one fits.
    """
    output_type = getattr(trt.LayerType, "ATTENTION_OUTPUT", None)
    if output_type is None:  # a TensorRT without IAttention
        return 0
    count = 0
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type == output_type:
            layer.__class__ = trt.IAttentionOutputLayer  # the bindings' documented downcast
            layer.attention.decomposable = True
            count += 1
    return count


def read_sidecar(plan: str | os.PathLike) -> dict | None:
    side = Path(str(plan) + ".json")
    if not side.exists():
        return None
    try:
        return json.loads(side.read_text())
    except ValueError:
        return None
