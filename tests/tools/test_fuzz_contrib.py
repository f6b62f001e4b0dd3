"""tools/fuzz_contrib.py (session 18): com.microsoft GroupQueryAttention / MultiHeadAttention /
RotaryEmbedding graphs as onnxruntime-genai writes them, int8 QDQ activations at opset 21..23,
Flatten-made attention layouts; and decoder steps with constant-shifted RoPE positions
(tools/fuzz_decoder.py ``pos_shift``), which trt-O4 pages."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import fuzz_contrib  # noqa: E402
import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import make_case  # noqa: E402

NOTED = ("ok", "ort-itself", "nan-rows", "padded-rows", "half-masked-rows", "all-nan")


@pytest.mark.parametrize("name", list(fuzz_contrib.FORMS))
def test_each_form_runs_in_ort_and_optimizes_right(name):
    """Seeds 0..2 of each form: ORT runs the original, every target at O3 is right; the contrib ops
    are lowered at onnx / trt (the rules fire) and kept at ort."""
    from onnx_fuse.verify import make_session

    fired = set()
    for seed in range(3):
        case = fuzz_contrib.make_contrib_case(seed, name)
        make_session(case.model, threads=1, ort_optimizations=False).run(None, case.feeds)
        results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
        assert all(r["cls"] in NOTED for r in results), [(r["target"], r["cls"], r["detail"][:200]) for r in results]
        for r in results:
            fired |= {f"{r['target']}:{k}" for k in r["fires"]}
    want = {"gqa_contrib": "onnx:attention-gqa-contrib", "mha_contrib": "trt:attention-mha-contrib",
            "qdq_int8": "onnx:attention", "flat_layout": "onnx:attention"}[name]
    assert want in fired, sorted(fired)
    if name == "qdq_int8":   # the int8 activations, at opset 21..23, become uint8 at onnx (a pass)
        import onnx_fuse

        result = onnx_fuse.optimize(case.model, level=3, target="onnx")
        assert any(p.name == "qdq-int8-to-uint8" and p.modified for p in result.report.passes)


def test_some_seeds_are_contrib_cases_and_named_seeds_are_not():
    contrib = [s for s in range(600) if make_case(s).model.graph.name.startswith("fuzz_contrib")]
    assert 10 < len(contrib) < 60, len(contrib)
    for seed in (1448915198, 14525077, 2019, 211629190, 2500259774, 3310816760, 3678026147, 875106632, 914902902):
        assert not make_case(seed).model.graph.name.startswith("fuzz_contrib"), seed
    for base, n in ((11, 40), (12, 20), (5, 25), (23, 50)):   # the graphs of tests/tools' fuzz() runs
        for i in range(n):
            assert not make_case(fd.case_seed(base, i)).model.graph.name.startswith("fuzz_contrib"), (base, i)


def test_shifted_positions_are_paged():
    """Decoder seed 58: float16, head 64, RoPE at Range(P, P + S) + 1 (the mask on the cache's own
    positions): paged at trt-O4 and right there and at onnx-O3."""
    case = make_case(58)
    assert case.spec.get("pos_shift") == 1 and "positions-shifted" in case.traps
    results, _, _ = fd.fuzz_case(case, [3, 4], ["onnx", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["level"], r["target"], r["cls"], r["detail"][:200]) for r in results]
    o4 = [r for r in results if r["level"] == 4 and r["target"] == "trt"]
    assert o4 and all(r["fires"].get("trt-paged-kv") for r in o4)


def test_decoder_steps_a_test_fixes_are_not_shifted():
    from fuzz_motifs import make_decoder_case

    case = make_decoder_case(77, repeat="hf", fp16=True)
    assert "pos_shift" not in case.spec and "positions-shifted" not in case.traps
    shifted = [s for s in range(400) if np.random.default_rng([s, 0xDF0]).random() < 0.2
               and make_case(s).spec.get("pos_shift")]
    assert shifted, "no decoder seed below 400 draws shifted positions"
