"""rules/layout/heads_3d.yaml norm-before-head-transpose: Phi's qk_layernorm normalizes q / k after the
head Transpose (LayerNormalization over D of [B,H,S,D], trained gamma and beta), so RoPE read
LayerNorm(Transpose(view)) and neither rotary-between-head-transposes nor attention-rotated-heads-3d
took it: each q / k kept its Transpose pair. The norm over the last axis moves before the Transpose
(which keeps that axis), leaving RoPE(Transpose(x)): no Transpose is left at ort / onnx / trt.

The block is a layer's attention as the dynamo export writes it, without a cache: q / k / v [B,S,H*D]
viewed into heads and transposed, LayerNorm on q and k, rotate-half RoPE from positions, softmax
attention, the merge back. Numerics against the original in ONNX Runtime."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attention_testing import rotate_half_nodes, scores_merge_nodes
from head_block_testing import D, H, S, head_feeds, head_inits, head_inputs, split_heads


def _block(h, *, axis=-1, normed_out=False):
    """axis: the LayerNorm's axis (-1: over D); normed_out: q's norm is also a graph output."""
    n = h.node
    nodes = split_heads(n, lambda x: [n("LayerNormalization", [f"{x}hf", f"{x}_gamma", f"{x}_beta"], [f"{x}4"],
                                        axis=axis, epsilon=1e-5)])
    nodes += rotate_half_nodes(n)
    nodes += scores_merge_nodes(n, "k4rot", "v4")
    outputs = [h.vi("y", ["b", "s", H * D])] + ([h.vi("q4", ["b", H, "s", D])] if normed_out else [])
    r = np.random.default_rng(7)
    gshape = (D,) if axis == -1 else (S, D)
    weights = {**{f"{x}_gamma": (1 + 0.1 * r.standard_normal(gshape)).astype(np.float32) for x in "qk"},
               **{f"{x}_beta": (0.1 * r.standard_normal(gshape)).astype(np.float32) for x in "qk"}}
    return h.make_model(nodes, head_inputs(h), outputs, head_inits(**weights))


def _feeds(h, s=S):
    return head_feeds(h, s, np.float32)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_normed_heads_rotate_on_the_3d_view(h, target):
    model = _block(h)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and ops["LayerNormalization"] == 2 and "Transpose" not in ops, ops
    # the two LayerNorms it emitted (at onnx also the rotations the transpose sink rewrote in place)
    assert h.fired(out)["norm-before-head-transpose"] >= 2, h.fired(out)
    # the norms run on the [B,S,H,D] views, the rotations on [B,S,H*D]
    rope = [x for x in out.graph.node if x.op_type == "RotaryEmbedding"]
    assert all(next(a.i for a in x.attribute if a.name == "num_heads") == H for x in rope)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s))


def test_a_norm_read_elsewhere_stays(h):
    """q's norm is a graph output too: moving it would compute it twice, so q keeps its Transposes."""
    model = _block(h, normed_out=True)
    reasons = h.reasons(model, "ort", "norm-before-head-transpose")
    assert any(re.search("must be read only by the rotation", r) for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert h.fired(out)["norm-before-head-transpose"] == 1, h.fired(out)   # k only
    assert [o.name for o in out.graph.output] == ["y", "q4"]
    h.assert_close(model, out, _feeds(h))


def test_a_norm_over_rows_and_head_size_stays(h):
    """LayerNorm over the last two axes ([S, D] of [B,H,S,D]) mixes the positions the Transpose moves."""
    model = _block(h, axis=-2)
    out = h.fuse(model, "ort")
    assert not h.fired(out)["norm-before-head-transpose"], h.fired(out)
    h.assert_close(model, out, _feeds(h))


# --- session 23: any per-head-size norm, and elementwise ops with a last-axis operand, before RoPE ---------
# Muse Glimmer / Spark RMS-normalize q / k after the head Transpose (x * rsqrt(mean(x^2) + eps), no scale:
# RMSNormalization with a ones scale after rms-norm-no-scale) and multiply q by qk_scale_factor before the
# rotation: RoPE(Mul(RMSNorm(Transpose(view)), c)), so the old rule (LayerNorm straight into RoPE) left q
# and k their Transpose pairs (hold-out 25 muse_glimmer_text dyn_mask: Transpose 4 at ort-O3).

def _rms_nodes(n, x, out, *, gamma=None, axes=(-1,)):
    """RMSNorm as the dynamo export writes it: x * 1/sqrt(mean(x^2) + eps) (* gamma)."""
    nodes = [n("Pow", [x, "two"], [f"{x}_sq"]),
             n("ReduceMean", [f"{x}_sq", "rm_axes" if axes == (-1,) else "rm_axes2"], [f"{x}_ms"], keepdims=1),
             n("Add", [f"{x}_ms", "rms_eps"], [f"{x}_ae"]), n("Sqrt", [f"{x}_ae"], [f"{x}_rt"]),
             n("Reciprocal", [f"{x}_rt"], [f"{x}_inv"])]
    if gamma is None:
        return nodes + [n("Mul", [x, f"{x}_inv"], [out])]
    return nodes + [n("Mul", [x, f"{x}_inv"], [f"{x}_nm"]), n("Mul", [f"{x}_nm", gamma], [out])]


def _block23(h, form):
    """form: how q / k go from the head Transpose (qhf / khf [B,H,S,D]) to the rotation (q4 / k4):
    'muse'       q: RMSNorm without scale, * scalar; k: RMSNorm without scale (Muse Glimmer)
    'rms_affine' q / k: RMSNorm with a trained [D] scale, then + a [1,1,1,D] vector, q also / a scalar
    'ln_nobias'  q / k: LayerNormalization without bias (2 inputs), q then * a [D] vector
    'mul_only'   q: no norm, * a [D] vector; k: RMSNorm without scale
    'per_pos'    q: RMSNorm, * a per-position constant [1,1,S,1] (the transpose sink's); k as 'muse'
    'rms_rows'   q / k: RMSNormalization over [S, D] (axis -2, near miss)"""
    n = h.node
    r = np.random.default_rng(11)
    nodes, inits = split_heads(n), {}
    gam = {x: (1 + 0.1 * r.standard_normal(D)).astype(np.float32) for x in "qk"}
    for x in "qk":
        hf, last = f"{x}hf", f"{x}4"
        if form == "muse" or (form in ("mul_only", "per_pos") and x == "k"):
            nodes += _rms_nodes(n, hf, last if x == "k" else "qn")
            if x == "q":
                nodes.append(n("Mul", ["qn", "qk_factor"], [last]))
        elif form == "rms_affine":
            inits[f"{x}_g"] = gam[x]
            inits[f"{x}_shift"] = (0.1 * r.standard_normal((1, 1, 1, D))).astype(np.float32)
            nodes += _rms_nodes(n, hf, f"{x}n", gamma=f"{x}_g")
            nodes.append(n("Add", [f"{x}n", f"{x}_shift"], [last if x == "k" else "qa"]))
            if x == "q":
                nodes.append(n("Div", ["qa", "qk_factor"], [last]))
        elif form == "ln_nobias":
            inits[f"{x}_g"] = gam[x]
            nodes.append(n("LayerNormalization", [hf, f"{x}_g"], [last if x == "k" else "qn"], axis=-1, epsilon=1e-5))
            if x == "q":
                inits["q_vec"] = (1 + 0.2 * r.standard_normal(D)).astype(np.float32)
                nodes.append(n("Mul", ["qn", "q_vec"], [last]))
        elif form == "mul_only":
            inits["q_vec"] = (1 + 0.2 * r.standard_normal(D)).astype(np.float32)
            nodes.append(n("Mul", [hf, "q_vec"], [last]))
        elif form == "per_pos":
            inits["q_pos"] = (1 + 0.3 * r.standard_normal((1, 1, S, 1))).astype(np.float32)
            nodes += _rms_nodes(n, hf, "qn")
            nodes.append(n("Mul", ["qn", "q_pos"], [last]))
        elif form == "rms_rows":
            inits[f"{x}_g"] = (1 + 0.1 * r.standard_normal((S, D))).astype(np.float32)
            nodes.append(n("RMSNormalization", [hf, f"{x}_g"], [last], axis=-2, epsilon=1e-6))
    nodes += rotate_half_nodes(n)
    nodes += scores_merge_nodes(n, "k4rot", "v4")
    s_dim = S if form in ("per_pos", "rms_rows") else "s"
    inits.update(head_inits(two=np.array(2.0, np.float32), rm_axes=np.array([-1], np.int64),
                            rms_eps=np.array(1e-6, np.float32), qk_factor=np.array(3.87, np.float32)))
    return h.make_model(nodes, head_inputs(h, s=s_dim), [h.vi("y", ["b", s_dim, H * D])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["muse", "rms_affine", "ln_nobias", "mul_only"])
def test_norms_and_last_axis_ops_move_before_the_head_transpose(h, form, target):
    model = _block23(h, form)
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    # the moved norms keep the tag of the rule that made them (rms-norm...), so count what is left
    assert ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    rope = [x for x in out.graph.node if x.op_type == "RotaryEmbedding"]
    assert all(next(a.i for a in x.attribute if a.name == "num_heads") == H for x in rope)
    for s in (S, 6):
        h.assert_close(model, out, _feeds(h, s))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_per_position_operand_sinks(h, target):
    """q * c with c [1,1,S,1] (per position) between the norm and the rotation: not this rule's (it moves
    norms only), but the transpose sink takes the region through the 4-D rotation and reads c transposed
    (session 24; on 14ac304 q kept its Transpose pair: 2 / 4 / 2 Transposes at ort / onnx / trt)."""
    model = _block23(h, "per_pos")
    out = h.fuse(model, target, level=4 if target == "trt" else 3)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Transpose" not in ops, ops
    h.assert_close(model, out, _feeds(h))


def test_an_rms_norm_over_rows_and_head_size_stays(h):
    """RMSNormalization over [S, D] (axis -2) mixes the positions the Transpose moves."""
    model = _block23(h, "rms_rows")
    reasons = h.reasons(model, "ort", "norm-before-head-transpose")
    assert any(re.search("must be over the head size", r) for r in reasons), reasons
    out = h.fuse(model, "ort")
    assert h.ops(out)["Transpose"] == 4, h.ops(out)
    h.assert_close(model, out, _feeds(h))
