"""GroupNorm + SiLU at ONNX Runtime CPU: the forms onnx-fuse could emit for target ort, timed.

A diffusion UNet / VAE block's torch.nn.GroupNorm + SiLU exports as Reshape [B, G, -1],
InstanceNormalization (unit scale, zero bias), Reshape back, the per-channel Mul / Add, Sigmoid, Mul.
ORT's fused GroupNorm with activation (com.microsoft GroupNorm, NHWC) is a CUDA kernel only, so at
target ort the candidates are:

  inorm_silu    the export's form, kept by onnx-fuse at ort (rules/norm/group_norm.yaml is onnx / trt only)
  inorm_quick   the same with SiLU written as com.microsoft QuickGelu(alpha=1)
  gn21_silu     GroupNormalization-21 (what onnx / trt get) + Sigmoid, Mul
  gn21_quick    GroupNormalization-21 + QuickGelu(alpha=1)

Each runs in ORT (CPU provider, ORT_ENABLE_ALL, one intra-op thread) on x [B, C, H, W]; prints the
median / min time of --repeats runs, the largest difference from the first form, and the node types
of the graph ORT itself runs after its own optimizations (saved with optimized_model_filepath).

    python tools/bench_group_norm_silu.py [--shape 2 320 64 64] [--groups 32] [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

FORMS = ("inorm_silu", "inorm_quick", "gn21_silu", "gn21_quick")


def build(form: str, shape: tuple[int, int, int, int], groups: int, rng):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    b, c, h, w = shape
    gamma = (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)  # trained-like affine
    beta = (0.1 * rng.standard_normal(c)).astype(np.float32)
    inits = {"gamma": gamma.reshape(c, 1, 1), "beta": beta.reshape(c, 1, 1), "g1": gamma, "b1": beta,
             "gshape": np.array([b, groups, -1], np.int64), "xshape": np.array(shape, np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32)}
    node = helper.make_node
    if form.startswith("inorm"):
        nodes = [node("Reshape", ["x", "gshape"], ["r"]),
                 node("InstanceNormalization", ["r", "ones", "zeros"], ["n"], epsilon=1e-5),
                 node("Reshape", ["n", "xshape"], ["n4"]), node("Mul", ["n4", "gamma"], ["m"]),
                 node("Add", ["m", "beta"], ["a"])]
        opset = 17
        used = ("gamma", "beta", "gshape", "xshape", "ones", "zeros")
    else:
        nodes = [node("GroupNormalization", ["x", "g1", "b1"], ["a"], num_groups=groups, epsilon=1e-5)]
        opset = 21
        used = ("g1", "b1")
    if form.endswith("silu"):
        nodes += [node("Sigmoid", ["a"], ["s"]), node("Mul", ["a", "s"], ["y"])]
    else:
        nodes += [node("QuickGelu", ["a"], ["y"], domain="com.microsoft", alpha=1.0)]
    graph = helper.make_graph(nodes, form, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                              [numpy_helper.from_array(inits[k], k) for k in used])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset),
                                                                  helper.make_opsetid("com.microsoft", 1)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=4, default=[2, 320, 64, 64], metavar=("B", "C", "H", "W"))
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    ns = ap.parse_args(argv)
    if ns.shape[1] % ns.groups or min(ns.shape) < 1 or ns.repeats < 1:
        print("error: channels must divide into --groups; sizes and --repeats must be positive", file=sys.stderr)
        return 2
    import numpy as np
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    x = rng.standard_normal(ns.shape).astype(np.float32)
    ref = None
    with tempfile.TemporaryDirectory() as tmp:
        for form in FORMS:
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.log_severity_level = 1, 3
            so.optimized_model_filepath = str(Path(tmp) / f"{form}.onnx")
            model = build(form, tuple(ns.shape), ns.groups, np.random.default_rng(1))
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            y = sess.run(None, {"x": x})[0]
            ref = y if ref is None else ref
            for _ in range(3):
                sess.run(None, {"x": x})
            times = []
            for _ in range(ns.repeats):
                t = time.perf_counter()
                sess.run(None, {"x": x})
                times.append(time.perf_counter() - t)
            ran = sorted({n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node})
            print(f"{form:12s} median {1e3 * np.median(times):8.3f} ms  min {1e3 * min(times):8.3f} ms  "
                  f"max diff {float(np.abs(y - ref).max()):.1e}  ORT runs {len(ran)} op types: {' '.join(ran)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
