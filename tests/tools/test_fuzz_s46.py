"""The fuzzer's session-46 family (tools/fuzz_s46.py): session 44's rewrites and their neighbours with near misses
drawn on purpose -- Casts on head splits float16 <-> float32 (through bfloat16 sometimes; near misses: the Cast read
elsewhere or a graph output, the split read elsewhere, two Casts of one split, a K^T split, heads inferred), an
Expand read through a chain of unary ops by a broadcasting op (near misses where the Expand changes the shape a reader
sees: a smaller co-input, the unary output a graph output or read by a ReduceSum / Softmax / MatMul / Shape, both
inputs read through, Pow by a scalar), 4-D key masks given as graph inputs of every dtype and polarity with keyless
rows (near misses: the second layer reading the mask the other way round, a mask of one batch row, its key dim of
another name, the mask an output) and ORT's contrib forms (SkipLayerNormalization, FusedMatMul). Each motif and near
miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the plain forms the
rewrites take are taken, and the near misses that must not be are not."""

from __future__ import annotations

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s46_case  # noqa: E402
from fuzz_s46 import CAST_NEAR, MASK_NEAR, MOTIFS, ORT_NEAR, S46_SHARE, UNARY_NEAR  # noqa: E402

globals().update(family_tests(make_s46_case, MOTIFS, S46_SHARE,
                              [*(("cast_heads", n) for n in CAST_NEAR), *(("expand_unary", n) for n in UNARY_NEAR),
                               *(("mask4d_every", n) for n in MASK_NEAR), *(("ort_forms", n) for n in ORT_NEAR)],
                              "s46", near_levels=(2, 3, 4)))


def _plain(motif, want, off=frozenset(), tries=600):
    return first_case(lambda seed: make_s46_case(seed, motif), frozenset(want), PLAIN_OFF | off, tries)


def _near(motif, near, want=frozenset()):
    return first_case(lambda seed: make_s46_case(seed, motif), frozenset({f"near-{near}"}) | frozenset(want), None,
                      600)


def _opset23(motif, want, off=frozenset()):
    """The first plain case of ``motif`` with ``want`` at opset 23 (cast-before-head-split's floor)."""
    for seed in range(600):
        case = make_s46_case(seed, motif)
        traps = set(case.traps)
        if case.model.opset_import[0].version == 23 and set(want) <= traps and \
                not traps & (PLAIN_OFF | off) - {"fp16"} and not any(t.startswith("near-") for t in traps):
            return case
    raise AssertionError(f"no opset-23 case with {want}")


@pytest.mark.parametrize("way", ["ch-up", "ch-down"])
def test_casts_on_head_splits_leave_no_split_and_fuse(way):
    """q / k / v split into heads and cast float16 -> float32 (or float32 -> float16), cast back before the attention:
    at onnx-O3 the Casts move before the splits, the attention reads the 3-D projections (no Transpose, no Softmax
    left); the outputs match at every level and target."""
    case = _opset23("cast_heads", {way}, {"ch-rope", "ch-via-bf16", "ch-attn-cast"})
    counts = case_ops(case, 3, "onnx")
    assert counts["Transpose"] == 0 and counts["Softmax"] == 0, (case.seed, case.traps, counts)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["split-shared", "two-casts", "cast-output", "kt-split"])
def test_head_split_cast_near_misses_match(near):
    """The split read elsewhere (the Cast must not move), two Casts of one split, the Cast a graph output, a K^T
    split cast: the outputs match at every level."""
    assert_fuzz_ok(_near("cast_heads", near), [1, 2, 3, 4])


@pytest.mark.parametrize("kind", ["eu-float", "eu-bool"])
def test_an_expand_read_through_unary_ops_by_a_full_reader_goes(kind):
    """Expand(a, Shape(co)) read by unary ops then by a broadcasting op whose other input is co: the Expand goes at O2
    (f66ee72) and the outputs match."""
    case = _plain("expand_unary", {kind, "eu-target-shape"})
    assert case_ops(case, 2, "onnx")["Expand"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("near", ["co-smaller", "unary-output", "unary-reduce", "unary-softmax", "unary-matmul",
                                  "self-co", "mixed", "pow-scalar"])
def test_an_expand_that_changes_what_a_reader_sees_stays(near):
    """A reader that sees the Expand's full shape only through it (a smaller co-input, a non-elementwise reader, a
    graph output, a co-input that is itself read through the Expand, a scalar exponent): the Expand stays at O2 and
    the outputs match at every level. (unary-shape is not here: Shape(u) is Shape(co) by the dims, read so first,
    and then the Expand rightly goes; its values are checked with the other near misses.)"""
    case = _near("expand_unary", near, {"eu-target-shape"})
    assert case_ops(case, 2, "onnx")["Expand"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


@pytest.mark.parametrize("dtype", ["m6-bool", "m6-uint8", "m6-int32", "m6-int64", "m6-float"])
def test_4d_key_masks_of_every_dtype_with_a_keyless_row_match(dtype):
    """A [B, 1, 1, T] key mask input of each dtype, a batch row with no key: the outputs match at every level
    (float16 / bfloat16 keyless-row differences are the classifier's half-masked-rows)."""
    assert_fuzz_ok(_plain("mask4d_every", {dtype, "m6-keyless"}, tries=1500), [1, 2, 3, 4])


def test_a_4d_key_mask_read_both_ways_by_two_layers_matches():
    """Layer 0 reads True as masked, layer 1 as kept (two different paddings of one input): the outputs match."""
    assert_fuzz_ok(_near("mask4d_every", "inverse-layer"), [1, 2, 3, 4])


def test_ort_contrib_forms_fuse_at_ort():
    """SkipLayerNormalization then projections and FusedMatMul(q, k, transB=1, alpha) scores: one MultiHeadAttention
    at ort-O3 (no Softmax, no FusedMatMul left); the outputs match."""
    case = _plain("ort_forms", set(), {"of-mask"})
    counts = case_ops(case, 3, "ort")
    assert counts["Softmax"] == 0 and counts["FusedMatMul"] == 0, (case.seed, case.traps, counts)
    assert_fuzz_ok(case, [1, 2, 3, 4])
