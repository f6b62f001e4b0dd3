"""The fuzzer's session-40 family (tools/fuzz_s40.py): session 38's rewrites with near misses drawn on purpose -- a
keep-mask of positions that value_range decides (attention-zero-mask) or must not (a Range from -1, > 0, a negative
or run-time step, a run-time start, one key dropped, int32 / uint8 ops that wrap), Cast chains around cast-of-select
(float16 edges, NaN, int32 / bool / bfloat16), SplitToSequence with its readers (sequence-ops: SequenceLength /
SequenceInsert readers, run-time sizes or index, keepdims 0 with a scalar chunk) and rotary tables cut at run time.
Each motif and near miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the
plain forms are rewritten and the near misses that must not be are not; make_case draws the family from a stream of
its own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import functools

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case, motif_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s40_case  # noqa: E402
from fuzz_s40 import (CAST_NEAR, CUT_NEAR, DROPS, MOTIFS, S40_SHARE, SPLIT_NEAR, ZERO_FORMS,  # noqa: E402
                      ZERO_NEAR)

_first = functools.partial(motif_case, make_s40_case)

globals().update(family_tests(make_s40_case, MOTIFS, S40_SHARE,
                              [*(("zero_mask", n) for n in ZERO_NEAR), *(("cast_chain", n) for n in CAST_NEAR),
                               *(("split_seq", n) for n in SPLIT_NEAR), *(("rope_cut", n) for n in CUT_NEAR)],
                              "s40"))


def _plain(motif, want):
    """The first plain case of ``motif`` with the traps ``want`` (no near miss, none of PLAIN_OFF, nor ``mask-select``:
    a boolean select of the scores whose fill is -1e4 is no mask, and the attention rule rightly leaves it; nor
    ``chunk-squeezed``, a SplitToSequence the pass leaves, nor ``piece-is-output``, a SequenceAt whose output is the
    graph's, which sequence-ops leaves to keep the output's name)."""
    return first_case(lambda seed: make_s40_case(seed, motif), frozenset(want),
                      PLAIN_OFF | {"mask-select", "chunk-squeezed", "piece-is-output"}, 600)


@pytest.mark.parametrize("form", ZERO_FORMS)
def test_a_keep_mask_value_range_decides_leaves_the_attention(form):
    """Range(0, S) >= 0 in each spelling (> -1, Not(< 0), And, Or with a bool input, a Where of the decided
    condition, a Range from 2 compared with >= 1): attention-zero-mask drops the mask, its Range dies."""
    case = _plain("zero_mask", {f"zero-{form}"})
    ops = case_ops(case)
    assert ops["Range"] == 0 and _attention_masks(case) == [False], (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", DROPS)
def test_a_keep_mask_that_may_drop_a_key_stays(near):
    """A Range from -1, > 0, a negative step, a start fed at run time, one key dropped by an Equal, an int32 Range
    plus / times a constant that wraps, a uint8 0 - 1 (255): the Attention keeps a mask and the output matches. The
    wrapping ones were decided true and dropped before value_range knew integer dtypes' ends."""
    case = _first("zero_mask", frozenset({f"near-{near}"}))
    assert _attention_masks(case) == [True], (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


def _attention_masks(case):
    """Whether each Attention of ``case`` optimized at onnx O3 reads a mask."""
    import onnx_fuse

    graph = onnx_fuse.optimize(case.model, level=3, target="onnx").to_proto().graph
    return [len(n.input) > 3 and n.input[3] != "" for n in graph.node if n.op_type == "Attention"]


def _casts_of_where(case):
    import onnx_fuse

    graph = onnx_fuse.optimize(case.model, level=3, target="onnx").to_proto().graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    return sum(node.op_type == "Cast" and made_by.get(node.input[0]) == "Where" for node in graph.node)


@pytest.mark.parametrize("chain", ["f32-f16", "f16-f32", "f32-f16-f32", "f16-f32-f16"])
def test_a_cast_chain_of_a_select_of_constants_folds_link_by_link(chain):
    """Cast(Cast(Where(c, a, b))) between float16 and float32: each Cast is taken into the constants in turn (the
    float32 -> float16 -> float32 round trip keeps float16's rounding: 65520 is inf, 1e-8 is 0), none is left."""
    case = _plain("cast_chain", {f"chain-{chain}"})
    assert _casts_of_where(case) == 0 and case_ops(case)["Cast"] == 0, (case.seed, case.traps, case_ops(case))
    assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("near", ["to-int32", "from-int32", "to-bool", "bf16", "where-shared", "fill-input"])
def test_a_cast_the_fold_must_not_take_stays(near):
    """To int32 / bool / bfloat16, from int32 (no NumPy twin of ORT's kernel, or none in _CASTS), a Where read
    elsewhere, a fill fed at run time: the Cast of the Where stays."""
    case = _first("cast_chain", frozenset({f"near-{near}"}))
    assert _casts_of_where(case) >= 1, (case.seed, case.traps)


def test_plain_split_to_sequence_becomes_a_split():
    for reader in ("at", "concat", "map"):
        case = _plain("split_seq", {f"reader-{reader}"})
        ops = case_ops(case)
        assert ops["SplitToSequence"] == 0 and not any("Sequence" in op for op in ops), (case.seed, case.traps, ops)
        assert_fuzz_ok(case, [1, 3])


@pytest.mark.parametrize("trap", ["near-length-reader", "near-insert-reader", "near-sizes-input", "near-chunk-symbolic",
                                  "near-no-split", "chunk-squeezed"])
def test_a_split_to_sequence_the_pass_must_not_take_stays(trap):
    """A SequenceLength / SequenceInsert reader, sizes fed at run time, a chunk over a symbolic axis, no split, a
    scalar chunk with keepdims 0 (ORT squeezes the axis): SplitToSequence stays, and the outputs match (keepdims 0
    changed the pieces' rank before the pass left it: seeds 4 and 13 were a signature change)."""
    case = _first("split_seq", frozenset({trap}))
    assert case_ops(case, level=1)["SplitToSequence"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 3])
