"""attention-blocks-5d-folded (rules/attention/blocks_5d.yaml): attention over heads-first 5-D blocks
[B, H, N, S, D] with the block count N dynamic (Hiera's mask-unit attention through Optimum: N read
from a shape, so H*N is not static and the [B, N, H] order of attention-blocks-5d-batch does not
hold) is a one-head attention on [B*H*N, 1, S, D] views, viewed back; numbers against the original
in ONNX Runtime. And Hiera's idiom end to end, where only the dims named after their views
(passes/_dim_source.py) prove the batch the same in q, K^T and V."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

import onnx_fuse

ATTENTION = {"com.microsoft::MultiHeadAttention", "Attention", "onnx_fuse::FusedAttention"}
SIZES = {"batch": 2, "N": 3, "M": 3, "S": 5, "T": 7}


def _blocks(h, heads=2, kn="N", kb="batch", mask=False):
    """softmax(q @ kt [+ m]) @ v on q [B, H, N, S, 16], kt [B, H, N, 16, T], v [B, H, N, T, 16]."""
    n = h.node
    nodes = [n("MatMul", ["q", "kt"], ["sc"])]
    nodes += [n("Add", ["sc", "m"], ["sm"])] if mask else []
    nodes += [n("Softmax", ["sm" if mask else "sc"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi("q", ["batch", heads, "N", "S", 16]), h.vi("kt", [kb, heads, kn, 16, "T"]),
              h.vi("v", [kb, heads, kn, "T", 16])]
    inputs += [h.vi("m", [1, 1, 1, 1, "T"])] if mask else []
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", heads, "N", "S", 16])])


def _fuse(model, target):
    """The pipeline as h.fuse runs it, and how often the rule fired (read from the report: at some
    targets the later view cleanups replace every node it emitted)."""
    result = onnx_fuse.optimize(model, level=3, target=target, float32_plugins=True)
    out = result.to_proto()
    onnx.checker.check_model(out, full_check=False)
    return out, result.report.rule_fires.get("attention-blocks-5d-folded", 0)


def _feeds(h, model, sizes=SIZES):
    return {i.name: h.rng.standard_normal([d.dim_value or sizes[d.dim_param] for d in
                                           i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("heads", [1, 2])
def test_heads_first_blocks_fold_into_the_batch(h, target, heads):
    """One attention, no Softmax left; the numbers unchanged. (N = 0 is left out: the rule's own views
    take it, but the attention lowerings' 3-D views, [0, -1, 16], refuse an empty batch, as for any
    attention.)"""
    model = _blocks(h, heads)
    out, fires = _fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert fires == 1
    h.assert_close(model, out, _feeds(h, model))


def test_heads_first_near_misses(h):
    """Block counts or batches of other names in q and K^T / V (broadcasting is possible) are refused
    with the reason; a mask is not taken (no Add in the pattern). The numbers stay the original's."""
    for model in (_blocks(h, kn="M"), _blocks(h, kb="other")):
        reasons = h.reasons(model, "ort", "attention-blocks-5d-folded")
        assert any("batch and blocks must be proven the same" in r for r in reasons), reasons
        out, fires = _fuse(model, "ort")
        assert "Softmax" in h.ops(out) and not fires
        h.assert_close(model, out, _feeds(h, model, dict(SIZES, other=2)))
    masked = _blocks(h, mask=True)
    out, fires = _fuse(masked, "ort")
    assert not fires
    h.assert_close(masked, out, _feeds(h, masked))


# Hiera's mask-unit attention as Optimum's TorchScript export writes it, in small: tokens x [B, T, 16]
# are unrolled through a view whose -1 is B only because T is even ([-1, 2, 16] and back to
# [-1, T, 16]), the window count N = T // 4 is read from the unrolled tokens' shape, qkv viewed
# [B, -1, N, 3, H, 8] (the -1 is T / N: not a symbolic size either) and permuted to [3, B, H, N, S, 8],
# q scaled, softmax(q @ k^T) @ v, and the windows put back [B, N*S, H*8].
HIERA = '''
<ir_version: 9, opset_import: ["" : 18]>
g (float[batch, tokens, 16] x, float[16, 48] w) => (float[?, ?, ?] y)
{
    c0 = Constant<value = int64[1] {0}>()
    c1 = Constant<value = int64[1] {1}>()
    c2 = Constant<value = int64[1] {2}>()
    m1 = Constant<value = int64[1] {-1}>()
    four = Constant<value = int64[1] {4}>()
    pair = Constant<value = int64[3] {-1, 2, 16}>()
    xy = Reshape(x, pair)
    sx = Shape(x)
    t = Slice(sx, c1, c2, c0)
    d16 = Constant<value = int64[1] {16}>()
    back = Concat<axis = 0>(m1, t, d16)
    u = Reshape(xy, back)
    su = Shape(u)
    b = Slice(su, c0, c1, c0)
    tu = Slice(su, c1, c2, c0)
    n = Div(tu, four)
    qkv = MatMul(u, w)
    tail = Constant<value = int64[3] {3, 2, 8}>()
    vs = Concat<axis = 0>(b, m1, n, tail)
    v6 = Reshape(qkv, vs)
    p6 = Transpose<perm = [3, 0, 4, 2, 1, 5]>(v6)
    q0, k0, v0 = Split<axis = 0, num_outputs = 3>(p6)
    q = Squeeze(q0, c0)
    k = Squeeze(k0, c0)
    v = Squeeze(v0, c0)
    scale = Constant<value = float {0.35355339}>()
    qs = Mul(q, scale)
    kt = Transpose<perm = [0, 1, 2, 4, 3]>(k)
    sc = MatMul(qs, kt)
    p = Softmax<axis = -1>(sc)
    o = MatMul(p, v)
    ot = Transpose<perm = [0, 3, 2, 1, 4]>(o)
    os = Constant<value = int64[3] {0, -1, 16}>()
    y = Reshape(ot, os)
}'''


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_hiera_mask_unit_attention(h, target):
    """Fused at every target and numerically the original's at two sizes (T = 16: 4 windows of 4;
    T = 8 at batch 3)."""
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(HIERA), data_prop=True)
    out, fires = _fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert fires == 1
    for b, t in ((2, 16), (3, 8)):
        feeds = {"x": h.rng.standard_normal((b, t, 16)).astype(np.float32),
                 "w": (h.rng.standard_normal((16, 48)) / 4).astype(np.float32)}
        h.assert_close(model, out, feeds)
