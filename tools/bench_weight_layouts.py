"""Peak RSS of load + O3 (+ saves) for the two weight layouts of tests/test_memory.py.

A: 2.4 GB 1-D + 2.05 GB 2-D float32 weights, external, in a sparse file (optimize only).
B: 256 MiB of weights inside the .onnx (16 x 16 MiB): optimize, save embedded, save external.
Each runs in a fresh child; numbers are the child's VmHWM. To compare with another checkout, put
its package first on the path (``PYTHONPATH=/path/to/checkout-as-onnx_fuse``): the children
inherit the environment.

    python tools/bench_weight_layouts.py
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    spec = importlib.util.spec_from_file_location("test_memory", ROOT / "tests" / "test_memory.py")
    tm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tm)
    print("| layout | import MiB | after O3 MiB | peak MiB |")
    print("|---|---|---|---|")
    for label, build, src, saves in (
            ("A: 4.45 GB external 1-D + 2-D, O3", tm._BUILD_SPARSE, "big.onnx", lambda d: []),
            ("B: 256 MiB inside .onnx, O3 + 2 saves", tm._BUILD_EMBEDDED, "emb.onnx",
             lambda d: [[str(d / "o1.onnx"), False], [str(d / "o2.onnx"), True]])):
        folder = Path(tempfile.mkdtemp(prefix="onnx-fuse-layouts-"))
        try:
            got = tm._child(build, folder, src, saves(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        mib = {k: got[k] / 2**20 for k in ("import", "optimize", "peak")}
        print(f"| {label} | {mib['import']:.0f} | {mib['optimize']:.0f} | {mib['peak']:.0f} |")


if __name__ == "__main__":
    main()
