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
import re
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import onnx

from onnx_fuse.errors import InternalError, UserError
from onnx_fuse.plugins.trt_backend import TrtBackend, gpu_identity, load_backend

__all__ = ["BuildOptions", "BuildResult", "Profile", "InputRange", "build_engine", "parse_profiles",
           "parse_size", "plugin_nodes", "prepare_for_tensorrt", "default_cache_dir",
           "model_inputs", "PLUGIN_DOMAIN", "PLUGIN_OPS"]

PLUGIN_DOMAIN = "onnx_fuse"
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


# --------------------------------------------------------------------------- profiles and sizes

Dims = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    """min / opt / max shape of one input in one optimization profile."""

    min: Dims
    opt: Dims
    max: Dims

    def as_json(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


@dataclass(frozen=True)
class Profile:
    """One optimization profile: input name -> range."""

    inputs: dict[str, InputRange]

    def as_json(self) -> dict:
        return {name: r.as_json() for name, r in self.inputs.items()}


def _dims(text: str, spec: str) -> Dims:
    text = text.strip()
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in re.split(r"[x×]", text))
    except ValueError:
        raise UserError(f"--profile {spec!r}: {text!r} is not a shape like 4x128") from None
    if any(d < 0 for d in dims):
        raise UserError(f"--profile {spec!r}: dimensions must be >= 0")
    return dims


def parse_profiles(specs: Iterable[str]) -> list[Profile]:
    """``NAME:MIN,OPT,MAX`` (or ``NAME:SHAPE`` for a fixed shape) -> profiles.

    Specs for different inputs go into one profile; naming an input a second time starts the next
    profile, so ``a:.. b:.. a:.. b:..`` is two profiles over inputs a and b.
    """
    profiles: list[dict[str, InputRange]] = []
    for spec in specs:
        name, sep, rest = spec.rpartition(":")
        if not sep or not name:
            raise UserError(f"--profile {spec!r}: expected NAME:MIN,OPT,MAX, e.g. "
                            "input_ids:1x1,4x128,8x512")
        parts = rest.split(",")
        if len(parts) == 1:
            parts = parts * 3
        if len(parts) != 3:
            raise UserError(f"--profile {spec!r}: give three shapes MIN,OPT,MAX (or one fixed "
                            "shape)")
        lo, opt, hi = (_dims(p, spec) for p in parts)
        if not profiles or name in profiles[-1]:
            profiles.append({})
        profiles[-1][name] = InputRange(lo, opt, hi)
    return [Profile(p) for p in profiles]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str | int | None) -> int | None:
    """``"4G"``, ``"512MiB"``, ``"1.5g"``, ``"1048576"`` -> bytes (binary units)."""
    if text is None or isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise UserError(f"--workspace {text!r}: expected a size like 4G, 512M or 1073741824")
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


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


def default_cache_dir() -> Path:
    base = os.environ.get("ONNX_FUSE_CACHE_DIR")
    if base:
        return Path(base) / "engines"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "onnx-fuse" / "engines"


# --------------------------------------------------------------------------- model inspection

def _load(source: str | os.PathLike | bytes) -> tuple[onnx.ModelProto, Path | None, str]:
    from onnx_fuse.model_io import load_proto

    proto, base_dir = load_proto(source, check=False)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return proto, None, hashlib.sha256(bytes(source)).hexdigest()
    path = Path(source).resolve()
    h = hashlib.sha256()
    _hash_file(path, h)
    for loc in sorted(_external_locations(proto)):
        h.update(b"\0" + loc.encode())
        _hash_file(Path(base_dir) / loc, h)
    return proto, path, h.hexdigest()


def _hash_file(path: Path, h) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)


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


def model_inputs(proto: onnx.ModelProto) -> dict[str, tuple[int, list[int | str | None] | None]]:
    """Real inputs (not initializers): name -> (elem_type, dims or None when the rank is unknown).

    A dim is an int (fixed), a str (named, e.g. "batch") or None (unnamed dynamic).
    """
    inits = {t.name for t in proto.graph.initializer}
    out = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out[vi.name] = (tt.elem_type, dims)
    return out


def _is_dynamic(dims) -> bool:
    return dims is None or any(not isinstance(d, int) for d in dims)


def _example_profile(name: str, dims) -> str:
    if dims is None:
        return f"{name}:MIN,OPT,MAX"
    lo = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
    opt = "x".join(str(d) if isinstance(d, int) else "4" for d in dims)
    hi = "x".join(str(d) if isinstance(d, int) else "16" for d in dims)
    return f"{name}:{lo},{opt},{hi}"


def validate_profiles(proto: onnx.ModelProto, profiles: Sequence[Profile]) -> None:
    """Check profiles against the model's inputs before anything is built."""
    inputs = model_inputs(proto)
    dynamic = {n: d for n, (_, d) in inputs.items() if _is_dynamic(d)}
    if dynamic and not profiles:
        example = " ".join(f"--profile {_example_profile(n, d)}" for n, d in dynamic.items())
        raise UserError(f"model has dynamic inputs ({', '.join(dynamic)}); give an optimization "
                        f"profile for each, e.g. {example}")
    for index, profile in enumerate(profiles):
        where = f"profile {index}" if len(profiles) > 1 else "profile"
        for name, rng in profile.inputs.items():
            if name not in inputs:
                raise UserError(f"{where}: model has no input {name!r} (inputs: "
                                f"{', '.join(inputs) or 'none'})")
            ranks = {len(rng.min), len(rng.opt), len(rng.max)}
            if len(ranks) != 1:
                raise UserError(f"{where}: {name}: MIN, OPT and MAX have different ranks "
                                f"({len(rng.min)}, {len(rng.opt)}, {len(rng.max)})")
            dims = inputs[name][1]
            if dims is not None and len(dims) != len(rng.min):
                raise UserError(f"{where}: {name} has rank {len(dims)} in the model "
                                f"({_fmt_dims(dims)}) but the profile gives rank {len(rng.min)}")
            for axis in range(len(rng.min)):
                lo, opt, hi = rng.min[axis], rng.opt[axis], rng.max[axis]
                if not lo <= opt <= hi:
                    raise UserError(f"{where}: {name} axis {axis}: need MIN <= OPT <= MAX, got "
                                    f"{lo}, {opt}, {hi}")
                fixed = dims[axis] if dims is not None else None
                if isinstance(fixed, int) and not lo == opt == hi == fixed:
                    raise UserError(f"{where}: {name} axis {axis} is fixed at {fixed} in the "
                                    f"model; the profile says {lo},{opt},{hi}")
        missing = [n for n in dynamic if n not in profile.inputs]
        if missing:
            example = " ".join(f"--profile {_example_profile(n, dynamic[n])}" for n in missing)
            raise UserError(f"{where}: no shape range for dynamic input(s) "
                            f"{', '.join(missing)}; add {example}")
        # TensorRT's ONNX parser treats equal dim names as equal dims: ranges must agree.
        named: dict[str, tuple[str, int, tuple[int, int, int]]] = {}
        for name, rng in profile.inputs.items():
            dims = inputs[name][1] or []
            for axis, d in enumerate(dims):
                if isinstance(d, str):
                    r = (rng.min[axis], rng.opt[axis], rng.max[axis])
                    seen = named.setdefault(d, (name, axis, r))
                    if seen[2] != r:
                        raise UserError(
                            f"{where}: dim {d!r} is {','.join(map(str, seen[2]))} on "
                            f"{seen[0]} axis {seen[1]} but {','.join(map(str, r))} on {name} "
                            f"axis {axis}; inputs sharing a named dim need the same range")


def _fmt_dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


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


# --------------------------------------------------------------------------- atomic files, cache

def _atomic_write(path: Path, data: bytes | memoryview) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_json(path: Path, obj: dict) -> None:
    _atomic_write(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


class EngineCache:
    """``<dir>/<key[:2]>/<key>.plan`` plus ``<key>.json`` holding the plan's size and sha256.

    An entry is only used when both files exist and the plan matches its checksum; anything
    else (truncated copy, bit rot, a crash between the two writes) is reported and rebuilt.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.plan", d / f"{key}.json"

    def lock(self, key: str):
        from filelock import FileLock

        d = self.root / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        return FileLock(str(d / f"{key}.lock"), timeout=3600)

    def get(self, key: str) -> tuple[bytes | None, dict | None, str]:
        """(plan, meta, "") on a hit; (None, None, why) on a miss or a bad entry."""
        plan_path, meta_path = self.paths(key)
        if not plan_path.exists() and not meta_path.exists():
            return None, None, ""
        try:
            meta = json.loads(meta_path.read_text())
            data = plan_path.read_bytes()
        except (OSError, ValueError) as exc:
            return None, None, f"cache entry {key[:12]} unreadable ({type(exc).__name__})"
        if len(data) != meta.get("plan_bytes") or _sha256(data) != meta.get("plan_sha256"):
            return None, None, (f"cache entry {key[:12]} is corrupt ({len(data)} bytes, expected "
                                f"{meta.get('plan_bytes')} with a matching sha256)")
        return data, meta, ""

    def put(self, key: str, plan: bytes | memoryview, meta: dict) -> None:
        plan_path, meta_path = self.paths(key)
        _atomic_write(plan_path, plan)
        _write_json(meta_path, meta)   # written last: its presence marks a complete entry

    def drop(self, key: str) -> None:
        for p in self.paths(key):
            with contextlib.suppress(OSError):
                p.unlink()


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
    attribute defaults, ``aot = 1``, a computed seq_lens where FusedAttention has none).
    Returns (copy, number of nodes changed). Main graph only; plugin nodes in subgraphs are
    left as they are."""
    import importlib

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

    new_nodes, changed = [], 0
    for node in out.graph.node:
        if node.domain == PLUGIN_DOMAIN and node.op_type in PLUGIN_OPS:
            before = node.SerializeToString()
            extra = importlib.import_module(PLUGIN_OPS[node.op_type]).prepare_node(node, fresh)
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
        _atomic_write(p, memoryview(blob))
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
    out = Path(output)
    if out.exists() and out.is_dir():
        raise UserError(f"{out}: is a folder; give a file name for the plan")
    if not out.resolve().parent.exists():
        raise UserError(f"{out}: output folder {str(out.resolve().parent)!r} does not exist")
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
        cache = EngineCache(Path(options.cache_dir) if options.cache_dir else default_cache_dir())
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
                _atomic_write(out, data)
                side = _write_sidecar(out, sidecar)
                return BuildResult(out, side, sidecar, True, time.perf_counter() - t0, notes)
        plan, sidecar = _build(proto, model_path, what, options, backend, nodes, note)
        sidecar.update(
            plan=out.name, plan_bytes=plan.nbytes, plan_sha256=_sha256(plan),
            model={"path": str(model_path) if model_path else None, "sha256": model_sha},
            gpu=gpu, plugins=plugins, options=options.key_fields(), options_hash=options_hash,
            cache={"key": key, "hit": False, "dir": str(cache.root) if cache else None},
        )
        sidecar = _ordered(sidecar)
        _atomic_write(out, memoryview(plan))
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
    _write_json(side, _ordered(sidecar))
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



# --------------------------------------------------------------------------- AOT kernel PTX

def compile_adapter(family: str, adapter_source: str, arch: str = "80") -> bytes:
    """PTX of ``adapter_source`` (which includes ``plugins/kernels/<family>.cu``), built with
    build_kernels' nvcc flags and cached under the engine cache folder by source hash."""
    from onnx_fuse.plugins import build_kernels as bk

    h = hashlib.sha256(adapter_source.encode())
    for src in sorted(bk.KERNEL_DIR.glob("*.cu*")) + sorted(bk.KERNEL_DIR.glob("*.h")):
        h.update(src.name.encode())
        h.update(src.read_bytes())
    h.update(arch.encode())
    cached = default_cache_dir().parent / "aot" / f"{family}-{h.hexdigest()[:24]}.ptx"
    if cached.is_file():
        return cached.read_bytes()
    nvcc = bk.find_nvcc()
    if nvcc is None:
        raise UserError(f"building the AOT implementation of the {family} plugin needs nvcc "
                        "(CUDA 12+), which is not on PATH or under $CUDA_HOME")
    import subprocess

    with tempfile.TemporaryDirectory(prefix="onnx-fuse-aot-") as tmp:
        src = Path(tmp) / f"{family}_trt_adapter.cu"
        src.write_text(adapter_source)
        out = Path(tmp) / "out.ptx"
        cmd = [nvcc, f"-gencode=arch=compute_{arch},code=compute_{arch}", "-ptx",
               *bk.COMMON_FLAGS, "-I", str(bk.KERNEL_DIR), str(src), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.is_file():
            raise InternalError(f"nvcc failed on the {family} TensorRT adapter: "
                                f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        data = out.read_bytes()
    _atomic_write(cached, data)
    return data


def ptx_entries(ptx: bytes) -> list[str]:
    """Names of the kernels (``.entry``) in a PTX module."""
    return re.findall(r"\.entry\s+([A-Za-z_][\w$]*)\s*\(", ptx.decode(errors="replace"))


def aot_kernel_ptx(family: str, entry: str, adapter_source: str, arch: str = "80") -> bytes:
    """PTX holding ``entry`` for a TensorRT AOT plugin implementation.

    Prefers what ``python -m onnx_fuse.plugins.build_kernels`` produced
    (``plugins/kernels/build/<family>.compute_<arch>.ptx``) when it already contains ``entry``;
    otherwise compiles ``adapter_source``: entry points in the argument order TensorRT's AOT
    launcher uses (input pointers, int32 scalars, output pointers) around the same kernel bodies.
    """
    from onnx_fuse.plugins import build_kernels as bk

    built = bk.DEFAULT_BUILD_DIR / f"{family}.compute_{arch}.ptx"
    if built.is_file():
        text = built.read_bytes()
        if entry in ptx_entries(text):
            return text
    data = compile_adapter(family, adapter_source, arch)
    if entry not in ptx_entries(data):
        raise UserError(f"the {family} kernels have no variant {entry} (have: "
                        f"{', '.join(ptx_entries(data)[:8])} ...)")
    return data
