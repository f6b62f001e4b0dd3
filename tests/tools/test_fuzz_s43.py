"""The fuzzer's session-43 family (tools/fuzz_s43.py): session 41's rewrites with near misses drawn on purpose -- an
Unsqueeze chain composing any constant axes (negative ones, the outer axes the inner's numbers again, a Squeeze
between two links, an int64 dim built into a Reshape target; a middle link read elsewhere, axes fed, the result added
to a tensor of its exact shape), one-head attention at ort (the bmm form lowered to MultiHeadAttention with no glue,
the 4-D form unsqueezed at the heads axis; the output read back other than by a squeeze, k / v unsqueezed at axis 0,
k's Unsqueeze read elsewhere, v fed 4-D, k and v one value), a single-number scale after an RMSNormalization over
one or two axes (along the sequence, fed, the norm read elsewhere, after a Cast to float16, wider, gamma * c past the
dtype's max), and a scaled K^T of a key in a batch-first permuted layout (the K^T scale per channel, per key, fed, a
Div, a layout that is not batch-first, K^T read elsewhere). Each motif and near miss builds a valid graph that ONNX
Runtime runs and the optimizer's output matches ORT on it; the plain forms are rewritten and the near misses that must
not be are not; make_case draws the family from a stream of its own without changing the graphs of the seeds other
tests pin."""

from __future__ import annotations

import pytest

from tests.tool_modules import PLAIN_OFF, assert_fuzz_ok, first_case
from tests.tools.fuzz_family import case_ops, family_tests  # (puts tools/ on sys.path)

from fuzz_motifs import make_s43_case  # noqa: E402
from fuzz_s43 import HEAD_NEAR, KEY_LAYOUTS, KEY_NEAR, MOTIFS, S43_SHARE, SCALAR_NEAR, UNSQ_NEAR  # noqa: E402

globals().update(family_tests(make_s43_case, MOTIFS, S43_SHARE,
                              [*(("unsq_compose", n) for n in UNSQ_NEAR), *(("one_head", n) for n in HEAD_NEAR),
                               *(("norm_scalar", n) for n in SCALAR_NEAR), *(("key_perm", n) for n in KEY_NEAR)],
                              "s43"))


def _plain(motif, want, off=frozenset()):
    return first_case(lambda seed: make_s43_case(seed, motif), frozenset(want), PLAIN_OFF | off, 600)


def _near(motif, near, want=frozenset()):
    return first_case(lambda seed: make_s43_case(seed, motif), frozenset({f"near-{near}"}) | frozenset(want), None,
                      600)


@pytest.mark.parametrize("want", ["unsq-same-numbers", "unsq-negative", "unsq-squeeze-between", "unsq-rank3"])
def test_an_unsqueeze_chain_of_constant_axes_is_one_unsqueeze(want):
    """A chain of 2 - 4 Unsqueezes of constant axes (the outer axes the inner's numbers again, negative ones, a
    Squeeze of a new axis between two links) is one Unsqueeze at O2; the outputs match at every level."""
    case = _plain("unsq_compose", {want, "unsq-float"})
    assert case_ops(case, level=2)["Unsqueeze"] == 1, (case.seed, case.traps)
    assert case_ops(case, level=2)["Squeeze"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [1, 2, 3, 4])


def test_an_unsqueeze_chain_with_a_middle_link_read_elsewhere_keeps_that_link():
    case = _near("unsq_compose", "middle-shared", {"unsq-float"})
    assert case_ops(case, level=2)["Unsqueeze"] >= 2, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3])


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_one_head_bmm_attention_leaves_no_glue_at_ort(target):
    """q3 @ k3^T -> softmax -> @ v3 on [B, S, D] (attention-bmm-single-head): fused at O3; at ort one
    MultiHeadAttention that reads q / k / v 3-D (no Unsqueeze, Squeeze, Reshape or Transpose around it)."""
    case = _plain("one_head", {"oh-bmm"})
    ops = case_ops(case, level=3, target=target)
    assert ops["Softmax"] == 0, (case.seed, case.traps, ops)
    if target == "ort":
        assert ops["MultiHeadAttention"] == 1, (case.seed, case.traps, ops)
        assert ops["Unsqueeze"] + ops["Squeeze"] + ops["Reshape"] + ops["Transpose"] == 0, (case.seed, ops)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("near", ["out-not-squeeze", "out-shared"])
def test_one_head_bmm_attention_read_back_otherwise_matches(near):
    """The bmm form's output viewed [B, D, S] (not a squeeze of the lowering's [B, 1, S, D]) or read elsewhere:
    the outputs match at ort."""
    case = _near("one_head", near, {"oh-bmm"})
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("form", ["rms23", "rms23-two-axes"])
def test_a_single_number_after_an_rms_norm_joins_gamma(form):
    """RMSNormalization over the last axis or the last two (gamma [S, D], [D] or [1]) times one number of any
    rank up to the output's: the Mul goes into gamma at O2."""
    case = _plain("norm_scalar", {f"ns-{form}"})
    assert case_ops(case, level=2)["Mul"] == 0, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


@pytest.mark.parametrize("near", ["along-seq", "fed", "norm-shared", "after-cast", "wider", "overflow"])
def test_a_norm_scale_the_rule_must_not_take_stays(near):
    """Along the sequence, fed, the norm read elsewhere, after a Cast to float16, one axis wider than the output,
    gamma * c past the dtype's max: the Mul stays (RMSNormalization-23 cases); outputs match."""
    case = next(c for c in (make_s43_case(s, "norm_scalar") for s in range(600))
                if f"near-{near}" in c.traps and any(t.startswith("ns-rms23") for t in c.traps))
    assert case_ops(case, level=2)["Mul"] >= 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [2, 3, 4])


@pytest.mark.parametrize("layout", KEY_LAYOUTS)
def test_a_scaled_permuted_key_is_fused(layout):
    """q, k, v in a batch-first layout other than [B, H, T, D] / [B, T, H, D] (Florence-2's [B, N, G, C/G] among
    them), the scale split over q and K^T or on either: one Attention at O3, the Softmax gone."""
    case = _plain("key_perm", {f"kp-{layout}"})
    ops = case_ops(case, level=3)
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, (case.seed, case.traps, ops)
    assert_fuzz_ok(case, [3, 4])


@pytest.mark.parametrize("near", ["per-channel", "per-key", "fed"])
def test_a_key_scale_that_is_not_one_number_keeps_the_softmax(near):
    """The K^T scale per channel ([1, 1, D, 1]), per key ([T]) or fed at run time is no attention scale: the
    Softmax stays; outputs match."""
    case = _near("key_perm", near)
    assert case_ops(case, level=3)["Softmax"] == 1, (case.seed, case.traps)
    assert_fuzz_ok(case, [3, 4])
