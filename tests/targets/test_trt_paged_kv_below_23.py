"""trt-paged-kv below opset 23 (``--opset N`` with N < 23): RotaryEmbedding-23 cannot be written, so
RoPE stays the export's elementwise cos / sin arithmetic and the rotated q / k feed the attention
itself. The readers hook (optimizer/targets/trt_paged_kv.py, ``_attention_qk``) follows the cache
positions into them as it follows them into RotaryEmbedding's cos / sin; before, it refused
("positions flow into AttentionKV ..., not RoPE") and a pinned LLaMA kept its contiguous cache
with the plain MatMul / Softmax chain. The paged model is compared with the contiguous original
on a ragged decode batch and a chunked prefill, one sequence at a time."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import gather_pool, paged_inputs_from_contiguous
from onnx_fuse.verify import make_session
from tests.targets import test_trt_paged_kv as paged_kv

MODEL = paged_kv.MODELS / "llama64_kv_dynamo.onnx"   # opset 20, RoPE, GQA 2 / 1 heads


@pytest.fixture(scope="module")
def pinned():
    result = onnx_fuse.optimize(str(MODEL), level=4, target="trt", float32_plugins=True, opset=20)
    return result


@pytest.fixture(scope="module")
def sessions(pinned):
    return make_session(onnx.load(str(MODEL))), make_session(pinned.model)


def test_pinned_rope_decoder_is_paged(pinned):
    ops = paged_kv._ops(pinned.model)
    assert ops["PagedAttention"] == paged_kv.LAYERS, ops
    assert ops["Softmax"] == 0 and ops["RotaryEmbedding"] == 0 and ops["Attention"] == 0, ops
    assert dict(pinned.model.opset_imports)[""] == 20
    assert not [w for w in pinned.report.warnings if "trt-paged-kv" in w], pinned.report.warnings


@pytest.mark.parametrize("past_lens, new", [((7, 3), 1), ((0, 9), 1), ((5, 2), 3)])
def test_pinned_paged_matches_original(pinned, sessions, past_lens, new):
    orig, got_sess = sessions
    feeds = paged_kv._feeds(2, max(past_lens), new, seed=new, hkv=1)
    pf = paged_inputs_from_contiguous(feeds, 4, past_lens=past_lens, new_tokens=new, seed=1)
    got = paged_kv._run(got_sess, pf)
    for b, length in enumerate(past_lens):
        ref = paged_kv._run_original(orig, feeds, b, length)
        np.testing.assert_allclose(got["logits"][b], ref["logits"][0], rtol=1e-4, atol=1e-5)
        pool = got["kv_pool_k_out.1"]
        np.testing.assert_allclose(gather_pool(pool, pf["block_tables"][b], length + new),
                                   ref["present.1.key"][0], rtol=1e-5, atol=1e-6)
