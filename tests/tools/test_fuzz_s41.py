"""The fuzzer's session-41 family (tools/fuzz_s41.py): session 39's rewrites with near misses drawn on purpose -- two
layers' masks whose operands are twins or near twins (another fill, a float16 layer, swapped branches, the grid the
other way round), Unsqueeze chains (negative axes, axes fed at run time, two inner axes, the inner result read
elsewhere), float16 norm islands whose scale float16 holds or not (1 + w, 1e-9, 1e5, an inexact bias) with the Cast to
bfloat16, the island in float64, the norm read in float32, and sequences whose elements differ in shape. Each motif
and near miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the plain forms
are rewritten and the near misses that must not be are not; make_case draws the family from a stream of its own
without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import functools

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case, motif_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s41_case  # noqa: E402
from fuzz_s41 import (EXACT_SCALES, ISLAND_NEAR, MOTIFS, S41_SHARE, SCALES, SEQ_FORMS, TWIN_NEAR,  # noqa: E402
                      UNSQ_NEAR)

_first = functools.partial(motif_case, make_s41_case)

globals().update(family_tests(make_s41_case, MOTIFS, S41_SHARE,
                              [*(("twins", n) for n in TWIN_NEAR), *(("unsq_chain", n) for n in UNSQ_NEAR),
                               *(("norm_island", n) for n in ISLAND_NEAR)],
                              "s41"))


def _plain(motif, want, off=frozenset()):
    return first_case(lambda seed: make_s41_case(seed, motif), frozenset(want), PLAIN_OFF | off, 600)


def _case(motif, want, off=frozenset()):
    """The first case of ``motif`` whose traps include ``want`` and none of ``off`` (near misses allowed)."""
    for seed in range(600):
        case = make_s41_case(seed, motif)
        if set(want) <= set(case.traps) and not set(off) & set(case.traps):
            return case
    raise AssertionError(f"no {motif} case with {want} and none of {off}")


INEXACT = frozenset(f"scale-{s}" for s in SCALES if s not in EXACT_SCALES)


def _island_kept(case, level=3, target="ort"):
    """Whether a norm of ``case`` optimized at ``level`` for ``target`` still reads a Cast up (to float32 or float64:
    the island); the float16 input's own Cast from the graph's float32 feed is no island."""
    import onnx_fuse

    graph = onnx_fuse.optimize(case.model, level=level, target=target).to_proto().graph
    cast_to = {node.output[0]: node.attribute[0].i for node in graph.node if node.op_type == "Cast"}
    norms = [n for n in graph.node if "Normalization" in n.op_type]
    assert norms, [n.op_type for n in graph.node]
    return any(cast_to.get(i) in (1, 11) for n in norms for i in n.input[:2])


@pytest.mark.parametrize("scale", EXACT_SCALES)
@pytest.mark.parametrize("form", ["layer", "layer-no-bias", "rms23"])
def test_an_island_whose_scale_float16_holds_becomes_a_float16_norm(scale, form):
    """A float16 scale (values, subnormals, 8192): the island's Casts go into the norm at ort O3, outputs match."""
    case = _plain("norm_island", {f"scale-{scale}", f"island-{form}"})
    assert not _island_kept(case), (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


@pytest.mark.parametrize("scale", [s for s in SCALES if s not in EXACT_SCALES])
def test_an_island_whose_scale_or_bias_float16_cannot_hold_stays(scale):
    """1 + w, 1e-9, 1e5 in the scale, a bias 1e-4 off float16's grid: the island stays float32."""
    case = _plain("norm_island", {f"scale-{scale}", "island-layer"})
    assert _island_kept(case), (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("near", ISLAND_NEAR)
def test_an_island_the_rules_must_not_take_stays(near):
    """The Cast back to bfloat16, the island in float64, the float32 norm read elsewhere, a bfloat16 input."""
    case = _case("norm_island", {f"near-{near}"}, INEXACT)   # an exact scale: only the near miss keeps it
    assert _island_kept(case), (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_an_unsqueeze_chain_becomes_one_unsqueeze(rank):
    """Two single-axis Unsqueezes over a rank-0 .. 3 x (negative axes too) become one at O2; outputs match."""
    case = _plain("unsq_chain", {f"unsq-rank{rank}"}, frozenset({"unsq-three"}))
    assert case_ops(case, level=2)["Unsqueeze"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3])


@pytest.mark.parametrize("near", ["axes-input", "inner-shared"])
def test_an_unsqueeze_chain_the_rule_must_not_take_stays(near):
    """Axes fed at run time, the inner result read elsewhere: both stay."""
    case = _case("unsq_chain", {f"near-{near}"}, {"unsq-three"})
    assert case_ops(case, level=2)["Unsqueeze"] == 2, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


def test_an_unsqueeze_chain_with_two_inner_axes_becomes_one():
    """Two axes in the inner Unsqueeze: a near miss of the pair rule until session 41, taken since the rule
    composes any constant axes (bec9828); one Unsqueeze at O2, outputs match."""
    case = _case("unsq_chain", {"near-inner-two-axes"}, {"unsq-three"})
    assert case_ops(case, level=2)["Unsqueeze"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


def test_two_layers_attention_23_over_one_bool_mask_read_one_where_at_trt():
    """The per-layer Where(mask, 0, -inf) attention-native-23 writes are twins: merged, one Where at trt O4."""
    case = next(c for c in (make_s41_case(seed, "twins") for seed in range(600))
                if not set(c.traps) & PLAIN_OFF and not any(t.startswith("near-") for t in c.traps)
                and sum(n.op_type == "Attention" for n in c.model.graph.node) >= 2)
    assert case_ops(case, level=4, target="trt")["Where"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [4])


@pytest.mark.parametrize("form", SEQ_FORMS)
def test_a_sequence_of_elements_of_different_shapes_matches(form):
    """SequenceConstruct of two shapes (or ranks), SplitToSequence by fed sizes, SequenceInsert, ConcatFromSequence,
    SequenceErase, each read by SequenceAt: every level and target matches ORT (ORT equated an invented dim name of
    the element shape before shape inference left SequenceAt outputs none)."""
    case = _first("seq_shapes", frozenset({f"seq-{form}"}))
    assert_fuzz_ok(case, [1, 2, 3, 4])
