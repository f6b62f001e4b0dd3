"""The fuzzer's rotary family (tools/fuzz_s34b.py): complex-product rotaries (step-2 Slices or the pairs view) and
rotate-half in the bhsd / bshd / sbhd layouts, over constant, computed and gathered tables, full and partial width,
with the near misses a value-reading recognizer must get right (other angles, sin negated, cos and sin swapped, one
table scaled, tables over the heads, halves not re-interleaved, GPT-J tables under rotate-half, the sign on the
other half). Each builds valid graphs that ONNX Runtime runs, the optimizer's output matches ORT on them at every
target, and the plain forms the recognizers take are fused (a generator whose forms are never optimized would not
pass for coverage); make_case draws them from a stream of their own without changing the graphs of the seeds other
tests pin."""

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

from fuzz_motifs import make_s34b_case  # noqa: E402
from fuzz_s34b import LAYOUTS, NEAR, S34B, S34B_SHARE, STYLES  # noqa: E402

#: traps that take a case off the plain path (fused or not, for reasons of their own)
OFF_PLAIN = {"fp16", "intermediate-is-output", "intermediate-multi-consumer", "initializer-is-input"}


def _first(want: frozenset, plain: bool = False, without: frozenset = frozenset()):
    """The first case with the traps ``want`` and none of ``without`` (``plain``: no near miss, float32, no
    exposed intermediate or overridable weight)."""
    for seed in range(600):
        case = make_s34b_case(seed)
        traps = set(case.traps)
        if not want <= traps or traps & without:
            continue
        if plain and (traps & OFF_PLAIN or any(t.startswith("near-") for t in traps)):
            continue
        return case
    raise AssertionError(f"no case with {set(want)}")


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_form_runs_in_ort_and_the_optimized_graphs_match(layout, style):
    case = _first(frozenset({f"rotary-{layout}", f"rotary-{style}"}))
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("tables", ["const", "computed", "gathered", "cut"])
def test_every_table_making_and_the_partial_width_run_and_match(tables):
    assert_fuzz_ok(_first(frozenset({f"tables-{tables}", "rotary-partial"})), [2, 4])


@pytest.mark.parametrize("near", NEAR)
def test_the_near_misses_run_and_match(near):
    assert_fuzz_ok(_first(frozenset({f"near-{near}"})), [3, 4])


def _rotaries(case, target: str) -> int:
    ops = collections.Counter(n.op_type for n in onnx_fuse.optimize(case.model, level=3, target=target)
                              .to_proto().graph.node)
    return sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding"))


# rotate-half over computed / gathered tables fuses in bhsd only (a coverage gap of the bshd / sbhd layouts)
FUSED = [(layout, style, None) for layout in LAYOUTS for style in ("complex", "pairs")] + \
    [(lay, "complex", "cut") for lay in LAYOUTS] + [("bhsd", "pairs", "cut")] + \
    [("bhsd", "half", "computed"), ("bhsd", "half", "gathered")] + [(lay, "half", "const") for lay in LAYOUTS]


@pytest.mark.parametrize("layout,style,tables", FUSED)
def test_the_plain_forms_are_fused(layout, style, tables):
    """Every rotated projection (q, and k on the same tables) becomes one RotaryEmbedding at every target."""
    want = {f"rotary-{layout}", f"rotary-{style}", *([f"tables-{tables}"] if tables else [])}
    case = _first(frozenset(want), plain=True)
    for target in ("ort", "onnx", "trt"):
        assert _rotaries(case, target) == len(case.model.graph.output), (case.seed, target, case.traps)


@pytest.mark.parametrize("near", ["angles-differ", "cos-scaled", "gptj-tables", "reflection", "re-negated",
                                  "im-other-cos", "half-no-neg"])
def test_a_near_miss_that_is_no_rotation_is_not_fused(near):
    """Tables of other angles, one table scaled, GPT-J tables under rotate-half, a reflection, re negated, im on
    another cos, rotate-half without its sign: no RotaryEmbedding computes these,
    so none may be written (sin negated, swapped, the sign on the other half are rotations still, by -a or
    pi/2 - a, which a rewrite may take on the tables' values; the pairs' halves side by side are rotate-half of
    x's columns regrouped, which rotary-halves takes)."""
    case = _first(frozenset({f"near-{near}"}), without=frozenset({"fp16"}))
    for target in ("ort", "onnx", "trt"):
        assert _rotaries(case, target) == 0, (case.seed, target, case.traps)


def test_make_case_draws_s34b_cases_from_a_stream_of_their_own():
    """About S34B_SHARE of the seeds that reach the plain motif graphs become rotary cases; the seeds other tests
    pin keep their graphs (S34B_SALT was chosen so)."""
    check_own_stream(S34B, 0.1 * S34B_SHARE * 300, S34B_SHARE * 300)


def test_s34b_cases_are_deterministic():
    assert_same_case(make_s34b_case(11), make_s34b_case(11))


def test_an_exposed_constant_table_is_not_made_a_graph_output():
    """make_s34b_case(33168) drew its constant cos table (an initializer) as an exposed intermediate: listed as a
    graph output of no type it failed the model's shape inference, so the case did not build. A weight is no
    intermediate; the draw is kept, so the case is the same graph without that output."""
    case = make_s34b_case(33168)
    inits = {t.name for t in case.model.graph.initializer}
    assert not inits & {o.name for o in case.model.graph.output}
    assert "tables-const" in case.traps
    onnx.checker.check_model(case.model, full_check=True)
    assert_fuzz_ok(case, [1, 3])
