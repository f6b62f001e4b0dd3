"""The fuzzer's session-28 motifs (tools/fuzz_s28.py): float32 softmax islands in half models, masked_fill
masks, and masks (causal, padding, sliding windows) on batch and length jointly. Each builds valid graphs that ONNX Runtime runs on every feed set
(other shapes too), the optimizer's output matches ORT on them at every target, and the plain form is fused, so
a generator whose form is never optimized would not pass for coverage; make_case draws them from a stream of
their own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import onnx
import pytest

import onnx_fuse
from tests.tool_modules import assert_same_case, check_own_stream

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import make_s28_case  # noqa: E402
from fuzz_s28 import S28, S28_SHARE  # noqa: E402

SEEDS = (0, 1, 2)


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("name", sorted(S28))
def test_s28_graphs_run_in_ort_and_the_optimized_ones_match(name):
    for seed in SEEDS:
        case = make_s28_case(seed, name)
        onnx.checker.check_model(case.model, full_check=True)
        assert case.motifs[-1] == name
        results, _, _ = fd.fuzz_case(case, [1, 3], ["ort", "onnx", "trt"])
        for r in results:
            # half-masked-rows: a float16 query row with no kept key (uniform in the original under a finite fill) has
            # no exact fused form, every other row matched (since session 29 the keep-form select of float32 scores
            # of seed 2's fp32_island fuses, as its masked_fill form did): the fuzzer's noted class, not a failure
            ok = ("ok", "half-masked-rows") if "fp16" in case.traps else ("ok",)
            assert r["cls"] in ok, (name, seed, r["level"], r["target"], r["cls"], r["detail"], case.traps)


def _first(name: str, want: set[str], half: bool | None = None):
    for seed in range(60):
        case = make_s28_case(seed, name)
        if want <= set(case.traps) and (half is None or ("fp16" in case.traps) == half):
            return case
    raise AssertionError(f"no {name} case with {want}")


@pytest.mark.parametrize("name,traps,half", [
    ("fp32_island", {"island-masked-fill", "masked-fill-not", "fill-q-lowest"}, True),
    ("fp32_island", {"island-masked-fill", "masked-fill-not", "fill-f32-lowest"}, True),
    ("fp32_island", {"island-additive", "fill-f32-lowest"}, True),
    ("fp32_island", {"island-masked-fill", "masked-fill-not", "fill--inf"}, True),
    ("masked_fill", {"masked-fill-not", "mask-causal", "fill--inf"}, None),
    ("masked_fill", {"mask-pad", "fill-q-lowest"}, None),
    ("batch_length_mask", {"joint-all-keys"}, None),
    ("batch_length_mask", {"joint-rows-all-keys"}, None),
    ("batch_length_mask", {"joint-causal-only-there"}, None),
    ("window_batch_mask", {"window-2"}, None),
    ("window_batch_mask", {"window-3", "mask-pad"}, None),
])
def test_the_form_is_fused_and_right_on_every_feed_set(name, traps, half):
    """Each form's first case with those switches: attention fused at ort-O3 (Softmax gone) and, at O3 on
    every target, equal to the original on the main and the other-shape feed sets."""
    case = _first(name, traps, half)
    ops = _ops(onnx_fuse.optimize(case.model, level=3, target="ort").to_proto())
    assert ops["Softmax"] == 0, (case.seed, case.traps, ops)
    results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
    assert all(r["cls"] in ("ok", "nan-rows") for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def test_a_fill_of_minus_1e4_keeps_the_select():
    """The near miss: Where(masked, -1e4, s) is no additive bias (a score below -1e4 would come out as -1e4
    under a select, and lower under an Add); the select must stay, and the model must still match."""
    case = _first("batch_length_mask", {"fill--1e4"})
    out = onnx_fuse.optimize(case.model, level=3, target="ort").to_proto()
    assert _ops(out)["Softmax"] == 1, (case.seed, _ops(out))
    results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def test_the_island_is_a_float32_softmax_between_half_casts():
    case = _first("fp32_island", {"island-masked-fill"}, True)
    g = case.model.graph
    (sm,) = (n for n in g.node if n.op_type == "Softmax")
    casts = {n.output[0]: n for n in g.node if n.op_type == "Cast"}
    back = next(n for n in g.node if n.op_type == "Cast" and n.input[0] == sm.output[0])
    assert onnx.helper.get_attribute_value(back.attribute[0]) == onnx.TensorProto.FLOAT16
    assert any(onnx.helper.get_attribute_value(c.attribute[0]) == onnx.TensorProto.FLOAT for c in casts.values())
    assert next(n for n in g.node if n.output[0] == sm.input[0]).op_type == "Where"


@pytest.mark.parametrize("name", ["batch_length_mask", "window_batch_mask"])
def test_batch_length_masks_are_fed_inside_and_beside_their_region(name):
    """A case with symbolic batch and length carries a feed set inside the condition's region (B >= c and
    lo <= S <= hi) and one beside it, where the mask differs."""
    seen = 0
    for seed in range(40):
        case = make_s28_case(seed, name)
        region = next(t for t in case.traps if t.startswith("region-"))
        c_b, lo, hi = map(int, re.match(r"region-B>=(\d+)-S(\d+)\.\.(\d+)", region).groups())
        (h,) = (v for k, v in case.feeds.items() if k.startswith("hidden"))
        dyn = [d.dim_param for d in case.model.graph.input[0].type.tensor_type.shape.dim[:2]]
        if not all(dyn) or not case.alt_feeds:
            continue
        seen += 1
        shapes = [next(v for k, v in f.items() if k.startswith("hidden")).shape[:2] for f in case.alt_feeds]
        inside = [c_b <= b and lo <= s <= hi for b, s in shapes]
        assert inside == [True, False], (seed, region, shapes, h.shape)
    assert seen >= 5


@pytest.mark.parametrize("seed", [6, 19, 25])
def test_batch_length_masks_catch_the_one_length_batch_probes(seed):
    """On 5c8d481's parent (the mask proofs probed the batches beside a constant at the proof's own length
    only) these cases are wrong at O3 on every target on their other-shape feed set (max abs 0.5-3.3: every
    key kept for the batches from c at lengths lo..hi was rebuilt as the causal / padding mask); since then ok."""
    case = make_s28_case(seed, "batch_length_mask")
    assert case.alt_feeds and any(t.startswith("joint-") for t in case.traps)
    results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def test_make_case_draws_s28_cases_from_a_stream_of_their_own():
    """S28_SHARE of the seeds that reach the plain motif graphs (about a third: the other families are drawn
    first) become session-28 cases; the seeds other tests pin keep their graphs (S28_SALT was chosen so)."""
    check_own_stream(S28, 0.1 * S28_SHARE * 300, S28_SHARE * 300)


def test_s28_cases_are_deterministic():
    assert_same_case(make_s28_case(7), make_s28_case(7))
