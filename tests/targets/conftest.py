"""Fixtures shared by the paged-KV target tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import onnx_fuse


@pytest.fixture(scope="module")
def any_head_rule(tmp_path_factory) -> str:
    """trt-paged-kv as built in, minus the kernels' head-size checks: the corpus has head size 16, so
    this shows what the rest of the lowering does on exporters and architectures the head-64 exports
    do not cover."""
    text = (Path(onnx_fuse.__file__).resolve().parents[1] / "rules" / "attention" / "paged_trt.yaml").read_text()
    start, end = text.index("rules:"), text.index("  - name: attention-kv-trt")
    lines = [ln for ln in text[start:end].splitlines()
             if "dim(q, 3) in (64, 80, 96, 128, 256)" not in ln and "dim(q, 3) in (64, 128)" not in ln]
    path = tmp_path_factory.mktemp("rules") / "paged_any_head.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
