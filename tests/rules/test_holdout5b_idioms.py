"""Idioms found on the fifth hold-out sweep, part B (encoders, vision, audio: tools/holdout_specs.py
HOLDOUT5B, docs/holdout.md), each as a tiny graph that failed before its fix; numbers against the
original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 4, 8
ATTENTION = {"com.microsoft::MultiHeadAttention", "Attention", "onnx_fuse::FusedAttention"}


def _head_scaled_attention(h, scale_shape, kperm=(0, 1, 3, 2), commuted=False):
    """Swin v2's cosine attention after the L2 norms: softmax((q @ k^T) * c + bias) @ v with c one
    logit scale per head ([H, 1, 1]); k is [B, H, S, D] (or [B, S, H, D] with kperm [0, 2, 3, 1])."""
    n = h.node
    mul = ["c", "sc"] if commuted else ["sc", "c"]
    nodes = [n("Transpose", ["k"], ["kt"], perm=list(kperm)), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", mul, ["ss"]), n("Add", ["ss", "bias"], ["sb"]), n("Softmax", ["sb"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["y"])]
    r = np.random.default_rng(1)
    inits = {"c": np.exp(r.uniform(0.5, 2.5, scale_shape)).astype(np.float32),
             "bias": (16 / (1 + np.exp(-r.standard_normal((H, S, S))))).astype(np.float32)}
    kshape = ["batch", H, S, D] if list(kperm) == [0, 1, 3, 2] else ["batch", S, H, D]
    return h.make_model(nodes, [h.vi("q", ["batch", H, S, D]), h.vi("k", kshape), h.vi("v", ["batch", H, S, D])],
                        [h.vi("y", ["batch", H, S, D])], inits)


def _feeds(h, model):
    shapes = {i.name: [d.dim_value or B for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    feeds = {k: h.rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    for name in ("q", "k"):  # unit vectors, as after the cosine attention's L2 norms
        feeds[name] /= np.linalg.norm(feeds[name], axis=-1, keepdims=True)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["heads", "heads4d", "bthd", "commuted"])
def test_per_head_score_scale_is_fused(h, target, form):
    """Swin v2 (hold-out 5B): the scores times a per-head logit scale [H, 1, 1] (attention 0/4 on
    swinv2 before: the attention rules take one number as the scale); the factor moves onto q and the
    attention fuses, the numbers unchanged."""
    model = _head_scaled_attention(h, [1, H, 1, 1] if form == "heads4d" else [H, 1, 1],
                                   kperm=(0, 2, 3, 1) if form == "bthd" else (0, 1, 3, 2), commuted=form == "commuted")
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert h.fired(out)["scores-head-scale"] >= 1
    h.assert_close(model, out, _feeds(h, model))


def test_per_head_score_scale_near_misses(h):
    """A scale that varies along the keys ([1, 1, S]: not one number per matrix) is refused with the
    reason and the attention stays unfused; a single number is the attention rules' own scale."""
    model = _head_scaled_attention(h, [1, 1, S])
    reasons = h.reasons(model, "ort", "scores-head-scale")
    assert any("one number per matrix" in r for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert "Softmax" in h.ops(out) and not h.fired(out)["scores-head-scale"]
    h.assert_close(model, out, _feeds(h, model))
    single = _head_scaled_attention(h, [1, 1, 1])
    out = h.fuse(single, "ort")
    assert h.ops(out)["com.microsoft::MultiHeadAttention"] == 1 and not h.fired(out)["scores-head-scale"]
    h.assert_close(single, out, _feeds(h, single))


G, N, X = 2, 3, 4  # global tokens, blocks, block length (PEGASUS-X)


def _block_local_attention(h, globals_dim=G, heads_static=True, einsum=True):
    """PEGASUS-X's block-local attention as its export writes it: queries in N blocks of X
    ([B, H, N, X, D]) attend to the G global tokens' keys ([B, H, G, D], no block axis) and to their
    own block's keys, in one softmax over the two score blocks side by side; the probabilities are
    split at G and multiplied by the global and the local values, and the two products added.
    einsum=False: the MatMuls einsum-to-matmul writes for it (what the attention rules see)."""
    n = h.node
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    if einsum:
        products = [n("Einsum", ["q", "kg"], ["s1"], equation="BHNKF,BHGF->BHNKG"),
                    n("Einsum", ["q", "kl"], ["s2"], equation="BHNKF,BHNXF->BHNKX"),
                    n("Einsum", ["p1", "vg"], ["o1"], equation="BHNKG,BHGF->BHNKF"),
                    n("Einsum", ["p2", "vl"], ["o2"], equation="BHNKX,BHNXF->BHNKF")]
    else:
        products = [n("Transpose", ["kg"], ["kgt"], perm=[0, 1, 3, 2]), n("Unsqueeze", ["kgt", "n_ax"], ["kgu"]),
                    n("MatMul", ["q", "kgu"], ["s1"]), n("Transpose", ["kl"], ["klt"], perm=[0, 1, 2, 4, 3]),
                    n("MatMul", ["q", "klt"], ["s2"]), n("Unsqueeze", ["vg", "n_ax"], ["vgu"]),
                    n("MatMul", ["p1", "vgu"], ["o1"]), n("MatMul", ["p2", "vl"], ["o2"])]
    nodes = products[:-2] + [
        n("Concat", ["s1", "s2"], ["sc"], axis=-1), n("Add", ["sc", "m"], ["sm"]),
        n("Softmax", ["sm"], ["p"], axis=-1),
        n("Slice", ["p", "z", "g", "ax"], ["p1"]), n("Slice", ["p", "g", "big", "ax"], ["p2"])] + products[-2:] + [
        n("Add", ["o1", "o2"], ["y"])]
    inits = {"z": i64(0), "g": i64(G), "big": i64(2 ** 63 - 1), "ax": i64(4), "n_ax": i64(2)}
    hh = H if heads_static else "heads"
    blocks = ["batch", hh, N, X, D]
    inputs = [h.vi("q", blocks), h.vi("kg", ["batch", hh, globals_dim, D]), h.vi("kl", blocks),
              h.vi("vg", ["batch", hh, globals_dim, D]), h.vi("vl", blocks), h.vi("m", ["batch", 1, N, 1, G + X])]
    return h.make_model(nodes, inputs, [h.vi("y", blocks)], inits)


def _block_feeds(h, model):
    feeds, sizes = {}, {"batch": B, "heads": H, "globals": G}
    for i in model.graph.input:
        shape = [d.dim_value or sizes[d.dim_param] for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = h.rng.standard_normal(shape).astype(np.float32)
    keep = h.rng.random(feeds["m"].shape) < 0.8  # a padding mask: some keys masked out
    feeds["m"] = np.where(keep, 0.0, -1e9).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_block_local_attention_with_global_tokens_is_fused(h, target):
    """PEGASUS-X (hold-out 5B: attention 1/3 before, its block-local layers unfused): the einsums
    become MatMuls (the global keys' missing block axis broadcast), the two key sets one attention
    over their concatenation (attention-concat-keys), the 5-D blocks 4-D heads (attention-blocks-5d),
    and the attention fuses; the numbers are the original's."""
    model = _block_local_attention(h)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts and "Einsum" not in counts, counts
    fired = h.fired(out)
    assert fired["attention-concat-keys"] >= 1 and fired["attention-blocks-5d"] >= 1, fired
    h.assert_close(model, out, _block_feeds(h, model))


def test_block_local_attention_near_misses(h):
    """A split at a constant where the first key set's length is not static is not proven to
    separate the two key sets (refused with the reason); blocks whose head count is not static
    cannot be viewed as heads (refused): attention-blocks-5d-batch folds [B, heads] into the batch
    instead, the static block axis taking the heads' place. Both keep the original's numbers."""
    off = _block_local_attention(h, globals_dim="globals", einsum=False)
    reasons = h.reasons(off, "ort", "attention-concat-keys")
    assert any("split must be at the first key set's" in r for r in reasons), reasons
    out = h.fuse(off, "ort")
    assert "Softmax" in h.ops(out) and not h.fired(out)["attention-concat-keys"]
    h.assert_close(off, out, _block_feeds(h, off))
    dyn = _block_local_attention(h, heads_static=False)
    out = h.fuse(dyn, "ort")
    assert not h.fired(out)["attention-blocks-5d"] and h.fired(out)["attention-blocks-5d-batch"] >= 1
    assert "Softmax" not in h.ops(out)
    assert h.fired(out)["attention-concat-keys"] >= 1  # the join does not need static heads
    h.assert_close(dyn, out, _block_feeds(h, dyn))
