"""Benchmark onnx_fuse.InferenceSession against onnxruntime.InferenceSession on a BERT-base sized
encoder: load time cold (optimize + save to the cache + load) and cached (hash + load from the
cache), and steady-state run latency of both sessions, interleaved in one process.

    python tools/bench_session.py                      # 12 layers, hidden 768, 12 heads
    python tools/bench_session.py --external --level 3 --batch 1 --seq 128 --runs 50

The model is onnx_fuse.demo_model's BERT-style encoder at BERT-base size (written the way
exporters write it: decomposed LayerNorm, erf GELU, MatMul/Softmax attention): about 85 M weights,
340 MB. Loads are interleaved (plain, cached, plain, cached, ...) so drift on a shared machine hits
both alike; cold loads each get a fresh cache folder. Run latency alternates one run of each
session per round. Prints a markdown table and, with --json, the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

import onnx_fuse
import onnx_fuse.session  # noqa: F401 - imported up front so no timed load pays for it
from onnx_fuse.demo_model import build_demo_model


def build_model(folder: Path, *, layers: int, hidden: int, heads: int, external: bool) -> Path:
    model = build_demo_model(layers=layers, hidden=hidden, heads=heads, seed=0)
    path = folder / "bert_like.onnx"
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="bert_like.onnx.data", size_threshold=1024)
    else:
        onnx.save_model(model, str(path))
    return path


def session_options(threads: int) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--target", default=None)
    ap.add_argument("--external", action="store_true", help="save the model with external weights")
    ap.add_argument("--cold", type=int, default=3, help="cold loads (each with a fresh cache)")
    ap.add_argument("--loads", type=int, default=7, help="cached and plain loads, interleaved")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=30, help="timed runs per session")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ns = ap.parse_args(argv)

    providers = ["CPUExecutionProvider"]
    kw = {"optimize_level": ns.level, "target": ns.target}
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        tmp = Path(tmp)
        path = build_model(tmp, layers=ns.layers, hidden=ns.hidden, heads=ns.heads, external=ns.external)
        size = sum(p.stat().st_size for p in tmp.iterdir())
        print(f"model: {ns.layers} layers, hidden {ns.hidden}, {ns.heads} heads, {size / 1e6:.0f} MB"
              f"{' (external data)' if ns.external else ''}; level {ns.level}; {ns.threads} threads",
              file=sys.stderr)
        time.sleep(2.5)  # the model file is not "just written" any more (see session_cache: racy memo)

        cold, cold_stats = [], None
        for i in range(ns.cold):
            cache = tmp / f"cache-cold-{i}"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sess, dt = timed(lambda: onnx_fuse.InferenceSession(
                    str(path), session_options(ns.threads), providers, cache_dir=cache, **kw))
            if not sess.onnx_fuse_optimized:
                print(f"warning: not optimized: {sess.onnx_fuse_stats.fallback_reason}", file=sys.stderr)
            assert sess.onnx_fuse_cache_hit is False
            cold.append(dt)
            cold_stats = sess.onnx_fuse_stats
            del sess, caught
        warm_cache = tmp / f"cache-cold-{ns.cold - 1}"

        plain, cached, hit_stats = [], [], []
        for _ in range(ns.loads):
            _, dt = timed(lambda: onnxruntime.InferenceSession(str(path), session_options(ns.threads), providers))
            plain.append(dt)
            sess, dt = timed(lambda: onnx_fuse.InferenceSession(
                str(path), session_options(ns.threads), providers, cache_dir=warm_cache, **kw))
            assert sess.onnx_fuse_cache_hit is True
            cached.append(dt)
            hit_stats.append(sess.onnx_fuse_stats.seconds)
            del sess

        # Steady-state latency, interleaved.
        ref = onnxruntime.InferenceSession(str(path), session_options(ns.threads), providers)
        fused = onnx_fuse.InferenceSession(str(path), session_options(ns.threads), providers,
                                           cache_dir=warm_cache, **kw)
        rng = np.random.default_rng(0)
        mask = np.ones((ns.batch, ns.seq), np.int64)
        feeds = {"hidden_states": rng.standard_normal((ns.batch, ns.seq, ns.hidden)).astype(np.float32),
                 "attention_mask": mask}
        (want,), (got,) = ref.run(None, feeds), fused.run(None, feeds)
        max_diff = float(np.max(np.abs(want - got)))
        for _ in range(3):
            ref.run(None, feeds)
            fused.run(None, feeds)
        lat_ref, lat_fused = [], []
        for _ in range(ns.runs):
            lat_ref.append(timed(lambda: ref.run(None, feeds))[1])
            lat_fused.append(timed(lambda: fused.run(None, feeds))[1])

    med = statistics.median
    rows = [
        ("load: onnxruntime (plain)", med(plain), 1.0),
        ("load: onnx-fuse cold (optimize + cache + load)", med(cold), med(cold) / med(plain)),
        ("load: onnx-fuse cached", med(cached), med(cached) / med(plain)),
        (f"run b{ns.batch} s{ns.seq}: onnxruntime", med(lat_ref), 1.0),
        (f"run b{ns.batch} s{ns.seq}: onnx-fuse", med(lat_fused), med(lat_fused) / med(lat_ref)),
    ]
    hit_parts = {k: med(s.get(k, 0.0) for s in hit_stats) for k in ("hash", "lookup", "ort_load")}
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"onnxruntime {onnxruntime.__version__}, onnx-fuse {onnx_fuse.__version__}")
    print(f"optimized: {cold_stats.optimized}; rule fires: {cold_stats.report and cold_stats.report['rule_fires']}")
    print(f"nodes {cold_stats.report and cold_stats.report['nodes_before']} -> "
          f"{cold_stats.report and cold_stats.report['nodes_after']}; max |diff| vs ORT {max_diff:.2e}")
    print(f"cold breakdown (s): " + ", ".join(f"{k} {v:.2f}" for k, v in cold_stats.seconds.items()))
    print(f"cached breakdown (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in hit_parts.items()))
    print("\n| what | median | vs onnxruntime |\n|---|---:|---:|")
    for name, value, ratio in rows:
        unit = f"{value * 1e3:.1f} ms" if value < 10 else f"{value:.1f} s"
        print(f"| {name} | {unit} | {ratio:.2f}x |")
    if ns.json:
        ns.json.write_text(json.dumps({
            "args": {k: str(v) for k, v in vars(ns).items()}, "cold_s": cold, "cached_s": cached,
            "plain_s": plain, "cached_breakdown_s": hit_stats, "run_ort_s": lat_ref, "run_fuse_s": lat_fused, "max_abs_diff": max_diff,
            "cold_breakdown": cold_stats.seconds, "report": cold_stats.report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
