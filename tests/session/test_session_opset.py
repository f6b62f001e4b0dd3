"""InferenceSession(opset=N): the ceiling of optimize(opset=N) passed through, part of the cache key.
Before, the session had no such option (a TypeError from ORT's own constructor for the unknown
keyword), so a deployment pinned below opset 23 could not use the drop-in."""

from __future__ import annotations

import types
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper

from onnx_fuse import InferenceSession
from onnx_fuse.errors import OnnxFuseWarning
from tests.rules import conftest as rule_helpers
from tests.rules import test_attention as prefill
from tests.rules.test_attention_plain import _at

CPU = ["CPUExecutionProvider"]


def _h():
    return types.SimpleNamespace(node=helper.make_node, vi=rule_helpers.vi, make_model=rule_helpers.make_model,
                                 F32=rule_helpers.F32, rng=np.random.default_rng(0))


@pytest.fixture(scope="module")
def block() -> onnx.ModelProto:
    """One GQA attention block (sdpa form, causal + padding mask) declared at opset 18."""
    return _at(prefill._block(_h(), form="sdpa", kv_heads=2), 18)


def _saved_opset(sess) -> int:
    model = onnx.load(sess.onnx_fuse_stats.cache_entry + "/model.onnx", load_external_data=False)
    return next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))


def test_opset_is_passed_through_and_keyed(block):
    data = block.SerializeToString()
    free = InferenceSession(data, providers=CPU, target="onnx")
    pinned = InferenceSession(data, providers=CPU, target="onnx", opset=18)
    assert free.onnx_fuse_optimized and pinned.onnx_fuse_optimized
    assert _saved_opset(free) == 23 and _saved_opset(pinned) == 18
    assert "attention-plain-grouped" in pinned.onnx_fuse_stats.report["rule_fires"]
    assert pinned.onnx_fuse_stats.opset == 18 and free.onnx_fuse_stats.opset is None
    assert pinned.onnx_fuse_stats.cache_key != free.onnx_fuse_stats.cache_key
    again = InferenceSession(data, providers=CPU, target="onnx", opset=18)
    assert again.onnx_fuse_cache_hit is True and again.onnx_fuse_stats.cache_key == pinned.onnx_fuse_stats.cache_key
    feeds = prefill._feeds(_h(), kv_heads=2)
    ref = onnxruntime.InferenceSession(data, providers=CPU).run(None, feeds)
    for got in (pinned.run(None, feeds), again.run(None, feeds)):
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5)


def test_without_cache_too(block):
    sess = InferenceSession(block.SerializeToString(), providers=CPU, target="onnx", opset=20, cache_dir=False)
    assert sess.onnx_fuse_optimized and sess.onnx_fuse_cache_hit is None
    assert "attention-plain-grouped" in sess.onnx_fuse_stats.report["rule_fires"]


@pytest.mark.parametrize("bad", [6, 99, "18", True, 18.0])
def test_bad_opset_is_a_value_error(block, bad):
    with pytest.raises(ValueError, match="^onnx_fuse.InferenceSession: opset must be an integer"):
        InferenceSession(block.SerializeToString(), providers=CPU, opset=bad)


def test_model_above_the_ceiling_runs_the_original(block):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = InferenceSession(block.SerializeToString(), providers=CPU, opset=17)
    assert not sess.onnx_fuse_optimized and "above --opset 17" in sess.onnx_fuse_stats.fallback_reason
    assert [w for w in caught if issubclass(w.category, OnnxFuseWarning)]
