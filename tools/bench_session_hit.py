"""InferenceSession cold load then two cache hits on a model with its weights inside the .onnx.

The model: ``--layers`` blocks of MatMul(1024x4096) -> Relu -> MatMul(4096x1024), random float32
weights embedded (14 layers: 470 MB). Prints each load's breakdown (hash, lookup = the entry's
CRC-32 check, optimize, save, ORT load) and the process's peak RSS.

    python tools/bench_session_hit.py [--layers 14]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper


def build(path: Path, layers: int, d: int = 1024) -> None:
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal((d, 4 * d), dtype=np.float32), f"W{i}"),
                  numpy_helper.from_array(rng.standard_normal((4 * d, d), dtype=np.float32), f"V{i}")]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", f"V{i}"], [f"y{i}"])]
        x = f"y{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["B", d])],
                          [helper.make_tensor_value_info(x, TP.FLOAT, ["B", d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=14)
    args = ap.parse_args()
    import onnx_fuse

    work = Path(tempfile.mkdtemp(prefix="onnx-fuse-hit-"))
    try:
        model = work / "m.onnx"
        build(model, args.layers)
        print(f"model {model.stat().st_size / 2**20:.0f} MiB")
        for i in range(3):
            t = time.perf_counter()
            s = onnx_fuse.InferenceSession(str(model), providers=["CPUExecutionProvider"],
                                           optimize_level=1, cache_dir=str(work / "cache"))
            st = s.onnx_fuse_stats
            parts = {k: round(v, 3) for k, v in st.seconds.items()
                     if k in ("hash", "lookup", "optimize", "save", "ort_load")}
            print(i, "hit" if st.cache_hit else "miss", f"{time.perf_counter() - t:.2f} s", parts)
            del s
        print("peak RSS MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
