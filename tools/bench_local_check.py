"""Cost of the per-rewrite numeric check: optimize(verify=True) with and without it, interleaved.

    python tools/bench_local_check.py [--repeat 5] [MODEL.onnx ...]

Prints, per model, the median wall time of optimize(level=3, verify=True) with the check off
(whole-model verification only) and on, the ratio, and the check's own counts and seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import onnx_fuse
import onnx_fuse.api as api

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT / "tests/data/models/llama_sdpa_dynamo.onnx", ROOT / "tests/data/models/bert_sdpa_dynamo.onnx"]


def _run(path: Path, local: bool, target: str):
    original = api._local_checkers
    if not local:
        api._local_checkers = lambda stages, seed: []   # whole-model verification only
    try:
        t = time.perf_counter()
        result = onnx_fuse.optimize(path, level=3, target=target, verify=True)
        return time.perf_counter() - t, result
    finally:
        api._local_checkers = original


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target", default="ort")
    args = ap.parse_args()
    print(f"{'model':<28} {'verify s':>9} {'+check s':>9} {'ratio':>6}  checks")
    for path in args.models:
        _run(path, True, args.target)   # warm-up: imports, ORT kernels
        off, on = [], []
        result = None
        for _ in range(args.repeat):
            off.append(_run(path, False, args.target)[0])
            t, result = _run(path, True, args.target)
            on.append(t)
        rw = result.report.verify["rewrites"]
        a, b = statistics.median(off), statistics.median(on)
        print(f"{path.stem:<28} {a:9.3f} {b:9.3f} {b / a:6.2f}  {rw['checked']} checked, "
              f"{rw['unchecked']} unchecked, {rw['rolled_back']} rolled back, {rw['seconds']:.3f} s in checks")


if __name__ == "__main__":
    main()
