"""KernelLib's ctypes signatures agree with the extern "C" launch functions in plugins/kernels/*.cu.

A wrong argument count or type only shows when a launch runs on a GPU (a TypeError from ctypes,
or garbage arguments); this check reads the C declarations and needs no GPU and no built library.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from onnx_fuse.plugins import kernel_lib

KERNELS = Path(kernel_lib.__file__).resolve().parent / "kernels"


def _c_declarations() -> dict[str, list[str]]:
    decls = {}
    for src in KERNELS.glob("*.cu"):
        text = src.read_text()
        for name, params in re.findall(r"^int (onnx_fuse_\w+)\(([^)]*)\)\s*\{", text, re.M):
            decls[name] = [" ".join(p.split()) for p in params.split(",")]
    return decls


def _ctype(param: str):
    if "*" in param or param.startswith("cudaStream_t"):
        return ctypes.c_void_p
    if param.startswith("long long"):
        return ctypes.c_longlong
    if param.startswith("float"):
        return ctypes.c_float
    if param.startswith("int"):
        return ctypes.c_int
    raise AssertionError(f"unmapped C parameter type: {param!r}")


@pytest.mark.parametrize("name", sorted(kernel_lib.ARGTYPES))
def test_argtypes_match_c_declaration(name):
    decls = _c_declarations()
    assert name in decls, f"{name} is not declared in plugins/kernels/*.cu"
    expected = [_ctype(p) for p in decls[name]]
    got = kernel_lib.ARGTYPES[name]
    assert len(got) == len(expected), f"{name}: {len(got)} argtypes for {len(expected)} C parameters"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g is e, f"{name} argument {i} ({decls[name][i]}): ctypes {g.__name__}, C wants {e.__name__}"
