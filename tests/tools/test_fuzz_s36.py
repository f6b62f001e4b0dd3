"""The fuzzer's session-36 family (tools/fuzz_s36.py): GroupNorm as the torch exporters write it (a [B, G, -1] view,
InstanceNormalization with unit scale and zero bias, a view back to x's shape, the per-channel affine), over rank-3
and rank-4 inputs, constant or Shape-built views, with its other forms and near misses (tables [1, C, 1, ...], the
instance norm's own scale or bias, the batch merged into the groups, groups on the last axis, the view back
flattened). Each builds valid graphs that ONNX Runtime runs and the optimizer's output matches ORT on them at every
target; the plain form is fused (group-norm) at onnx / trt; make_case draws them from a stream of their own without
changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import onnx
import pytest

import onnx_fuse
from tests.tool_modules import assert_fuzz_ok, assert_same_case, check_own_stream, first_case

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from fuzz_motifs import make_s36_case  # noqa: E402
from fuzz_s36 import BACKS, NEAR, S36_SHARE, VIEWS  # noqa: E402

OFF_PLAIN = {"fp16", "intermediate-is-output", "initializer-is-input", "gn-tables-lead1"}


def _first(want: frozenset, plain: bool = False):
    """The first case with the traps ``want`` (``plain``: no near miss, float32, no exposed piece or overridable
    weight, tables [C, 1, ...])."""
    return first_case(make_s36_case, want, OFF_PLAIN if plain else None)


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("groups", ["one", "some", "all"])
def test_every_rank_and_group_count_runs_in_ort_and_the_optimized_graphs_match(rank, groups):
    case = _first(frozenset({f"gn-rank{rank}", f"gn-groups-{groups}"}))
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("trap", [*(f"gn-view-{v}" for v in VIEWS), *(f"gn-back-{b}" for b in BACKS),
                                  "gn-no-affine", "gn-tables-lead1", "fp16"])
def test_every_view_and_table_form_matches(trap):
    assert_fuzz_ok(_first(frozenset({trap})), [2, 4])


@pytest.mark.parametrize("near", NEAR)
def test_the_near_misses_run_and_match(near):
    assert_fuzz_ok(_first(frozenset({f"near-{near}"})), [3, 4])


@pytest.mark.parametrize("rank", [3, 4])
def test_the_plain_group_norm_is_fused(rank):
    """A plain float32 GroupNorm of several groups: no InstanceNormalization is left at onnx O3 (a generator whose
    forms are never optimized would add runs, not coverage). With G == C on a rank-3 x the views are no-ops and go,
    leaving InstanceNormalization itself."""
    case = _first(frozenset({f"gn-rank{rank}", "gn-groups-some"}), plain=True)
    ops = collections.Counter(n.op_type for n in onnx_fuse.optimize(case.model, level=3, target="onnx")
                              .to_proto().graph.node)
    assert ops["InstanceNormalization"] == 0 and ops["GroupNormalization"] == 1, (case.seed, case.traps, ops)


def test_make_case_draws_s36_cases_from_a_stream_of_their_own():
    """About S36_SHARE of the seeds that reach the plain motif graphs become session-36 cases; the seeds other tests
    pin keep their graphs (S36_SALT was chosen so)."""
    check_own_stream({"group_norm"}, 0.1 * S36_SHARE * 300, S36_SHARE * 300)


def test_s36_cases_are_deterministic():
    assert_same_case(make_s36_case(7), make_s36_case(7))
    with pytest.raises(AssertionError):
        assert_same_case(make_s36_case(7), make_s36_case(8))
