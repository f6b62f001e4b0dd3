"""Peak memory of O1 on a model with 4 GiB of external weights: must stay under 1 GiB RSS.

Builds (on disk, in a temp folder, through numpy memmap so this process never holds the weights)
a model of four 16384x16384 float32 MatMul weights (1 GiB each) plus the small things cleanup
works on (an Identity on a weight, a Shape->Gather->Concat->Reshape chain of static dims, twin
Relus, a Transpose of a 1 GiB weight that must NOT be folded), then runs ``onnx-fuse``'s Python API
(load, O1, atomic save with external data) in a child process and reads the child's peak RSS
(``VmHWM`` from ``/proc/self/status`` at the end of the child: the peak resident set of that
process image; ``ru_maxrss`` is not used because Linux carries the pre-exec image's peak into it).
The weights are written by a separate child too, so no page of them is ever resident here.

    /work/venv/bin/python tools/bench_memory.py [--gib 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import onnx_fuse
t1 = time.perf_counter()
result = onnx_fuse.optimize(sys.argv[1], level=1)
t2 = time.perf_counter()
result.save(sys.argv[2])
t3 = time.perf_counter()
# VmHWM: peak resident set of this process image (after exec), the number the budget is about.
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_rss_kib": hwm_kib, "import": t1 - t0, "optimize": t2 - t1, "save": t3 - t2,
                  "nodes_before": result.report.nodes_before, "nodes_after": result.report.nodes_after,
                  "ops_after": result.report.ops_after}))
"""


def build(folder: Path, gib: int, dim: int = 16384) -> Path:
    data = folder / "weights.data"
    per = dim * dim * 4
    count = max(1, (gib << 30) // per)
    mm = np.memmap(data, dtype=np.float32, mode="w+", shape=(count, dim, dim))
    rng = np.random.default_rng(0)
    block = (rng.standard_normal((256, dim)) * 0.01).astype(np.float32)
    for k in range(count):
        for r in range(0, dim, 256):
            mm[k, r:r + 256] = block
        mm.flush()
    del mm
    inits = []
    for k in range(count):
        t = TensorProto(name=f"W{k}", data_type=TensorProto.FLOAT, dims=[dim, dim])
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", data.name), ("offset", str(k * per)), ("length", str(per))):
            t.external_data.add(key=key, value=value)
        inits.append(t)
    inits += [numpy_helper.from_array(np.array([1], np.int64), "one"),
              numpy_helper.from_array(np.array([-1], np.int64), "m1")]
    nodes = [helper.make_node("Identity", ["W0"], ["W0i"]),
             helper.make_node("MatMul", ["x", "W0i"], ["h0"])]
    prev = "h0"
    for k in range(1, count):
        a, b = helper.make_node("Relu", [prev], [f"r{k}a"]), helper.make_node("Relu", [prev], [f"r{k}b"])
        nodes += [a, b, helper.make_node("Add", [f"r{k}a", f"r{k}b"], [f"s{k}"]),
                  helper.make_node("MatMul", [f"s{k}", f"W{k}"], [f"h{k}"])]
        prev = f"h{k}"
    nodes += [helper.make_node("Transpose", ["W0"], ["W0t"], perm=[1, 0]),  # 1 GiB: never folded
              helper.make_node("MatMul", [prev, "W0t"], ["ht"]),
              helper.make_node("Shape", ["ht"], ["sh"], start=1),
              helper.make_node("Concat", ["m1", "sh"], ["shape"], axis=0),
              helper.make_node("Reshape", ["ht", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = folder / "big.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=int, default=4, help="GiB of weights (default 4)")
    parser.add_argument("--keep", help="build in this folder instead of a temp one")
    parser.add_argument("--limit-mib", type=int, default=1024)
    parser.add_argument("--build-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build_only:
        build(Path(args.build_only), args.gib)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--build-only", str(folder), "--gib", str(args.gib)],
                       check=True)
        src = folder / "big.onnx"
        built = time.perf_counter() - t
        out_dir = folder / "out"
        out_dir.mkdir(exist_ok=True)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, str(src), str(out_dir / "big.opt.onnx")],
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return 1
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        peak_mib = info["peak_rss_kib"] / 1024
        out_bytes = sum(p.stat().st_size for p in out_dir.iterdir())
        onnx.checker.check_model(str(out_dir / "big.opt.onnx"))
    weights = args.gib * (1 << 30)
    ok = peak_mib < args.limit_mib
    print(f"| weights | build s | child wall s | optimize s | save s | nodes | peak RSS | limit | result |")
    print(f"|---|---|---|---|---|---|---|---|---|")
    print(f"| {weights / (1 << 30):.0f} GiB external | {built:.1f} | {wall:.1f} | {info['optimize']:.2f} | "
          f"{info['save']:.1f} | {info['nodes_before']} -> {info['nodes_after']} | {peak_mib:.0f} MiB | "
          f"{args.limit_mib} MiB | {'PASS' if ok else 'FAIL'} |")
    print(f"ops after: {info['ops_after']}; output {out_bytes / (1 << 30):.2f} GiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
