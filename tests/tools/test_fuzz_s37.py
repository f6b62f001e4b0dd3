"""The fuzzer's session-37 family (tools/fuzz_s37.py): session 36's rewrites with their traps -- a Pad before a Conv
(fold-pad-into-conv), summed Conv branches with an identity BN (merge-conv-branches), BN folds (fold-batch-norm),
x / Sqrt(moment) (div-by-root), the scores' clamp onto the mask (scores-clamp-onto-mask) and the erf GELU's groupings
(gelu-erf). Each motif and near miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches
ORT on it; the plain forms are rewritten and the near misses that must not be are not; make_case draws the family from
a stream of its own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import functools

import pytest

import onnx_fuse
from tests.tool_modules import assert_fuzz_ok, motif_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s37_case  # noqa: E402
from fuzz_s37 import BRANCH_NEAR, CLAMP_NEAR, GELU_GROUPS, GELU_NEAR, MOTIFS, PAD_NEAR, ROOT_NEAR, S37_SHARE  # noqa: E402

_first = functools.partial(motif_case, make_s37_case)
_ops = case_ops

globals().update(family_tests(make_s37_case, MOTIFS, S37_SHARE,
                              [*(("pad_conv", n) for n in PAD_NEAR), *(("conv_branches", n) for n in BRANCH_NEAR),
                               *(("div_root", n) for n in ROOT_NEAR), *(("scores_clamp", n) for n in CLAMP_NEAR),
                               *(("gelu_erf", n) for n in GELU_NEAR)], "s37", near_levels=(2, 3)))


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
