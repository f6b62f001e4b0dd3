"""The one place that knows which TensorRT is installed: `tensorrt` 10.x/11.x or TensorRT-RTX.

Everything else asks :func:`load_backend` for a :class:`TrtBackend` (the module handle plus
capability flags) and branches on the flags, never on version strings or module names.

Import is lazy: nothing here imports a TensorRT module until :func:`load_backend` runs, so
``import onnx_fuse.plugins.trt_backend`` is free on machines without TensorRT.

Order of preference: full ``tensorrt`` (it can build plugin layers and time tactics) and then
``tensorrt_rtx_bindings`` (TensorRT-RTX: builds engines on a CPU-only machine, but has no plugin
layers, no effective timing cache, and its ONNX parser aborts the process on a plugin node).
``ONNX_FUSE_TRT_BACKEND=tensorrt|rtx`` forces one.

Differences handled through the flags (measured on TensorRT-RTX 1.7.1; full TensorRT from its
10.x API documentation, not run here because its library cannot be installed on these machines):

=============================  =======================  =========================
capability                     tensorrt 10.x / 11.x     TensorRT-RTX 1.7
=============================  =======================  =========================
plugin layers (QDP/V3)         yes                      no (parser aborts)
timing cache                   persisted and reused     API present, no-op
``BuilderFlag.FP16`` etc.      10.x yes, 11.x removed   no (strongly typed only)
target compute capability      the build GPU            ``set_compute_capability``
runtime                        GPU needed               GPU needed; refuses sm_90
=============================  =======================  =========================
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from types import ModuleType

from onnx_fuse.errors import UserError

__all__ = ["TrtBackend", "BackendUnavailable", "load_backend", "try_load_backend",
           "gpu_identity", "backend_summary"]

_ENV = "ONNX_FUSE_TRT_BACKEND"
_CANDIDATES = {"tensorrt": "tensorrt", "rtx": "tensorrt_rtx_bindings"}


class BackendUnavailable(UserError):
    """Neither TensorRT nor TensorRT-RTX imports; the message says why for each."""


@dataclass(frozen=True)
class TrtBackend:
    """An imported TensorRT flavour and what it can do."""

    module: ModuleType = field(repr=False)
    name: str                      # "tensorrt" or "tensorrt-rtx"
    version: str                   # the bindings' __version__
    is_rtx: bool
    plugins: bool                  # can build plugin layers (tensorrt.plugin / add_plugin_v3)
    timing_cache: bool             # a timing cache is actually used and worth persisting
    weak_typing: bool              # BuilderFlag.FP16 exists (tensorrt 10.x)
    version_compatible: bool       # BuilderFlag.VERSION_COMPATIBLE exists
    hardware_compatible: bool      # HardwareCompatibilityLevel.AMPERE_PLUS exists
    progress_monitor: bool         # IBuilderConfig.progress_monitor exists
    compute_capability_targets: bool  # IBuilderConfig.set_compute_capability (RTX: build on CPU)
    parser_version: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def plugin_module(self) -> ModuleType:
        """``tensorrt.plugin`` (the Python plugin API); only full TensorRT has it."""
        if not self.plugins:
            raise UserError(f"{self.label} cannot build plugin layers (no tensorrt.plugin); "
                            "install full TensorRT to build models with onnx_fuse plugin nodes")
        return importlib.import_module(f"{self.module.__name__}.plugin")


def _probe(kind: str) -> TrtBackend:
    mod = importlib.import_module(_CANDIDATES[kind])
    trt = mod
    is_rtx = kind == "rtx"
    version = str(getattr(trt, "__version__", "unknown"))
    plugins = False
    if not is_rtx:
        plugins = hasattr(trt.INetworkDefinition, "add_plugin_v3")
        if plugins:
            try:
                importlib.import_module("tensorrt.plugin")
            except Exception:  # noqa: BLE001 - an old tensorrt without the QDP API
                plugins = False
    hw = getattr(trt, "HardwareCompatibilityLevel", None)
    parser_version = ""
    if hasattr(trt, "get_nv_onnx_parser_version"):
        parser_version = str(trt.get_nv_onnx_parser_version())
    return TrtBackend(
        module=trt,
        name="tensorrt-rtx" if is_rtx else "tensorrt",
        version=version,
        is_rtx=is_rtx,
        plugins=plugins,
        # RTX keeps create_timing_cache/set_timing_cache for API compatibility; they do nothing.
        timing_cache=not is_rtx and hasattr(trt.IBuilderConfig, "create_timing_cache"),
        weak_typing=hasattr(trt.BuilderFlag, "FP16"),
        version_compatible=hasattr(trt.BuilderFlag, "VERSION_COMPATIBLE"),
        hardware_compatible=hw is not None and hasattr(hw, "AMPERE_PLUS"),
        progress_monitor=hasattr(trt, "IProgressMonitor")
        and hasattr(trt.IBuilderConfig, "progress_monitor"),
        compute_capability_targets=hasattr(trt.IBuilderConfig, "set_compute_capability"),
        parser_version=parser_version,
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


@functools.lru_cache(maxsize=None)
def _load(order: tuple[str, ...]) -> TrtBackend | str:
    reasons = []
    for kind in order:
        try:
            return _probe(kind)
        except Exception as exc:  # noqa: BLE001 - stub wheels raise all sorts of things
            reasons.append(f"{_CANDIDATES[kind]}: {_reason(exc)}")
    return "; ".join(reasons)


def _order(prefer: str | None) -> tuple[str, ...]:
    prefer = prefer or os.environ.get(_ENV) or None
    if prefer is None:
        return ("tensorrt", "rtx")
    prefer = {"tensorrt-rtx": "rtx", "trt": "tensorrt"}.get(prefer, prefer)
    if prefer not in _CANDIDATES:
        raise UserError(f"unknown TensorRT backend {prefer!r} (from ${_ENV} or --backend); "
                        "use 'tensorrt' or 'rtx'")
    return (prefer,)


def try_load_backend(prefer: str | None = None) -> tuple[TrtBackend | None, str]:
    """(backend, "") or (None, why neither TensorRT nor TensorRT-RTX could be imported)."""
    got = _load(_order(prefer))
    if isinstance(got, TrtBackend):
        return got, ""
    return None, got


def load_backend(prefer: str | None = None) -> TrtBackend:
    """The best available TensorRT; raises :class:`BackendUnavailable` with each reason."""
    backend, why = try_load_backend(prefer)
    if backend is None:
        raise BackendUnavailable(
            f"no usable TensorRT: {why}. Install TensorRT-RTX (pip install "
            "'onnx-fuse[trt]') to build engines on any machine, or full TensorRT for plugins")
    return backend


@functools.lru_cache(maxsize=1)
def gpu_identity() -> str:
    """``"<name> (sm_XY)"`` of GPU 0, or ``"none"``. Part of the engine cache key.

    Asks ``nvidia-smi`` (no CUDA import, nothing to initialise); ``ONNX_FUSE_GPU`` overrides.
    """
    forced = os.environ.get("ONNX_FUSE_GPU")
    if forced:
        return forced
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "none"
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "none"
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if not line:
        return "none"
    name, _, cc = (part.strip() for part in line.partition(","))
    return f"{name} (sm_{cc.replace('.', '')})" if cc else name


def backend_summary(prefer: str | None = None) -> dict:
    """A JSON-able description for reports and docs."""
    backend, why = try_load_backend(prefer)
    if backend is None:
        return {"available": False, "reason": why, "gpu": gpu_identity()}
    return {
        "available": True,
        "library": backend.name,
        "version": backend.version,
        "onnx_parser": backend.parser_version,
        "plugins": backend.plugins,
        "timing_cache": backend.timing_cache,
        "gpu": gpu_identity(),
    }
