"""tools/coverage.py reads its own Markdown table back (--resume-from-markdown): the per-file rows,
the anchors' columns and the failure reasons survive markdown -> rows -> markdown unchanged, and a
partial rerun laid over the table (--overlay) replaces only the columns it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "tests/data/corpus/manifest.json"
COLS = ["ort-O3", "onnx-O3", "trt-O4", "onnxscript", "ort-tools"]


@pytest.fixture(scope="module")
def cov():
    return load_tool("coverage", "coverage_tool")


def _entry(arch, style, layers):
    return {"arch": arch, "style": style, "weights": "trained", "kind": "decoder", "num_layers": layers,
            "sha256": f"sha-{arch}-{style}"}


FILES = {"a__kv__trained.onnx": _entry("a", "kv", 2), "b__dyn_mask__trained.onnx": _entry("b", "dyn_mask", 2),
         "c__optimum__trained.onnx": {**_entry("c", "optimum", 2), "attention_blocks": 3},
         "d__kv__trained.onnx": _entry("d", "kv", 4)}
HEADER = {"command": "python tools/coverage.py --label x (y; z)", "machine": "box (2 CPUs, shared)",
          "date": "2026-12-02 10:00 UTC", "git": "abc1234 (rows of 3 files reused)",
          "versions": {"onnxruntime": "1.32.0", "onnxscript": "0.7.2"}, "export_failed": {"e__kv": "bad | thing"}}


def _res(attn, passed, reason=None, norm=5):
    return {"counts": {"attn": attn, "norm": norm, "rope": 4, "gelu": 0},
            "verify": {"passed": passed, "reason": reason}}


def _rows():
    return [
        {"file": "a__kv__trained.onnx", "expected_attn": 2, "columns": {
            "ort-O3": _res(2, True), "onnx-O3": _res(2, True),
            "trt-O4": _res(2, None, "not run: paged KV changes the inputs"),
            "onnxscript": _res(0, False, "output 'logits' differs: max abs 0.5, max rel 1 "),
            "ort-tools": {"error": "TypeError: 'method' object is not iterable"}}},
        {"file": "b__dyn_mask__trained.onnx", "expected_attn": 2, "columns": {
            "ort-O3": _res(2, True), "onnx-O3": _res(1, True), "trt-O4": {"error": "UserError: no | way"},
            "onnxscript": _res(2, True)}},  # ort-tools never ran: an empty cell
        {"file": "c__optimum__trained.onnx", "error": "worker exit 1: boom"},
        {"file": "d__kv__trained.onnx", "expected_attn": 4, "columns": {
            c: _res(4, c != "onnxscript", "ONNX Runtime refuses the optimized model: 12 x" if c == "onnxscript"
                    else None, norm=9) for c in COLS}},
    ]


def _fill(rows):
    for r in rows:  # a worker that failed printed no row: the file and its error only
        keys = ("sha256",) if "error" in r else ("arch", "style", "weights", "kind", "sha256")
        r.update({k: FILES[r["file"]][k] for k in keys})
    return rows


def test_synthetic_table_round_trips(cov):
    rows = _fill(_rows())
    text = cov.render_markdown(rows, COLS, HEADER)
    back, cols, header = cov.rows_from_markdown(text, FILES)
    assert cols == COLS
    assert header == {k: v for k, v in HEADER.items() if k != "export_failed"}
    assert cov.render_markdown(back, cols, {**header, "export_failed": HEADER["export_failed"]}) == text
    got = {r["file"]: r for r in back}
    assert got["c__optimum__trained.onnx"]["error"] == "worker failed"
    a, b = got["a__kv__trained.onnx"]["columns"], got["b__dyn_mask__trained.onnx"]["columns"]
    assert a["trt-O4"]["verify"] == {"passed": None, "reason": "not run: paged KV changes the inputs"}
    # one column's reasons are dealt to its FAIL cells in table order: which row had which is not recorded
    assert {got[f]["columns"]["onnxscript"]["verify"]["reason"] for f in ("a__kv__trained.onnx", "d__kv__trained.onnx")
            } == {"output 'logits' differs: max abs N, max rel N ", "ONNX Runtime refuses the optimized model: N x"}
    assert a["ort-tools"]["error"] == "TypeError: 'method' object is not iterable"
    assert b["trt-O4"]["error"] == "UserError: no / way" and "ort-tools" not in b
    assert b["onnx-O3"]["counts"] == {"attn": 1, "norm": 5, "rope": 4, "gelu": 0}
    assert cov.expectations(back, cols) == cov.expectations(rows, COLS)


def test_committed_table_round_trips(cov):
    """docs/coverage.md as committed reads back into rows that render it again byte for byte."""
    text = (ROOT / "docs/coverage.md").read_text()
    manifest = json.loads(MANIFEST.read_text())
    rows, cols, header = cov.rows_from_markdown(text, manifest["files"])
    assert len(rows) == len(manifest["files"])
    assert cov.render_markdown(rows, cols, {**header, "export_failed": manifest.get("failed", {})}) == text


def test_overlay_replaces_only_the_columns_it_ran(cov, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text(json.dumps({"files": FILES}))
    rows = _fill(_rows())
    md = tmp_path / "old.md"
    md.write_text(cov.render_markdown(rows, COLS, HEADER))
    fresh = {"file": "a__kv__trained.onnx", "sha256": FILES["a__kv__trained.onnx"]["sha256"], "expected_attn": 2,
             "columns": {"trt-O4": _res(1, True)}}
    stale = {"file": "d__kv__trained.onnx", "sha256": "another file", "expected_attn": 4,
             "columns": {"ort-O3": _res(0, False, "x")}}
    (tmp_path / "part.json").write_text(json.dumps({"rows": [fresh, stale]}))
    out_md, out_exp = tmp_path / "new.md", tmp_path / "expected.json"
    assert cov.main(["--corpus", str(corpus), "--columns", "ort-O3", "onnx-O3", "trt-O4",
                     "--json", str(tmp_path / "all.json"), "--resume-from-markdown", str(md),
                     "--overlay", str(tmp_path / "part.json"), "--markdown", str(out_md),
                     "--write-expected", str(out_exp), "--label", "test"]) == 0
    back = {r["file"]: r for r in cov.rows_from_markdown(out_md.read_text(), FILES)[0]}
    a = back["a__kv__trained.onnx"]["columns"]
    assert a["trt-O4"]["counts"]["attn"] == 1 and a["trt-O4"]["verify"]["passed"] is True  # the overlay
    assert a["ort-tools"]["error"] and a["onnxscript"]["verify"]["passed"] is False  # the table's
    assert back["d__kv__trained.onnx"]["columns"]["ort-O3"]["counts"]["attn"] == 4  # stale sha: not laid
    exp = json.loads(out_exp.read_text())
    assert exp["a__kv__trained.onnx"]["trt-O4"]["attn"] == 1 and set(exp["d__kv__trained.onnx"]) == {
        "sha256", "ort-O3", "onnx-O3", "trt-O4"}
