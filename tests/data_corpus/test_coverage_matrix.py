"""The coverage matrix over the export corpus: for each file and onnx-fuse column (ort/onnx/trt at
O3, trt at O4) the fused attention, norm, RoPE and GELU counts and the whole-model numeric check
must be what tests/data/corpus/expected_coverage.json records, and so must the optimized graph's op
histogram (equal counts over a larger graph are a partial fusion) (written by
`python tools/coverage.py --write-expected tests/data/corpus/expected_coverage.json`, docs/coverage.md).

A change that fuses less, or breaks numerics, fails here; one that fuses more fails too, until the
expectations are regenerated and the gain shows in docs/coverage.md. The suite runs a sample (one
file per architecture, every KV-cache export; ort and onnx at O3, trt at O4 for KV exports; the
merged decoders at ort-O3 and trt-O4) to keep CI short; ONNX_FUSE_CORPUS_MATRIX=full runs every file and column.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "corpus"
EXPECTED = CORPUS / "expected_coverage.json"
STYLE_ORDER = ("dyn_mask", "static_nomask", "optimum", "kv", "torchscript")


def _coverage_tool():
    return load_tool("coverage", "coverage_tool")


def _cases() -> list[tuple[str, str]]:
    if not EXPECTED.exists():
        return []
    expected = json.loads(EXPECTED.read_text())
    if os.environ.get("ONNX_FUSE_CORPUS_MATRIX") == "full":
        return [(f, c) for f in sorted(expected) for c in expected[f] if c != "sha256"]
    by_arch: dict[str, str] = {}
    for f in sorted(expected, key=lambda f: (STYLE_ORDER.index(f.split("__")[1])
                                             if f.split("__")[1] in STYLE_ORDER else 9, f)):
        if "__trained" in f:
            by_arch.setdefault(f.split("__")[0], f)
    cases = [(f, c) for f in sorted(by_arch.values()) for c in ("ort-O3", "onnx-O3") if c in expected[f]]
    for f in sorted(expected):
        if "__kv__" in f:
            cases += [(f, c) for c in ("ort-O3", "onnx-O3", "trt-O4")
                      if c in expected[f] and (f, c) not in cases]
        if "__optimum_merged__" in f:   # the corpus's only If branches (and trt-O4's merged-decoder trial)
            cases += [(f, c) for c in ("ort-O3", "trt-O4") if c in expected[f] and (f, c) not in cases]
    return cases


def _histogram_diff(want: dict[str, int], got: dict[str, int]) -> dict[str, str]:
    """The ops whose count changed, as {op: 'recorded -> now'}."""
    return {op: f"{want.get(op, 0)} -> {got.get(op, 0)}" for op in sorted(set(want) | set(got))
            if want.get(op, 0) != got.get(op, 0)}


@pytest.mark.slow
@pytest.mark.parametrize("name,column", _cases() or [pytest.param("", "", marks=pytest.mark.skip(
    reason="tests/data/corpus/expected_coverage.json not generated"))])
def test_corpus_file_fuses_as_recorded(name, column):
    tool = _coverage_tool()
    expected = json.loads(EXPECTED.read_text())[name]
    manifest = json.loads((CORPUS / "manifest.json").read_text())["files"][name]
    assert manifest["sha256"] == expected["sha256"], f"{name} changed since the expectations were written"
    target, level = column.split("-O")
    got = tool.run_onnx_fuse(str(CORPUS / name), int(level), target, manifest)
    want = expected[column]
    assert got["counts"] == {k: want[k] for k in ("attn", "norm", "rope", "gelu")}, (
        f"{name} {column}: fused {got['counts']}, recorded {want} (rule fires: {got['rule_fires']})")
    if "ops" in want:  # same counts but more glue is a partial fusion too
        diff = _histogram_diff(want["ops"], got["ops"])
        assert not diff, f"{name} {column}: op histogram differs from the record (op: recorded -> now): {diff}"
    if want["verified"]:  # numerics recorded as right must stay right
        assert got["verify"]["passed"], f"{name} {column}: {got['verify']}"
