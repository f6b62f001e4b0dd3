"""The fuzzer's session-42 family (tools/fuzz_s42.py): session 40's rewrites with near misses drawn on purpose -- a
per-dim constant scale on a projection's head view (along the heads, one number, fed, the view or the weight read
elsewhere, wider than the view, D moved off the last axis, over the batch), a per-channel constant after a norm (along
the sequence, fed, the norm read elsewhere, after the island's Cast down, wider, a norm over two axes, gamma * c past
the dtype's max), channels-first one-head attention (p not transposed, softmax over the queries, a mask, a per-key
scale, p read elsewhere, a symbolic channel count; attention over the channels; a batch-1 memory), and a decode
step's rotary over one row of a cos / sin buffer cut at a run-time p (0, the last row, a middle row; two rows, sin a
row later, the identity row). Each motif and near miss builds a valid graph that ONNX Runtime runs and the
optimizer's output matches ORT on it; the plain forms are rewritten and the near misses that must not be are not;
make_case draws the family from a stream of its own without changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s42_case  # noqa: E402
from fuzz_s42 import CF_NEAR, CHAN_NEAR, HEAD_NEAR, MOTIFS, ROW_FROM, ROW_NEAR, S42_SHARE  # noqa: E402

globals().update(family_tests(make_s42_case, MOTIFS, S42_SHARE,
                              [*(("head_scale", n) for n in HEAD_NEAR), *(("chan_scale", n) for n in CHAN_NEAR),
                               *(("attn_cf", n) for n in CF_NEAR), *(("rope_row", n) for n in ROW_NEAR)],
                              "s42"))


def _plain(motif, want, off=frozenset()):
    return first_case(lambda seed: make_s42_case(seed, motif), frozenset(want), PLAIN_OFF | off, 600)


def _near(motif, near):
    return first_case(lambda seed: make_s42_case(seed, motif), frozenset({f"near-{near}"}), None, 600)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("op", ["Mul", "Div"])
def test_a_per_dim_head_view_scale_joins_the_projection(layout, op):
    """Mul / Div(view(x @ W [+ b]), c[D]) at O2: the scale goes into W (and b), no Mul / Div is left."""
    want = {f"head-{layout}"} | ({"head-div"} if op == "Div" else set())
    case = next(c for c in (make_s42_case(s, "head_scale") for s in range(600))
                if want <= set(c.traps) and (op == "Div" or "head-div" not in c.traps)
                and "head-flat" not in c.traps and not set(c.traps) & PLAIN_OFF
                and not any(t.startswith("near-") for t in c.traps))
    assert case_ops(case, level=2)[op] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


@pytest.mark.parametrize("near", ["along-heads", "uniform", "fed", "view-shared", "weight-shared", "wider",
                                  "perm-moves-d", "batch"])
def test_a_head_view_scale_the_pass_must_not_fold_stays(near):
    """Along the heads, one number (attention-q-scale's), fed, the view or W read elsewhere, wider than the view,
    D moved off the last axis, over the batch: the scale stays (a Mul or Div is left); outputs match."""
    case = _near("head_scale", near)
    ops = case_ops(case, level=2)
    assert ops["Mul"] + ops["Div"] >= 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


@pytest.mark.parametrize("form", ["layer", "layer-no-bias", "rms23"])
def test_a_channel_scale_after_a_norm_joins_gamma(form):
    case = _plain("chan_scale", {f"chan-{form}"}, frozenset({"chan-island"}))
    assert case_ops(case, level=2)["Mul"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


@pytest.mark.parametrize("near", ["along-seq", "fed", "after-cast", "wider", "two-axes", "overflow"])
def test_a_channel_scale_the_rules_must_not_take_stays(near):
    """Along the sequence, fed, after the island's Cast down, wider than the output, a norm over two axes, gamma * c
    past the dtype's max (overflow: was wrong output, inf or NaN, at O2-O4 before the rules' finiteness check)."""
    case = _near("chan_scale", near)
    assert case_ops(case, level=2)["Mul"] >= 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


@pytest.mark.parametrize("src", ["conv", "fed", "memory"])
def test_channels_first_attention_is_fused(src):
    """q [B, C, N] viewed channels-first (1x1 Convs over a map, fed, a constant memory k / v): one attention at O3,
    the Softmax gone, except a batch-1 memory under a batch that is not 1 (the fused ops want one batch)."""
    case = _plain("attn_cf", {f"cf-{src}"})
    ops = case_ops(case, level=3)
    if src == "memory" and not all(d.dim_value == 1 for d in case.model.graph.input[0].type.tensor_type.shape.dim[:1]):
        assert ops["Softmax"] == 1, (case.seed, case.traps)
    else:
        assert ops["Attention"] == 1 and ops["Softmax"] == 0, (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("near", [n for n in CF_NEAR if n not in ("c-symbolic", "over-channels")])
def test_channels_first_near_misses_keep_their_softmax(near):
    case = _near("attn_cf", near)
    assert case_ops(case, level=3)["Softmax"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("src", ROW_FROM)
def test_a_one_row_cut_rotary_is_fused(src):
    """The rows [p, p + 1) (step 1 or 2) of a cos / sin buffer at p = 0, the last row, a middle row, a past's
    length, counted from the end: RotaryEmbedding at onnx O3; outputs match at every level."""
    case = _plain("rope_row", {f"row-{src}"})
    assert case_ops(case, level=3)["RotaryEmbedding"] >= 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


def test_attention_over_the_channels_is_the_same_pattern_and_fuses():
    """q as it is, k and v transposed (XCiT's cross-covariance attention, scores [B, C, C]): the channels-first
    pattern with N as the head size; fused, the outputs match."""
    case = _near("attn_cf", "over-channels")
    ops = case_ops(case, level=3)
    assert ops["Softmax"] == 0 and ops["Attention"] == 1, (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("near", ["sin-next"])
def test_a_cut_that_is_no_rotation_stays(near):
    case = _near("rope_row", near)
    assert case_ops(case, level=3)["RotaryEmbedding"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [3])
