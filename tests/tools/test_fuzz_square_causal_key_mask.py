"""Fuzz regressions of 7ba674d (key padding over a computed [B, S] key mask): a causal part built as a square
bool [S, S] (Trilu over ConstantOfShape([S, S])) was taken for a [B, S] key mask; the probe's [rows, S] drop
pattern did not broadcast to it (numpy ValueError, not EvalFailure), every attention lowering was rejected and
optimize raised CanonicalLeftover at O3 / O4 (fuzz 25003 seed 3750698633 at ort / onnx / trt; 25004 seed
3201138260 and 25001 seed 1077178779 at onnx / trt under --precision fp16)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402


@pytest.mark.parametrize("seed,precision,targets", [(3750698633, None, ["ort", "onnx", "trt"]),
                                                    (3201138260, "fp16", ["onnx", "trt"])])
def test_a_square_causal_bool_is_no_key_mask(seed, precision, targets):
    results, _, _ = fd.fuzz_case(make_case(seed), [3], targets, precision=precision)
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"][:200]) for r in results]
