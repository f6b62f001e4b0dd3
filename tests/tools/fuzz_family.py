"""The tests every one-motif fuzz family shares (tests/tools/test_fuzz_s37.py .. test_fuzz_s40.py), written once.

A family (tools/fuzz_s37.py ..) is a ``make_sNN_case(seed, name)`` of fuzz_motifs, its MOTIFS, the share of
make_case's seeds it takes from a side stream of its own and its near misses. ``family_tests`` gives the five tests
each family's file had written out, under the names they had, for the file to take in with
``globals().update(...)``: every motif builds a checked graph that matches at every target, every near miss
runs and matches, the plain motifs match after a float16 / bfloat16 conversion, make_case draws the family from a
stream of its own (no seed another test pins moves), and a seed makes one case. Importing this module puts tools/
on sys.path, so the family's modules import after it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

from tests.tool_modules import (assert_fuzz_ok, assert_plain_motifs_ok, assert_same_case, check_own_stream, motif_case,
                                 op_counts)

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


def case_ops(case, level: int = 3, target: str = "onnx"):
    """The op types of ``case``'s model optimized at ``level`` for ``target``, counted."""
    return op_counts(case.model, level, target)


def family_tests(make, motifs, share: float, near_cases, tag: str, near_levels=(1, 2, 3, 4)) -> dict:
    """The shared tests of the family ``make`` (make_s37_case ..), by name: ``near_cases`` are its (motif, near)
    pairs, each checked at ``near_levels``; ``tag`` (s37 ..) names the stream and determinism tests."""

    @pytest.mark.parametrize("motif", motifs)
    def test_every_motif_builds_a_checked_graph_that_matches_at_every_target(motif):
        case = motif_case(make, motif)
        onnx.checker.check_model(case.model, full_check=True)
        assert_fuzz_ok(case, [1, 2, 3, 4])

    @pytest.mark.parametrize("motif, near", list(near_cases))
    def test_the_near_misses_run_and_match(motif, near):
        assert_fuzz_ok(motif_case(make, motif, frozenset({f"near-{near}"})), list(near_levels))

    @pytest.mark.parametrize("precision", ["fp16", "bf16"])
    def test_each_motif_matches_under_a_half_precision_conversion(precision):
        assert_plain_motifs_ok(make, motifs, precision)

    def own_stream():
        """About ``share`` of the seeds that reach the plain motif graphs become this family's cases; the seeds
        other tests pin keep their graphs (the family's salt was chosen so)."""
        check_own_stream(set(motifs), 0.1 * share * 300, share * 300)

    def deterministic():
        assert_same_case(make(7), make(7))
        with pytest.raises(AssertionError):
            assert_same_case(make(7), make(8))

    own_stream.__name__ = f"test_make_case_draws_{tag}_cases_from_a_stream_of_their_own"
    deterministic.__name__ = f"test_{tag}_cases_are_deterministic"
    tests = (test_every_motif_builds_a_checked_graph_that_matches_at_every_target, test_the_near_misses_run_and_match,
             test_each_motif_matches_under_a_half_precision_conversion, own_stream, deterministic)
    return {t.__name__: t for t in tests}
