"""The fuzzer's session-35 family (tools/fuzz_s35.py): gated MLPs (SwiGLU / GeGLU) with gate and up sliced or
chunked from one projection (Phi-3 / GLM, torch.chunk, even / odd columns) or from two (Llama), with the near
misses a rewrite must get right by value (overlapping or reversed columns, the activation on up, none). Each builds
valid graphs that ONNX Runtime runs and the optimizer's output matches ORT on them at every target; make_case draws
them from a stream of their own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import onnx
import pytest

import onnx_fuse
from tests.tool_modules import assert_fuzz_ok, assert_same_case, check_own_stream

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from fuzz_motifs import make_s35_case  # noqa: E402
from fuzz_s35 import ACTS, FORMS, S35, S35_SHARE  # noqa: E402

NEAR = ("near-overlap", "near-up-reversed", "near-act-on-up", "near-no-act")


def _first(want: frozenset, plain: bool = False):
    """The first case with the traps ``want`` (``plain``: no near miss, float32, one graph output)."""
    for seed in range(300):
        case = make_s35_case(seed)
        traps = set(case.traps)
        if not want <= traps:
            continue
        if plain and (traps & {*NEAR, "fp16", "intermediate-is-output", "intermediate-multi-consumer"}
                      or len(case.model.graph.output) != 1):
            continue
        return case
    raise AssertionError(f"no case with {set(want)}")


@pytest.mark.parametrize("form", FORMS)
def test_every_form_runs_in_ort_and_the_optimized_graphs_match(form):
    case = _first(frozenset({f"gated-{form}"}))
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("act", ACTS)
def test_every_activation_matches(act):
    assert_fuzz_ok(_first(frozenset({f"act-{act}"})), [3, 4])


@pytest.mark.parametrize("near", NEAR)
def test_the_near_misses_run_and_match(near):
    assert_fuzz_ok(_first(frozenset({near})), [3, 4])


def test_a_float32_island_in_a_half_model_matches():
    assert_fuzz_ok(_first(frozenset({"float32-island"})), [1, 3])


@pytest.mark.parametrize("act, op", [("gelu_erf", "Erf"), ("gelu_tanh", "Tanh")])
def test_the_gate_gelu_is_fused(act, op):
    """A plain float32 GeGLU: the GELU on the gate piece fuses at ORT O3 (a generator whose activation is never
    optimized would add runs, not coverage)."""
    case = _first(frozenset({f"act-{act}"}), plain=True)
    ops = collections.Counter(n.op_type for n in onnx_fuse.optimize(case.model, level=3, target="ort")
                              .to_proto().graph.node)
    assert ops[op] == 0, (case.seed, case.traps, ops)


def test_make_case_draws_s35_cases_from_a_stream_of_their_own():
    """About S35_SHARE of the seeds that reach the plain motif graphs become session-35 cases; the seeds other tests
    pin keep their graphs (S35_SALT was chosen so)."""
    check_own_stream(S35, 0.1 * S35_SHARE * 300, S35_SHARE * 300)


def test_s35_cases_are_deterministic():
    assert_same_case(make_s35_case(7), make_s35_case(7))
    with pytest.raises(AssertionError):
        assert_same_case(make_s35_case(7), make_s35_case(8))
