"""Paged KV with a sliding window: trt-paged-kv (rules/attention/paged_trt.yaml) reads the window W of
a causal banded mask over Concat(past, new) with sliding_window() (rewrite/_mask_probe.py) and emits
PagedAttention(window=W); a mask banded at some positions only stays refused (the contiguous cache
kept). The paged graphs run in ORT through the NumPy reference (which applies ``window``) and are
compared with the original, one sequence at a time, past lengths longer than the window.

Graphs: the LLaMA KV export (head size 64, tests/data/models/llama64_kv_dynamo.onnx) with the band
kv_idx > q_idx - W And-ed to its causal comparison (transformers' sliding_window_overlay over a
whole, uncropped cache); the corpus' Optimum exports of Mistral and Gemma 3 (head size 16, so
through the rule without its head-size check, as test_trt_paged_kv.py does).
Transformers 5's own KV exports of sliding layers (DynamicSlidingWindowLayer) crop the present to
the last W - 1 tokens: tests/targets/test_trt_paged_cropped.py.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from tests.paged_ragged import outputs, per_sequence
from tests.sliding_band import with_band

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
CORPUS = MODELS.parent / "corpus"
LAYERS, D, VOCAB = 2, 64, 128


def _with_band(window: int, until: int | None = None) -> onnx.ModelProto:
    """llama64_kv_dynamo with the band kv > q - window on its causal comparison."""
    return with_band(onnx.load(str(MODELS / "llama64_kv_dynamo.onnx")), window, until=until)


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph)


def _windows(model) -> list[int]:
    return [n.attributes["window"].value for n in model.graph if n.op_type == "PagedAttention"]


def _feeds(batch: int, past: int, new: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, VOCAB, (batch, new)).astype(np.int64)}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((batch, 1, past, D)).astype(np.float32)
    return feeds


def _check_against_original(original: onnx.ModelProto, paged, past_lens, sq: int, block_size: int,
                            seed: int) -> float:
    """The paged batch (ragged past lengths) against the original run per sequence: logits and
    the pools' tokens. Returns the largest logit difference."""
    orig, new = make_session(original), make_session(paged)
    feeds = _feeds(len(past_lens), max(past_lens), sq, seed)
    pf = paged_inputs_from_contiguous(feeds, block_size, past_lens=past_lens, new_tokens=sq, seed=seed)
    got = outputs(new, pf)
    worst = 0.0
    for b, L, _, ref in per_sequence(orig, feeds, past_lens, sq):
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)
        worst = max(worst, float(np.abs(got["logits"][b] - ref["logits"][0]).max()))
        for i in range(LAYERS):
            for kv, t in (("key", "k"), ("value", "v")):
                np.testing.assert_allclose(gather_pool(got[f"kv_pool_{t}_out.{i}"], pf["block_tables"][b], L + sq),
                                           ref[f"present.{i}.{kv}"][0], rtol=1e-4, atol=1e-5)
    return worst


@pytest.fixture(scope="module")
def banded():
    original = _with_band(5)
    return original, onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True).model


def test_banded_cache_mask_becomes_paged_attention_with_its_window(banded):
    _, paged = banded
    assert _ops(paged)["PagedAttention"] == LAYERS and _windows(paged) == [5] * LAYERS
    assert not [v.name for v in paged.graph.inputs if v.name.startswith("past_")]


@pytest.mark.parametrize("past_lens, sq, block_size", [((9, 3), 1, 4), ((17, 0), 1, 16), ((12, 4), 1, 1),
                                                        ((8, 2), 3, 4), ((0, 11), 7, 2)])
def test_windowed_decode_and_chunked_prefill_match_the_original(banded, past_lens, sq, block_size):
    """Past lengths beyond W: a paged form that lost the band would attend to keys the original
    hides. Sq > 1: chunked prefill over the pool, every new token with its own band."""
    original, paged = banded
    _check_against_original(original, paged, past_lens, sq, block_size, seed=sq * 10 + block_size)


def test_the_window_changes_the_numbers(banded):
    """The comparison above can fail: the same feeds through the unwindowed export differ."""
    original, _ = banded
    plain = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    feeds = _feeds(1, 12, 1, seed=3)
    feeds["attention_mask"] = np.ones((1, 13), np.int64)
    a, b = outputs(make_session(original), feeds)["logits"], outputs(make_session(plain), feeds)["logits"]
    assert np.abs(a - b).max() > 1e-3


def test_window_longer_than_every_context_run_stays_exact():
    original = _with_band(100)
    paged = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True).model
    assert _windows(paged) == [100] * LAYERS
    _check_against_original(original, paged, (9, 30), 2, 4, seed=5)


def test_mask_banded_only_at_small_positions_is_refused():
    """Banded for queries before position 40 only: at the lengths a decoder is usually tried at it
    looks like a window of 5, but at position 40 on it is plain causal; no single W, so the
    model keeps its contiguous cache (and stays exact)."""
    original = _with_band(5, until=40)
    result = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True, verify=True)
    assert _ops(result.model)["PagedAttention"] == 0
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "lets a query see all of its" in notes[0], result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason


@pytest.mark.parametrize("name, windows", [
    ("mistral__optimum__trained", [4, 4]),     # every layer sliding (sliding_window=4)
    ("gemma3__optimum__trained", [4, 0]),      # sliding and full layers alternating
])
def test_corpus_sliding_decoders_are_paged_with_their_windows_and_verified(any_head_rule, name, windows):
    path = CORPUS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    result = onnx_fuse.optimize(str(path), level=4, target="trt", float32_plugins=True,
                                rules=[any_head_rule], verify=True)
    assert _windows(result.model) == windows, result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
