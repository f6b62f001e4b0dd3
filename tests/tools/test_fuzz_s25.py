"""The fuzzer's session-25 motifs (tools/fuzz_s25.py): each builds valid graphs that ONNX Runtime runs, the
optimizer's output matches ORT on them at every target, and the plain form is taken (the vmap glue of a key
mask from lengths and of causal + padding over a past dies, covering ScatterND writes become a Concat), so a
generator whose idiom is never optimized would not pass for coverage; make_case draws them from a stream of
their own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_fuse
from tests.tool_modules import assert_same_case, check_own_stream

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import make_s25_case  # noqa: E402
from fuzz_s25 import S25, S25_SHARE  # noqa: E402

SEEDS = (0, 1, 2)


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("name", sorted(S25))
def test_s25_graphs_run_in_ort_and_the_optimized_ones_match(name):
    for seed in SEEDS:
        case = make_s25_case(seed, name)
        onnx.checker.check_model(case.model, full_check=True)
        assert case.motifs[-1] == name
        results, _, _ = fd.fuzz_case(case, [1, 3], ["ort", "onnx", "trt"])
        for r in results:
            assert r["cls"] == "ok", (name, seed, r["level"], r["target"], r["cls"], r["detail"], case.traps)


NEAR_MISSES = ("query-row-mask", "sliding-window-3", "writes-not-covering", "writes-mid-output")


def _plain(name: str, want: str, opset: int = 17):
    """The first seed whose case of ``name`` has trap ``want``, no near miss and an opset from ``opset``."""
    for seed in range(80):
        case = make_s25_case(seed, name)
        if want in case.traps and not set(NEAR_MISSES) & set(case.traps) and "fp16" not in case.traps \
                and case.model.opset_import[0].version >= opset:
            return case
    raise AssertionError(f"no plain {name} case with {want}")


@pytest.mark.parametrize("name,trap,target,gone", [
    ("lengths_key_mask", "vmap-gathernd-mask", "ort", "GatherND"),
    ("lengths_key_mask", "vmap-gathernd-mask", "onnx", "GatherND"),
    ("causal_pad_past", "vmap-gathernd-mask", "onnx", "GatherND"),
    ("causal_pad_past", "vmap-gathernd-mask", "ort", "GatherND"),
    ("covering_writes", "writes-back-and-forth", "ort", "ScatterND"),
])
def test_the_plain_form_is_optimized(name, trap, target, gone):
    # (onnx: Attention-23 with its cache, opset 23)
    case = _plain(name, trap, 23 if target == "onnx" else 17)
    ops = _ops(onnx_fuse.optimize(case.model, level=3, target=target).to_proto())
    assert ops[gone] == 0 and ops["Softmax"] == 0, (case.seed, case.traps, ops)


def test_make_case_draws_s25_cases_from_a_stream_of_their_own():
    """About S25_SHARE of the seeds that reach the plain motif graphs become session-25 cases; the seeds
    other tests pin keep their graphs (S25_SALT was chosen so)."""
    check_own_stream(S25, 0.2 * S25_SHARE * 300, 2 * S25_SHARE * 300)


def test_s25_cases_are_deterministic():
    assert_same_case(make_s25_case(7), make_s25_case(7))


def test_a_float16_row_of_length_0_is_half_masked_rows():
    """A float16 graph whose key mask comes from lengths with a row of length 0 (seed 16): that batch row has
    no kept key, the original's float16 Add absorbs its scores into the fill (uniform weights) and the fused
    attention adds in float32, as for a fully padded 0/1 mask row: half-masked-rows (noted), not wrong; the
    other rows must still match (was: wrong at onnx / trt O3 / O4)."""
    case = make_s25_case(16, "lengths_key_mask")
    assert {"fp16", "length-0-row"} <= set(case.traps)
    results, _, _ = fd.fuzz_case(case, [3], ["onnx"])
    assert [r["cls"] for r in results] == ["half-masked-rows"], [(r["cls"], r["detail"]) for r in results]
    broken = {k: (v + (v == 0)) for k, v in case.feeds.items()}   # no row of length 0: nothing to excuse
    assert not fd._empty_lengths(broken) and fd._empty_lengths(case.feeds)


def test_keyless_rows_after_a_cache_line_up_with_the_masks_last_keys():
    """--precision fp16, causal + padding over a past with batch row 0 fully padded (seed 36, attention_mask
    [[0, 0, 0], [0, 1, 1]], P 2, S 1): the mask is [B, P + S] and the output [B, S, d], query i being key
    P + i; the keyless rows are read from the mask's last S keys (before, no mask lined up with the output,
    which had to agree whole: wrong at O1 / O3 on every target). Kept rows still have to match."""
    case = make_s25_case(36, "causal_pad_past")
    (am,) = (v for k, v in case.feeds.items() if "mask" in k)
    assert not am[0].any() and am.shape[1] > 1
    results, _, _ = fd.fuzz_case(case, [1], ["ort"], precision="fp16")
    assert [r["cls"] for r in results] == ["half-masked-rows"], [(r["cls"], r["detail"]) for r in results]
    keep = fd._row_keep((2, 1, 16), [np.cumsum(am, axis=1) > 0], tail=True)
    assert keep is not None and not keep[0].any() and keep[1].all()
    assert fd._row_keep((2, 1, 16), [np.cumsum(am, axis=1) > 0]) is None


def test_unmask_unattended_near_miss_keeps_the_export_mask():
    """causal_pad_past's near miss (seed 51, opset 23, batch row 0 fully padded): transformers 4's
    _unmask_unattended lets a row with no kept key attend every key; no key padding, so it must not be rebuilt
    from attention_mask (was: wrong by 1.0 at O3 on every target before ff6839a's fully padded probe row)."""
    case = make_s25_case(51, "causal_pad_past")
    assert {"unmask-unattended", "mask-fully-masked-row"} <= set(case.traps)
    results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def test_unmask_unattended_near_miss_below_opset_18():
    """The near miss's ReduceMax takes its axes as an attribute below opset 18 (seed 278, opset 17: the axes
    input made an invalid graph, 'ReduceMax:13 has input size 2', class invalid-graph at every run)."""
    case = make_s25_case(278, "causal_pad_past")
    assert "unmask-unattended" in case.traps and case.model.opset_import[0].version < 18
    onnx.checker.check_model(case.model, full_check=True)
    results, _, _ = fd.fuzz_case(case, [1, 3], ["ort", "onnx", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]
