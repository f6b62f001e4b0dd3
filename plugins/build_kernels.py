"""Build the CUDA kernels in plugins/kernels/ with nvcc: PTX, cubin and a host library.

    python -m onnx_fuse.plugins.build_kernels [--out DIR] [--what ptx,cubin,lib] [--arch 80,90]

Artifacts (in ``plugins/kernels/build/`` by default, which git ignores):

- ``<family>.compute_<arch>.ptx`` and ``<family>.sm_<arch>.cubin`` for each ``<family>.cu``:
  the ``extern "C" __global__`` kernels, for embedding (a TensorRT plugin's AOT path) or for
  loading with the driver API / cupy ``RawModule``.
- ``libonnx_fuse_kernels.so``: every family plus its ``extern "C"`` host launch functions
  (pointers, dims, stream), cudart linked statically, machine code for each arch (sm_90a in
  place of sm_90 when both are asked for, so the wgmma kernels are what runs on Hopper) plus
  PTX of the oldest; loaded by ``onnx_fuse.plugins.kernel_lib`` (ctypes) in the GPU tests.

Arch ``90a`` builds ``-gencode=arch=compute_90a,code=sm_90a``: the fused-attention wgmma
variant exists only there (its body traps in the sm_80 / sm_90 builds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
DEFAULT_BUILD_DIR = KERNEL_DIR / "build"
LIB_NAME = "libonnx_fuse_kernels.so"
DEFAULT_ARCHS = ("80", "90", "90a")
COMMON_FLAGS = ["-O3", "-std=c++17", "--use_fast_math", "-lineinfo", "-Xptxas=-warn-spills"]

__all__ = ["BuildError", "BuildResult", "build", "find_nvcc", "kernel_sources", "main"]


class BuildError(RuntimeError):
    """nvcc failed; the message carries the command and its output."""


@dataclass
class BuildResult:
    out_dir: Path
    artifacts: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


def find_nvcc() -> str | None:
    """Path of nvcc (PATH, then $CUDA_HOME/bin), or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def kernel_sources() -> list[Path]:
    """Every kernel family source, one ``.cu`` per family."""
    return sorted(KERNEL_DIR.glob("*.cu"))


def _gencode(arch: str, code: str) -> str:
    return f"-gencode=arch=compute_{arch},code={code}_{arch}"


def _jobs(out_dir: Path, what: set[str], archs: tuple[str, ...],
          lib_ptx: bool = True) -> list[tuple[list[str], Path]]:
    jobs: list[tuple[list[str], Path]] = []
    srcs = kernel_sources()
    for src in srcs:
        fam = src.stem
        for arch in archs:
            if "ptx" in what:
                out = out_dir / f"{fam}.compute_{arch}.ptx"
                jobs.append(([_gencode(arch, "compute"), "-ptx", str(src), "-o", str(out)], out))
            if "cubin" in what:
                out = out_dir / f"{fam}.sm_{arch}.cubin"
                jobs.append(([_gencode(arch, "sm"), "-cubin", str(src), "-o", str(out)], out))
    if "lib" in what:
        out = out_dir / LIB_NAME
        sass = [a for a in archs if not (a == "90" and "90a" in archs)]
        gens = [_gencode(a, "sm") for a in sass] + ([_gencode(archs[0], "compute")] if lib_ptx else [])
        cmd = gens + ["-shared", "-Xcompiler=-fPIC", "-cudart=static", *map(str, srcs), "-o", str(out)]
        jobs.append((cmd, out))
    return jobs


def build(
    out_dir: str | Path | None = None,
    *,
    what: tuple[str, ...] | list[str] = ("ptx", "cubin", "lib"),
    archs: tuple[str, ...] | list[str] = DEFAULT_ARCHS,
    jobs: int | None = None,
    nvcc: str | None = None,
    verbose: bool = False,
    lib_ptx: bool = True,
) -> BuildResult:
    """Compile every kernel family; raises BuildError on the first failure. ``lib_ptx=False``
    leaves the PTX out of the library (SASS for the named archs only): about half the size, for
    carrying a prebuilt library to a machine of exactly that arch."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise BuildError("nvcc not found on PATH or under $CUDA_HOME/bin")
    out = Path(out_dir) if out_dir is not None else DEFAULT_BUILD_DIR
    out.mkdir(parents=True, exist_ok=True)
    unknown = set(what) - {"ptx", "cubin", "lib"}
    if unknown:
        raise ValueError(f"unknown build products {sorted(unknown)} (ptx, cubin, lib)")
    todo = _jobs(out, set(what), tuple(str(a) for a in archs), lib_ptx)
    res = BuildResult(out_dir=out)
    t0 = time.perf_counter()

    def run(job: tuple[list[str], Path]) -> tuple[Path, str]:
        args, target = job
        cmd = [nvcc, *COMMON_FLAGS, f"-I{KERNEL_DIR}", *args]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise BuildError(f"nvcc failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        return target, (p.stdout + p.stderr).strip()

    n = jobs or max(1, min(len(todo), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        for target, text in pool.map(run, todo):
            res.artifacts.append(target)
            if text:
                res.log.append(f"{target.name}: {text}")
            if verbose:
                print(f"built {target}", flush=True)
    res.seconds = time.perf_counter() - t0
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_BUILD_DIR})")
    ap.add_argument("--what", default="ptx,cubin,lib", help="comma list of ptx, cubin, lib")
    ap.add_argument("--arch", default=",".join(DEFAULT_ARCHS), help="comma list, e.g. 80,90")
    ap.add_argument("-j", "--jobs", type=int, default=None)
    ap.add_argument("--lib-sass-only", action="store_true",
                    help="no PTX in the library: SASS for --arch only (smaller; runs on that arch alone)")
    a = ap.parse_args(argv)
    try:
        r = build(a.out, what=a.what.split(","), archs=a.arch.split(","), jobs=a.jobs, verbose=True,
                  lib_ptx=not a.lib_sass_only)
    except BuildError as e:
        print(e, file=sys.stderr)
        return 1
    for line in r.log:
        print(line)
    print(f"built {len(r.artifacts)} artifacts in {r.seconds:.1f} s -> {r.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
