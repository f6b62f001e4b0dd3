"""ORT CPU latency of attention below opset 23 (--opset pinned: rules/attention/lower_plain.yaml's
plain MatMul / Softmax chain) against the original export and the default Attention-23 form.

Candidates per model (tests/data/models/manifest.json), timed round-robin in one process (order
reversed every other round); per candidate the median and the best run, and the ratios original /
candidate (> 1 is faster) of each. On a shared, loaded machine the best run is the steadier one
(the median moves with the neighbours' load):

  original      the export as is (ORT's own graph optimizations at their default, as for all)
  onnx-23       onnx-fuse -O3 --target onnx (Attention-23; the model raised to 23)
  onnx-O2-pin   onnx-fuse -O2 --target onnx --opset <the model's own opset>: the same pipeline
                without attention fusion, so onnx-pinned / onnx-O2-pin isolates the lowering
  onnx-pinned   onnx-fuse -O3 --target onnx --opset <own> (plain attention; GQA as 5-D MatMuls)
  trt-O2-pin    onnx-fuse -O2 --target trt --opset <own>
  trt-pinned    onnx-fuse -O3 --target trt --opset <own> (plain attention; GQA by K/V repeated)

Outputs are compared with the original's (max abs error over unpadded positions).

--gqa-forms instead times the two GQA forms of the chain on one [B,H,S,D] block (float32, random
inputs, additive [B,1,S,T] mask): K / V repeated to q's heads (Reshape -> Expand -> Reshape, the
trt form) against q viewed [B,Hkv,G,S,D] over K / V [B,Hkv,1,T,D] (the onnx / ort form), prefill
and decode shapes.

    .venv/bin/python tools/bench_opset_pin.py [--models llama_sdpa_dynamo ...] [--batch 4]
        [--seq 128] [--rounds 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fusion import MODELS, compare, feeds_for, fused_counts, session, timed_rounds  # noqa: E402

DEFAULT_MODELS = ("bert_sdpa_dynamo", "bert_eager_torchscript", "gpt2_sdpa_dynamo", "gpt2_eager_torchscript",
                  "llama_sdpa_dynamo", "llama_eager_torchscript")


def _own_opset(proto: onnx.ModelProto) -> int:
    return next(i.version for i in proto.opset_import if i.domain in ("", "ai.onnx"))


def bench_model(name: str, entry: dict, ns) -> list[dict]:
    import onnx_fuse

    path = MODELS / entry["file"]
    original = onnx.load(str(path))
    own = _own_opset(original)

    def fused(target: str, opset: int | None, level: int = 3) -> onnx.ModelProto:
        return onnx_fuse.optimize(str(path), level=level, target=target, opset=opset).to_proto()

    builders = {"original": lambda: original, "onnx-23": lambda: fused("onnx", None),
                "onnx-O2-pin": lambda: fused("onnx", own, 2), "onnx-pinned": lambda: fused("onnx", own),
                "trt-O2-pin": lambda: fused("trt", own, 2), "trt-pinned": lambda: fused("trt", own)}
    feeds = feeds_for(entry, ns.batch, ns.seq)
    valid = feeds.get("attention_mask")
    rows, sessions, ref = [], {}, None
    for cand, build in builders.items():
        proto = build()
        sess = session(proto, ns.threads)
        out = sess.run(None, feeds)
        ref = out if ref is None else ref
        rows.append({"model": name, "candidate": cand, "opset": _own_opset(proto),
                     "softmax": sum(n.op_type == "Softmax" for n in proto.graph.node),
                     **fused_counts(proto), "max_abs": compare(ref, out, valid)})
        sessions[cand] = sess
    times = timed_rounds(sessions, feeds, ns.warmup, ns.rounds)
    base, best = statistics.median(times["original"]), min(times["original"])
    for row in rows:
        row["ms"] = 1e3 * statistics.median(times[row["candidate"]])
        row["speedup"] = 1e3 * base / row["ms"]
        row["best_ms"] = 1e3 * min(times[row["candidate"]])
        row["best_speedup"] = 1e3 * best / row["best_ms"]
    return rows


def _gqa_block(form: str, B: int, Hq: int, Hkv: int, S: int, T: int, D: int) -> onnx.ModelProto:
    import numpy as np
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    G, n, inits = Hq // Hkv, oh.make_node, []

    def c(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    nodes = [n("Mul", ["q", c("sc", np.array([D ** -0.5], np.float32))], ["qs"])]
    if form == "repeat":
        for x in "kv":
            nodes += [n("Reshape", [x, c(f"{x}5", np.array([0, Hkv, 1, -1, D]))], [f"{x}r"]),
                      n("Expand", [f"{x}r", c(f"{x}rep", np.array([1, 1, G, 1, 1]))], [f"{x}e"]),
                      n("Reshape", [f"{x}e", c(f"{x}h", np.array([0, Hq, -1, D]))], [f"{x}x"])]
        nodes += [n("Transpose", ["kx"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["qs", "kt"], ["s"]),
                  n("Add", ["s", "mask"], ["sa"]), n("Softmax", ["sa"], ["p"], axis=3),
                  n("MatMul", ["p", "vx"], ["o"])]
    else:
        nodes += [n("Reshape", ["qs", c("q5s", np.array([0, Hkv, G, -1, D]))], ["q5"]),
                  n("Reshape", ["k", c("k5s", np.array([0, Hkv, 1, -1, D]))], ["k5"]),
                  n("Reshape", ["v", c("v5s", np.array([0, Hkv, 1, -1, D]))], ["v5"]),
                  n("Unsqueeze", ["mask", c("ax2", np.array([2]))], ["m5"]),
                  n("Transpose", ["k5"], ["kt"], perm=[0, 1, 2, 4, 3]), n("MatMul", ["q5", "kt"], ["s"]),
                  n("Add", ["s", "m5"], ["sa"]), n("Softmax", ["sa"], ["p"], axis=4),
                  n("MatMul", ["p", "v5"], ["o5"]),
                  n("Reshape", ["o5", c("oh", np.array([0, Hq, -1, D]))], ["o"])]
    f = onnx.TensorProto.FLOAT
    vi = oh.make_tensor_value_info
    graph = oh.make_graph(nodes, "gqa", [vi("q", f, [B, Hq, S, D]), vi("k", f, [B, Hkv, T, D]), vi("v", f, [B, Hkv, T, D]),
                                         vi("mask", f, [B, 1, S, T])], [vi("o", f, [B, Hq, S, D])], inits)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])


def gqa_forms(ns) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    print("| B, Hq, Hkv, S, T, D | repeat median / best ms | grouped median / best ms | repeat / grouped (median, best) |")
    print("|---|---|---|---|")
    for B, Hq, Hkv, S, T, D in [(1, 32, 8, 256, 256, 128), (4, 32, 8, 1, 1024, 128), (2, 16, 2, 128, 128, 64)]:
        feeds = {"q": rng.standard_normal((B, Hq, S, D), np.float32), "k": rng.standard_normal((B, Hkv, T, D), np.float32),
                 "v": rng.standard_normal((B, Hkv, T, D), np.float32), "mask": np.zeros((B, 1, S, T), np.float32)}
        sessions = {f: session(_gqa_block(f, B, Hq, Hkv, S, T, D), ns.threads) for f in ("repeat", "grouped")}
        outs = {f: s.run(None, feeds)[0] for f, s in sessions.items()}
        assert np.allclose(outs["repeat"], outs["grouped"], atol=1e-5)
        times = timed_rounds(sessions, feeds, 0, ns.rounds)
        med = {f: 1e3 * statistics.median(v) for f, v in times.items()}
        best = {f: 1e3 * min(v) for f, v in times.items()}
        print(f"| {B}, {Hq}, {Hkv}, {S}, {T}, {D} | {med['repeat']:.2f} / {best['repeat']:.2f} | "
              f"{med['grouped']:.2f} / {best['grouped']:.2f} | {med['repeat'] / med['grouped']:.2f}x, "
              f"{best['repeat'] / best['grouped']:.2f}x |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128, help="at most the models' 128 positions")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="ORT intra-op threads")
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("--gqa-forms", action="store_true", help="time the two GQA forms of the chain instead")
    ns = ap.parse_args(argv)
    if ns.gqa_forms:
        gqa_forms(ns)
        return 0
    manifest = json.loads((MODELS / "manifest.json").read_text())["models"]
    rows = []
    print("| model | candidate | opset | attention ops | Softmax | nodes | median ms | original / candidate | "
          "best ms | original / candidate (best) | max abs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ns.models:
        if name not in manifest:
            print(f"unknown model {name!r}; see {MODELS / 'manifest.json'}", file=sys.stderr)
            return 2
        for r in bench_model(name, manifest[name], ns):
            rows.append(r)
            print(f"| {r['model']} | {r['candidate']} | {r['opset']} | {r['attention']} | {r['softmax']} | "
                  f"{r['nodes']} | {r['ms']:.3f} | {r['speedup']:.2f}x | {r['best_ms']:.3f} | "
                  f"{r['best_speedup']:.2f}x | {r['max_abs']:.1e} |", flush=True)
    if ns.json:
        Path(ns.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
