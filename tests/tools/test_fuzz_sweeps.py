"""The fuzzer's motifs for the idioms of the later hold-out sweeps (tools/fuzz_sweeps.py), the
classes they brought (left-padded, half-masked-rows), the merged decoder's second feed set and the
--pretool option: the graphs are valid and ORT runs them, the optimizer's output matches ORT on them
at every target with the rules each motif is there for firing, and make_case draws them without
changing the graphs of the seeds other tests pin."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import SWEEP_SALT, make_case, make_sweep_case  # noqa: E402
from fuzz_sweeps import SWEEP_SHARE, SWEEPS  # noqa: E402
from tests.tool_modules import assert_same_case  # noqa: E402

NAMES = sorted(SWEEPS) + ["merged_decoder"]
#: a rule each motif must fire somewhere among its seeds at O3 (a generator whose rules never
#: fire would not notice them regressing)
SWEEP_RULES = {
    "mask_forms": lambda r: r == "attention",
    "rope_forms": lambda r: r.startswith("rotary-interleaved") or r.startswith("rotary-partial"),
    "parallel_block": lambda r: r == "attention",
    "qk_norm": lambda r: r.startswith(("rms-norm", "layer-norm")),
    "gqa_forms": lambda r: r == "attention",
    "score_bias": lambda r: r == "attention",
    "softcap": lambda r: r == "attention",
    "sinks": lambda r: r == "attention-sinks",
    "merged_decoder": lambda r: r == "attention-kv-cache",
}
SEEDS = (0, 1, 2)


@pytest.mark.parametrize("name", NAMES)
def test_sweep_graphs_run_in_ort_and_the_optimized_ones_match(name):
    fired = 0
    for seed in SEEDS:
        case = make_sweep_case(seed, name)
        onnx.checker.check_model(case.model, full_check=True)
        assert name in case.motifs
        results, _, _ = fd.fuzz_case(case, [3], ["ort", "onnx", "trt"])
        for r in results:
            assert r["cls"] not in (*fd.FAIL_CLASSES, "invalid-graph"), \
                (name, seed, r["target"], r["cls"], r["detail"], case.traps)
            fired += sum(n for rule, n in r["fires"].items() if SWEEP_RULES[name](rule))
    assert fired, name


def test_make_case_draws_sweeps_from_a_stream_of_their_own():
    """About SWEEP_SHARE of the motif-graph seeds become sweep cases; the seeds other tests pin keep
    their graphs (SWEEP_SALT was chosen so)."""
    kinds = [make_case(seed) for seed in range(150)]
    sweep = sum(any(m in (*SWEEPS, "merged_decoder") for m in c.motifs) for c in kinds)
    assert 0.3 * SWEEP_SHARE * 150 < sweep < 2 * SWEEP_SHARE * 150, sweep
    for seed in (3, 4, 6, 10, 16, 2019, 14525077, 2004176908, 3310816760, 567340412):
        assert not np.random.default_rng([seed, SWEEP_SALT]).random() < SWEEP_SHARE, seed


def test_sweep_cases_are_deterministic():
    assert_same_case(make_sweep_case(5, "merged_decoder"), make_sweep_case(5, "merged_decoder"))


def test_merged_decoder_is_checked_on_both_values_of_the_condition():
    """The If's other branch (use_cache_branch false: an empty past, a mask of the new tokens) is a
    second feed set; run_one classifies each, so a model wrong on that branch alone is wrong."""
    case = make_sweep_case(0, "merged_decoder")
    (alt,) = case.alt_feeds
    assert case.feeds["use_cache_branch"].all() and not alt["use_cache_branch"].any()
    assert alt["past_key_values.0.key"].shape[2] == 0
    names = [o.name for o in case.model.graph.output]
    sess = fd._session(case.model, ort_optimizations=False)
    ref, ref_alt = sess.run(names, case.feeds), sess.run(names, alt)
    assert ref[1].shape[2] > ref_alt[1].shape[2]   # the branches differ: present = past + new vs new
    cls, detail, _, fires = fd.run_one(case.model, case.feeds, ref, 3, "ort", alt=[(alt, ref_alt)])
    assert cls == "ok" and fires.get("attention"), (cls, detail, fires)
    # a reference that differs on the second set only: the second set decides (ORT's own
    # optimizations disagree with it too, so the class is ort-itself; never ok)
    bad = [np.asarray(r) + 1.0 for r in ref_alt]
    cls, detail, _, _ = fd.run_one(case.model, case.feeds, ref, 3, "ort", alt=[(alt, bad)])
    assert cls in ("wrong", "ort-itself") and detail.startswith("feed set 1:"), (cls, detail)


def test_saved_cases_keep_their_second_feed_set(tmp_path):
    case = make_sweep_case(0, "merged_decoder")
    res = {"seed": 0, "level": 3, "target": "ort", "cls": "wrong", "detail": "", "motifs": case.motifs,
           "traps": case.traps, "precision": None, "spec": {}}
    folder = Path(fd._save_failure(tmp_path, res, case, None))
    assert (folder / "feeds_alt1.npz").is_file()
    ((_, then, now),) = fd.replay([folder])
    assert (then, now) == ("wrong", "ok")


def test_left_padding_and_kept_rows():
    """The classifier's view of masks: a row of ones then zeros is right-padded; zeros first (or
    holes) is left padding; position ids (0/1 too at length 2) are no mask."""
    right = {"attention_mask": np.array([[1, 1, 0], [1, 1, 1]], np.int64)}
    left = {"attention_mask": np.array([[0, 1, 1], [1, 1, 1]], np.float32)}
    assert not fd._left_padded(right) and fd._left_padded(left)
    assert not fd._left_padded({"position_ids": np.array([[0, 1]], np.int64)})
    ref = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    got = ref.copy()
    got[0, 0] = -5.0                                             # a padded query row
    assert fd._kept_rows_match(["y"], [ref], [got], left, None)
    assert not fd._kept_rows_match(["y"], [ref], [got], right, None)  # row 0 is kept there


def test_left_padded_fused_attention_is_its_own_class():
    """Sweep seed 3 (mask_forms: a float32 left-padded float mask, a causal select filling -inf
    plus the padding, head size 64) becomes FusedAttention at O4 trt, whose seq_lens only counts
    (docs/ops.md): the kept rows differ too, which is `left-padded` (noted, saved, replayable), not
    `wrong` (the old classifier took no float mask); a left-padding-safe plugin leaves only the
    padded rows (`padded-rows`) or none."""
    ((_, _, cls, detail),) = [(r["level"], r["target"], r["cls"], r["detail"]) for r in
                              fd.fuzz_case(make_sweep_case(3, "mask_forms"), [4], ["trt"])[0]]
    assert cls in ("left-padded", "padded-rows", "ok"), (cls, detail)
    assert "left-padded" in fd.NOTED_CLASSES and "left-padded" not in fd.FAIL_CLASSES


def test_pretool_rewrites_the_graph_first():
    case = make_sweep_case(1, "rope_forms")
    pre = fd.pretool_case(case, "ort1")
    assert "pretool-ort1" in pre.traps and pre.model is not case.model
    assert len(pre.model.graph.node) < len(case.model.graph.node)   # ORT's basic folding ran
    results, _, _ = fd.fuzz_case(pre, [3], ["ort", "trt"])
    assert all(r["cls"] == "ok" for r in results), [(r["target"], r["cls"], r["detail"]) for r in results]


def test_float16_rows_with_no_kept_key_are_their_own_class():
    """Sweep seed 9 (mask_forms, float16: a causal mask plus the padding, one sequence fully
    masked): the original's float16 Adds absorb the scores into -65504 on rows with no kept key,
    Attention-23 at onnx adds in float32 (docs/holdout.md "Masked rows (session 14)"): only those
    rows differ, `half-masked-rows` (noted; it was `wrong`)."""
    ((cls, detail),) = [(r["cls"], r["detail"]) for r in
                        fd.fuzz_case(make_sweep_case(9, "mask_forms"), [3], ["onnx"])[0]]
    assert cls in ("half-masked-rows", "ok"), (cls, detail)
    # the rows set aside: none kept up to the row's own position (a causal row's keys)
    feeds = {"attention_mask": np.array([[1, 1, 0], [0, 0, 0], [0, 1, 1]], np.int64)}
    ref = np.zeros((3, 3, 2), np.float32)
    for row, expected in (((1, 2), True), ((2, 0), True), ((0, 2), False), ((2, 1), False)):
        got = ref.copy()
        got[row] = 1.0
        assert fd._kept_rows_match(["y"], [ref], [got], feeds, None, keyless=True) == expected, row


def test_nan_rows_of_the_original_are_their_own_class():
    """Seed 914902902 (run D at 38419ee: mask_forms, float32, a left-padded bool mask and a causal
    one combined by a -inf select, softcap): query 0 of the padded sequence keeps no key, so the
    original's softmax is NaN there; Attention-23 at onnx gives 0. Every row with a kept key agrees:
    `nan-rows` (noted; it was `wrong`): verify's rule for rows NaN throughout (2c2c5f2) accepts it."""
    case = make_case(914902902)
    assert "fill-neg-inf" in case.traps and "mask_forms" in case.motifs
    ((cls, detail),) = [(r["cls"], r["detail"]) for r in fd.fuzz_case(case, [3], ["onnx"])[0]]
    assert cls in ("nan-rows", "ok"), (cls, detail)
    assert "nan-rows" in fd.NOTED_CLASSES
