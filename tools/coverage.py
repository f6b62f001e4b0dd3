"""Coverage matrix: what onnx-fuse and the anchors fuse on each file of the export corpus.

For every corpus file (tests/data/corpus/manifest.json, or an --only subset) and each column
  ort O3, onnx O3, trt O3, trt O4     onnx_fuse.optimize(path, level, target, verify=True)
                                      (trt O4 with float32_plugins=True: the plugin ops on the
                                      float32 exports too, checked through the NumPy reference)
  onnxscript                          onnxscript.rewriter.ort_fusions.optimize_for_ort
  ort-tools                           onnxruntime.transformers.optimizer.optimize_model
                                      (model_type from the architecture, heads/hidden from the manifest)
it counts in the optimized graph: fused attention ops, norms, RoPE and GELU ops, and whether the
optimized model matches the original in ONNX Runtime (onnx_fuse.verify; the anchors' outputs are
checked the same way). Attention layers expected = the manifest's attention_blocks (seq2seq
decoders: self- and cross-attention per layer), else num_layers. Each file runs in its own
subprocess with a time limit, so a crash or a hang costs one row, not the run.

    python tools/coverage.py [--only NAME_SUBSTRING ...] [--json out/coverage.json] [--resume]
                             [--markdown docs/coverage.md] [-j 2] [--timeout 900]

A partial rerun without the earlier JSON: --resume-from-markdown docs/coverage.md reads the per-file
rows back from the table (every column it shows; the failure reasons from its reasons table), runs
only the files --rerun names (and files the table lacks) in --columns, keeps the table's other
columns of those files, and --overlay lays earlier partial runs' JSON over it column by column.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests/data/corpus"
COLUMNS = ("ort-O3", "onnx-O3", "trt-O3", "trt-O4", "onnxscript", "ort-tools")
CONFIG_TIMEOUT = 300  # seconds per column inside a worker (checked between columns)

ATTENTION = {"com.microsoft::Attention", "com.microsoft::MultiHeadAttention",
             "com.microsoft::GroupQueryAttention", "com.microsoft::PackedAttention",
             "com.microsoft::PackedMultiHeadAttention", "Attention", "onnx_fuse::FusedAttention",
             "onnx_fuse::PagedAttention"}
NORMS = {"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
         "com.microsoft::SimplifiedLayerNormalization", "com.microsoft::SkipLayerNormalization",
         "com.microsoft::SkipSimplifiedLayerNormalization", "com.microsoft::EmbedLayerNormalization",
         "com.microsoft::LayerNormalization", "GroupNormalization"}
ROPE = {"RotaryEmbedding", "com.microsoft::RotaryEmbedding"}
GELU = {"Gelu", "com.microsoft::Gelu", "com.microsoft::FastGelu", "com.microsoft::BiasGelu",
        "com.microsoft::QuickGelu"}


def count_ops(ops: dict[str, int]) -> dict[str, int]:
    """Category counts from an op histogram keyed 'domain::Op' ('Op' for the default domain)."""
    norm = lambda k: k.replace("ai.onnx::", "")  # noqa: E731
    ops = {norm(k): v for k, v in ops.items()}
    return {cat: sum(v for k, v in ops.items() if k in names)
            for cat, names in (("attn", ATTENTION), ("norm", NORMS), ("rope", ROPE), ("gelu", GELU))}


def _histogram(proto) -> dict[str, int]:
    import collections

    hist: collections.Counter[str] = collections.Counter()

    def walk(graph):
        for node in graph.node:
            hist[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.g.node:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(proto.graph)
    return dict(hist)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:240] if text else ''}"


class _Timeout(Exception):
    pass


def _alarm(seconds: int):
    import signal

    def handler(signum, frame):
        raise _Timeout(f"column took over {seconds} s")

    signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)


def _manifest_feeds(entry: dict) -> dict:
    """Example inputs from the manifest's dims (tools/export_corpus.py), for models whose inputs
    verify cannot size by itself (symbolic image height/width)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from export_corpus import feeds_from_manifest

    return feeds_from_manifest(entry, entry.get("vocab_size") or 128)


def _verify(original_path: str, optimized, entry: dict) -> dict:
    from onnx_fuse.errors import UserError
    from onnx_fuse.verify import failure_summary, verify

    try:
        result, inputs = verify(original_path, optimized), "random"
    except UserError as exc:
        if "cannot verify" not in str(exc):
            raise
        result, inputs = verify(original_path, optimized, inputs=_manifest_feeds(entry)), "manifest"
    return {"passed": bool(result.get("passed")), "inputs": inputs,
            "reason": None if result.get("passed") else failure_summary(result)}


def run_onnx_fuse(path: str, level: int, target: str, entry: dict) -> dict:
    import onnx_fuse
    from onnx_fuse.errors import UserError

    t0 = time.perf_counter()
    # trt-O4 is the plugin column: the plugin ops on the float32 exports too, checked through the
    # NumPy reference (without float32_plugins optimize keeps TensorRT's own ops there, as trt-O3)
    extra = {"float32_plugins": True} if (target, level) == ("trt", 4) else {}
    try:
        try:
            result, inputs = onnx_fuse.optimize(path, level=level, target=target, verify=True, **extra), "random"
        except UserError as exc:  # verify's random inputs cannot size this model: use the manifest's
            if "cannot verify" not in str(exc) or "changed the model's inputs" in str(exc):
                raise
            result = onnx_fuse.optimize(path, level=level, target=target, verify=True,
                                        verify_inputs=_manifest_feeds(entry), **extra)
            inputs = "manifest"
        verify = result.report.verify or {}
        row = {"verify": {"passed": bool(verify.get("passed")), "inputs": inputs,
                          "reason": None if verify.get("passed") else _verify_reason(verify)}}
    except UserError as exc:
        if "changed the model's inputs" not in str(exc):
            raise
        # the O4 paged-KV rewrite replaces the KV inputs: optimize again without verify
        result = onnx_fuse.optimize(path, level=level, target=target, verify=False, **extra)
        row = {"verify": {"passed": None, "reason": "not run: paged KV changes the inputs"}}
    row["ops"] = dict(sorted(result.report.ops_after.items()))
    row["counts"] = count_ops(result.report.ops_after)
    row["rule_fires"] = result.report.rule_fires
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def _verify_reason(verify: dict) -> str:
    from onnx_fuse.verify import failure_summary

    return failure_summary(verify)


def run_onnxscript(path: str, entry: dict) -> dict:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    t0 = time.perf_counter()
    model = ir.load(path)
    model, fusions = optimize_for_ort(model)
    proto = ir.to_proto(model)
    hist = _histogram(proto)
    return {"ops": dict(sorted(hist.items())), "counts": count_ops(hist), "verify": _verify(path, proto, entry),
            "fusions": {k: v for k, v in fusions.items() if v}, "seconds": round(time.perf_counter() - t0, 2)}


def run_ort_tools(path: str, entry: dict) -> dict:
    import io
    import logging
    from contextlib import redirect_stdout

    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    # a manifest without heads / hidden (vision models whose config nests them) passes 0, the optimizer's "read
    # them from the graph": None reaches its comparisons (TypeError: '>' between NoneType and int)
    with redirect_stdout(io.StringIO()):
        opt = optimize_model(path, model_type=entry["ort_model_type"] or "bert", num_heads=entry["num_heads"] or 0,
                             hidden_size=entry["hidden_size"] or 0)
    proto = opt.model
    hist = _histogram(proto)
    return {"ops": dict(sorted(hist.items())), "counts": count_ops(hist), "verify": _verify(path, proto, entry),
            "model_type": entry["ort_model_type"], "seconds": round(time.perf_counter() - t0, 2)}


def worker(name: str, corpus: Path, columns: list[str]) -> dict:
    """All columns for one file; a failing column records its one-line error."""
    import warnings

    warnings.simplefilter("ignore")
    manifest = json.loads((corpus / "manifest.json").read_text())
    entry = manifest["files"][name]
    path = str(corpus / name)
    row = {"file": name, "arch": entry["arch"], "style": entry["style"], "weights": entry["weights"],
           "kind": entry["kind"], "expected_attn": entry.get("attention_blocks", entry["num_layers"]),
           "columns": {}}
    for col in columns:
        _alarm(CONFIG_TIMEOUT)
        try:
            if col == "onnxscript":
                res = run_onnxscript(path, entry)
            elif col == "ort-tools":
                res = run_ort_tools(path, entry)
            else:
                target, level = col.split("-O")
                res = run_onnx_fuse(path, int(level), target, entry)
        except (Exception, _Timeout) as exc:  # noqa: BLE001 -- the matrix records crashes
            res = {"error": _one_line(exc)}
        finally:
            import signal

            signal.alarm(0)
        row["columns"][col] = res
    return row


def _run_batch(names: list[str], corpus: Path, columns: list[str], timeout: int) -> list[dict]:
    """One worker process for a batch (imports and rule loading once); files a crashed or
    timed-out worker left without a row are run again alone."""
    cmd = [sys.executable, __file__, "_worker", *names, "--corpus", str(corpus), "--columns", *columns]
    err = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * len(names))
        out, code = proc.stdout, proc.returncode
        if code:
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            err = f"worker exit {code}: {tail[0][:240]}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = f"timed out after {timeout * len(names)} s"
    rows = {r["file"]: r for r in (json.loads(ln) for ln in out.splitlines() if ln.startswith("{"))}
    missing = [n for n in names if n not in rows]
    if missing and len(names) > 1:
        for n in missing:
            rows.update({r["file"]: r for r in _run_batch([n], corpus, columns, timeout)})
    elif missing:
        rows[names[0]] = {"file": names[0], "error": err or "worker printed no result"}
    return [rows[n] for n in names]


# ---- rendering ------------------------------------------------------------------------------

def fully_fused(row: dict, col: str) -> bool:
    res = row.get("columns", {}).get(col, {})
    if "counts" not in res:
        return False
    verified = res["verify"]["passed"] in (True, None) if col == "trt-O4" else res["verify"]["passed"]
    return res["counts"]["attn"] == row["expected_attn"] and bool(verified)


def summary(rows: list[dict], columns: list[str]) -> dict:
    out = {}
    for col in columns:
        ran = [r for r in rows if "counts" in r.get("columns", {}).get(col, {})]
        out[col] = {"files": len(rows), "ran": len(ran),
                    "attn_fully_fused": sum(r["columns"][col]["counts"]["attn"] == r["expected_attn"] for r in ran),
                    "verified": sum(bool(r["columns"][col]["verify"]["passed"]) for r in ran),
                    "fully_fused_and_verified": sum(fully_fused(r, col) for r in rows),
                    "errors": len(rows) - len(ran)}
    return out


def _cell(row: dict, col: str) -> str:
    if "error" in row:
        return "worker failed"
    res = row["columns"].get(col)
    if res is None:
        return ""
    if "error" in res:
        return "crash"
    c, v = res["counts"], res["verify"]["passed"]
    mark = "ok" if v else ("n/a" if v is None else "**FAIL**")
    return f"{c['attn']}/{row['expected_attn']} · {c['norm']} · {c['rope']} · {c['gelu']} · {mark}"


def render_markdown(rows: list[dict], columns: list[str], header: dict) -> str:
    lines = ["# Fusion coverage over the export corpus", "",
             f"Generated by `{header['command']}` on {header['machine']}, {header['date']} "
             f"(onnx-fuse at git {header['git']}; onnxruntime {header['versions']['onnxruntime']}, "
             f"onnxscript {header['versions']['onnxscript']}). Do not edit by hand.", "",
             "Corpus: tests/data/corpus (tools/export_corpus.py; how each file was made is in its "
             "manifest.json). Columns: onnx-fuse `optimize(level, target, verify=True)` per target and "
             "level; `onnxscript` = onnxscript.rewriter.ort_fusions.optimize_for_ort; `ort-tools` = "
             "onnxruntime.transformers.optimizer.optimize_model (model_type guessed from the "
             "architecture). Each cell: **attention fused/expected** · norms · RoPE · GELU · numeric check "
             "against the original in ONNX Runtime (ok, **FAIL**, n/a where the paged-KV rewrite changes "
             "the inputs). `crash` = the optimizer raised (reason in the JSON).", "",
             "## Summary: files with attention fully fused and verified", "",
             "| column | fully fused + verified | attention fully fused | verified | crashed |",
             "|---|---|---|---|---|"]
    summ = summary(rows, columns)
    for col in columns:
        s = summ[col]
        lines.append(f"| {col} | {s['fully_fused_and_verified']}/{s['files']} | {s['attn_fully_fused']}/{s['files']}"
                     f" | {s['verified']}/{s['files']} | {s['errors']} |")
    by_style: dict[str, list[dict]] = {}
    for r in rows:
        by_style.setdefault(r.get("style", "?"), []).append(r)
    lines += ["", "Per export style (fully fused + verified / files):", "",
              "| style | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for style, rs in sorted(by_style.items()):
        lines.append(f"| {style} | " + " | ".join(f"{summary(rs, [c])[c]['fully_fused_and_verified']}/{len(rs)}"
                                                   for c in columns) + " |")
    lines += ["", "## Per file", "", "| file | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for r in rows:
        lines.append(f"| {r['file'].removesuffix('.onnx')} | " + " | ".join(_cell(r, c) for c in columns) + " |")
    if header.get("export_failed"):
        lines += ["", "## Exports that failed (not in the corpus)", "", "| export | reason |", "|---|---|"]
        for name, reason in sorted(header["export_failed"].items()):
            lines.append(f"| {name} | {reason.replace('|', '/')[:200]} |")
    failures = _failure_reasons(rows, columns)
    if failures:
        lines += ["", "## Most common verify failures and crashes", "", "| count | column | reason |", "|---|---|---|"]
        for (col, reason), n in failures[:25]:
            lines.append(f"| {n} | {col} | {reason.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# ---- reading a rendered table back ------------------------------------------------------------

_HEADER = re.compile(r"^Generated by `(?P<command>.*)` on (?P<machine>.*), (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d UTC) "
                     r"\(onnx-fuse at git (?P<git>.*); onnxruntime (?P<ort>\S+), onnxscript (?P<oscript>\S+)\)\. "
                     r"Do not edit by hand\.$")
_CELL = re.compile(r"^(\d+)/(\d+) · (\d+) · (\d+) · (\d+) · (ok|n/a|\*\*FAIL\*\*)$")
_EXCEPTION = re.compile(r"^[\w.]+: ")  # _one_line's 'Type: message' (a crash), not a verify summary
NOT_RUN = "not run: paged KV changes the inputs"


def _table(lines: list[str], title: str) -> list[list[str]]:
    """The body rows of the Markdown table under '## title', split into cells."""
    try:
        i = lines.index(f"## {title}")
    except ValueError:
        return []
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    body = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        body.append(ln[2:-2].split(" | "))  # a reason's trailing space is part of it
    return body


def rows_from_markdown(text: str, files: dict) -> tuple[list[dict], list[str], dict]:
    """(rows, columns, header) of a render_markdown table, for files still in the manifest `files`.
    Cells give counts and verify results; crash and verify-failure reasons come from the reasons
    table, which only counts them per column, so they are handed to that column's crash / FAIL
    cells in table order (totals exact, which row had which reason not recorded: marked
    reason_from_markdown); reasons beyond the table's 25 lines stay None."""
    lines = text.splitlines()
    head = next((m for m in map(_HEADER.match, lines) if m), None)
    header = {"command": head["command"], "machine": head["machine"], "date": head["date"], "git": head["git"],
              "versions": {"onnxruntime": head["ort"], "onnxscript": head["oscript"]}} if head else {}
    i = lines.index("## Per file")
    columns = [c.strip() for c in lines[i + 2].strip()[1:-1].split("|")][1:]
    pools: dict[tuple[str, bool], list[str]] = {}  # (column, crash?) -> reasons, one per cell
    for n, col, reason in _table(lines, "Most common verify failures and crashes"):
        pools.setdefault((col, bool(_EXCEPTION.match(reason))), []).extend([reason] * int(n))
    rows = []
    for cells in _table(lines, "Per file"):
        name = cells[0] + ".onnx"
        entry = files.get(name)
        if entry is None:
            continue
        row = {"file": name, "arch": entry["arch"], "style": entry["style"], "weights": entry["weights"],
               "kind": entry["kind"], "expected_attn": entry.get("attention_blocks", entry["num_layers"]),
               "columns": {}, "sha256": entry["sha256"], "from_markdown": True}
        if "worker failed" in cells[1:]:
            rows.append({k: row[k] for k in ("file", "sha256", "from_markdown")} | {"error": "worker failed"})
            continue
        for col, cell in zip(columns, cells[1:]):
            if cell == "crash":
                pool = pools.get((col, True))
                row["columns"][col] = {"error": pool.pop(0) if pool else None, "reason_from_markdown": True}
            elif cell:
                m = _CELL.match(cell)
                if not m:
                    raise ValueError(f"{name} {col}: cannot read the cell {cell!r}")
                passed = {"ok": True, "n/a": None}.get(m[6], False)
                pool = pools.get((col, False)) if passed is False else None
                row["expected_attn"] = int(m[2])
                row["columns"][col] = {
                    "counts": dict(zip(("attn", "norm", "rope", "gelu"), map(int, m.group(1, 3, 4, 5)))),
                    "verify": {"passed": passed, "reason": NOT_RUN if passed is None else
                               (pool.pop(0) if pool else None) if passed is False else None},
                    "reason_from_markdown": True}
        rows.append(row)
    return rows, columns, header


def _failure_reasons(rows, columns):
    import collections

    seen: collections.Counter = collections.Counter()
    for r in rows:
        for col in columns:
            res = r.get("columns", {}).get(col, {})
            reason = res.get("error") or (res.get("verify") or {}).get("reason")
            if reason and not reason.startswith("not run"):
                seen[(col, re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", reason)[:160])] += 1
    order = {c: i for i, c in enumerate(COLUMNS)}  # ties in a fixed order: a table read back renders the same
    return sorted(seen.items(), key=lambda kv: (-kv[1], order.get(kv[0][0], 99), kv[0][1]))


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def _version(dist: str) -> str:
    """Installed version of a distribution for the header; the anchors' packages are optional
    (the test extras do not install onnxscript), so a missing one reads 'not installed'."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        ap = argparse.ArgumentParser()
        ap.add_argument("names", nargs="+")
        ap.add_argument("--corpus")
        ap.add_argument("--columns", nargs="*")
        ns = ap.parse_args(argv[1:])
        for name in ns.names:
            print(json.dumps(worker(name, Path(ns.corpus), ns.columns)), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--only", nargs="*", help="keep files whose name contains one of these strings")
    ap.add_argument("--columns", nargs="*", default=list(COLUMNS), choices=COLUMNS)
    ap.add_argument("--json", default=str(ROOT / "out/coverage.json"), help="where the full results go")
    ap.add_argument("--markdown", help="also write the table here (e.g. docs/coverage.md)")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="reuse rows of unchanged files from --json")
    ap.add_argument("--rerun", nargs="*", help="with --resume / --resume-from-markdown: run files containing these strings again")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per file (all columns)")
    ap.add_argument("--batch", type=int, default=8, help="files per worker process")
    ap.add_argument("--label", help="what onnx-fuse version ran, for the header (default: git HEAD)")
    ap.add_argument("--machine", default=None, help="machine description for the Markdown header")
    ap.add_argument("--write-expected", help="also write the onnx-fuse counts per file and column "
                    "(attn, norm, rope, gelu, verified) here: the coverage-matrix test's expectations")
    ap.add_argument("--resume-from-markdown", metavar="MD", help="reuse the rows of an earlier --markdown "
                    "table (its JSON gone): run only files --rerun names or the table lacks, in --columns; "
                    "those keep the table's other columns; the table shows every column of either")
    ap.add_argument("--overlay", nargs="*", default=[], metavar="JSON", help="with --resume-from-markdown: "
                    "earlier partial runs' --json, laid over the table's rows column by column (later wins; "
                    "rows whose sha256 is not the manifest's are skipped)")
    ap.add_argument("--keep-columns-from", help="an earlier --json: its other columns (e.g. the anchors, "
                    "which do not change with onnx-fuse) join the table for files with the same sha256")
    ns = ap.parse_args(argv)
    corpus = Path(ns.corpus)
    mpath = corpus / "manifest.json"
    if not mpath.exists():
        print(f"error: {mpath} not found; run tools/export_corpus.py first", file=sys.stderr)
        return 2
    names = sorted(json.loads(mpath.read_text())["files"])
    if ns.only:
        names = [n for n in names if any(s in n for s in ns.only)]
    if not names:
        print("error: no corpus file matches --only", file=sys.stderr)
        return 2
    files = json.loads(mpath.read_text())["files"]
    rows: dict[str, dict] = {}
    if ns.resume and Path(ns.json).exists():  # keep rows of unchanged files that ran every column
        for row in json.loads(Path(ns.json).read_text())["rows"]:
            entry = files.get(row["file"])
            if (entry and row.get("sha256") == entry["sha256"] and "error" not in row
                    and set(ns.columns) <= set(row["columns"])
                    and not any(r in row["file"] for r in ns.rerun or ())):
                rows[row["file"]] = row
    base: dict[str, dict] = {}  # --resume-from-markdown: the table's rows with the overlays laid on
    md_columns: list[str] = []
    if ns.resume_from_markdown:
        md_rows, md_columns, _ = rows_from_markdown(Path(ns.resume_from_markdown).read_text(), files)
        recorded = (json.loads(Path(ns.write_expected).read_text())
                    if ns.write_expected and Path(ns.write_expected).exists() else {})
        base = {r["file"]: r for r in md_rows  # a file changed since the table: run it again
                if recorded.get(r["file"], {}).get("sha256", r["sha256"]) == r["sha256"]}
        for path in ns.overlay:
            for row in json.loads(Path(path).read_text())["rows"]:
                if files.get(row["file"], {}).get("sha256") != row.get("sha256"):
                    continue
                old = base.get(row["file"])
                if "error" in row or old is None or "error" in old:
                    base[row["file"]] = row
                else:
                    old["columns"].update(row["columns"])
                    old.pop("from_markdown", None)
        for name, row in base.items():
            if name not in rows and not any(r in name for r in ns.rerun or ()):
                rows[name] = row
    todo = [n for n in names if n not in rows]
    print(f"{len(names) - len(todo)} files reused from "
          f"{ns.resume_from_markdown or ns.json}, {len(todo)} to run", flush=True)
    batches = [todo[i:i + ns.batch] for i in range(0, len(todo), ns.batch)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, ns.jobs)) as pool:
        futures = [pool.submit(_run_batch, b, corpus, ns.columns, ns.timeout) for b in batches]
        for fut in concurrent.futures.as_completed(futures):
            for row in fut.result():
                row["sha256"] = files[row["file"]]["sha256"]
                rows[row["file"]] = row
                print(f"[{len(rows)}/{len(names)}] {row['file']}: "
                      + ("  ".join(f"{c}={_cell(row, c)}" for c in ns.columns) if "error" not in row
                         else row["error"]), flush=True)
            _atomic_write(Path(ns.json), json.dumps({"partial": True, "rows": list(rows.values())}, indent=1))
    ordered = [rows[n] for n in names]
    table_columns = list(ns.columns)
    if ns.resume_from_markdown:  # rerun files keep their other columns; expected counts from today's manifest
        for row in ordered:
            old = base.get(row["file"])
            if old is not None and old is not row and "error" not in row and "error" not in old:
                for col, res in old["columns"].items():
                    row["columns"].setdefault(col, res)
            if "error" not in row:
                entry = files[row["file"]]
                row["expected_attn"] = entry.get("attention_blocks", entry["num_layers"])
        table_columns = [c for c in COLUMNS if c in set(md_columns) | set(ns.columns)]
    if ns.keep_columns_from:
        earlier = {r["file"]: r for r in json.loads(Path(ns.keep_columns_from).read_text())["rows"]}
        for row in ordered:
            old = earlier.get(row["file"])
            if old is None or old.get("sha256") != row.get("sha256") or "error" in row:
                continue
            for col, res in old.get("columns", {}).items():
                if col not in row["columns"]:
                    row["columns"][col] = res
                    if col not in table_columns:
                        table_columns.append(col)
        table_columns = [c for c in COLUMNS if c in table_columns]

    header = {"command": "python tools/coverage.py " + " ".join(argv),
              "machine": ns.machine or f"{platform.node()} ({os.cpu_count()} CPUs, {platform.processor() or platform.machine()})",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "git": ns.label or _git_head(), "versions": {"onnxruntime": _version("onnxruntime"),
                                               "onnxscript": _version("onnxscript")}}
    header["export_failed"] = json.loads(mpath.read_text()).get("failed", {})
    summ = summary(ordered, table_columns)
    _atomic_write(Path(ns.json), json.dumps({"header": header, "summary": summ, "rows": ordered}, indent=1) + "\n")
    if ns.markdown:
        _atomic_write(Path(ns.markdown), render_markdown(ordered, table_columns, header))
    if ns.write_expected:
        _atomic_write(Path(ns.write_expected), json.dumps(expectations(ordered, table_columns), indent=1,
                                                          sort_keys=True) + "\n")
    print("summary: " + "; ".join(f"{c} {s['fully_fused_and_verified']}/{s['files']} fully fused+verified"
                                  f" (attn {s['attn_fully_fused']}, verified {s['verified']}, crashed {s['errors']})"
                                  for c, s in summ.items()))
    return 0


ONNX_FUSE_COLUMNS = ("ort-O3", "onnx-O3", "trt-O3", "trt-O4")


def expectations(rows: list[dict], columns: list[str]) -> dict:
    """{file: {"sha256": .., column: {attn, norm, rope, gelu, verified, ops}}} for onnx-fuse's columns.

    ops is the optimized graph's op histogram (subgraphs included): a change can keep every count and
    still leave a larger graph (a fusion taken apart into more glue), which only the histogram shows.
    """
    out: dict = {}
    for row in rows:
        cols = {}
        for col in columns:
            res = row.get("columns", {}).get(col, {})
            if col in ONNX_FUSE_COLUMNS and "counts" in res:
                cols[col] = {**res["counts"], "verified": res["verify"]["passed"],
                             **({"ops": res["ops"]} if "ops" in res else {})}
        if cols:
            out[row["file"]] = {"sha256": row.get("sha256"), **cols}
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
