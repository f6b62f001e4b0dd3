"""The fuzzer's exporter-idiom motifs (tools/fuzz_idioms.py, the fourth hold-out sweep's root
causes): each builds valid graphs that ONNX Runtime runs, the optimizer's output matches ORT on
them at every target, and the rules the idiom is there for fire (a generator whose rule never
fires would not notice that rule regressing); make_case draws them without changing the graphs
of the seeds other tests pin."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
from fuzz_idioms import IDIOM_RULES, IDIOM_SHARE, IDIOMS  # noqa: E402
from fuzz_motifs import make_case, make_idiom_case  # noqa: E402
from tests.tool_modules import assert_same_case  # noqa: E402

SEEDS = (0, 1, 2)


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom_graphs_run_in_ort_and_the_optimized_ones_match(name):
    fired = dict.fromkeys(IDIOM_RULES[name], 0)
    for seed in SEEDS:
        case = make_idiom_case(seed, name)
        onnx.checker.check_model(case.model, full_check=True)
        assert case.motifs[-1] == name
        results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
        for r in results:
            assert r["cls"] == "ok", (name, seed, r["target"], r["cls"], r["detail"], case.traps)
            for rule in fired:
                fired[rule] += r["fires"].get(rule, 0)
    assert all(fired.values()), (name, fired)


def test_shared_mask_idiom_loses_its_expand():
    """shared_mask has no rule of its own: the layers' selects read the mask itself (identity-elimination),
    so no Shape of layer 0's scores (the Expand's size) is left and both layers fuse; an Expand
    sized by other dims ([B, H, S, 1], the near-miss trap) is [B, H, S, S] anyway and goes too. Outputs match
    ORT in the test above."""
    import onnx_fuse

    for seed in (0, 1, 2, 4, 17, 21, 36):   # 17, 36: expand-to-other-dims; 21: float16; 4: an exposed output
        case = make_idiom_case(seed, "shared_mask")
        for target in ("ort", "onnx", "trt"):
            out = onnx_fuse.optimize(case.model, level=3, target=target).to_proto()
            inputs = {i.name for i in case.model.graph.input}
            sized_by = {n.input[0] for n in case.model.graph.node if n.op_type == "Shape"} - inputs  # the scores
            reads = {n.input[0] for n in out.graph.node if n.op_type == "Shape"}
            assert sized_by and not reads & sized_by, (seed, target, case.traps, reads)
            if "intermediate-is-output" not in case.traps:   # an exposed intermediate keeps its layer
                assert not any(n.op_type == "Softmax" for n in out.graph.node), (seed, target, case.traps)


def test_make_case_draws_idioms_from_a_stream_of_their_own():
    """About IDIOM_SHARE of the motif-graph seeds become idiom cases; the seeds other tests pin
    (tests/tools/test_fuzz_differential.py) keep their graphs."""
    names = [make_case(seed).motifs for seed in range(200)]
    idiom = sum(any(m in IDIOMS for m in ms) for ms in names)
    decoder = sum(ms == ["decoder_kv"] for ms in names)
    assert 0.5 * IDIOM_SHARE < idiom / (200 - decoder) < 2 * IDIOM_SHARE, (idiom, decoder)
    for seed in (14525077, 2078360400, 2710596152, 875106632, 211629190, 3, 4):
        assert not set(make_case(seed).motifs) & set(IDIOMS), seed


def test_idiom_cases_are_deterministic():
    assert_same_case(make_idiom_case(5), make_idiom_case(5))
