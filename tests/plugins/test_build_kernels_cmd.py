"""The nvcc command lines of plugins/build_kernels.py (no nvcc needed: only the job list)."""

from __future__ import annotations

from pathlib import Path

from onnx_fuse.plugins import build_kernels


def _lib_cmd(**kw) -> list[str]:
    jobs = build_kernels._jobs(Path("/tmp/x"), {"lib"}, ("90a",), **kw)
    assert len(jobs) == 1
    return jobs[0][0]


def test_library_carries_ptx_by_default():
    cmd = _lib_cmd()
    assert "-gencode=arch=compute_90a,code=sm_90a" in cmd
    assert "-gencode=arch=compute_90a,code=compute_90a" in cmd


def test_sass_only_library_leaves_the_ptx_out():
    cmd = _lib_cmd(lib_ptx=False)
    assert "-gencode=arch=compute_90a,code=sm_90a" in cmd
    assert not any("code=compute_" in c for c in cmd)
