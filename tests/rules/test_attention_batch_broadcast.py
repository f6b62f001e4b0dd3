"""Attention whose q and k / v batch axes broadcast (one of them 1, the other not): the MatMuls of the original
broadcast a learned memory k, v [1, H, T, D] (or one query set [1, H, S, D]) over the batch, while
MultiHeadAttention and Attention want one batch for q, k and v ("Input 'query', 'key' and 'value' shall have same
dim 0", "inconsistent batch_size (between Q and K)"). The recognizer (attention-scores) and
attention-bmm-channels-first refuse it; fused, ONNX Runtime refused the optimized model at run time at every target
(fuzz_s42 attn_cf seed 9: a channels-first memory [1, C, T] under queries [B, C, N]). The same batch on both sides,
static or one symbolic name, still fuses."""

from __future__ import annotations

import numpy as np
import pytest

H, S, T, D = 2, 4, 3, 8
ATTN = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _model(h, qb, kb):
    """softmax(q k^T / sqrt(D)) v, q [qb, H, S, D], k / v inputs [kb, H, T, D]."""
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["s"]),
             n("Mul", ["s", "sc"], ["ss"]), n("Softmax", ["ss"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    ob = kb if qb == 1 else qb
    return h.make_model(nodes, [h.vi("q", [qb, H, S, D]), h.vi("k", [kb, H, T, D]), h.vi("v", [kb, H, T, D])],
                        [h.vi("y", [ob, H, S, D])], {"sc": np.array(D ** -0.5, np.float32)}, opset=18)


def _feeds(qb, kb):
    rng = np.random.default_rng(7)
    return {"q": rng.standard_normal((qb, H, S, D)).astype(np.float32),
            "k": rng.standard_normal((kb, H, T, D)).astype(np.float32),
            "v": rng.standard_normal((kb, H, T, D)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("qb, kb, run", [("b", 1, (2, 1)), (1, "b", (1, 3)), (2, 1, (2, 1))])
def test_a_batch_that_broadcasts_stays_unfused_and_runs(h, target, qb, kb, run):
    model = _model(h, qb, kb)
    out = h.fuse(model, target)
    assert ATTN[target] not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(*run))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("qb, kb, run", [("b", "b", (2, 2)), (1, 1, (1, 1)), (2, 2, (2, 2))])
def test_one_batch_still_fuses(h, target, qb, kb, run):
    model = _model(h, qb, kb)
    out = h.fuse(model, target)
    assert h.ops(out)[ATTN[target]] == 1, h.ops(out)
    h.assert_close(model, out, _feeds(*run))


def _cf_model(h, mem_batch):
    """channels-first one-head attention (the VQGAN AttnBlock's) of q [B, C, N] over a memory k, v [mb, C, T]."""
    n = h.node
    c, nq, t = 8, 5, 3
    rng = np.random.default_rng(3)
    nodes = [n("Transpose", ["q"], ["q3"], perm=[0, 2, 1]), n("MatMul", ["q3", "k"], ["s"]),
             n("Mul", ["s", "sc"], ["ss"]), n("Softmax", ["ss"], ["p"], axis=2),
             n("Transpose", ["p"], ["pt"], perm=[0, 2, 1]), n("MatMul", ["v", "pt"], ["y"])]
    inits = {"sc": np.array(c ** -0.5, np.float32),
             "k": rng.standard_normal((mem_batch, c, t)).astype(np.float32),
             "v": rng.standard_normal((mem_batch, c, t)).astype(np.float32)}
    return h.make_model(nodes, [h.vi("q", ["b", c, nq])], [h.vi("y", ["b", c, nq])], inits, opset=18), c, nq


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_channels_first_memory_of_batch_one_is_not_rewritten(h, target):
    model, c, nq = _cf_model(h, 1)
    out = h.fuse(model, target)
    assert "attention-bmm-channels-first" not in h.fired(out) and ATTN[target] not in h.ops(out), h.ops(out)
    h.assert_close(model, out, {"q": np.random.default_rng(5).standard_normal((2, c, nq)).astype(np.float32)})
