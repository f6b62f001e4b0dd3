"""rules/attention/recognize.yaml + lower.yaml on forms beyond the classic prefill block: a KV cache
(Concat of past and new K/V, present as graph outputs), no mask at all (static exports), Gemma-2
softcapping, MQA by broadcast. q/k/v enter as [B,H,S,D] graph inputs, so nothing about how they
were projected matters (the recognizer treats them as leaves). Numerics against the original."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, P, D = 2, 4, 3, 5, 8
T = P + S


def _block(h, *, kv_heads=H, cache=True, mask=True, softcap=0.0, fill=False, repeat=True, guard=False):
    n = h.node
    nodes, outputs = [], []
    k, v = "k_new", "v_new"
    if cache:
        nodes += [n("Concat", ["past_k", "k_new"], ["present_k"], axis=2),
                  n("Concat", ["past_v", "v_new"], ["present_v"], axis=2)]
        k, v = "present_k", "present_v"
        outputs += [h.vi("present_k", [B, kv_heads, T, D]), h.vi("present_v", [B, kv_heads, T, D])]
    tk = T if cache else S
    if kv_heads != H and repeat:
        nodes += [n("Unsqueeze", [k, "ax2"], ["ku"]), n("Expand", ["ku", "rep5"], ["kx"]),
                  n("Reshape", ["kx", "rep4"], ["kr"]),
                  n("Unsqueeze", [v, "ax2"], ["vu"]), n("Expand", ["vu", "rep5"], ["vx"]),
                  n("Reshape", ["vx", "rep4"], ["vr"])]
        k, v = "kr", "vr"
    nodes += [n("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"])]
    scores = "ss"
    if softcap:
        nodes += [n("Div", [scores, "cap"], ["cd"]), n("Tanh", ["cd"], ["th"]), n("Mul", ["th", "cap"], ["cm"])]
        scores = "cm"
    if mask:
        nodes.append(n("Add", [scores, "mask"], ["sm"]))
        scores = "sm"
    if fill:   # masked_fill(bool mask, finfo.min), MPT / older eager attention
        nodes.append(n("Where", ["bmask", "fillv", scores], ["sw"]))
        scores = "sw"
    nodes.append(n("Softmax", [scores], ["p"], axis=-1))
    probs = "p"
    if guard:  # the sdpa export's NaN guard: a row whose keys are all -inf gives 0
        nodes += [n("IsNaN", ["p"], ["isn"]), n("Where", ["isn", "zero", "p"], ["pz"])]
        probs = "pz"
    nodes.append(n("MatMul", [probs, v], ["o"]))
    inputs = [h.vi("q", [B, H, S, D]), h.vi("k_new", [B, kv_heads, S, D]), h.vi("v_new", [B, kv_heads, S, D])]
    if cache:
        inputs += [h.vi("past_k", [B, kv_heads, P, D]), h.vi("past_v", [B, kv_heads, P, D])]
    if mask:
        inputs.append(h.vi("mask", [B, 1, S, tk]))
    if fill:
        inputs.append(h.vi("bmask", [B, 1, S, tk], elem=9))
    inits = {"zero": np.array(0.0, np.float32), "scale": np.array(D ** -0.5, np.float32), "fillv": np.array(np.finfo(np.float32).min, np.float32), "cap": np.array(softcap or 1.0, np.float32),
             "ax2": np.array([2], np.int64), "rep5": np.array([B, kv_heads, H // kv_heads, tk, D], np.int64),
             "rep4": np.array([B, H, tk, D], np.int64)}
    return h.make_model(nodes, inputs, [h.vi("o", [B, H, S, D])] + outputs, inits)


def _feeds(h, kv_heads=H, cache=True, mask=True):
    r = h.rng
    f = {"q": r.standard_normal((B, H, S, D)), "k_new": r.standard_normal((B, kv_heads, S, D)),
         "v_new": r.standard_normal((B, kv_heads, S, D))}
    tk = T if cache else S
    if cache:
        f["past_k"] = r.standard_normal((B, kv_heads, P, D))
        f["past_v"] = r.standard_normal((B, kv_heads, P, D))
    if mask:
        m = np.zeros((B, 1, S, tk))
        m += np.triu(np.full((S, tk), -1e9), 1 + tk - S)   # causal over past + new
        m[1, :, :, :2] = -1e9                                 # left padding on row 1
        f["mask"] = m
    return {k: v.astype(np.float32) for k, v in f.items()}


@pytest.mark.parametrize("kv_heads,ort_op", [(H, "com.microsoft::MultiHeadAttention"), (2, "Attention"),
                                             (1, "Attention")])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_kv_cache_attention_keeps_past_and_present(h, target, kv_heads, ort_op):
    model = _block(h, kv_heads=kv_heads)
    out = h.fuse(model, target)
    ops = h.ops(out)
    want = ort_op if target == "ort" else "Attention"
    assert ops[want] == 1 and "Softmax" not in ops and "Concat" not in ops, ops
    assert "attention-kv-cache" in h.fired(out) or ops[want] == 1
    assert [o.name for o in out.graph.output] == ["o", "present_k", "present_v"]
    h.assert_close(model, out, _feeds(h, kv_heads=kv_heads))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("kv_heads", [H, 2])
def test_attention_without_a_mask_fuses(h, target, kv_heads):
    """Static-shape exports without an attention_mask have no Add at all."""
    model = _block(h, kv_heads=kv_heads, cache=False, mask=False)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    h.assert_close(model, out, _feeds(h, kv_heads=kv_heads, cache=False, mask=False))


@pytest.mark.parametrize("target,op", [("ort", "com.microsoft::GroupQueryAttention"), ("onnx", "Attention")])
def test_softcapped_attention_fuses_with_its_softcap(h, target, op):
    model = _block(h, kv_heads=2, cache=False, softcap=5.0)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[op] == 1 and "Tanh" not in ops, ops
    (node,) = [n for n in out.graph.node if n.op_type == op.split("::")[-1]]
    assert {a.name: a.f for a in node.attribute}["softcap"] == 5.0
    h.assert_close(model, out, _feeds(h, kv_heads=2, cache=False))


def test_tanh_without_the_softcap_scaling_is_not_a_softcap(h):
    """Div(c) -> Tanh -> Mul(d) with d != c is not softcapping: the Tanh stays."""
    model = _block(h, kv_heads=H, cache=False, softcap=5.0)
    import onnx

    for init in model.graph.initializer:
        if init.name == "cap":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(5.0, np.float32), "cap"))
    # a second constant for the Mul
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(4.0, np.float32), "cap2"))
    for node in model.graph.node:
        if node.op_type == "Mul" and "th" in node.input:
            node.input[1] = "cap2"
    out = h.fuse(model, "onnx")
    assert "Tanh" in h.ops(out) or "Softmax" in h.ops(out)
    h.assert_close(model, out, _feeds(h, cache=False))


@pytest.mark.parametrize("target", ["ort", "onnx"])
@pytest.mark.parametrize("kv_heads", [H, 2])
def test_fully_masked_rows_keep_the_exported_numbers(h, target, kv_heads):
    """Hugging Face masks use finfo.min: a padded query row masks every key, and the exported graph
    then averages V (softmax of equal scores). ORT's Attention-23 zeroes such rows; the lowering
    raises finite mask entries to -1e30 first so every row matches."""
    model = _block(h, kv_heads=kv_heads, cache=False)
    feeds = _feeds(h, kv_heads=kv_heads, cache=False)
    feeds["mask"][1, :, :2, :] = np.finfo(np.float32).min   # rows 0-1 of batch 1: all keys masked
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out)
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("mask", [True, False])
def test_masked_fill_is_an_additive_bias(h, target, mask):
    """Where(bool, finfo.min, scores) (masked_fill), alone or after an ALiBi-like additive bias."""
    model = _block(h, cache=False, mask=mask, fill=True)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    feeds = _feeds(h, cache=False, mask=mask)
    bm = np.zeros((B, 1, S, S), bool)
    bm[..., np.triu_indices(S, 1)[0], np.triu_indices(S, 1)[1]] = True
    bm[1, ..., 0] = True
    feeds["bmask"] = bm
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target,op", [("ort", "com.microsoft::GroupQueryAttention"), ("onnx", "Attention")])
def test_one_kv_head_by_broadcast_is_mqa(h, target, op):
    """Falcon's MQA: K/V [B,1,T,D] broadcast by the MatMuls, no repeat_kv."""
    model = _block(h, kv_heads=1, cache=False, repeat=False)
    out = h.fuse(model, target)
    assert h.ops(out)[op] == 1 and "Softmax" not in h.ops(out)
    h.assert_close(model, out, _feeds(h, kv_heads=1, cache=False))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("kv_heads", [H, 2])
def test_nan_guard_keeps_rows_of_all_minus_inf_at_zero(h, target, kv_heads):
    """sdpa exports guard Softmax with Where(IsNaN(p), 0, p): with a -inf mask a padded query row
    gives 0. ORT's MultiHeadAttention/GroupQueryAttention give NaN there; the lowering adds the guard."""
    model = _block(h, kv_heads=kv_heads, cache=False, guard=True)
    feeds = _feeds(h, kv_heads=kv_heads, cache=False)
    feeds["mask"] = np.where(feeds["mask"] < 0, -np.inf, 0).astype(np.float32)
    feeds["mask"][1, :, 0, :] = -np.inf
    out = h.fuse(model, target)
    assert "Softmax" not in h.ops(out)
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_mask_sized_from_present_does_not_make_a_cycle(h, target):
    """Optimum's Falcon sizes its mask from Shape(present): folding the Concat into AttentionKV
    would make the op read its own output. The cache form is refused (the graph stays acyclic);
    attention still fuses over the concatenated K/V."""
    import onnx

    model = _block(h)
    g = model.graph
    n = h.node
    extra = [n("Shape", ["present_k"], ["pks"]), n("Slice", ["pks", "c2", "c3"], ["tl"]),
                   n("Concat", ["bs1s", "tl"], ["mshape"], axis=0),
                   n("ConstantOfShape", ["mshape"], ["zmask"],
                     value=onnx.numpy_helper.from_array(np.zeros(1, np.float32))),
                   n("Add", ["mask", "zmask"], ["mask2"])]
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(nodes[:2] + extra + nodes[2:])   # right after the two Concats
    for node in g.node:
        if node.op_type == "Add" and "mask" in node.input and "zmask" not in node.input:
            node.input[list(node.input).index("mask")] = "mask2"
    g.initializer.extend([onnx.numpy_helper.from_array(np.array([2], np.int64), "c2"),
                          onnx.numpy_helper.from_array(np.array([3], np.int64), "c3"),
                          onnx.numpy_helper.from_array(np.array([B, 1, S], np.int64), "bs1s")])
    onnx.checker.check_model(model)
    model = onnx.shape_inference.infer_shapes(model)
    import onnx_fuse
    onnx_model = onnx_fuse.optimize(model, level=3, target=target).to_proto()   # no cycle error
    assert "Softmax" not in h.ops(onnx_model) and "attention-kv-cache" not in h.fired(onnx_model)
    h.assert_close(model, onnx_model, _feeds(h))


def _gqa_cache_symbolic(h, form: str):
    """GQA over a KV cache with symbolic dims and undeclared presents: shape inference leaves the
    present's length (P + S) unknown and names it afresh on the Unsqueeze, Expand and Reshape, so
    the repetition cannot be proven from their inferred shapes. ``form``: "static" (Expand to a
    constant [1, 1, n, 1, 1], Reshape [0, H, -1, D]) or "hf" (transformers' repeat_kv: both shapes
    read from Shape(present) at run time)."""
    n = h.node
    hkv = 2
    nodes = [n("Concat", ["past_k", "k_new"], ["present_k"], axis=2),
             n("Concat", ["past_v", "v_new"], ["present_v"], axis=2)]
    inits = {"scale": np.array(D ** -0.5, np.float32), "ax2": np.array([2], np.int64)}
    if form == "static":
        inits.update(rep5=np.array([1, 1, H // hkv, 1, 1], np.int64), rep4=np.array([0, H, -1, D], np.int64))
    else:
        inits.update(c0=np.array([0], np.int64), c1=np.array([1], np.int64), c2=np.array([2], np.int64),
                     c4=np.array([4], np.int64), heads_n=np.array([hkv, H // hkv], np.int64),
                     heads=np.array([H], np.int64))
    for x in ("k", "v"):
        pres = f"present_{x}"
        nodes.append(n("Unsqueeze", [pres, "ax2"], [f"{x}u"]))
        if form == "static":
            nodes += [n("Expand", [f"{x}u", "rep5"], [f"{x}x"]), n("Reshape", [f"{x}x", "rep4"], [f"{x}r"])]
        else:
            nodes += [n("Shape", [pres], [f"{x}sh"]), n("Slice", [f"{x}sh", "c0", "c1"], [f"{x}b"]),
                      n("Slice", [f"{x}sh", "c2", "c4"], [f"{x}td"]),
                      n("Concat", [f"{x}b", "heads_n", f"{x}td"], [f"{x}es"], axis=0),
                      n("Expand", [f"{x}u", f"{x}es"], [f"{x}x"]),
                      n("Concat", [f"{x}b", "heads", f"{x}td"], [f"{x}rs"], axis=0),
                      n("Reshape", [f"{x}x", f"{x}rs"], [f"{x}r"])]
    nodes += [n("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"]), n("Add", ["ss", "mask"], ["sm"]),
              n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "vr"], ["o"])]
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("k_new", ["b", hkv, "s", D]), h.vi("v_new", ["b", hkv, "s", D]),
              h.vi("past_k", ["b", hkv, "p", D]), h.vi("past_v", ["b", hkv, "p", D]),
              h.vi("mask", ["b", 1, "s", "t"])]
    outputs = [h.vi("o", None), h.vi("present_k", None), h.vi("present_v", None)]
    return h.make_model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("form", ["static", "hf"])
@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_gqa_repeat_over_an_unknown_cache_length_is_folded(h, form, target):
    """Refused before (the fuzzer's GQA decoders without declared present dims): the canonical op
    took the repeated K/V (H heads) and the cache form never formed. Now the Expand is proven
    from present's own dims and the shape vector, the Reshape with has_dims from those dims."""
    model = _gqa_cache_symbolic(h, form)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and "Reshape" not in ops and ops["Attention"] == 1, ops
    (att,) = [nd for nd in out.graph.node if nd.op_type == "Attention"]
    # K/V of the kv heads (the repeat folded: GQA) and the cache form (past in, present out)
    assert list(att.input[:3]) == ["q", "k_new", "v_new"] and list(att.input[4:]) == ["past_k", "past_v"], att.input
    assert list(att.output) == ["o", "present_k", "present_v"]
    f = _feeds(h, kv_heads=2)
    f["q"] = h.rng.standard_normal((B, H, S, D)).astype(np.float32)
    h.assert_close(model, out, f)
