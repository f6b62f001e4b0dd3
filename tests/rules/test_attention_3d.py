"""rules/attention/batched_heads.yaml and has_dims (optimizer/rewrite/_dims.py).

Attention on [B*H,S,D] views (BLOOM's baddbmm with ALiBi, DeBERTa-v2's bmm with c2p/p2c) is
rewritten to the 4-D form and fused. Hand-built blocks compute the views' targets at run time
(Shape -> Slice -> Mul -> Concat, as TorchScript does), with a 3-D additive bias whose first dim
is B*H (unprovable here, so reshaped at run time) or 1; an escaping 3-D score must not fuse. The
corpus files of both architectures fuse 2/2 and verify.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.rewrite._dims import has_dims, to_dim

B, S, H, D = 2, 6, 4, 8
CORPUS = pathlib.Path(__file__).parents[1] / "data" / "corpus"
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _block(h, *, bias="rows", escape_scores=False, keep_fill=None):
    """keep_fill: GPT-NeoX / GPT-J before transformers 4.4x, torch.where(causal, scores, fill) on the
    4-D scores before the mask (a bool input `causal`)."""
    n = h.node
    nodes = [
        n("Shape", ["q"], ["qs"]),
        n("Slice", ["qs", "i0", "i1"], ["bb"]),                 # [B]
        n("Slice", ["qs", "i2", "i3"], ["ss"]),                 # [S]
        n("Mul", ["bb", "hh"], ["bh"]),                         # [B*H], as TorchScript computes it
        n("Concat", ["bh", "m1", "dd"], ["t3d"], axis=0),       # [B*H, -1, D]
        n("Reshape", ["q", "t3d"], ["q3"]),
        n("Reshape", ["k", "t3d"], ["k3"]),
        n("Reshape", ["v", "t3d"], ["v3"]),
        n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q3", "kt"], ["sc"]),
        n("Mul", ["sc", "scale"], ["ss3"]),
        n("Add", ["ss3", "bias"], ["sb"]),
        n("Concat", ["bb", "hh", "ss", "m1"], ["t4"], axis=0),  # [B, H, S, -1]
        n("Reshape", ["sb", "t4"], ["s4"]),
        *([n("Where", ["causal", "s4", "fill"], ["sk"]), n("Add", ["sk", "mask"], ["sm"])] if keep_fill is not None
          else [n("Add", ["s4", "mask"], ["sm"])]),
        n("Softmax", ["sm"], ["p"], axis=-1),
        n("Concat", ["bh", "ss", "m1"], ["tp"], axis=0),        # [B*H, S, -1]
        n("Reshape", ["p", "tp"], ["p3"]),
        n("MatMul", ["p3", "v3"], ["o3"]),
        n("Concat", ["bb", "hh", "ss", "dd"], ["to"], axis=0),  # [B, H, S, D]
        n("Reshape", ["o3", "to"], ["y"]),
    ]
    outputs = [h.vi("y", ["b", H, "s", D])]
    if escape_scores:
        nodes.append(n("ReduceMax", ["sc"], ["side"], keepdims=0))
        outputs.append(h.vi("side", None))
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "i3": np.array([3], np.int64), "hh": np.array([H], np.int64), "m1": np.array([-1], np.int64),
             "dd": np.array([D], np.int64), "scale": np.array(D ** -0.5, np.float32)}
    bias_shape = ["bh", 1, "s"] if bias == "rows" else [1, "s", "s"]
    inputs = [h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")]
    inputs += [h.vi("bias", bias_shape), h.vi("mask", ["b", 1, "s", "s"])]
    if keep_fill is not None:
        inits["fill"] = np.array(keep_fill, np.float32)
        inputs.append(h.vi("causal", [1, 1, "s", "s"], 9))
    return h.make_model(nodes, inputs, outputs, inits, opset=18)


def _feeds(h, bias="rows"):
    mask = np.triu(np.full((S, S), np.finfo(np.float32).min, np.float32), 1)[None, None].repeat(B, 0)
    shape = (B * H, 1, S) if bias == "rows" else (1, S, S)
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    return {**feeds, "bias": h.rng.standard_normal(shape).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("bias", ["rows", "one"])
def test_batched_heads_attention_fuses(h, target, bias):
    model = _block(h, bias=bias)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1, ops
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    h.assert_close(model, out, _feeds(h, bias))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("bias", ["rows", "one"])
def test_batched_heads_with_a_causal_where_before_the_mask_fuses(h, target, bias):
    model = _block(h, bias=bias, keep_fill=float(np.finfo(np.float32).min))
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1, ops
    assert "Softmax" not in ops and "MatMul" not in ops, ops
    # a padding mask (the last keys of batch 1) under the causal one; batch 0 unpadded
    feeds = _feeds(h, bias)
    feeds["mask"] = np.zeros((B, 1, S, S), np.float32)
    feeds["mask"][1, :, :, S - 2:] = np.finfo(np.float32).min
    h.assert_close(model, out, {**feeds, "causal": np.tril(np.ones((S, S), bool))[None, None]})


def test_batched_heads_where_with_a_finite_fill_does_not_fuse(h):
    model = _block(h, keep_fill=-1.0)  # not a mask: -1 is a score the softmax still weighs
    assert "Softmax" in h.ops(h.fuse(model, "ort"))
    assert any("must put (nearly) -inf" in r for r in h.reasons(model, "ort", "attention-batched-heads"))


def _bloom_438_block(h, *, kperm=(0, 2, 3, 1)):
    """BLOOM as transformers 4.38 wrote it: q, k, v [B,S,H,D] from the fused projection; q and v
    transposed to [B,H,S,D] and viewed [B*H,S,D]; K^T as k.permute(0, 2, 3, 1).reshape(B*H, D, T)."""
    n = h.node
    nodes = [
        n("Shape", ["q"], ["qs"]), n("Slice", ["qs", "i0", "i1"], ["bb"]), n("Slice", ["qs", "i1", "i2"], ["ss"]),
        n("Mul", ["bb", "hh"], ["bh"]),
        n("Transpose", ["q"], ["q4"], perm=[0, 2, 1, 3]), n("Transpose", ["v"], ["v4"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k"], ["kp"], perm=list(kperm)),
        n("Concat", ["bh", "m1", "dd"], ["t3d"], axis=0), n("Concat", ["bh", "dd", "m1"], ["tk"], axis=0),
        n("Reshape", ["q4", "t3d"], ["q3"]), n("Reshape", ["v4", "t3d"], ["v3"]), n("Reshape", ["kp", "tk"], ["kd"]),
        n("MatMul", ["q3", "kd"], ["sc"]), n("Mul", ["sc", "scale"], ["ss3"]), n("Add", ["ss3", "bias"], ["sb"]),
        n("Concat", ["bb", "hh", "ss", "m1"], ["t4"], axis=0), n("Reshape", ["sb", "t4"], ["s4"]),
        n("Add", ["s4", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1),
        n("Concat", ["bh", "ss", "m1"], ["tp"], axis=0), n("Reshape", ["p", "tp"], ["p3"]),
        n("MatMul", ["p3", "v3"], ["o3"]), n("Concat", ["bb", "hh", "ss", "dd"], ["to"], axis=0),
        n("Reshape", ["o3", "to"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64), "i2": np.array([2], np.int64),
             "hh": np.array([H], np.int64), "m1": np.array([-1], np.int64), "dd": np.array([D], np.int64),
             "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi(x, ["b", "s", H, D]) for x in ("q", "k", "v")]
    inputs += [h.vi("bias", ["bh", 1, "s"]), h.vi("mask", ["b", 1, "s", "s"])]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", D])], inits, opset=18)


def _bloom_438_feeds(h):
    feeds = _feeds(h)
    return {**{x: h.rng.standard_normal((B, S, H, D)).astype(np.float32) for x in ("q", "k", "v")},
            "bias": feeds["bias"], "mask": feeds["mask"]}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_bmm_key_as_a_view_of_the_transposed_key_fuses(h, target):
    model = _bloom_438_block(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops and "MatMul" not in ops, ops
    h.assert_close(model, out, _bloom_438_feeds(h))


def test_bmm_key_view_of_other_axes_does_not_fuse(h):
    # [B,D,H,T] merged as [B*D, H, T]: not K^T of heads (H and D swapped); the view is refused
    model = _bloom_438_block(h, kperm=(0, 3, 2, 1))
    assert "Softmax" in h.ops(h.fuse(model, "ort"))
    assert any("must merge [B,H,D,T]" in r for r in h.reasons(model, "ort", "bmm-key-view"))


def test_escaping_3d_scores_do_not_fuse(h):
    model = _block(h, escape_scores=True)
    for target in ("ort", "onnx"):
        assert "Softmax" in h.ops(h.fuse(model, target))
    assert any("is also used by" in r for r in h.reasons(model, "ort", "attention-batched-heads"))


def _reshape_out(h, target, in_shape):
    """The output value of Reshape(x, Concat(Shape(x)[0] * 4, target...)) in an onnx-ir graph."""
    n = h.node
    nodes = [n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "i0", "i1"], ["b"]), n("Mul", ["b", "four"], ["bh"]),
             n("Concat", ["bh", "t"], ["shape"], axis=0), n("Reshape", ["x", "shape"], ["y"])]
    model = h.make_model(nodes, [h.vi("x", in_shape)], [h.vi("y", None)],
                         {"i0": np.array([0], np.int64), "i1": np.array([1], np.int64),
                          "four": np.array([4], np.int64), "t": np.array(target, np.int64)}, opset=18)
    graph = ir.serde.deserialize_model(model).graph
    return next(nd for nd in graph if nd.op_type == "Reshape").outputs[0]


def test_has_dims_proves_a_head_merge_from_values(h):
    y = _reshape_out(h, [-1, 8], ["b", 4, "s", 8])
    assert has_dims(y, [["b", 4], "s", 8])
    assert has_dims(y, ["4*b", "s", None])            # the dynamo spelling of the product
    assert not has_dims(y, [["b", 4], 8, "s"])        # S and D swapped
    assert not has_dims(y, [["b", 2], "s", 8])        # another factorisation
    # the -1 cannot be solved when the input's dims do not cancel
    assert not has_dims(_reshape_out(h, [-1, 8], ["b", 4, "s", "d"]), [["b", 4], "s", 8])
    # in_dims: the input's true dims where inference left a symbol of its own
    z = _reshape_out(h, [-1, 8], ["b", 4, "u", 8])
    assert has_dims(z, [["b", 4], "s", 8], ["b", 4, "s", 8]) and not has_dims(z, [["b", 4], "s", 8])


def test_to_dim_is_canonical():
    assert to_dim(["batch", 2]) == to_dim("2*batch") == to_dim("batch * 2")
    assert to_dim("past + sequence") == (1, ("past + sequence",))
    assert to_dim([3, 4]) == (12, ())


@pytest.mark.parametrize("name", [
    "bloom__dyn_mask__trained", "bloom__kv__trained", "bloom__static_nomask__trained",
    "bloom__torchscript__trained", "deberta_v2__dyn_mask__trained", "deberta_v2__static_nomask__trained",
    # these three need dims onnx cannot size (passes/_dim_source.py): BLOOM Optimum slices its mask
    # at Shape(k^T)[2], DeBERTa TorchScript/Optimum size the head merge from Shape(softmax)
    "bloom__optimum__trained", "deberta_v2__optimum__trained", "deberta_v2__torchscript__trained"])
def test_corpus_batched_heads_attention_fuses(name):
    r = onnx_fuse.optimize(str(CORPUS / f"{name}.onnx"), level=3, target="ort", verify=True)
    assert r.report.status == "PASSED"
    fired = r.report.rule_fires
    assert fired.get("attention-batched-heads", 0) == 2, fired  # the 4-D MatMul form too (one rule)
    ops = [n.op_type for n in r.model.graph]
    # BLOOM's biased fused projection, its columns permuted by qkv-columns (253f14f), goes to ORT's
    # packed Attention when no cache is read; MultiHeadAttention otherwise
    assert ops.count("MultiHeadAttention") + ops.count("Attention") == 2 and "Softmax" not in ops
    if name.startswith("bloom") and "kv" not in name and "optimum" not in name:
        assert ops.count("Attention") == 2, ops


@pytest.mark.parametrize("name", ["bloom__optimum__trained", "deberta_v2__optimum__trained",
                                  "deberta_v2__torchscript__trained"])
def test_corpus_unsized_views_fuse_for_onnx(name):
    r = onnx_fuse.optimize(str(CORPUS / f"{name}.onnx"), level=3, target="onnx", verify=True)
    assert r.report.status == "PASSED"
    ops = [n.op_type for n in r.model.graph]
    assert ops.count("Attention") == 2 and "Softmax" not in ops
