"""PTX for TensorRT's ahead-of-time plugin implementations: the kernels of plugins/kernels/ behind
small adapters whose entry points take arguments in the order TensorRT's AOT launcher passes them.
Compiled with build_kernels' nvcc flags and cached by source hash, so a plan embeds the kernels
and runs without Python."""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

from onnx_fuse.errors import InternalError, UserError
from onnx_fuse.fileio import cache_dir
from onnx_fuse.plugins.engine_cache import atomic_write

def compile_adapter(family: str, adapter_source: str, arch: str = "80") -> bytes:
    """PTX of ``adapter_source`` (which includes ``plugins/kernels/<family>.cu``), built with
    build_kernels' nvcc flags and cached under the engine cache folder by source hash."""
    from onnx_fuse.plugins import build_kernels as bk

    h = hashlib.sha256(adapter_source.encode())
    for src in sorted(bk.KERNEL_DIR.glob("*.cu*")) + sorted(bk.KERNEL_DIR.glob("*.h")):
        h.update(src.name.encode())
        h.update(src.read_bytes())
    h.update(arch.encode())
    cached = cache_dir() / "aot" / f"{family}-{h.hexdigest()[:24]}.ptx"
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
    atomic_write(cached, data)
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
