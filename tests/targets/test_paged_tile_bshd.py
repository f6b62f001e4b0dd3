"""A decoder step whose GQA repeats the cache's K/V heads with Tile on [B, T, Hkv, D] (keras-hub
through tf2onnx: Transpose -> Unsqueeze -> Tile -> Reshape -> Transpose back) is paged at trt-O4.

attention-repeat-kv reads the repeat's source through the head Transpose and writes K as
Transpose(Transpose(present, [0, 2, 1, 3]), [0, 2, 1, 3]); transpose-pair only cancels that in the
simplify stage, after lowering, so attention-kv-cache (which wanted the Concat(past, new) itself)
never formed an AttentionKV and the cache stayed contiguous ("reaches the attention only through
['Transpose', 'Transpose', ...]"). attention-kv-cache now takes a Transpose pair that undoes itself
(session 18, fuzz11). The graphs come from the fuzzer's decoder builder (tools/fuzz_decoder.py)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import onnx_fuse  # noqa: E402
from fuzz_motifs import make_decoder_case  # noqa: E402

SPEC = dict(heads=4, kv_heads=2, head=64, window=0, sinks=False, layers=1, upcast=False, kv_fp8=False, padded=False)


def _ops(result):
    return collections.Counter(n.op_type for n in result.to_proto().graph.node)


@pytest.mark.parametrize("repeat", ["tile_bshd", "tile_ri"])
def test_tile_repeat_is_paged(repeat):
    case = make_decoder_case(77, repeat=repeat, fp16=True, **SPEC)
    assert f"kv-{'tile-bshd' if repeat == 'tile_bshd' else 'repeat-interleave-tile'}" in case.traps
    result = onnx_fuse.optimize(case.model, level=4, target="trt", verify=True)   # paged: random feeds
    assert "trt-paged-kv" in result.report.rule_fires, result.report.warnings
    assert _ops(result)["PagedAttention"] == 1 and _ops(result)["Attention"] == 0
    assert result.report.passed, result.report.verify_failure


@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_tile_bshd_forms_the_cache_attention(target):
    """float32 (not paged at trt: the plugin takes half precision): the cache attention still forms,
    Attention-23 with past / present at onnx, and the numbers match the step's."""
    case = make_decoder_case(77, repeat="tile_bshd", fp16=False, **SPEC)
    result = onnx_fuse.optimize(case.model, level=3, target=target, verify=True, verify_inputs=case.feeds)
    assert "attention-kv-cache" in result.report.rule_fires, result.report.rule_fires
    assert _ops(result)["Attention"] == 1 and _ops(result)["Softmax"] == 0
    assert result.report.passed, result.report.verify_failure


def test_tile_of_the_heads_axis_is_not_gqa():
    """The near miss k.repeat(1, n, 1, 1) reads kv head h % Hkv: no cache attention over Hkv heads."""
    case = make_decoder_case(77, repeat="tile_heads", fp16=True, **SPEC)
    result = onnx_fuse.optimize(case.model, level=4, target="trt", verify=True)
    assert "attention-repeat-kv" not in result.report.rule_fires and _ops(result)["PagedAttention"] == 0
    assert result.report.passed, result.report.verify_failure
