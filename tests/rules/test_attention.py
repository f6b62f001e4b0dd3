"""rules/attention: mha.yaml, gqa.yaml, sdpa_key_transpose.yaml on hand-built attention blocks.

Each block goes from 3-D projections q3/k3/v3 [B,S,H*D] through the head split, the scores, an
additive mask [B,1,S,S] (or the key-padding [B,1,1,S], broadcast in the rewrite), Softmax and the
head merge, in the exporters' variants: eager (K^T straight from [B,S,H,D], scale after the
MatMul as Mul or Div) and sdpa (K^T as Reshape/Transpose/Reshape, sqrt(scale) on q and k, NaN guard
after Softmax); GQA with repeat_kv and RotaryEmbedding. Numerics are compared with the original in
ORT; near-misses must not fuse.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

B, S, H, D = 2, 6, 4, 8
HID = H * D


def _block(h, *, form="eager", scale_op="mul", kv_heads=H, rope=False, mask_shape=("b", 1, "s", "s"),
           softmax_axis=-1, k_perm=None, escape_scores=False, merge_to_2d=False, rep_axis=2):
    n = h.node
    hd_k = kv_heads * D
    nodes = [
        n("Shape", ["q3"], ["q3s"]),
        n("Slice", ["q3s", "c0", "c2"], ["bs"]),                     # [B, S]
        n("Concat", ["bs", "hq", "dd"], ["split_shape"], axis=0),     # [B, S, H, D]
        n("Concat", ["bs", "kvh", "dd"], ["kv_split_shape"], axis=0),  # [B, S, Hkv, D]
        n("Reshape", ["q3", "split_shape"], ["qr"]),
        n("Transpose", ["qr"], ["q4"], perm=[0, 2, 1, 3]),
        n("Reshape", ["k3", "kv_split_shape"], ["kr"]),
        n("Reshape", ["v3", "kv_split_shape"], ["vr"]),
        n("Transpose", ["vr"], ["v4"], perm=[0, 2, 1, 3]),
    ]
    q, k_bhsd = "q4", None
    if rope:
        nodes += [n("RotaryEmbedding", ["q4", "cos", "sin"], ["qe"])]
        q = "qe"
    if form == "eager" and not rope and kv_heads == H:
        nodes.append(n("Transpose", ["kr"], ["kt"], perm=k_perm or [0, 2, 3, 1]))
    else:
        nodes.append(n("Transpose", ["kr"], ["k4"], perm=[0, 2, 1, 3]))
        k_bhsd = "k4"
        if rope:
            nodes.append(n("RotaryEmbedding", ["k4", "cos", "sin"], ["ke"]))
            k_bhsd = "ke"
        v_src = "v4"
        if kv_heads != H:
            rep = H // kv_heads
            nodes += [
                n("Shape", [k_bhsd], ["ks5"]),
                n("Gather", ["ks5", "i0"], ["b0"]), n("Gather", ["ks5", "i2"], ["s0"]),
                n("Concat", ["b0", "kvh", "rep", "s0", "dd"], ["exp_shape"], axis=0),
                n("Concat", ["b0", "hq", "s0", "dd"], ["rep_shape"], axis=0),
                n("Unsqueeze", [k_bhsd, "ax_rep"], ["ku"]), n("Expand", ["ku", "exp_shape"], ["kx"]),
                n("Reshape", ["kx", "rep_shape"], ["kxr"]),
                n("Unsqueeze", ["v4", "ax_rep"], ["vu"]), n("Expand", ["vu", "exp_shape"], ["vx"]),
                n("Reshape", ["vx", "rep_shape"], ["vxr"]),
            ]
            k_bhsd, v_src = "kxr", "vxr"
        if form == "sdpa":
            nodes += [
                n("Shape", [k_bhsd], ["k4s"]),
                n("Slice", ["k4s", "c2", "c4"], ["sd_"]),
                n("Concat", ["m1", "sd_"], ["flat_shape"], axis=0),
                n("Reshape", [k_bhsd, "flat_shape"], ["kf"]),
                n("Transpose", ["kf"], ["kft"], perm=[0, 2, 1]),
                n("Slice", ["k4s", "c0", "c2"], ["bh"]),
                n("Slice", ["k4s", "c3", "c4"], ["dlast"]),
                n("Slice", ["k4s", "c2", "c3"], ["slast"]),
                n("Concat", ["bh", "dlast", "slast"], ["kt_shape"], axis=0),
                n("Reshape", ["kft", "kt_shape"], ["kt"]),
            ]
        else:
            nodes.append(n("Transpose", [k_bhsd], ["kt"], perm=k_perm or [0, 1, 3, 2]))
    v = "vxr" if kv_heads != H else "v4"
    if form == "sdpa":
        nodes += [n("Mul", [q, "sqrt_scale"], ["qs"]), n("Mul", ["kt", "sqrt_scale"], ["ks"]),
                  n("MatMul", ["qs", "ks"], ["sc"])]
        scores = "sc"
    else:
        nodes.append(n("MatMul", [q, "kt"], ["sc"]))
        if scale_op == "mul":
            nodes.append(n("Mul", ["sc", "scale"], ["ss"]))
        else:
            nodes.append(n("Div", ["sc", "sqrt_d"], ["ss"]))
        scores = "ss"
    nodes += [n("Add", [scores, "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=softmax_axis)]
    probs = "p"
    if form == "sdpa":
        nodes += [n("IsNaN", ["p"], ["isn"]), n("Where", ["isn", "zero", "p"], ["pz"])]
        probs = "pz"
    nodes += [n("MatMul", [probs, v], ["o"]), n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3])]
    outputs = [h.vi("y", [None, HID] if merge_to_2d else ["b", "s", HID])]
    if merge_to_2d:
        nodes.append(n("Reshape", ["ot", "flat2"], ["y"]))
    else:
        nodes += [n("Concat", ["bs", "m1"], ["merge_shape"], axis=0), n("Reshape", ["ot", "merge_shape"], ["y"])]
    if escape_scores:
        nodes.append(n("ReduceMax", ["sm"], ["side"], keepdims=0))
        outputs.append(h.vi("side", None))
    half = np.linspace(0, 1, D // 2, dtype=np.float32)
    inits = {
        "c0": np.array([0], np.int64), "c2": np.array([2], np.int64), "c3": np.array([3], np.int64),
        "c4": np.array([4], np.int64), "m1": np.array([-1], np.int64), "dd": np.array([D], np.int64),
        "i0": np.array([0], np.int64), "i2": np.array([2], np.int64),
        "kvh": np.array([kv_heads], np.int64), "rep": np.array([H // kv_heads], np.int64),
        "hq": np.array([H], np.int64), "ax_rep": np.array([rep_axis], np.int64),
        "flat2": np.array([-1, HID], np.int64),
        "scale": np.array(1 / np.sqrt(D), np.float32), "sqrt_d": np.array(np.sqrt(D), np.float32),
        "sqrt_scale": np.array(D ** -0.25, np.float32), "zero": np.array(0.0, np.float32),
        "cos": np.cos(np.outer(np.arange(S), half))[None].repeat(B, 0).astype(np.float32),
        "sin": np.sin(np.outer(np.arange(S), half))[None].repeat(B, 0).astype(np.float32),
    }
    inputs = [h.vi("q3", ["b", "s", HID]), h.vi("k3", ["b", "s", hd_k]), h.vi("v3", ["b", "s", hd_k]),
              h.vi("mask", list(mask_shape))]
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, kv_heads=H, mask_rows=S, causal=True):
    hd_k = kv_heads * D
    mask = np.zeros((B, 1, mask_rows, S), np.float32)
    if causal:
        mask += np.triu(np.full((mask_rows, S), np.finfo(np.float32).min), 1)
    mask[1, :, :, S - 2:] = np.finfo(np.float32).min  # right padding on row 1
    return {"q3": h.rng.standard_normal((B, S, HID)).astype(np.float32),
            "k3": h.rng.standard_normal((B, S, hd_k)).astype(np.float32),
            "v3": h.rng.standard_normal((B, S, hd_k)).astype(np.float32), "mask": mask}


MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
GQA_OP = {"ort": "com.microsoft::GroupQueryAttention", "onnx": "Attention", "trt": "Attention"}


def _op_for(kv_heads):
    """ORT gets MultiHeadAttention when K/V have q's heads, GroupQueryAttention otherwise."""
    return MHA_OP if kv_heads == H else GQA_OP


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form,scale_op", [("eager", "mul"), ("eager", "div"), ("sdpa", "mul")])
def test_mha_fuses(h, target, form, scale_op):
    model = _block(h, form=form, scale_op=scale_op)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1, ops
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_mha_merge_to_2d(h, target):
    """GPT-2 merges heads to [B*S, H*D] for its Gemm; the merge Reshape is re-applied."""
    model = _block(h, merge_to_2d=True)
    out = h.fuse(model, target)
    assert h.ops(out)[MHA_OP[target]] == 1
    assert target != "ort" or "attention-mha-ort" in h.fired(out)
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("form", ["eager", "sdpa"])
@pytest.mark.parametrize("kv_heads,rope", [(2, True), (1, False), (H, True)])
def test_gqa_and_rope_attention_fuses(h, target, form, kv_heads, rope):
    model = _block(h, form=form, kv_heads=kv_heads, rope=rope)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[_op_for(kv_heads)[target]] == 1, ops
    assert "Softmax" not in ops and "Unsqueeze" not in ops, ops
    h.assert_close(model, out, _feeds(h, kv_heads=kv_heads))


def _assert_no_fusion(h, model, rule, why, targets=("ort", "onnx")):
    for target in targets:
        out = h.fuse(model, target)
        assert "Softmax" in h.ops(out), (target, h.ops(out))
    rs = h.reasons(model, "onnx", rule)
    assert any(re.search(why, r) for r in rs), rs


def test_softmax_over_wrong_axis_does_not_fuse(h):
    _assert_no_fusion(h, _block(h, softmax_axis=2), "attention", "softmax must run over the keys")


def test_wrong_key_transpose_does_not_fuse(h):
    # [0,2,1,3] on K gives [B,H,S,D]: q @ that is not q @ k^T (D == S would even type-check)
    model = _block(h, k_perm=[0, 2, 1, 3])
    out = h.fuse(model, "onnx")
    assert "Softmax" in h.ops(out)


def test_escaping_scores_do_not_fuse(h):
    _assert_no_fusion(h, _block(h, escape_scores=True), "attention", "is also used by")


KEY_PADDING = ("b", 1, 1, "s")  # transformers 4.x BERT: (1 - mask) * -10000 unsqueezed to [B,1,1,T]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("kv_heads,rope,op", [(H, False, MHA_OP), (2, True, GQA_OP)])
def test_key_padding_mask_is_broadcast_to_one_row_per_query(h, target, kv_heads, rope, op):
    """The fused ops need a bias row per query: a [B,1,1,T] mask is expanded to [B,1,S,T]."""
    model = _block(h, kv_heads=kv_heads, rope=rope, mask_shape=KEY_PADDING)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[op[target]] == 1 and "Softmax" not in ops, ops
    assert [n.op_type for n in out.graph.node if "mask" in n.input] == ["Expand"]
    # every row compared, the padded query positions of batch row 1 included
    h.assert_close(model, out, _feeds(h, kv_heads=kv_heads, mask_rows=1, causal=False))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_mask_with_a_row_per_query_is_passed_as_is(h, target):
    """No Expand for a [B,1,S,T] bias; Attention-23 on onnx reads it through keep-masked-rows
    (entries below -1e30 squeezed above finfo.min, see rules/attention/lower.yaml), on trt too."""
    out = h.fuse(_block(h), target)
    users = sorted(n.op_type for n in out.graph.node if "mask" in n.input)
    want = ["Max", "Mul"] if target in ("onnx", "trt") else [MHA_OP[target].split("::")[-1]]
    assert users == want


@pytest.mark.parametrize("form", ["eager", "sdpa"])
def test_key_padding_mask_with_packed_qkv_for_ort(h, form):
    model = _with_projections(h, _block(h, form=form, mask_shape=KEY_PADDING))
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["com.microsoft::Attention"] == 1 and "MatMul" not in ops, ops
    # (a Shape may read its dims: shape CSE reads equal dims from a graph input)
    assert [n.op_type for n in out.graph.node if "mask" in n.input and n.op_type != "Shape"] == ["Expand"]
    feeds = _feeds(h, mask_rows=1, causal=False)
    h.assert_close(model, out, {"x": feeds["q3"], "mask": feeds["mask"]})


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("kv_heads,rope", [(H, False), (2, True)])
@pytest.mark.parametrize("mask_shape", [("b", 1, "s", 1), ("s", "s"), (1, "s", "s"), (1, 1, 1, "s")])
def test_masks_that_broadcast_fuse_exactly(h, target, kv_heads, rope, mask_shape):
    """Any additive bias that broadcasts to [B,H,S,T] is the canonical op's mask: one column for
    all keys, rank 2 or 3, one row for every batch and query. The lowering expands it to the
    [.,.,S,T] the fused ops take, so every shape gives the original's numbers."""
    model = _block(h, kv_heads=kv_heads, rope=rope, mask_shape=mask_shape)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[_op_for(kv_heads)[target]] == 1 and "Softmax" not in ops, ops
    feeds = _feeds(h, kv_heads=kv_heads, causal=False)
    dims = {"b": B, "s": S}
    shape = [dims.get(d, d) for d in mask_shape]
    feeds["mask"] = (h.rng.standard_normal(shape) * 3).astype(np.float32)
    h.assert_close(model, out, feeds)


def test_mask_of_rank_five_does_not_fuse(h):
    model = _block(h, mask_shape=("b", 1, 1, "s", "s"))
    _assert_no_fusion(h, model, "attention", "the mask must broadcast to")


def test_repeat_on_wrong_axis_is_not_folded(h):
    """Unsqueeze at axis 1 then Expand/Reshape interleaves heads differently: not repeat_kv. The
    attention still fuses, on the expanded K/V (q's head count), and gives the same numbers."""
    model = _block(h, kv_heads=2, rope=True, rep_axis=1)
    rs = h.reasons(model, "onnx", "attention-repeat-kv")
    out = h.fuse(model, "onnx")
    assert "attention-repeat-kv" not in h.fired(out) and "Softmax" not in h.ops(out)
    h.assert_close(model, out, _feeds(h, kv_heads=2))


def _with_projections(h, model, *, shared_input=True, unbiased=""):
    """Replace inputs q3/k3/v3 by x @ W + b (BERT's biased projections of one input); the
    projections named in ``unbiased`` are x @ W alone (VideoMAE: no k bias)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep = [i for i in g.input if i.name not in ("q3", "k3", "v3")]
    del g.input[:]
    g.input.extend(keep + [h.vi("x", ["b", "s", HID])] + ([] if shared_input else [h.vi("x2", ["b", "s", HID])]))
    proj = []
    for n in "qkv":
        src = "x" if (shared_input or n != "v") else "x2"
        g.initializer.append(onnx.numpy_helper.from_array((0.2 * h.rng.standard_normal((HID, HID))).astype(np.float32), f"w{n}"))
        if n in unbiased:
            proj.append(h.node("MatMul", [src, f"w{n}"], [f"{n}3"]))
            continue
        proj += [h.node("MatMul", [src, f"w{n}"], [f"m{n}"]), h.node("Add", [f"m{n}", f"b{n}"], [f"{n}3"])]
        g.initializer.append(onnx.numpy_helper.from_array((0.1 * h.rng.standard_normal(HID)).astype(np.float32), f"b{n}"))
    for node in g.node:  # the head split shapes read x, as in a dynamo export
        if node.op_type == "Shape" and node.input[0] == "q3":
            node.input[0] = "x"
    nodes = proj + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return onnx.shape_inference.infer_shapes(m, data_prop=True)


@pytest.mark.parametrize("form", ["eager", "sdpa"])
def test_packed_qkv_attention_for_ort(h, form):
    model = _with_projections(h, _block(h, form=form))
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["com.microsoft::Attention"] == 1 and "MatMul" not in ops, ops
    feeds = _feeds(h)
    feeds = {"x": feeds["q3"], "mask": feeds["mask"]}
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("mask_shape", [("b", 1, "s", "s"), KEY_PADDING])
def test_packed_qkv_attention_without_a_k_bias(h, mask_shape):
    """VideoMAE: q and v biased, k not: packed Attention with a zero k bias (onnxscript packs it too)."""
    model = _with_projections(h, _block(h, mask_shape=mask_shape), unbiased="k")
    out = h.fuse(model, "ort")
    ops = h.ops(out)
    assert ops["com.microsoft::Attention"] == 1 and "MatMul" not in ops, ops
    feeds = _feeds(h, mask_rows=1, causal=False) if mask_shape == KEY_PADDING else _feeds(h)
    h.assert_close(model, out, {"x": feeds["q3"], "mask": feeds["mask"]})


def test_packed_qkv_with_only_q_biased_is_not_packed(h):
    """v without a bias too: the rule's v3 = Add(MatMul(x, wv), bv) does not match; MultiHeadAttention."""
    model = _with_projections(h, _block(h), unbiased="kv")
    ops = h.ops(h.fuse(model, "ort"))
    assert "com.microsoft::Attention" not in ops and ops["com.microsoft::MultiHeadAttention"] == 1, ops


def test_packed_qkv_needs_one_input(h):
    """v projected from another tensor (cross attention): MultiHeadAttention, not packed Attention."""
    model = _with_projections(h, _block(h), shared_input=False)
    ops = h.ops(h.fuse(model, "ort"))
    assert "com.microsoft::Attention" not in ops and ops["com.microsoft::MultiHeadAttention"] == 1, ops
