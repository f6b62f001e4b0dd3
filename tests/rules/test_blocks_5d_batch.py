"""attention-blocks-5d-batch (rules/attention/blocks_5d.yaml): attention over 5-D blocks [B, N, H, K, D]
with the block count N dynamic (LongT5's local / transient-global attention) is the attention of
[B*N, H, K, D] views, viewed back; numbers against the original in ONNX Runtime. And the LongT5 idiom
end to end: blocks built by TorchScript's pad to a multiple of 3, a view whose block count is read back
from the padded shape, and the keys' three-block window, whose N only the shape facts prove equal in
q, K^T and V (tests/passes/test_block_dims.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest

H, K, D = 2, 3, 16
ATTENTION = {"com.microsoft::MultiHeadAttention", "Attention", "onnx_fuse::FusedAttention"}
SIZES = {"batch": 2, "N": 4, "M": 4, "L": 7, "Q": 3, "heads": 2}


def _blocks(h, mask=("batch", "N", H, K, "L"), kn="N"):
    """softmax(q @ kt + m) @ v on q [B, N, H, K, D], kt [B, N, H, D, L], v [B, N, H, L, D] (mask None:
    no Add)."""
    n = h.node
    nodes = [n("MatMul", ["q", "kt"], ["sc"])]
    nodes += [n("Add", ["sc", "m"], ["sm"])] if mask is not None else []
    nodes += [n("Softmax", ["sm" if mask is not None else "sc"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inputs = [h.vi("q", ["batch", "N", H, K, D]), h.vi("kt", ["batch", kn, H, D, "L"]),
              h.vi("v", ["batch", kn, H, "L", D])]
    inputs += [h.vi("m", list(mask))] if mask is not None else []
    return h.make_model(nodes, inputs, [h.vi("y", ["batch", "N", H, K, D])])


def _feeds(h, model):
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value or SIZES[d.dim_param] for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = h.rng.standard_normal(shape).astype(np.float32)
    if "m" in feeds:   # a bias with masked keys (-1e9), as LongT5's local / side masks
        feeds["m"] = np.where(h.rng.random(feeds["m"].shape) < 0.8, feeds["m"], -1e9).astype(np.float32)
    return feeds


MASKS = {"full": ("batch", "N", H, K, "L"), "bias": (1, 1, H, K, "L"), "rank2": (K, "L"),
         "keys": ("batch", "N", 1, 1, "L"), "none": None}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_blocks_with_a_dynamic_count_fold_into_the_batch(h, target, mask):
    """One attention over [B*N, H, K, D]: the mask broadcast over [B, N] first where it is not proven
    so (a relative-position bias [1, 1, H, K, L], a rank-2 one), the numbers unchanged."""
    model = _blocks(h, MASKS[mask])
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    assert h.fired(out)["attention-blocks-5d-batch"] >= 1
    h.assert_close(model, out, _feeds(h, model))


def test_blocks_near_misses(h):
    """Block counts of other names in q and K^T / V (N against M: broadcasting is possible) and a mask
    whose query dim is not static are refused with the reason; the numbers stay the original's."""
    other = _blocks(h, kn="M")
    reasons = h.reasons(other, "ort", "attention-blocks-5d-batch")
    assert any("batch and blocks must be proven the same" in r for r in reasons), reasons
    out = h.fuse(other, "ort")
    assert "Softmax" in h.ops(out) and not h.fired(out)["attention-blocks-5d-batch"]
    h.assert_close(other, out, _feeds(h, other))
    rows = _blocks(h, mask=("batch", "N", 1, "Q", "L"))
    reasons = h.reasons(rows, "ort", "attention-blocks-5d-batch")
    assert any("heads and queries must be static" in r for r in reasons), reasons
    out = h.fuse(rows, "ort")
    assert "Softmax" in h.ops(out) and not h.fired(out)["attention-blocks-5d-batch"]
    h.assert_close(rows, out, _feeds(h, rows))


def _longt5_local(with_bias: bool) -> onnx.ModelProto:
    """LongT5's local attention as TorchScript writes it (no global tokens): q, k, v [B, S, 2, 16] padded
    to whole blocks of 3 by F.pad (pads (-S) % 3, reversed pairwise), viewed [B, N, 3, 2, 16] with N read
    back as Shape(padded)[1] // 3; k and v padded by a block each side and cut [i : N + i] three times;
    scores [B, N, 2, 3, 9] plus a relative-position bias [1, 1, 2, 3, 9]; the output merged back and cut
    to S rows."""
    def blocks(x):
        return f"""
            {x}ng = Neg (s1)
            {x}md = Mod ({x}ng, three)
            {x}u = Unsqueeze ({x}md, z1)
            {x}c = Concat <axis = 0> (z1, z1, z1, z1, z1, {x}u, z1, z1)
            {x}r = Reshape ({x}c, pairs)
            {x}rev = Slice ({x}r, m1, lo, z1, m1)
            {x}t = Transpose <perm = [1, 0]> ({x}rev)
            {x}pads = Reshape ({x}t, m1)
            {x}p = Pad ({x}, {x}pads)
            {x}psh = Shape ({x}p)
            {x}p1 = Gather <axis = 0> ({x}psh, i1)
            {x}nb = Div ({x}p1, three)
            {x}nbu = Unsqueeze ({x}nb, z1)
            {x}bt = Concat <axis = 0> (b0, {x}nbu, blk)
            {x}b = Reshape ({x}p, {x}bt)"""

    def window(x):
        cuts = "".join(f"""
            {x}e{i} = Add ({x}n, c{i})
            {x}e{i}u = Unsqueeze ({x}e{i}, z1)
            {x}w{i} = Slice ({x}bp, st{i}, {x}e{i}u, o1, o1)""" for i in range(3))
        return f"""
            {x}bp = Pad ({x}b, bpads)
            {x}bsh = Shape ({x}b)
            {x}n = Gather <axis = 0> ({x}bsh, i1)""" + cuts + f"""
            {x}9 = Concat <axis = 2> ({x}w0, {x}w1, {x}w2)"""

    consts = "".join(f"""
            c{i} = Constant <value = int64 {{{i}}}> ()
            st{i} = Constant <value = int64[1] {{{i}}}> ()""" for i in range(3))
    text = """<ir_version: 9, opset_import: ["" : 18]>
        g (float[B, S, 2, 16] q, float[B, S, 2, 16] k, float[B, S, 2, 16] v) => (float[B, S, 32] y) {
            i1 = Constant <value = int64 {1}> ()
            three = Constant <value = int64 {3}> ()
            z1 = Constant <value = int64[1] {0}> ()
            o1 = Constant <value = int64[1] {1}> ()
            m1 = Constant <value = int64[1] {-1}> ()
            lo = Constant <value = int64[1] {-9223372036854775807}> ()
            pairs = Constant <value = int64[2] {-1, 2}> ()
            blk = Constant <value = int64[3] {3, 2, 16}> ()
            bpads = Constant <value = int64[10] {0, 1, 0, 0, 0, 0, 1, 0, 0, 0}> ()
            tail = Constant <value = int64[2] {-1, 32}> ()
            bias = Constant <value = float[1, 1, 2, 3, 9] {""" + ", ".join(
        f"{0.1 * ((7 * i) % 11) - 0.5:.1f}" for i in range(54)) + """}> ()
            sh = Shape (q)
            s1 = Gather <axis = 0> (sh, i1)
            b0 = Slice (sh, z1, o1)""" + consts + blocks("q") + blocks("k") + blocks("v") + window("k") + window("v") + """
            qh = Transpose <perm = [0, 1, 3, 2, 4]> (qb)
            khT = Transpose <perm = [0, 1, 3, 4, 2]> (k9)
            vh = Transpose <perm = [0, 1, 3, 2, 4]> (v9)
            sc = MatMul (qh, khT)""" + ("""
            sm = Add (sc, bias)""" if with_bias else """
            sm = Identity (sc)""") + """
            pr = Softmax <axis = -1> (sm)
            o5 = MatMul (pr, vh)
            ot = Transpose <perm = [0, 1, 3, 2, 4]> (o5)
            os = Concat <axis = 0> (b0, tail)
            o3 = Reshape (ot, os)
            s1u = Unsqueeze (s1, z1)
            y = Slice (o3, z1, s1u, o1)
        }"""
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_longt5_local_blocks_fuse(h, target, with_bias):
    """Both block counts are (S+2)//3 once the pad to a multiple and the window cuts are named, so the
    blocks fold into the batch and the attention fuses (0 before: the counts were onnx's unk names);
    the numbers match at every length, a partial last block included. With the bias the 5-D block rule
    folds them; without it fold-layout-chains (which reads Flatten since session 17) already leaves 4-D
    views and the plain recognizer takes them."""
    model = _longt5_local(with_bias)
    out = h.fuse(model, target)
    counts = h.ops(out)
    assert sum(counts[k] for k in ATTENTION) == 1 and "Softmax" not in counts, counts
    if with_bias:
        assert h.fired(out)["attention-blocks-5d-batch"] >= 1
    for s in (1, 2, 3, 4, 7, 11):
        feeds = {x: h.rng.standard_normal((2, s, 2, 16)).astype(np.float32) for x in "qkv"}
        h.assert_close(model, out, feeds)


def test_views_are_named_so_the_bias_is_not_broadcast_again(h):
    """The rewriter names a new Flatten's products and a constant Reshape's 0 / -1 entries from the
    input's dims (rewrite/_rewriter.py _view_dims), so the lowering sees a bias already [B*N, H, K, L]
    against k [B*N, H, L, D] and feeds it as it is (before: an Expand to [1, 1, S, T] read from shapes)."""
    model = _blocks(h, MASKS["full"])
    out = h.fuse(model, "ort")
    counts = h.ops(out)
    assert counts["com.microsoft::MultiHeadAttention"] == 1 and "Expand" not in counts, counts
    mha = next(n for n in out.graph.node if n.op_type == "MultiHeadAttention")
    producer = {o: n for n in out.graph.node for o in n.output}
    assert producer[mha.input[5]].op_type == "Reshape"
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in out.graph.value_info}
    assert shapes[mha.input[5]] == ["N*batch", H, K, "L"], shapes[mha.input[5]]
    h.assert_close(model, out, _feeds(h, model))


def test_longt5_local_views_keep_every_dim_named(h):
    """After the fusion every value of the LongT5 block graph has its dims named (ints or the shape
    facts' names: the views back to [B, N, H, K, D] read their Shape / Concat targets, _target_entries)."""
    out = h.fuse(_longt5_local(True), "ort")
    unnamed = [v.name for v in out.graph.value_info
               if any(not d.dim_param and not d.HasField("dim_value") or d.dim_param.startswith("unk__")
                      for d in v.type.tensor_type.shape.dim)]
    assert not unnamed, unnamed
