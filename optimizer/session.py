"""``onnx_fuse.InferenceSession``: ``onnxruntime.InferenceSession`` that optimizes the model on load.

    import onnx_fuse as ort_like          # instead of: import onnxruntime as ort_like
    sess = ort_like.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    sess.run(None, feeds)

It *is* an ``onnxruntime.InferenceSession`` (a subclass), built from the optimized model, so every
method (run, run_with_ort_values, io_binding, get_inputs, set_providers, ...) is ONNX Runtime's own.
The optimized model keeps the original's input/output names, dtypes and shapes, overridable
initializers and model metadata; that is checked after optimization and anything else falls back.

Optimized models are cached on disk (see session_cache.py): the first load of a model pays for the
optimization, later loads only hash the files and load the cached graph.

Failure policy: if anything of ours fails (optimization, the interface check, numeric verification,
the cache, ORT refusing the optimized graph), the session is built from the original model exactly
as ``onnxruntime.InferenceSession`` would build it, and one ``OnnxFuseWarning`` says why. Errors in
the user's model or arguments therefore surface as the same exceptions plain ONNX Runtime raises.
Our own keyword arguments are checked first: a level, target, opset, cache size limit or rules value
that does not exist raises ValueError (one line) at construction instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import stat
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import Fail as _OrtFail

from onnx_fuse import fileio
from onnx_fuse.api import check_opset, optimize
from onnx_fuse.errors import OnnxFuseWarning, UserError, VerificationError
from onnx_fuse.external_data import UnsafeExternalDataError, external_info, has_external_data, iter_model_tensors
from onnx_fuse.levels import as_list, check_level_target
from onnx_fuse.model_io import load_proto, save_model
from onnx_fuse.session_cache import DEFAULT_SIZE_LIMIT, MODEL_NAME, ModelCache

__all__ = ["InferenceSession", "OnnxFuseWarning", "SessionStats", "UnsafeModelError", "choose_target"]

log = logging.getLogger("onnx_fuse.session")

DEFAULT_OPTIMIZE_LEVEL = 3
#: Providers that run com.microsoft contrib ops, so the ``ort`` target suits them.
ORT_TARGET_PROVIDERS = frozenset({"CPUExecutionProvider", "CUDAExecutionProvider"})
#: TensorRT providers take standard ops only: the ``onnx`` target.
TRT_PROVIDERS = frozenset({"TensorrtExecutionProvider", "NvTensorRTRTXExecutionProvider"})


class InterfaceMismatch(Exception):
    """The optimized graph's inputs or outputs differ from the original's."""


class UnsafeModelError(UserError, _OrtFail):
    """The model file is a FIFO or device, or its external data points outside its folder, through
    a link, or at a special file: refused before anything reads it, and never handed to ONNX
    Runtime either (it follows hard links). Also an ``onnxruntime`` ``Fail``, which is what ONNX
    Runtime raises for most of these, so drop-in code catches it the same way."""


def check_source(source: Any) -> list[str] | None:
    """Refuse an unsafe model file (UnsafeModelError); return its external-data locations.

    None when it is not a file we can parse: ONNX Runtime then reports what is wrong, as usual.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None
    path = os.fspath(source)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeModelError(f"{path}: is {fileio.file_kind(st.st_mode)}, not a model file; "
                               "refusing to read it")
    try:
        proto, _ = load_proto(path, check=False, map_weights=True)
    except UnsafeExternalDataError as exc:
        raise UnsafeModelError(f"{path}: {exc}") from None
    except UserError:
        return None
    own = os.path.basename(os.path.realpath(path))  # mapped weights refer to the file itself
    return sorted({external_info(t).get("location", "") for t in iter_model_tensors(proto)
                   if t.data_location == onnx.TensorProto.EXTERNAL} - {"", own})


@dataclasses.dataclass
class SessionStats:
    """What happened when the session was built (``session.onnx_fuse_stats``)."""

    optimized: bool = False  #: the session runs the optimized graph
    cache_hit: bool | None = None  #: None when the cache was not used
    cache_key: str | None = None
    cache_entry: str | None = None
    level: int | None = None
    target: str | None = None
    opset: int | None = None  #: the ceiling on the default-domain opset given (None: none)
    fallback_reason: str | None = None
    #: node counts, rule fires, pass timings of the optimization (from the manifest on a hit)
    report: dict[str, Any] | None = None
    evicted: list[str] = dataclasses.field(default_factory=list)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def choose_target(providers: Sequence[Any] | None, sess_options: Any = None) -> str:
    """The optimizer target for a provider list.

    CPU and CUDA run com.microsoft contrib ops: ``ort``. A TensorRT provider anywhere in the list
    (it takes the graph first) or an unknown provider: ``onnx``, standard ops only, which every
    execution provider supports. No providers: ORT's default (CPU here) unless the session options
    choose providers themselves (``add_provider_for_devices``), which we cannot see: ``onnx``.
    """
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or []]
    if not names:
        has = getattr(sess_options, "has_providers", None)
        return "onnx" if sess_options is not None and has is not None and has() else "ort"
    if any(n in TRT_PROVIDERS for n in names):
        return "onnx"
    return "ort" if all(n in ORT_TARGET_PROVIDERS for n in names) else "onnx"


def _check_options(level: Any, target: Any, size_limit: Any, rules: Any, opset: Any = None) -> None:
    """Our keyword arguments, checked before anything loads: a level, target or opset that does not
    exist is the caller's mistake (a one-line ValueError), not an optimization failure to fall back from."""
    try:
        if isinstance(level, bool):  # True == 1 would pass as level 1
            raise UserError(f"unknown optimization level {level!r}; choose one of 0..4")
        check_level_target(level, "ort" if target is None else target)
        check_opset(opset)
        as_list(rules, "rules")
    except UserError as exc:
        raise ValueError(f"onnx_fuse.InferenceSession: {exc}") from None
    if isinstance(size_limit, bool) or not isinstance(size_limit, int) or size_limit < 0:
        raise ValueError(f"onnx_fuse.InferenceSession: cache_size_limit must be a number of bytes >= 0, "
                         f"got {size_limit!r}")


def _is_ort_format(source: Any, sess_options: Any) -> bool:
    """ORT-format (flatbuffer) models are ORT's own; we leave them alone, like ORT detects them."""
    if sess_options is not None:
        with contextlib.suppress(Exception):
            if sess_options.get_session_config_entry("session.load_model_format") == "ORT":
                return True
    if isinstance(source, (bytes, bytearray)):
        return bytes(source[4:8]) == b"ORTM"
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source).endswith(".ort")
    return False


# ---------------------------------------------------------------------------------------------
# Keeping the interface


def _shape_free(tp: onnx.TypeProto) -> onnx.TypeProto:
    out = onnx.TypeProto()
    out.CopyFrom(tp)
    stack = [out]
    while stack:
        t = stack.pop()
        kind = t.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            getattr(t, kind).ClearField("shape")
        elif kind in ("sequence_type", "optional_type"):
            stack.append(getattr(t, kind).elem_type)
        elif kind == "map_type":
            stack.append(t.map_type.value_type)
    out.ClearField("denotation")
    return out


def _restore_values(kind: str, values: Sequence[ir.Value], originals: Sequence[onnx.ValueInfoProto]) -> None:
    got_names = [v.name for v in values]
    want_names = [vi.name for vi in originals]
    if got_names != want_names:
        raise InterfaceMismatch(f"graph {kind}s changed from {want_names} to {got_names}")
    for value, vi in zip(values, originals):
        got = ir.serde.serialize_value(value).type
        if _shape_free(got) != _shape_free(vi.type):
            raise InterfaceMismatch(f"{kind} {vi.name!r}: type changed from "
                                    f"{_shape_free(vi.type)} to {_shape_free(got)}".replace("\n", " "))
        # Same dtype: put back the original's declared shape (optimization may have refined it,
        # but ORT reports the declared one and callers compare shapes).
        ir.serde.deserialize_value_info_proto(vi, value)
        if ir.serde.serialize_value(value).type != vi.type:
            raise InterfaceMismatch(f"{kind} {vi.name!r}: could not keep the original type")


def keep_interface(model: ir.Model, original: onnx.ModelProto) -> None:
    """Make ``model`` present exactly the original's interface, or raise InterfaceMismatch.

    Names and order of inputs and outputs, their dtypes, the declared shapes (restored where the
    optimizer refined them), which initializers are overridable, and the metadata ORT reports
    (get_modelmeta).
    """
    graph, og = model.graph, original.graph
    _restore_values("input", graph.inputs, og.input)
    _restore_values("output", graph.outputs, og.output)
    init_names = {t.name for t in og.initializer}
    want = {vi.name for vi in og.input if vi.name in init_names}
    got = {v.name for v in graph.inputs if v.name in graph.initializers}
    if want != got:
        raise InterfaceMismatch(f"overridable initializers changed from {sorted(want)} to {sorted(got)}")
    model.producer_name = original.producer_name or None
    model.producer_version = original.producer_version or None
    model.domain = original.domain or None
    model.model_version = original.model_version if original.HasField("model_version") else None
    model.doc_string = original.doc_string or None
    graph.name = original.graph.name or None
    graph.doc_string = original.graph.doc_string or None
    model.metadata_props.clear()
    model.metadata_props.update({p.key: p.value for p in original.metadata_props})


def _original_proto(source: str | os.PathLike | bytes) -> onnx.ModelProto:
    """The original's interface and metadata; large embedded weights are mapped, not read."""
    if isinstance(source, (bytes, bytearray)):
        return onnx.ModelProto.FromString(bytes(source))
    return load_proto(source, check=False, map_weights=True)[0]


def _repeated_node_name(graph: onnx.GraphProto) -> str | None:
    """A node name used twice in one graph (a body is a graph of its own), or None."""
    seen: set[str] = set()
    for node in graph.node:
        if node.name and node.name in seen:
            return node.name
        seen.add(node.name)
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                inner = _repeated_node_name(g)
                if inner is not None:
                    return inner
    return None


def _report_summary(result) -> dict[str, Any]:
    report = result.report
    return {"nodes_before": report.nodes_before, "nodes_after": report.nodes_after,
            "rule_fires": report.rule_fires, "op_delta": report.op_delta,
            "seconds": {k: round(v, 4) for k, v in report.seconds.items()},
            "verify_passed": None if report.verify is None else bool(report.verify.get("passed"))}


# ---------------------------------------------------------------------------------------------
# The session


class InferenceSession(onnxruntime.InferenceSession):
    """A drop-in ``onnxruntime.InferenceSession`` that runs an optimized copy of the model.

    The positional arguments and ``**kwargs`` are ONNX Runtime's. Ours are keyword-only:

    optimize_level   onnx-fuse level 0..4 (default 3).
    target           ``ort`` / ``onnx`` / ``trt``; default from the providers (see choose_target).
    cache_dir        folder of the optimized-model cache; default $ONNX_FUSE_CACHE_DIR, else
                     $XDG_CACHE_HOME/onnx-fuse, else ~/.cache/onnx-fuse. ``False`` disables it.
    cache_size_limit bytes the cache may hold (default 2 GiB); least recently used entries go.
    verify           compare the optimized model with the original on random inputs when it is
                     first optimized, and fall back if they differ (default False).
    rules            extra YAML rule files for the optimizer.
    opset            a ceiling on the optimized model's default-domain opset, as optimize(opset=N)
                     (default None: raised to 23 where a fused op needs it); a model already above
                     it falls back to the original with the warning.

    ``session.onnx_fuse_stats`` says whether the graph was optimized, whether the cache hit, why it
    fell back, and how long each step took.
    """

    def __init__(self, path_or_bytes: str | bytes | os.PathLike, sess_options: Any = None,
                 providers: Sequence[Any] | None = None, provider_options: Sequence[dict] | None = None,
                 *, optimize_level: int = DEFAULT_OPTIMIZE_LEVEL, target: str | None = None,
                 cache_dir: str | os.PathLike | bool | None = None,
                 cache_size_limit: int = DEFAULT_SIZE_LIMIT, verify: bool = False,
                 rules: Sequence[str | os.PathLike] = (), opset: int | None = None, **kwargs: Any) -> None:
        _check_options(optimize_level, target, cache_size_limit, rules, opset)
        t0 = time.perf_counter()
        stats = SessionStats(level=optimize_level, opset=opset)
        self.onnx_fuse_stats = stats
        self._onnx_fuse_keepalive: Any = None
        if _is_ort_format(path_or_bytes, sess_options):
            super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
            stats.fallback_reason = "ORT-format model: left as it is"
            return
        stats.target = target if target is not None else choose_target(providers, sess_options)
        external = check_source(path_or_bytes)  # before anything hashes or loads it
        reason = None
        with contextlib.ExitStack() as stack:
            try:
                source = self._prepare(path_or_bytes, external, stats, stack, level=optimize_level,
                                       cache_dir=cache_dir, size_limit=cache_size_limit,
                                       verify=verify, rules=rules)
            except Exception as exc:  # noqa: BLE001 - any failure of ours means: run the original
                reason = f"optimization failed ({type(exc).__name__}: {_first_line(exc)})"
            else:
                t1 = time.perf_counter()
                reason = self._load(source, path_or_bytes, sess_options, providers, provider_options,
                                    kwargs, stats)
                stats.seconds["ort_load"] = time.perf_counter() - t1
        if stats.optimized:
            self._evict(stats, cache_dir, cache_size_limit)
            stats.seconds["total"] = time.perf_counter() - t0
            return
        self._onnx_fuse_keepalive = None
        if not getattr(self, "_onnx_fuse_loaded_original", False):
            # Exactly what onnxruntime would do. Its exception (bad model, bad providers)
            # propagates unchanged; only if it succeeds do we say why we could not optimize.
            super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
        stats.fallback_reason = reason
        stats.seconds["total"] = time.perf_counter() - t0
        warnings.warn(f"onnx-fuse: {reason}; running the original model unoptimized",
                      OnnxFuseWarning, stacklevel=2)

    def _load(self, source: str | bytes, original: Any, sess_options: Any, providers: Any,
              provider_options: Any, kwargs: dict[str, Any], stats: SessionStats) -> str | None:
        """Build the ORT session from ``source``; return None, or why the original must be used.

        ORT's EP fallback (retry on CPU when a provider fails) is off at first: if the optimized
        graph is what a provider refuses, we want the original with that provider, not our graph
        on the CPU. If the original fails the same way, the graph is not to blame, and the
        optimized one is loaded the way ORT would load any model, EP fallback and all.
        """
        user_fallback = int(kwargs.get("enable_fallback", 1)) == 1
        strict = {**kwargs, "enable_fallback": 0}
        try:
            super().__init__(source, sess_options, providers, provider_options, **strict)
            self._enable_fallback = user_fallback
            stats.optimized = True
            return None
        except Exception as exc:  # noqa: BLE001
            reason = ("ONNX Runtime could not load the optimized model "
                      f"({type(exc).__name__}: {_first_line(exc)})")
        try:
            super().__init__(original, sess_options, providers, provider_options, **strict)
            self._enable_fallback = user_fallback
            self._onnx_fuse_loaded_original = True
            return reason
        except Exception:  # noqa: BLE001 - not our graph's fault
            pass
        if user_fallback:
            try:
                super().__init__(source, sess_options, providers, provider_options, **kwargs)
                stats.optimized = True
                return None
            except Exception:  # noqa: BLE001 - the caller builds the original and lets ORT raise
                pass
        return reason

    # -- stats shortcuts ---------------------------------------------------------------------------

    @property
    def onnx_fuse_cache_hit(self) -> bool | None:
        return self.onnx_fuse_stats.cache_hit

    @property
    def onnx_fuse_optimized(self) -> bool:
        return self.onnx_fuse_stats.optimized

    # -- building ----------------------------------------------------------------------------------

    def _prepare(self, source: Any, external: list[str] | None, stats: SessionStats,
                 stack: contextlib.ExitStack, *, level: int,
                 cache_dir: Any, size_limit: int, verify: bool, rules: Sequence[Any]) -> str | bytes:
        """Return what ORT should load: a cache entry's path or bytes, or an in-memory model."""
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if not isinstance(source, (str, bytes)):
            raise TypeError(f"unable to load from type {type(source)!r}")
        rules = [os.fspath(r) for r in rules]
        cache = self._open_cache(cache_dir, size_limit)
        if cache is not None:
            t = time.perf_counter()
            options = {"level": level, "target": stats.target, "verify": bool(verify),
                       "rules": [[Path(r).name, fileio.sha256_file(r)] for r in rules]}
            if stats.opset is not None:   # absent when unset: the keys made before the option stay valid
                options["opset"] = int(stats.opset)
            key, _ = cache.key_for(source, options, external)
            stats.cache_key = key
            stats.seconds["hash"] = time.perf_counter() - t
            lock = cache.lock(key)
            try:
                stack.enter_context(lock)
            except Exception as exc:  # noqa: BLE001 - a stuck lock: optimize without the cache
                log.warning("onnx-fuse cache lock %s unavailable (%s); not caching", lock.lock_file, exc)
                cache = None
        if cache is not None:
            t = time.perf_counter()
            entry = cache.lookup(key)
            stats.seconds["lookup"] = time.perf_counter() - t
            stats.cache_hit = entry is not None
            if entry is None:
                result, external = self._optimize(source, stats, level=level, verify=verify, rules=rules)
                t = time.perf_counter()
                with cache.staging(key) as stage:
                    # Weights always beside the graph: writing them as raw external data is
                    # 7-14x faster than serializing them into the protobuf (0.16 s vs 1.2-2.3 s
                    # for 340 MB), and ORT loads either from a path.
                    save_model(result.model, stage / MODEL_NAME, external_data=True)
                    entry = cache.commit(key, stage, {"options": options, "report": stats.report,
                                                      "source": source if isinstance(source, str) else "<bytes>"})
                stats.seconds["save"] = time.perf_counter() - t
            else:
                stats.report = entry.manifest.get("report")
            stats.cache_entry = str(entry.path)
            # By path: ORT loads a 340 MB model from a file in about half the time it takes from
            # bytes (docs/PERF.md). set_providers() re-reads it, see docs/session.md.
            return str(entry.model_path)
        result, external = self._optimize(source, stats, level=level, verify=verify, rules=rules)
        if not external and not _too_big_for_bytes(result.model):
            return result.to_proto().SerializeToString()
        tmp = tempfile.TemporaryDirectory(prefix="onnx-fuse-session-")
        self._onnx_fuse_keepalive = tmp  # lives as long as the session (ORT may re-read it)
        path = Path(tmp.name) / MODEL_NAME
        save_model(result.model, path, external_data=True)
        return str(path)

    def _optimize(self, source: str | bytes, stats: SessionStats, *, level: int, verify: bool,
                  rules: Sequence[str]):
        original = _original_proto(source)
        repeated = _repeated_node_name(original.graph)
        if repeated is not None:  # optimize() renames it; ONNX Runtime refuses the model
            raise UserError(f"node name {repeated!r} is used twice in one graph")
        t = time.perf_counter()
        result = optimize(source, level=level, target=stats.target, rules=rules, verify=verify, opset=stats.opset)
        stats.seconds["optimize"] = time.perf_counter() - t
        if verify and not result.report.passed:
            raise VerificationError(f"verification failed: {result.report.verify_failure}")
        t = time.perf_counter()
        keep_interface(result.model, original)
        stats.seconds["interface"] = time.perf_counter() - t
        stats.report = _report_summary(result)
        return result, isinstance(source, str) and has_external_data(original)

    @staticmethod
    def _open_cache(cache_dir: Any, size_limit: int) -> ModelCache | None:
        if cache_dir is False:
            return None
        root = fileio.cache_dir() if cache_dir is None or cache_dir is True else Path(cache_dir)
        try:
            return ModelCache(root, size_limit)
        except OSError as exc:
            log.warning("onnx-fuse cache folder %s unusable (%s); optimizing without a cache", root, exc)
            return None

    def _evict(self, stats: SessionStats, cache_dir: Any, size_limit: int) -> None:
        if stats.cache_key is None:
            return
        cache = self._open_cache(cache_dir, size_limit)
        if cache is None:
            return
        try:
            stats.evicted = cache.evict(keep=[stats.cache_key])
        except OSError as exc:
            log.warning("onnx-fuse cache eviction failed: %s", exc)


#: Without a cache, models with more weights than this go to ORT as a temporary file (weights
#: streamed out one at a time) instead of one serialized protobuf: two whole copies in memory.
BYTES_HANDOFF_LIMIT = 64 * 1024 * 1024


def _too_big_for_bytes(model: ir.Model) -> bool:
    total = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    return total > BYTES_HANDOFF_LIMIT


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
