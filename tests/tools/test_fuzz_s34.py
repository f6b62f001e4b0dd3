"""The fuzzer's session-34 family (tools/fuzz_s34.py): a fused q / k / v projection picked apart by slices, chunks
and head views (Phi-3, GPT-NeoX, BLOOM / Falcon, Falcon's grouped layout, ModernBERT), with the near misses a
column-pick rewrite must get right (reversed or interleaved columns, a column read twice or never). Each builds valid
graphs that ONNX Runtime runs, the optimizer's output matches ORT on them at every target, and the attention of each
form is fused (a generator whose form is never optimized would not pass for coverage); make_case draws them from a
stream of their own without changing the graphs of the seeds other tests pin."""

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

from fuzz_motifs import make_s34_case  # noqa: E402
from fuzz_s34 import FORMS, S34, S34_SHARE  # noqa: E402

NEAR = ("near-v-reversed", "near-k-early", "near-qk-interleaved", "near-unread-columns")


def _first(form: str, want: frozenset = frozenset(), plain: bool = False):
    """The first case of ``form`` with the traps ``want`` (``plain``: no near miss, float32, no graph output
    beside the motif's)."""
    for seed in range(200):
        case = make_s34_case(seed)
        traps = set(case.traps)
        if f"picks-{form}" not in traps or not want <= traps:
            continue
        if plain and (traps & {*NEAR, "fp16", "projection-is-output", "intermediate-is-output"}
                      or len(case.model.graph.output) != 1):
            continue
        return case
    raise AssertionError(f"no {form} case with {set(want)}")


@pytest.mark.parametrize("form", FORMS)
def test_every_form_runs_in_ort_and_the_optimized_graphs_match(form):
    case = _first(form)
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("near", NEAR)
def test_the_near_misses_run_and_match(near):
    case = _first("slices", frozenset({near}))
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("form", FORMS)
def test_the_plain_form_is_fused(form):
    case = _first(form, plain=True)
    for target in ("ort", "onnx", "trt"):
        ops = collections.Counter(n.op_type for n in onnx_fuse.optimize(case.model, level=3, target=target)
                                  .to_proto().graph.node)
        assert ops["Softmax"] == 0, (case.seed, target, case.traps, ops)


def test_a_near_miss_keeps_its_picks():
    """k picked one head early reads q's last head twice and leaves v's first head unread: no Split of the
    projection into pieces can write that, so the picks stay (the attention is still fused on them)."""
    case = _first("slices", frozenset({"near-k-early"}))
    ops = collections.Counter(n.op_type for n in onnx_fuse.optimize(case.model, level=3, target="ort")
                              .to_proto().graph.node)
    assert ops["Slice"] >= 2, ops


def test_make_case_draws_s34_cases_from_a_stream_of_their_own():
    """About S34_SHARE of the seeds that reach the plain motif graphs (about a third: the other families are drawn
    first) become session-34 cases; the seeds other tests pin keep their graphs (S34_SALT was chosen so)."""
    check_own_stream(S34, 0.1 * S34_SHARE * 300, S34_SHARE * 300)


def test_s34_cases_are_deterministic():
    assert_same_case(make_s34_case(7), make_s34_case(7))
