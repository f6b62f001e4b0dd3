"""The fuzzer's session-38 family (tools/fuzz_s38.py): session 37's rewrites with their traps -- a zero Pad of a
value >= 0 before a MaxPool (fold-pad-into-conv), the tanh GELU in its spellings (gelu-tanh), a Cast between two views
(cast-between-views) and a Slice to the axis's own symbolic dim (identity-elimination). Each motif and near miss builds
a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the plain forms are rewritten and
the near misses that must not be are not; make_case draws the family from a stream of its own without changing the
graphs of the seeds other tests pin."""

from __future__ import annotations

import functools

import pytest

from tests.tool_modules import assert_fuzz_ok, motif_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s38_case  # noqa: E402
from fuzz_s38 import (CUBICS, MOTIFS, POOL_ACTS, POOL_NEAR, S38_SHARE, SLICE_NEAR, TANH_GROUPS,  # noqa: E402
                      TANH_NEAR, VIEW_FORMS, VIEW_NEAR)

_first = functools.partial(motif_case, make_s38_case)
_ops = case_ops

globals().update(family_tests(make_s38_case, MOTIFS, S38_SHARE,
                              [*(("pad_maxpool", n) for n in POOL_NEAR), *(("gelu_tanh", n) for n in TANH_NEAR),
                               *(("cast_views", n) for n in VIEW_NEAR), *(("slice_dim", n) for n in SLICE_NEAR)],
                              "s38"))


@pytest.mark.parametrize("act", POOL_ACTS)
def test_a_zero_pad_of_a_nonnegative_value_folds_into_the_maxpool(act):
    case = _first("pad_maxpool", frozenset({f"pool-{act}"}), plain=True)
    assert _ops(case, level=2)["Pad"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


@pytest.mark.parametrize("near", ["negative", "tanh", "clip-negative", "pad-ge-kernel", "dilation", "value",
                                  "pad-shared"])
def test_the_maxpool_near_misses_keep_their_pad(near):
    case = _first("pad_maxpool", frozenset({f"near-{near}"}))
    assert _ops(case, level=2)["Pad"] == 1, (case.seed, case.traps)


@pytest.mark.parametrize("trap", [*(f"cubic-{c}" for c in CUBICS), *(f"tanh-{g}" for g in TANH_GROUPS)])
def test_every_tanh_gelu_spelling_is_fused(trap):
    """A plain float32 tanh GELU with each spelling of the cubic and each grouping of the product has no Tanh left at
    onnx O3, and matches."""
    case = _first("gelu_tanh", frozenset({trap}), plain=True)
    assert _ops(case)["Tanh"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", TANH_NEAR)
def test_the_tanh_gelu_near_misses_keep_their_tanh(near):
    case = _first("gelu_tanh", frozenset({f"near-{near}"}))
    assert _ops(case)["Tanh"] == 1, (case.seed, case.traps)


@pytest.mark.parametrize("form", VIEW_FORMS)
def test_a_cast_between_views_leaves_one_reshape(form):
    case = _first("cast_views", frozenset({f"view-{form}"}), plain=True)
    assert _ops(case)["Reshape"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", ["view-shared", "cast-shared"])
def test_a_cast_or_view_read_elsewhere_keeps_both_reshapes(near):
    case = _first("cast_views", frozenset({f"near-{near}"}))
    assert _ops(case)["Reshape"] == 2, (case.seed, case.traps)


@pytest.mark.parametrize("read", ["shape-range", "gather", "slice"])
def test_a_slice_to_the_axis_own_dim_is_dropped(read):
    case = _first("slice_dim", frozenset({f"end-{read}"}), plain=True)
    assert _ops(case)["Slice"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", SLICE_NEAR)
def test_the_slice_near_misses_keep_their_slice(near):
    case = _first("slice_dim", frozenset({f"near-{near}"}))
    assert _ops(case)["Slice"] == 1, (case.seed, case.traps)
