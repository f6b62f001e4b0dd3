"""Fusion coverage and CPU latency: onnx-fuse per target vs the anchors, in one interleaved run.

For each test model (tests/data/models/manifest.json) the candidates are:

  original      the export as is
  fuse-ort      onnx-fuse -O3 --target ort   (com.microsoft contrib ops)
  fuse-onnx     onnx-fuse -O3 --target onnx  (standard ops; opset raised to 23 where needed)
  fuse-trt      onnx-fuse -O3 --target trt   (standard ops TensorRT maps natively)
  fuse-trt-O4   onnx-fuse -O4 --target trt   (+ onnx_fuse::FusedAttention plugin)
                trt candidates: counts only by default (ORT is not their runtime, and the
                plugin runs through the NumPy reference); --trt-latency times them anyway
  ort-opt       onnxruntime.transformers.optimizer.optimize_model (model_type, num_heads and
                hidden_size from the manifest; opt_level 0 = its Python fusions only, ORT's own
                graph optimizations run at session creation like for everyone else)
  onnxscript    onnxscript.optimizer.optimize + onnxscript.rewriter.ort_fusions.optimize_for_ort

Each candidate's fused-op counts (attention, norms incl. skip forms, GELU forms, RoPE) are taken
from its output graph. Latency: ORT CPU, 2 intra-op threads, ORT graph optimizations at their
default (ORT_ENABLE_ALL), inputs batch x seq from the command line; the candidates are timed
round-robin (one run each per round, order reversed every other round) so drift and position hit
all alike; the median is reported with the
ratio original/candidate (> 1 is faster). A candidate whose outputs differ from the original's
(per-dtype tolerance of onnx_fuse.verify) is flagged.

    /work/venv/bin/python tools/bench_fusion.py [--models bert_sdpa_dynamo ...] [--batch 2]
        [--seq 64] [--rounds 200] [--markdown]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "data" / "models"

ATTENTION = {"MultiHeadAttention", "GroupQueryAttention", "Attention", "FusedAttention",
             "PackedAttention", "PackedMultiHeadAttention", "SparseAttention"}
NORM = {"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
        "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization"}
SKIP = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
GELU = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu"}
ROPE = {"RotaryEmbedding"}
COLUMNS = ("attention", "norm", "skip", "gelu", "rope", "nodes")

ORT_MODEL_TYPE = {"bert": "bert", "gpt2": "gpt2", "llama": "gpt2"}


def fused_counts(proto: onnx.ModelProto) -> dict[str, int]:
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    return {
        "attention": sum(ops[o] for o in ATTENTION),
        "norm": sum(ops[o] for o in NORM),
        "skip": sum(ops[o] for o in SKIP),
        "gelu": sum(ops[o] for o in GELU),
        "rope": sum(ops[o] for o in ROPE),
        "nodes": len(proto.graph.node),
    }


def run_onnx_fuse(path: Path, target: str, level: int = 3) -> onnx.ModelProto:
    import onnx_fuse

    # float32_plugins: -O4 trt's plugin form also on the float32 models (else TensorRT's own ops)
    return onnx_fuse.optimize(str(path), level=level, target=target, float32_plugins=level == 4).to_proto()


def run_ort_optimizer(path: Path, entry: dict) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    m = optimize_model(str(path), model_type=ORT_MODEL_TYPE[entry["arch"]],
                       num_heads=entry["num_heads"], hidden_size=entry["hidden_size"],
                       opt_level=0, use_gpu=False)
    return m.model


def run_onnxscript(path: Path) -> onnx.ModelProto:
    import onnx_ir as ir
    import onnxscript.optimizer
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(path))
    onnxscript.optimizer.optimize(model)
    model, _ = optimize_for_ort(model)
    return ir.to_proto(model)


def feeds_for(entry: dict, batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in entry["inputs"]:
        if name == "input_ids":
            feeds[name] = rng.integers(0, entry["config"]["vocab_size"], (batch, seq), dtype=np.int64)
        elif name == "attention_mask":
            m = np.ones((batch, seq), np.int64)
            if batch > 1:
                m[-1, seq * 3 // 4:] = 0  # right padding on the last row
            feeds[name] = m
        else:
            feeds[name] = np.zeros((batch, seq), np.int64)
    return feeds


def timed_rounds(sessions: dict, feeds: dict, warmup: int, rounds: int) -> dict[str, list[float]]:
    """Seconds of each session's run per round, the sessions interleaved in one run: ``warmup``
    untimed rounds, then forward on even rounds and backward on odd ones (a fixed position in
    the round biases: the last candidate ran ~10% faster than the same graph placed second)."""
    for _ in range(warmup):
        for sess in sessions.values():
            sess.run(None, feeds)
    times = collections.defaultdict(list)
    order = list(sessions.items())
    for r in range(rounds):
        for cand, sess in (order if r % 2 == 0 else order[::-1]):
            t = time.perf_counter()
            sess.run(None, feeds)
            times[cand].append(time.perf_counter() - t)
    return times



def session(proto: onnx.ModelProto, threads: int = 2):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if any(n.domain == "onnx_fuse" for n in proto.graph.node):
        from onnx_fuse.reference.ort_ops import prepare_session

        proto = prepare_session(proto, opts)
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def compare(ref: list[np.ndarray], got: list[np.ndarray], valid: np.ndarray | None) -> float:
    """Max abs error over all outputs, restricted to unpadded positions when ``valid`` is given."""
    worst = 0.0
    for r, g in zip(ref, got):
        if r.shape != g.shape:
            return float("inf")
        d = np.abs(r.astype(np.float64) - g.astype(np.float64))
        if valid is not None and d.ndim >= 2 and d.shape[:2] == valid.shape:
            d = d[valid.astype(bool)]
        worst = max(worst, float(np.nanmax(d)) if d.size else 0.0)
    return worst


def bench_model(name: str, entry: dict, ns) -> list[dict]:
    path = MODELS / entry["file"]
    original = onnx.load(str(path))
    builders = {
        "original": lambda: original,
        "fuse-ort": lambda: run_onnx_fuse(path, "ort"),
        "fuse-onnx": lambda: run_onnx_fuse(path, "onnx"),
        "fuse-trt": lambda: run_onnx_fuse(path, "trt"),
        "fuse-trt-O4": lambda: run_onnx_fuse(path, "trt", level=4),
        "ort-opt": lambda: run_ort_optimizer(path, entry),
        "onnxscript": lambda: run_onnxscript(path),
    }
    rows, sessions = [], {}
    feeds = feeds_for(entry, ns.batch, ns.seq)
    valid = feeds.get("attention_mask")
    ref = None
    for cand, build in builders.items():
        row = {"model": name, "candidate": cand, "error": ""}
        t0 = time.perf_counter()
        try:
            proto = build()
        except Exception as exc:
            row["error"] = f"optimize: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            if ns.verbose:
                traceback.print_exc()
            rows.append(row)
            continue
        row["optimize_s"] = time.perf_counter() - t0
        row.update(fused_counts(proto))
        try:
            sess = session(proto)
            out = sess.run(None, feeds)
        except Exception as exc:
            row["error"] = f"run: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            rows.append(row)
            continue
        if ref is None:
            ref = out
        row["max_abs"] = compare(ref, out, valid)
        row["max_abs_all"] = compare(ref, out, None)
        if not cand.startswith("fuse-trt") or ns.trt_latency:
            sessions[cand] = sess
        rows.append(row)
    times = timed_rounds(sessions, feeds, ns.warmup, ns.rounds)
    base = statistics.median(times["original"]) if times.get("original") else None
    for row in rows:
        if row["candidate"] in times:
            row["ms"] = 1e3 * statistics.median(times[row["candidate"]])
            row["speedup"] = (1e3 * base / row["ms"]) if base else None
    return rows


def fmt_table(rows: list[dict], markdown: bool) -> str:
    head = ["model", "candidate", *COLUMNS, "ms", "speedup", "max_abs", "note"]
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
    else:
        lines.append("  ".join(f"{h:>10s}" if i > 1 else f"{h:<22s}" if i == 0 else f"{h:<11s}"
                               for i, h in enumerate(head)))
    for r in rows:
        cells = [r["model"], r["candidate"]]
        for c in COLUMNS:
            cells.append(str(r.get(c, "-")))
        cells.append(f"{r['ms']:.3f}" if "ms" in r else "-")
        cells.append(f"{r['speedup']:.2f}x" if r.get("speedup") else "-")
        if "max_abs" in r:
            cells.append(f"{r['max_abs']:.1e}" + ("" if r["max_abs_all"] == r["max_abs"] else
                                                   f" ({r['max_abs_all']:.0e} padded)"))
        else:
            cells.append("-")
        cells.append(r.get("error", "") or ("" if r.get("max_abs", 0) < 1e-3 else "OUTPUT DIFFERS"))
        if markdown:
            lines.append("| " + " | ".join(cells) + " |")
        else:
            lines.append("  ".join(f"{c:>10s}" if i > 1 else f"{c:<22s}" if i == 0 else f"{c:<11s}"
                                   for i, c in enumerate(cells)))
    return "\n".join(lines)


DEFAULT_MODELS = ("bert_sdpa_dynamo", "bert_eager_torchscript", "gpt2_sdpa_dynamo",
                  "gpt2_sdpa_torchscript", "llama_sdpa_dynamo", "llama_sdpa_torchscript")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS),
                    help="names from tests/data/models/manifest.json, or 'all'")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--trt-latency", action="store_true", help="also time fuse-trt (NumPy reference ops)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("-v", "--verbose", action="store_true")
    ns = ap.parse_args(argv)
    manifest = json.loads((MODELS / "manifest.json").read_text())["models"]
    names = list(manifest) if ns.models == ["all"] else ns.models
    rows = []
    for name in names:
        if name not in manifest:
            print(f"unknown model {name!r}; see {MODELS / 'manifest.json'}", file=sys.stderr)
            return 2
        rows += bench_model(name, manifest[name], ns)
        print(fmt_table([r for r in rows if r["model"] == name], ns.markdown), flush=True)
    if ns.json:
        Path(ns.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
