"""Float16 exports (tools/export_corpus.py --dtype float16, weights tag trained16) fuse as much as
their float32 twins (same architecture, style and weights, exported from the model before .half()):
the Casts a half-precision model makes HF write (RoPE tables computed in float32, softmax in
float32, RMSNorm's float32 island, float16-rounded constants) must not cost a fusion. Counts come
from tools/coverage.py (the matrix's own counting) and are compared with the twin's recorded ones
in expected_coverage.json; each optimized model must verify against the float16 original in ORT.
The suite runs a sample (the forms fixed for float16); ONNX_FUSE_CORPUS_MATRIX=full runs every
trained16 file at ort-O3 and trt-O4."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "corpus"
EXPECTED = CORPUS / "expected_coverage.json"
SAMPLE = [  # (file, column): what each exercises
    ("llama__optimum__trained16.onnx", "ort-O3"),        # TorchScript sdpa: float32 mask, V cast up
    ("falcon__torchscript__trained16.onnx", "trt-O4"),   # the same under TorchScript directly
    ("gemma2__torchscript__trained16.onnx", "ort-O3"),   # eager softmax: float16 -> float32 -> float16
    ("gemma__optimum__trained16.onnx", "ort-O3"),        # float32 layer 1: tables cast down and up
    ("gemma2__optimum__trained16.onnx", "trt-O4"),       # float32 logits of a float16 model
    ("mistral__kv__trained16.onnx", "ort-O3"),           # sliding window, float16 mask minimum
    ("olmo2__kv__trained16.onnx", "trt-O4"),             # RoPE in float32 on a float16 x
    ("gpt2__kv__trained16.onnx", "ort-O3"),              # tanh GELU with float16 constants
]


def _cases() -> list[tuple[str, str]]:
    if os.environ.get("ONNX_FUSE_CORPUS_MATRIX") == "full" and CORPUS.exists():
        return [(p.name, c) for p in sorted(CORPUS.glob("*__trained16.onnx")) for c in ("ort-O3", "trt-O4")]
    return SAMPLE


def _coverage_tool():
    return load_tool("coverage", "coverage_tool")


@pytest.mark.slow
@pytest.mark.parametrize("name,column", _cases())
def test_float16_export_fuses_like_its_float32_twin(name, column):
    path = CORPUS / name
    twin = name.replace("__trained16.onnx", "__trained.onnx")
    if not path.exists() or not EXPECTED.exists():
        pytest.skip(f"{name} or expected_coverage.json not there")
    want = json.loads(EXPECTED.read_text()).get(twin, {}).get(column)
    if want is None:
        pytest.skip(f"no recorded {column} counts for the twin {twin}")
    entry = json.loads((CORPUS / "manifest.json").read_text())["files"][name]
    assert entry["dtype"] == "float16"
    target, level = column.split("-O")
    got = _coverage_tool().run_onnx_fuse(str(path), int(level), target, entry)
    assert got["counts"] == {k: want[k] for k in ("attn", "norm", "rope", "gelu")}, (
        f"{name} {column}: fused {got['counts']}, its float32 twin {want} (rule fires: {got['rule_fires']})")
    assert got["verify"]["passed"], f"{name} {column}: {got['verify']}"
