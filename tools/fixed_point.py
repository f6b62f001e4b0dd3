"""Is onnx-fuse's own output a fixed point? Optimize, optimize the result again, compare.

For each corpus file and each setting (target-level[@opset]) the first pass optimizes the original;
the second pass optimizes that output again, either with the same setting or with another one (a
cross pass: ort-O3 output at onnx-O3, an opset-pinned output at onnx-O3 unpinned). A cell passes when
  - the second pass keeps every fusion: fused attention / norm / RoPE / GELU counts (coverage.py's
    categories) at least those of the reference (the first pass for a same-setting pass; the
    original optimized directly with the second setting for a cross pass),
  - a same-setting pass does not grow the graph (nodes after <= nodes of the first pass),
  - the second output verifies against the ORIGINAL in ORT.

    python tools/fixed_point.py [--only SUBSTR ...] [--passes ort-O3 onnx-O3@18 ort-O3:onnx-O3 ...]
                                [--corpus DIR] [--json out/fixed_point.json]

A pass 'A' is A then A again; 'A:B' is A then B (compared with B on the original). A setting is
TARGET-O<level>[@opset].
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from coverage import count_ops  # noqa: E402

# ~15 files across families (tests/data/corpus): encoders, decoders with and without a cache, GQA,
# partial RoPE, seq2seq, vision, a merged decoder
SPREAD = ("bert__dyn_mask__trained", "gpt2__kv__trained", "llama__kv__trained", "llama__dyn_mask__trained",
          "mistral__dyn_mask__trained", "qwen2__optimum__trained", "phi3__dyn_mask__trained",
          "t5_encoder__optimum__trained", "t5_decoder__optimum__trained", "whisper_decoder__kv__trained",
          "vit__dyn_mask__trained", "clip_vision__optimum__trained", "gpt2__optimum_merged__trained",
          "qwen3__kv__trained", "distilbert__optimum__trained")
# a pin below the file's opset is skipped (onnx-fuse never converts down): @18 reaches the Optimum /
# TorchScript exports (opset 17 / 18), @22 the dynamo ones (opset 20)
PASSES = ("ort-O3", "onnx-O3", "trt-O4", "onnx-O3@18", "onnx-O3@22", "ort-O3@22", "trt-O4@18", "trt-O4@22",
          "ort-O3:onnx-O3", "onnx-O3@18:onnx-O3", "onnx-O3@22:onnx-O3", "onnx-O3@22:ort-O3",
          "onnx-O3@22:trt-O4")


def parse_setting(text: str) -> dict:
    """'trt-O4@18' -> {'target': 'trt', 'level': 4, 'opset': 18}."""
    body, _, opset = text.partition("@")
    target, _, level = body.partition("-O")
    if target not in ("ort", "onnx", "trt") or not level.isdigit() or (opset and not opset.isdigit()):
        raise SystemExit(f"error: bad setting {text!r} (TARGET-O<level>[@opset], e.g. onnx-O3@18)")
    return {"target": target, "level": int(level), "opset": int(opset) if opset else None}


def _optimize(model, setting: dict):
    import onnx_fuse

    extra = {"float32_plugins": True} if (setting["target"], setting["level"]) == ("trt", 4) else {}
    return onnx_fuse.optimize(model, level=setting["level"], target=setting["target"],
                              opset=setting["opset"], **extra)


def check(path: str | Path, spec: str, *, verify: bool = True) -> dict:
    """One cell: the pass ``spec`` ('A' or 'A:B') on the model at ``path``."""
    import onnx_ir as ir

    from onnx_fuse.verify import failure_summary
    from onnx_fuse.verify import verify as run_verify

    first_text, _, second_text = spec.partition(":")
    first, second = parse_setting(first_text), parse_setting(second_text or first_text)
    import onnx

    have = max(o.version for o in onnx.load(str(path), load_external_data=False).opset_import
               if o.domain in ("", "ai.onnx"))
    if any(s["opset"] is not None and s["opset"] < have for s in (first, second)):
        return {"ok": True, "skip": True, "problems": [f"skipped: the file is opset {have}"]}
    one = _optimize(str(path), first)
    two = _optimize(ir.to_proto(one.model), second)
    ref = one if not second_text else _optimize(str(path), second)
    got, want = count_ops(two.report.ops_after), count_ops(ref.report.ops_after)
    problems = [f"{cat} {want[cat]} -> {got[cat]}" for cat in want if got[cat] < want[cat]]
    n1, n2 = sum(one.report.ops_after.values()), sum(two.report.ops_after.values())
    if not second_text and n2 > n1:
        problems.append(f"nodes {n1} -> {n2}")
    row = {"counts_ref": want, "counts": got, "nodes_first": n1, "nodes_second": n2,
           "second_fires": {k: v for k, v in two.report.rule_fires.items() if v}}
    if verify:
        try:
            result = run_verify(str(path), ir.to_proto(two.model))
        except Exception as exc:  # random inputs cannot size it (an image's symbolic height): the manifest's
            if "cannot verify" not in str(exc):
                raise
            from coverage import _manifest_feeds

            manifest = json.loads((Path(path).parent / "manifest.json").read_text())
            result = run_verify(str(path), ir.to_proto(two.model),
                                inputs=_manifest_feeds(manifest["files"][Path(path).name]))
        if not result.get("passed"):
            problems.append("verify: " + failure_summary(result))
    row["problems"] = problems
    row["ok"] = not problems
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="corpus file name substrings (default: the spread)")
    ap.add_argument("--passes", nargs="*", default=list(PASSES))
    ap.add_argument("--corpus", default=str(ROOT / "tests/data/corpus"))
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args(argv)
    for spec in args.passes:
        for part in spec.split(":"):
            parse_setting(part)
    corpus = Path(args.corpus)
    files = sorted(p for p in corpus.glob("*.onnx")
                   if (any(s in p.name for s in args.only) if args.only else p.stem in SPREAD))
    if not files:
        print("error: no corpus file matches", file=sys.stderr)
        return 2
    rows, bad = {}, 0
    for path in files:
        for spec in args.passes:
            t0 = time.perf_counter()
            try:
                row = check(path, spec, verify=not args.no_verify)
            except Exception as exc:  # one cell's failure is a row, not the run's end
                row = {"ok": False, "problems": [f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"]}
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows[f"{path.stem} {spec}"] = row
            bad += not row["ok"]
            if row.get("skip"):
                continue
            print(f"{'ok  ' if row['ok'] else 'FAIL'} {path.stem:40s} {spec:20s} {row['seconds']:6.1f}s "
                  f"{'; '.join(row['problems'])}", flush=True)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows, indent=1, sort_keys=True))
        tmp.replace(out)
    print(f"{len(rows) - bad}/{len(rows)} cells a fixed point")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
