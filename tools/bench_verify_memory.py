"""Peak memory of optimize(..., verify=True) on a model with a big external weight.

    python tools/bench_verify_memory.py [--mb 400] [--inline]

Writes a Gather -> Relu -> Relu model with one float32 table of ``--mb`` MB as external data into
a temporary folder, then runs O1 + verify on it in a fresh process (so building the model does not
count) and prints the verdict, the time, that process's peak RSS (which counts the file pages ORT
maps) and its peak anonymous memory (sampled every 10 ms). ``--inline`` forces the old
way (every weight inlined into one in-memory protobuf for ORT).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def _measure(path: str, inline: bool) -> None:
    import onnx_fuse
    import onnx_fuse.verify as verify_module

    if inline:
        verify_module._INLINE_LIMIT = 1 << 62
    anon = [0]
    done = threading.Event()

    def sample() -> None:   # anonymous memory only: file pages ORT maps are cache, not a cost
        while not done.wait(0.01):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    anon[0] = max(anon[0], int(line.split()[1]) // 1024)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    result = onnx_fuse.optimize(path, level=1, verify=True)
    seconds = time.perf_counter() - t
    done.set()
    sampler.join()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{'inline' if inline else 'files'}: {result.report.status} in {seconds:.1f} s, peak RSS {peak} "
          f"MiB, peak anonymous {anon[0]} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=400)
    ap.add_argument("--inline", action="store_true")
    ap.add_argument("--model", help=argparse.SUPPRESS)   # the measuring child
    args = ap.parse_args()
    if args.model:
        _measure(args.model, args.inline)
        return
    cols = 1024
    table = np.random.default_rng(0).standard_normal((args.mb * (1 << 20) // 4 // cols, cols), np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["e"]), helper.make_node("Relu", ["e"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", cols])],
        [onnx.numpy_helper.from_array(table, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
        del model, table
        print(f"{args.mb} MB weight:", flush=True)
        cmd = [sys.executable, __file__, "--model", str(path)] + (["--inline"] if args.inline else [])
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
