"""The fuzzer's session-44 family (tools/fuzz_s44.py): session 42's rewrites with near misses drawn on purpose -- an
Expand read only by broadcasting elementwise ops whose other input has the Expand's whole output dims (identity
elimination drops it; float / bool / int64 / float16, rank growth; near misses: also read by a MatMul, a Reshape, a
Concat or a graph output, read twice by one op, a reader whose other input is smaller, the other input declared with
unknown dims or another dim_param, or itself smaller), a key mask expanded to the scores (Where / additive, shared by
two layers; read by a Cast to an output or a Not), Squeeze / Unsqueeze / Reduce axes as attributes (opset 11),
initializers and Constant nodes (a Squeeze with no axes over a batch that is 1 at run time, axes fed), and a rotary
table's first half taken below a row cut (half-slice-below-row-slice; unequal halves, a cut naming the last axis, a
step of 2, the second half read). Each motif and near miss builds a valid graph that ONNX Runtime runs and the
optimizer's output matches ORT on it; the plain forms are rewritten and the near misses that must not be are not."""

from __future__ import annotations

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s44_case  # noqa: E402
from fuzz_s44 import AXES_NEAR, EXPAND_NEAR, HALF_NEAR, MASK_NEAR, MOTIFS, S44_SHARE  # noqa: E402

globals().update(family_tests(make_s44_case, MOTIFS, S44_SHARE,
                              [*(("expand_reader", n) for n in EXPAND_NEAR), *(("expand_mask", n) for n in MASK_NEAR),
                               *(("axes_forms", n) for n in AXES_NEAR), *(("half_row", n) for n in HALF_NEAR)],
                              "s44"))


def _plain(motif, want, off=frozenset()):
    return first_case(lambda seed: make_s44_case(seed, motif), frozenset(want), PLAIN_OFF | off, 600)


def _near(motif, near, want=frozenset()):
    return first_case(lambda seed: make_s44_case(seed, motif), frozenset({f"near-{near}"}) | frozenset(want), None,
                      600)


@pytest.mark.parametrize("kind", ["float", "bool", "int64"])
def test_an_expand_read_only_by_broadcasting_ops_of_its_whole_dims_goes(kind):
    """Expand(a, Shape(co)) read by broadcasting elementwise ops whose other input is co (the Expand's whole
    output dims, the same names): no Expand at O2; the outputs match at every level."""
    case = _plain("expand_reader", {f"er-{kind}", "er-target-shape-of"})
    assert case_ops(case, level=2)["Expand"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["also-matmul", "also-reshape", "also-concat", "is-output", "read-twice",
                                  "mixed-readers", "co-unknown", "co-other-name", "co-smaller"])
def test_an_expand_some_reader_needs_stays(near):
    """Another reader than a broadcasting op of a full co-input (a MatMul, a Reshape, a Concat, a graph output,
    the op reading it twice, a co-input smaller than the output), or a co-input whose full dims are known only at
    run time (unknown dims, another dim_param): the Expand stays; the outputs match."""
    case = _near("expand_reader", near, {"er-target-shape-of"})
    assert case_ops(case, level=2)["Expand"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


def test_a_key_mask_expanded_to_the_scores_goes_before_the_where():
    """A key mask [B, 1, 1, T] expanded to Shape(scores) and read by Where(m, scores, min): the Expand goes at O2
    (the Where reads the mask); the outputs match at every level."""
    case = _plain("expand_mask", {"em-where", "em-target-shape"})
    assert case_ops(case, level=2)["Expand"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("form", ["attr", "init", "tensor", "value_ints"])
def test_axes_in_every_constant_form_match(form):
    """Squeeze / Unsqueeze / Reduce axes as an attribute (opset 11), an initializer, a Constant of a tensor or of
    value_ints: the Unsqueeze / Squeeze pair around an elementwise op and the last Squeeze of a size-1 axis match."""
    case = _plain("axes_forms", {f"ax-{form}"})
    assert_fuzz_ok(case, [1, 2, 3, 4])


def test_a_squeeze_without_axes_over_a_batch_of_one_matches():
    """Squeeze() of a tensor whose symbolic batch is 1 at run time takes the batch too: the optimizer must not
    read the symbolic dim as kept."""
    case = _near("axes_forms", "squeeze-all")
    assert_fuzz_ok(case, [1, 2, 3, 4])


def test_the_first_half_of_a_computed_table_moves_below_its_row_cut():
    """Cos / Sin(Concat(f, f)) of fed positions, rows cut, then the first half: half-slice-below-row-slice and
    half-of-doubled-table leave one Concat (x's halves joined) at O2; the outputs match."""
    case = _plain("half_row", {"hr-positions-fed"})
    assert case_ops(case, level=2)["Concat"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["unequal-halves", "row-step", "second-half"])
def test_a_half_below_a_row_cut_the_rules_must_not_move_stays(near):
    """Unequal halves, a row step of 2, a reader of the second half: the doubled table stays (two Concats); the
    outputs match."""
    case = _near("half_row", near, {"hr-positions-fed"})
    assert case_ops(case, level=2)["Concat"] == 2, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])
