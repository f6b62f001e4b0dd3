"""The fuzzer's session-39 family (tools/fuzz_s39.py): session 38's rewrites with their traps -- the rotary written half
by half (concat(a cos - b sin, b cos + a sin)) in four layouts, rotate-half over packed patches [S, H, D], and a Cast of
a Where of constants into the scores (cast-of-select).
Each motif and near miss builds a valid graph that ONNX Runtime runs and the optimizer's output matches ORT on it; the
plain forms are rewritten and the near misses that must not be are not; make_case draws the family from a stream of
its own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import functools

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case, motif_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s39_case  # noqa: E402
from fuzz_s39 import HALVES, HALVES_NEAR, LAYOUTS, MASK_CONSTS, MOTIFS, PACKED_NEAR, S39_SHARE, WHERE_NEAR  # noqa: E402

_first = functools.partial(motif_case, make_s39_case)
_ops = case_ops

globals().update(family_tests(make_s39_case, MOTIFS, S39_SHARE,
                              [*(("rope_halves", n) for n in HALVES_NEAR), *(("rope_packed", n) for n in PACKED_NEAR),
                               *(("cast_where", n) for n in WHERE_NEAR)], "s39"))


def _plain_halves(layout, form):
    """A plain halves-form case in ``layout`` with ``form`` halves whose tables have known rows (a run-time row cut
    leaves the tables' rows unknown to shape inference, which the rotary rules need)."""
    return first_case(lambda seed: make_s39_case(seed, "rope_halves"),
                      frozenset({f"halves-{layout}", f"halves-{form}"}), PLAIN_OFF | {"tables-cut"}, 600)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", HALVES)
def test_the_halves_form_is_a_rotary_in_every_layout(layout, form):
    case = _plain_halves(layout, form)
    ops = _ops(case)
    assert ops["RotaryEmbedding"] >= 1 and ops["Sub"] == 0, (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3])


@pytest.mark.parametrize("tables", ["const", "computed"])
def test_rotate_half_over_packed_patches_is_a_rotary(tables):
    """x [S, H, D] (no batch axis) with [S, 1, D] tables, constant or computed: RotaryEmbedding, no Neg left."""
    case = _first("rope_packed", frozenset({f"packed-{tables}"}), plain=True)
    ops = _ops(case)
    assert ops["RotaryEmbedding"] >= 1 and ops["Neg"] == 0, (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3])


def test_packed_rotate_half_without_a_sign_is_no_rotary():
    case = _first("rope_packed", frozenset({"near-half-no-neg"}))
    assert _ops(case)["RotaryEmbedding"] == 0, (case.seed, case.traps)


@pytest.mark.parametrize("near", ["cat-swapped", "cos-twice", "b-broadcast"])
def test_the_halves_near_misses_are_no_rotary(near):
    """Halves concatenated the other way round, cos in both products of the second half, or b one head broadcast over
    the heads are not RotaryEmbedding of concat(a, b): no rotary is written."""
    case = _first("rope_halves", frozenset({f"near-{near}"}))
    assert _ops(case)["RotaryEmbedding"] == 0, (case.seed, case.traps)


def _casts_of_where(case, level=3, target="onnx"):
    """The Casts of a Where left in ``case.model`` optimized."""
    import onnx_fuse

    graph = onnx_fuse.optimize(case.model, level=level, target=target).to_proto().graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    return sum(node.op_type == "Cast" and made_by.get(node.input[0]) == "Where" for node in graph.node)


def _plain_where(want, half: bool):
    """The first plain cast_where case with the traps ``want``, of a float16 graph (its float32 mask cast down) or
    a float32 one (a float16 mask cast up)."""
    make = functools.partial(make_s39_case, name="cast_where")
    return first_case(make, frozenset(want | {"fp16"}), PLAIN_OFF - {"fp16"}, 600) if half else \
        first_case(make, frozenset(want), PLAIN_OFF, 600)


@pytest.mark.parametrize("cond, consts, half", [*((c, k, True) for c in ("padding", "causal", "bool")
                                                  for k in MASK_CONSTS),
                                                *(("causal", k, False) for k in MASK_CONSTS)])
def test_a_cast_of_a_where_of_constants_is_folded(cond, consts, half):
    """cast-of-select: no Cast of a Where of constants is left at onnx O3, and the output matches."""
    case = _plain_where({f"cond-{cond}", f"mask-{consts}"}, half)
    assert _casts_of_where(case) == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [3])


def test_the_island_mask_cast_of_the_attention_rewrite_is_folded():
    case = first_case(lambda seed: make_s39_case(seed, "cast_where"), frozenset({"mask-island"}),
                      PLAIN_OFF - {"fp16"})   # the island is float16's
    assert _casts_of_where(case) == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("near", ["other-input", "default-input"])
def test_a_fill_the_user_may_feed_is_still_read(near):
    """A Where whose fill is a graph input (or an initializer a user may override) is no select of constants: the
    optimized graph still reads the fill (causal masks of several query rows, where the mask matters)."""
    case = next(c for c in map(lambda seed: make_s39_case(seed, "cast_where"), range(600))
                if {f"near-{near}", "cond-causal"} <= set(c.traps) and "one-query" not in c.traps)
    fill = case.model.graph.node[[n.op_type for n in case.model.graph.node].index("Where")].input[2]
    import onnx_fuse

    graph = onnx_fuse.optimize(case.model, level=3, target="onnx").to_proto().graph
    assert any(fill in node.input for node in graph.node), (case.seed, case.traps)
