"""The fuzzer's session-45 family (tools/fuzz_s45.py): session 43's rewrites with near misses drawn on purpose --
one-head attention written 4-D by Unsqueezes (K^T a Transpose of the Unsqueeze or an Unsqueeze of the Transpose; near
misses: q and k unsqueezed at different axes, the new axis among the last two, k / v of rank 2 broadcast over the
batch, k's Unsqueeze or K^T read elsewhere), a scalar Gather(Shape(x), j) beside a [1] read of the same dim (near
misses: a Slice of another range, of another input, the Gather an output, the whole Shape read otherwise), interleaved
rotary tables behind Casts to float16 / bfloat16 / float32 (near misses: a Cast or the Unsqueeze read elsewhere, halves
instead of pairs, cos and sin cast differently) and rotary caches gathered by an index of rank 0 / 1 / 2 (near misses:
two indices, the rows or the index read elsewhere, overridable tables, the table's last row), and 4-D key masks given
as graph inputs ([B, 1, 1, T] bool either polarity or additive; near misses: per query, per head, [B, 1, 1, 1], dim 2
symbolic, a row with every key masked, the mask read elsewhere). Each motif and near miss
builds a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the plain forms the rewrites
take are taken, and the near misses that must not be are not."""

from __future__ import annotations

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s45_case  # noqa: E402
from fuzz_s45 import CAST_NEAR, HEAD_NEAR, MASK4_NEAR, MOTIFS, ROWS_NEAR, S45_SHARE, TWIN_NEAR  # noqa: E402

globals().update(family_tests(make_s45_case, MOTIFS, S45_SHARE,
                              [*(("head_unsq", n) for n in HEAD_NEAR), *(("scalar_twins", n) for n in TWIN_NEAR),
                               *(("cast_tables", n) for n in CAST_NEAR), *(("gathered_rows", n) for n in ROWS_NEAR),
                               *(("mask4d", n) for n in MASK4_NEAR)],
                              "s45"))


def _plain(motif, want, off=frozenset()):
    return first_case(lambda seed: make_s45_case(seed, motif), frozenset(want), PLAIN_OFF | off, 600)


def _near(motif, near, want=frozenset()):
    return first_case(lambda seed: make_s45_case(seed, motif), frozenset({f"near-{near}"}) | frozenset(want), None,
                      600)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_one_head_attention_of_unsqueezed_projections_fuses(target, level):
    """q / k / v [B, S, D] unsqueezed at the heads axis, K^T = Transpose(Unsqueeze(k), [0, 1, 3, 2]) (750f94b): no
    Softmax left at any target; the outputs match at every level."""
    case = _plain("head_unsq", {"hu-transpose-of-unsq"}, frozenset({"hu-cross"}))
    assert case_ops(case, level, target)["Softmax"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["axes-differ", "last-two", "kv-rank2"])
def test_unsqueezes_that_are_no_heads_axis_keep_the_softmax(near):
    """q and k unsqueezed at different axes (the scores broadcast to [B, B, S, T]), the new axis among the last two
    (a per-position product), k / v [T, D] shared by the batch: no attention is read into them (the Softmax stays)
    and the outputs match."""
    case = _near("head_unsq", near)
    assert case_ops(case, 3, "ort")["Softmax"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


def test_a_scalar_read_beside_its_twin_leaves_no_whole_shape():
    """Gather(Shape(x), j) (a Range's end) beside Shape(x, j, j + 1) in a Reshape target, dims symbolic: the
    scalar-twins stage reads the scalar off the twin, one Shape is left at O2; the outputs match at every level."""
    case = first_case(lambda seed: make_s45_case(seed, "scalar_twins"), frozenset({"st-twin-shape-attr"}),
                      PLAIN_OFF | {"st-intermediate"}, 600)
    counts = case_ops(case, level=2)
    assert counts["Shape"] <= 1 and counts["Gather"] == 0, (case.seed, case.traps, counts)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["other-range", "other-input", "gather-output", "whole-read", "other-dim"])
def test_a_scalar_read_without_a_twin_matches(near):
    """A Slice of another range, a [1] read of another input, the Gather a graph output, the whole Shape read
    otherwise, the [1] read of another dim: the outputs match at every level."""
    assert_fuzz_ok(_near("scalar_twins", near), [1, 2, 3, 4])


@pytest.mark.parametrize("chain", ["f16", "bf16", "f32"])
def test_interleaved_tables_behind_casts_of_fed_positions_fuse(chain):
    """cos / sin of fed positions' angles repeat_interleave'd, cast to float16 / bfloat16 / float32 and back
    (eed9ab5): one RotaryEmbedding at ort-O3, the rotate_every_two's Neg gone; the outputs match."""
    case = _plain("cast_tables", {f"ct-via-{chain}", "ct-positions-fed"})
    counts = case_ops(case, 3, "ort")
    assert counts["RotaryEmbedding"] == 1 and counts["Neg"] == 0, (case.seed, case.traps, counts)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["not-pairs", "mixed-casts", "first-cast-shared", "last-cast-shared"])
def test_tables_behind_casts_near_misses_match(near):
    """Halves instead of pairs (no interleaved rotary: the every-two rotation stays), cos and sin behind different
    Casts, a Cast read elsewhere: the outputs match at every level."""
    case = _near("cast_tables", near, {"ct-positions-fed"})
    if near == "not-pairs":
        assert case_ops(case, 3, "ort")["RotaryEmbedding"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_rows_gathered_by_an_index_of_any_rank_match(rank):
    """Caches gathered by an index of rank 0 / 1 / 2 (RotaryEmbedding-23 or the decomposed rotate-half): the
    outputs match at every level."""
    case = _plain("gathered_rows", {f"gr-index-rank{rank}"})
    assert_fuzz_ok(case, [1, 2, 3, 4])


def test_rows_gathered_by_two_indices_keep_their_gathers():
    """cos rows by one index, sin rows by another: no one position_ids reads both (the Gathers stay)."""
    case = _near("gathered_rows", "two-indices", {"gr-node"})
    counts = case_ops(case, 3, "ort")
    assert counts["Gather"] + counts["GatherND"] == 2, (case.seed, case.traps, counts)
    assert_fuzz_ok(case, [2, 3, 4])


@pytest.mark.parametrize("form", ["gr-node", "gr-decomposed"])
def test_rows_gathered_up_to_the_tables_last_row_match(form):
    """The index reads the table's last row and its first: the outputs match at every level."""
    assert_fuzz_ok(_near("gathered_rows", "last-row", {form}), [1, 2, 3, 4])


@pytest.mark.parametrize("form", ["bool-masked", "bool-keep", "additive"])
def test_a_4d_key_mask_given_as_an_input_matches(form):
    """A [B, 1, 1, T] key mask graph input, True = masked / True = kept / additive 0 or min, over self-attention: the
    outputs match at every level and target."""
    assert_fuzz_ok(_plain("mask4d", {f"m4-{form}"}), [1, 2, 3, 4])
