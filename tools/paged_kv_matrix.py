"""The trt O4 paged-KV coverage matrix: optimize each KV-cache export at level 4, target trt, with
verify, and say per file whether attention was fused, whether PagedAttention was emitted, whether
verify passed, and (not paged) the reason the rewrite gave.

    python tools/paged_kv_matrix.py FILE_OR_DIR ... [--json out.json]

Files are made offline with `tools/export_corpus.py --head-dim 64 --styles kv torchscript_kv optimum
--weights trained --out DIR` (docs/paged_kv.md, "Coverage"). Only files with `past_key_values`-like
inputs are run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ATTENTION_OPS = ("Attention", "PagedAttention", "AttentionKV")


def _kv_inputs(path: Path) -> bool:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return any("past" in i.name for i in graph.input)


def classify(path: Path) -> dict:
    """One row: ops after, fused / paged / verify and the refusal warning."""
    import onnx_fuse

    row = {"file": path.name}
    try:
        # float32_plugins: the float32 corpus files get the paged form too (checked in the reference)
        res = onnx_fuse.optimize(str(path), level=4, target="trt", verify=True, float32_plugins=True)
    except Exception as exc:  # a crash is a result of the matrix, not its end
        row.update(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return row
    rep = res.report
    ops = rep.ops_after
    attn = {k: v for k, v in ops.items() if k.split("::")[-1] in ATTENTION_OPS or "Attention" in k}
    row["attention_ops"] = attn
    row["fused"] = bool(attn) and not any(k.split("::")[-1] in ("Softmax",) for k in ops)
    row["paged"] = any(k.endswith("PagedAttention") for k in ops)
    row["verify"] = rep.status
    if rep.status == "FAILED":
        row["verify_failure"] = rep.verify_failure
    row["nodes"] = [rep.nodes_before, rep.nodes_after]
    # the model's own inputs that stay (the pools, block_tables and seq_lens left out)
    row["inputs"] = [v.name for v in res.model.graph.inputs
                     if not v.name.startswith(("kv_pool_", "past_")) and v.name not in ("block_tables", "seq_lens")]
    reasons = [w for w in rep.warnings if "trt-paged-kv" in w]
    if reasons and not row["paged"]:
        row["refusal"] = reasons[0][:400]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--json", default=None, help="write the rows here")
    ns = ap.parse_args(argv)
    files = []
    for p in map(Path, ns.paths):
        if not p.exists():
            print(f"error: {p}: no such file or folder", file=sys.stderr)
            return 2
        files += sorted(p.glob("*.onnx")) if p.is_dir() else [p]
    rows = []
    for f in files:
        if not _kv_inputs(f):
            continue
        row = classify(f)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if ns.json:
        tmp = Path(ns.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(rows, indent=1) + "\n")
        tmp.replace(ns.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
