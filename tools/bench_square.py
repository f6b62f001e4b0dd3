"""Pow(x, 2) against Mul(x, x) in ONNX Runtime (CPU): whether Nemotron / Persimmon's relu^2
(Relu then Pow(., 2)) gains from a canonical Mul(x, x) form. No target has a fused relu^2 op;
this measures the only candidate rewrite. Two forms are timed interleaved in one process, one thread each:
the activation alone (Relu then Pow / Mul on [256, 8192]) and inside an MLP (MatMul D -> F, relu^2,
MatMul F -> D). The outputs are checked bitwise equal first. Prints the median per form and the ratio.

    python tools/bench_square.py [--reps 30]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh


def _model(form: str, mlp: tuple[int, int] | None, width: int) -> bytes:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [nh.from_array(np.array(2.0, np.float32), "two")], "x"
    if mlp:
        d, f = mlp
        inits += [nh.from_array((rng.standard_normal((d, f)) * 0.02).astype(np.float32), "w1"),
                  nh.from_array((rng.standard_normal((f, d)) * 0.02).astype(np.float32), "w2")]
        nodes.append(oh.make_node("MatMul", ["x", "w1"], ["h"]))
        x = "h"
    nodes.append(oh.make_node("Relu", [x], ["r"]))
    nodes.append(oh.make_node("Pow", ["r", "two"], ["q"]) if form == "pow" else oh.make_node("Mul", ["r", "r"], ["q"]))
    if mlp:
        nodes.append(oh.make_node("MatMul", ["q", "w2"], ["y"]))
    out = "y" if mlp else "q"
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
                          [oh.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]).SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    for label, mlp, rows, width in (("relu^2 [256, 8192]", None, 256, 8192),
                                    ("MLP 1024->4096->1024, 128 rows", (1024, 4096), 128, 1024)):
        x = np.random.default_rng(1).standard_normal((rows, width)).astype(np.float32)
        sess = {f: ort.InferenceSession(_model(f, mlp, width), so, providers=["CPUExecutionProvider"])
                for f in ("pow", "mul")}
        ref, got = (sess[f].run(None, {"x": x})[0] for f in ("pow", "mul"))
        assert np.array_equal(ref, got), "Pow(x, 2) and Mul(x, x) differ"
        times = {f: [] for f in sess}
        for _ in range(args.reps):
            for f, s in sess.items():
                t0 = time.perf_counter()
                s.run(None, {"x": x})
                times[f].append(time.perf_counter() - t0)
        med = {f: 1e3 * float(np.median(t)) for f, t in times.items()}
        print(f"{label:34s} Pow {med['pow']:8.3f} ms  Mul {med['mul']:8.3f} ms  Pow/Mul {med['pow'] / med['mul']:.2f}x")


if __name__ == "__main__":
    main()
