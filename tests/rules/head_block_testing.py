"""Shared fixture of the head-split rule tests (test_cast_before_head_split, test_norm_island_before_head_transpose,
test_norm_before_head_transpose): a layer's attention as the dynamo export writes it, without a cache: q / k / v
[B,S,H*D] viewed into heads and transposed, ops of the test's own on q / k, rotate-half RoPE from positions
(attention_testing.rotate_half_nodes), softmax attention and the merge back (scores_merge_nodes). The model's
float type is float32 or float16; the feeds' mask follows it. test_rotary_between_head_transposes shares the
constants (head_inits)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from attention_testing import scores_merge_nodes

B, S, H, D = 2, 3, 4, 8
BIG = np.iinfo(np.int64).max
F16 = TensorProto.FLOAT16


def split_heads(n, qk=lambda name: []) -> list:
    """Reshape (by ``shp``) + Transpose of q3 / k3 / v3 into heads: qhf / khf and v4; ``qk(name)`` the nodes
    q / k get right after their split (from {name}hf to {name}4)."""
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [n("Reshape", [f"{name}3", "shp"], [f"{name}sp"]),
                  n("Transpose", [f"{name}sp"], [f"{name}hf" if name != "v" else "v4"], perm=[0, 2, 1, 3])]
        if name != "v":
            nodes += qk(name)
    return nodes


def cast_down_merge(n) -> list:
    """A float32 rotation in a float16 model: q4rot / k4rot cast to float16 (q4r16 / k4r16), then the scores
    with float16 v4 and the merge back."""
    merge = scores_merge_nodes(n, "k4r16", "v4")
    merge[1].input[0] = "q4r16"
    return [n("Cast", ["q4rot"], ["q4r16"], to=F16), n("Cast", ["k4rot"], ["k4r16"], to=F16), *merge]


def head_inputs(h, elem=TensorProto.FLOAT, s="s") -> list:
    """pos [s] (int64), q3 / k3 / v3 [b, s, H*D] and the additive mask [b, 1, s, s] in ``elem``."""
    return [h.vi("pos", [s], elem=7), *(h.vi(f"{x}3", ["b", s, H * D], elem=elem) for x in "qkv"),
            h.vi("mask", ["b", 1, s, s], elem=elem)]


def head_inits(scale_dtype=np.float32, **weights) -> dict:
    """The split's shape, the test's ``weights`` (after it, as the tests had them), the rotation's constants
    (inv_freq, the axes and slice bounds rotate_half_nodes reads) and the merge's; the attention scale in
    ``scale_dtype`` (the model's float type)."""
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    return {"shp": np.array([0, 0, H, D], np.int64), **weights,
            "ax02": np.array([0, 2], np.int64), "ax1": np.array([1], np.int64), "inv_freq": inv,
            "s_0": np.array([0], np.int64), "s_half": np.array([D // 2], np.int64),
            "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
            "scale": np.array(D ** -0.5, scale_dtype), "hd": np.array([H * D], np.int64)}


def head_feeds(h, s=S, dtype=np.float16) -> dict:
    """Positions 0..s-1, q3 / k3 / v3 drawn from ``h.rng`` in ``dtype``, a causal additive mask with one key of
    batch row 1 padded. float16: fill -1e4, row 1's last key (every query keeps its first key: float16 has no
    exact all-masked row); float32: fill -1e9, row 1's first key (left padding)."""
    r = h.rng
    f = {"pos": np.arange(s), **{x: r.standard_normal((B, s, H * D)).astype(dtype) for x in ("q3", "k3", "v3")}}
    fill = -1e4 if dtype == np.float16 else -1e9
    m = np.triu(np.full((s, s), fill), 1) + np.zeros((B, 1, s, s))
    if dtype == np.float16:
        m[1, :, :, -1:] = fill
    else:
        m[1, :, :, :1] = fill
    f["mask"] = m.astype(dtype)
    return f
