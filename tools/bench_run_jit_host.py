"""Time the Python (host) side of the PagedAttention plugin's JIT path, ``run_jit``, without a GPU.

    python tools/bench_run_jit_host.py [--calls 20000] [--json OUT.json]

``paged_attention_plugin.run_jit`` runs on every TensorRT enqueue; when a decode step takes less
GPU time than its Python side, the host is the bound (docs/PERF.md: B4 ctx 4096). Here the kernel
library is a stand-in shared object compiled with the system C compiler on the spot: it exports
every launch function KernelLib binds (same names, same ctypes argtypes), each returning 0 at
once, so what is timed is run_jit's own work plus the real ctypes foreign calls, and no launch.
The buffers are plain objects with the interface ``tensorrt.plugin.Tensor`` has (``data_ptr``,
``shape``, ``strides``); the Workspace hands out one host pointer. Rows: the B4 / B64 ctx 4096
decode (16-bit and fp8 pools, planned split-K) and a 512-token chunked prefill; per row the
median and the minimum over 5 rounds of microseconds per call (after one warm-up call, which
plans; on a shared machine the minimum is the steadier figure).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _Buf:
    """What run_jit reads from a tensorrt.plugin.Tensor: pointer, shape, element strides."""

    def __init__(self, shape, ptr):
        self.data_ptr, self.shape = ptr, tuple(shape)
        st, acc = [], 1
        for s in reversed(self.shape):
            st.append(acc)
            acc *= s
        self.strides = tuple(reversed(st))


def stub_library(workdir: Path) -> Path:
    """A shared object with every KernelLib launch function, each a no-op returning 0."""
    from onnx_fuse.plugins.kernel_lib import ARGTYPES

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("error: no C compiler (cc/gcc) found to build the stand-in library")
    src = workdir / "stub.c"
    src.write_text("".join(f"int {name}() {{ return 0; }}\n" for name in ARGTYPES))
    out = workdir / "libstub.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)], check=True)
    return out


class _HostWorkspace:
    def get(self, nbytes, stream):
        return 1 << 20


def _buffers(b, ctx, sq, hq, hkv, d, bs, fp8):
    nb = ctx // bs * b
    shapes = [(b, sq, hq * d), (b, sq, hkv * d), (b, sq, hkv * d), (nb, bs, hkv, d),
              (nb, bs, hkv, d), (b, ctx // bs), (b,), (b, sq, hq * d)]
    bufs = [_Buf(s, 0x10000 * (i + 1)) for i, s in enumerate(shapes)]
    scales = dict(k_scale=_Buf((hkv,), 0x200000), v_scale=_Buf((hkv,), 0x300000)) if fp8 else {}
    return bufs, scales


ROWS = [  # label, B, ctx, Sq, Hq, Hkv, D, block, fp8
    ("decode B4 ctx4096 H32/8 D128 fp16", 4, 4096, 1, 32, 8, 128, 16, False),
    ("decode B64 ctx4096 H32/8 D128 fp16", 64, 4096, 1, 32, 8, 128, 16, False),
    ("decode B4 ctx4096 H32/8 D128 fp8 pool", 4, 4096, 1, 32, 8, 128, 16, True),
    ("prefill B8 4096+512 H32/8 D128 fp16", 8, 4608, 512, 32, 8, 128, 16, False),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)

    from onnx_fuse.plugins import launch_plan as lp
    from onnx_fuse.plugins import paged_attention_plugin as pa
    from onnx_fuse.plugins.kernel_lib import KernelLib

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        lib = KernelLib.load(stub_library(Path(tmp)))
        ws = _HostWorkspace()
        for label, b, ctx, sq, hq, hkv, d, bs, fp8 in ROWS:
            bufs, scales = _buffers(b, ctx, sq, hq, hkv, d, bs, fp8)

            def call():
                pa.run_jit(lib, *bufs, num_heads=hq, kv_num_heads=hkv, scale=0.0,
                           dtype="float16", stream=7, workspace=ws, device=lp.H200, **scales)

            call()
            rounds = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    call()
                rounds.append((time.perf_counter() - t0) / args.calls * 1e6)
            rows.append({"row": label, "us_per_call": round(statistics.median(rounds), 2),
                         "min_us": round(min(rounds), 2), "rounds_us": [round(r, 2) for r in rounds]})
            print(f"{label:40s} median {rows[-1]['us_per_call']:7.2f} min {rows[-1]['min_us']:7.2f}"
                  f" us/call  (rounds {', '.join(f'{r:.2f}' for r in rounds)})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
