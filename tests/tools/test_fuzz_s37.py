"""The fuzzer's session-37 family (tools/fuzz_s37.py): session 36's rewrites with their traps -- a Pad before a Conv
(fold-pad-into-conv), summed Conv branches with an identity BN (merge-conv-branches), BN folds (fold-batch-norm),
x / Sqrt(moment) (div-by-root), the scores' clamp onto the mask (scores-clamp-onto-mask) and the erf GELU's groupings
(gelu-erf). Each motif and near miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches
ORT on it; the plain forms are rewritten and the near misses that must not be are not; make_case draws the family from
a stream of its own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import onnx
import pytest

import onnx_fuse
from tests.tool_modules import (assert_fuzz_ok, assert_plain_motifs_ok, assert_same_case, check_own_stream, motif_case,
                                 op_counts)

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from fuzz_motifs import make_s37_case  # noqa: E402
from fuzz_s37 import BRANCH_NEAR, CLAMP_NEAR, GELU_GROUPS, GELU_NEAR, MOTIFS, PAD_NEAR, ROOT_NEAR, S37_SHARE  # noqa: E402

_first = functools.partial(motif_case, make_s37_case)


def _ops(case, level=3, target="onnx"):
    return op_counts(case.model, level, target)


@pytest.mark.parametrize("motif", MOTIFS)
def test_every_motif_builds_a_checked_graph_that_matches_at_every_target(motif):
    case = _first(motif)
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("motif, near", [*(("pad_conv", n) for n in PAD_NEAR),
                                         *(("conv_branches", n) for n in BRANCH_NEAR),
                                         *(("div_root", n) for n in ROOT_NEAR),
                                         *(("scores_clamp", n) for n in CLAMP_NEAR),
                                         *(("gelu_erf", n) for n in GELU_NEAR)])
def test_the_near_misses_run_and_match(motif, near):
    assert_fuzz_ok(_first(motif, frozenset({f"near-{near}"})), [2, 3])


@pytest.mark.parametrize("group", GELU_GROUPS)
def test_every_gelu_grouping_is_fused(group):
    """A plain float32 erf GELU in each grouping is one Gelu at onnx O3, and matches."""
    case = _first("gelu_erf", frozenset({f"gelu-{group}"}), plain=True)
    assert _ops(case)["Erf"] == 0, case.traps
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", ["half", "erf-scale", "erf-other", "div-reversed", "broadcast"])
def test_the_gelu_near_misses_keep_their_erf(near):
    assert _ops(_first("gelu_erf", frozenset({f"near-{near}"})))["Erf"] == 1


def test_the_plain_pad_folds_into_the_conv_and_its_near_misses_do_not():
    assert _ops(_first("pad_conv", plain=True), level=2)["Pad"] == 0
    for near in ("value", "value-input", "negative", "reflect", "edge", "channel-axis", "conv-same", "pad-shared"):
        assert _ops(_first("pad_conv", frozenset({f"near-{near}"})), level=2)["Pad"] == 1, near


def test_plain_conv_branches_merge_into_one_conv_and_their_near_misses_do_not():
    case = _first("conv_branches", frozenset({"identity-bn"}), plain=True)
    ops = _ops(case, level=2)
    assert ops["Conv"] == 1 and ops["BatchNormalization"] == 0 and ops["Add"] == 0, (case.seed, ops)
    for near in ("stride", "dilation", "group", "uncentered", "even-kernel", "auto-pad", "residual", "other-input"):
        near_case = _first("conv_branches", frozenset({f"near-{near}"}))
        assert _ops(near_case, level=2)["Add"] >= 1, (near, near_case.seed)


def test_a_conv_bn_pair_folds():
    case = _first("bn_fold", frozenset({"bn-conv_bn"}), plain=True)
    assert _ops(case, level=2)["BatchNormalization"] == 0


def test_the_scores_clamp_moves_onto_the_mask_in_float32_and_not_at_another_bound():
    """The plain float32 clamp is rewritten (the Max reads the mask, not the sum); a bound that is not the lowest
    float keeps its place."""
    def max_reads_sum(case):
        m = onnx_fuse.optimize(case.model, level=3, target="ort").to_proto()
        made_by = {o: n.op_type for n in m.graph.node for o in n.output}
        return [made_by.get(i) for n in m.graph.node if n.op_type == "Max" for i in n.input]

    assert "Add" not in max_reads_sum(_first("scores_clamp", plain=True))
    assert "Add" in max_reads_sum(_first("scores_clamp", frozenset({"near-bound-1e4"})))


def test_a_float16_clamp_is_left_and_matches():
    case = _first("scores_clamp", frozenset({"fp16"}))
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_each_motif_matches_under_a_half_precision_conversion(precision):
    assert_plain_motifs_ok(make_s37_case, MOTIFS, precision)


def test_make_case_draws_s37_cases_from_a_stream_of_their_own():
    """About S37_SHARE of the seeds that reach the plain motif graphs become session-37 cases; the seeds other tests
    pin keep their graphs (S37_SALT was chosen so)."""
    check_own_stream(set(MOTIFS), 0.1 * S37_SHARE * 300, S37_SHARE * 300)


def test_s37_cases_are_deterministic():
    assert_same_case(make_s37_case(7), make_s37_case(7))
    with pytest.raises(AssertionError):
        assert_same_case(make_s37_case(7), make_s37_case(8))
