"""The README's test install must not download CUDA libraries: no torch (or nvidia-*) in the
``test`` extra, and no CPU test that needs torch. GPU tests reach torch through importorskip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_test_extra_pulls_no_cuda_packages():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("test", "trt"):
        names = [re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in extras[extra]]
        assert not [n for n in names if n == "torch" or n.startswith(("nvidia-", "cuda"))], (extra, names)


def test_tests_reach_torch_only_through_importorskip():
    direct = re.compile(r"^\s*(import torch\b|from torch\b)", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py") if direct.search(p.read_text())]
    assert not offenders, offenders
