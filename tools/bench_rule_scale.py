"""Rule-engine scale benchmark: all built-in rules over synthetic transformer-like graphs.

Each block is a pre-norm transformer layer written the way exporters decompose it: LayerNorm
(ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add), MatMul + bias, erf-GELU, MatMul + bias,
residual Add, RMSNorm (Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Mul), and a few near-miss ops
(a GELU-like chain with a wrong constant, Relu/Tanh). Values carry dtype and symbolic shapes, as
after shape inference. For 10k, 50k and 100k nodes it times:

  fuse     RewritePass with every built-in rule for the target (index, match, validate, rewrite),
           wall seconds and process CPU seconds (the CPU time is what to compare on a busy machine)
  rescan   the same pass again on the fused graph (pure matching: nothing left to fire)

and prints microseconds per node so linear growth is visible. Usage:

    python tools/bench_rule_scale.py [--sizes 10000,50000,100000] [--target ort] [--repeat 1]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite import RewritePass, load_rules

H = 64
F32 = ir.DataType.FLOAT


def _shape(last) -> ir.Shape:
    return ir.Shape(["B", "S", last])


class Builder:
    def __init__(self, opset: int):
        self.nodes: list[ir.Node] = []
        self.inits: dict[str, ir.Value] = {}
        self.opset = opset
        self.n = 0

    def const(self, name: str, arr: np.ndarray) -> ir.Value:
        if name not in self.inits:
            v = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                         shape=ir.Shape(arr.shape), const_value=ir.tensor(arr, name=name))
            self.inits[name] = v
        return self.inits[name]

    def op(self, op_type: str, inputs, last=H, **attrs) -> ir.Value:
        self.n += 1
        node = ir.Node("", op_type, inputs, attributes=[ir.convenience.convert_attribute(k, v)
                                                        for k, v in attrs.items()],
                       name=f"n{self.n}")
        out = node.outputs[0]
        out.name = f"v{self.n}"
        out.dtype = F32
        out.shape = _shape(last)
        self.nodes.append(node)
        return out

    def reduce_mean(self, x: ir.Value) -> ir.Value:
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.const("axes_last", np.array([-1], np.int64))], last=1)
        return self.op("ReduceMean", [x], last=1, axes=[-1])

    def block(self, x: ir.Value, i: int) -> ir.Value:
        c = self.const
        # LayerNorm
        mu = self.reduce_mean(x)
        d = self.op("Sub", [x, mu])
        sq = self.op("Pow", [d, c("two", np.array(2.0, np.float32))])
        var = self.reduce_mean(sq)
        ve = self.op("Add", [var, c("eps", np.array(1e-5, np.float32))], last=1)
        sd = self.op("Sqrt", [ve], last=1)
        nrm = self.op("Div", [d, sd])
        g = self.op("Mul", [nrm, c("gamma", np.ones(H, np.float32))])
        ln = self.op("Add", [g, c("beta", np.zeros(H, np.float32))])
        # MLP with erf-GELU
        h = self.op("MatMul", [ln, c("w1", np.eye(H, dtype=np.float32))])
        hb = self.op("Add", [h, c("b1", np.zeros(H, np.float32))])
        t = self.op("Div", [hb, c("sqrt2", np.array(1.4142135, np.float32))])
        e = self.op("Erf", [t])
        a = self.op("Add", [e, c("one", np.array(1.0, np.float32))])
        m = self.op("Mul", [hb, a])
        gl = self.op("Mul", [m, c("half", np.array(0.5, np.float32))])
        o = self.op("MatMul", [gl, c("w2", np.eye(H, dtype=np.float32))])
        ob = self.op("Add", [o, c("b2", np.zeros(H, np.float32))])
        r = self.op("Add", [x, ob])
        # RMSNorm
        sq2 = self.op("Pow", [r, c("two", np.array(2.0, np.float32))])
        ms = self.reduce_mean(sq2)
        ve2 = self.op("Add", [ms, c("eps", np.array(1e-5, np.float32))], last=1)
        sd2 = self.op("Sqrt", [ve2], last=1)
        inv = self.op("Reciprocal", [sd2], last=1)
        n2 = self.op("Mul", [r, inv])
        y = self.op("Mul", [n2, c("g2", np.ones(H, np.float32))])
        # near misses: a GELU-like chain with a wrong constant, and plain activations
        t2 = self.op("Div", [y, c("sqrt3", np.array(1.7320508, np.float32))])
        e2 = self.op("Erf", [t2])
        a2 = self.op("Add", [e2, c("one", np.array(1.0, np.float32))])
        m2 = self.op("Mul", [y, a2])
        z = self.op("Relu", [self.op("Tanh", [m2])])
        return self.op("Add", [z, y])


def build(n_nodes: int, opset: int = 23) -> ir.Model:
    b = Builder(opset)
    x = ir.Value(name="x", type=ir.TensorType(F32), shape=_shape(H))
    cur = x
    i = 0
    while b.n < n_nodes:
        cur = b.block(cur, i)
        i += 1
    graph = ir.Graph([x], [cur], nodes=b.nodes, initializers=list(b.inits.values()),
                     opset_imports={"": opset}, name="bench")
    return ir.Model(graph, ir_version=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,50000,100000")
    ap.add_argument("--target", default="ort", choices=("ort", "onnx", "trt"))
    ap.add_argument("--repeat", type=int, default=1, help="best of N")
    args = ap.parse_args()
    rule_set, errors, _ = load_rules()  # lenient: a rule pack being edited must not stop the bench
    for e in errors:
        print(f"# skipped: {e}")
    rules = rule_set.select(target=args.target, max_level=4)
    print(f"# onnx-fuse rule engine scale: {len(rules)} rules (target {args.target}), "
          f"python {platform.python_version()}, {platform.machine()}")
    print(f"{'nodes':>8} {'fused':>7} {'fuse s':>8} {'cpu s':>7} {'us/node':>8} {'rescan s':>9} {'us/node':>8}  fires")
    for size in (int(s) for s in args.sizes.split(",")):
        best_fuse = best_scan = best_cpu = float("inf")
        for _ in range(args.repeat):
            model = build(size)
            n0 = model.graph.num_nodes()
            p = RewritePass(rules)
            t0, c0 = time.perf_counter(), time.process_time()
            p(model)
            t1, c1 = time.perf_counter(), time.process_time()
            p2 = RewritePass(rules)
            p2(model)
            t2 = time.perf_counter()
            assert not p2.stats, f"second pass fired: {dict(p2.stats)}"
            best_fuse, best_scan = min(best_fuse, t1 - t0), min(best_scan, t2 - t1)
            best_cpu = min(best_cpu, c1 - c0)
        fires = ", ".join(f"{k}={v}" for k, v in sorted(p.stats.items()))
        print(f"{n0:>8} {model.graph.num_nodes():>7} {best_fuse:>8.2f} {best_cpu:>7.2f} {1e6 * best_fuse / n0:>8.1f} "
              f"{best_scan:>9.2f} {1e6 * best_scan / n0:>8.1f}  {fires}")


if __name__ == "__main__":
    main()
