"""Session 14 KV-cache leftovers (docs/holdout.md "Cache layouts and verify leftovers"):

- GPT-J as transformers 4.48 wrote it in float16: float32 RoPE tables promote q and k to float32
  (the past key is cast up before its Concat), v stays float16 and the float32 probabilities are
  cast down to it before P v. The attention is taken in float32 with v cast up (exact), its
  output cast down once (recognize.yaml attention; attention-kv-cache joins the cast values).
- Its present key is a float32 -> float32 Cast of the Concat, named by the TorchScript exporter
  ``Castpresent..._dim_2``; cleanup drops the Cast, and the placeholder must still read as one
  (shape_inference.exporter_placeholders), or the mask's cut at Shape(present)[2] keeps the present
  and attention-kv-cache refuses the cycle.
- Keys joined from two computed sets (PEGASUS-X's global tokens before its block keys): an
  Attention-23 with that "past" keeps its present outputs, which ONNX Runtime requires.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

B, H, S, P, D = 2, 2, 3, 4, 8
F16 = TensorProto.FLOAT16
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
KV_RULE = {"ort": "attention-kv-ort", "onnx": "attention-kv-onnx", "trt": "attention-kv-trt"}


def _gptj448_half(h):
    n = h.node
    nodes = [
        n("Cast", ["pk"], ["pkc"], to=1), n("Concat", ["pkc", "kn"], ["kc"], axis=2),
        n("Cast", ["kc"], ["present_k"], to=1),   # the exporter's float32 -> float32 Cast
        n("Concat", ["pv", "vn"], ["present_v"], axis=2),
        n("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
        n("Div", ["sc", "four"], ["sd"]),
        n("Shape", ["present_k"], ["ks"]), n("Slice", ["ks", "i2", "i3"], ["klen"]),
        n("Slice", ["mask", "i0", "klen", "i3"], ["mk"]), n("Add", ["sd", "mk"], ["sm"]),
        n("Softmax", ["sm"], ["p"], axis=-1), n("Cast", ["p"], ["pc"], to=F16),
        n("MatMul", ["pc", "present_v"], ["y"]),
    ]
    inits = {"i0": np.array([0], np.int64), "i2": np.array([2], np.int64), "i3": np.array([3], np.int64),
             "four": np.array(4.0, np.float32)}
    inputs = [h.vi("q", ["b", H, "s", D]), h.vi("kn", ["b", H, "s", D]), h.vi("vn", ["b", H, "s", D], F16),
              h.vi("pk", ["b", H, "past_sequence", D], F16), h.vi("pv", ["b", H, "past_sequence", D], F16),
              h.vi("mask", ["b", 1, "s", "total"])]
    outputs = [h.vi("y", ["b", H, "s", D], F16), h.vi("present_k", ["b", H, "Castpresent_k_dim_2", D]),
               h.vi("present_v", ["b", H, "Concatpresent_v_dim_2", D], F16)]
    return h.make_model(nodes, inputs, outputs, inits, opset=18)


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_float32_scores_with_half_values_fuse_with_their_cache(h, target, level):
    import onnx_fuse

    model = _gptj448_half(h)
    shapes = {"s": (S,), "past_sequence": (P,), "total": (P + S,)}   # no token ids to tie them by
    result = onnx_fuse.optimize(model, level=level, target=target, verify=True, shapes=shapes)
    out = result.to_proto()
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, (ops, result.report.warnings)
    assert h.fired(out)[KV_RULE[target]] >= 1, result.report.warnings
    assert result.report.verify["passed"], result.report.verify
    y = [o for o in out.graph.output if o.name in ("y", "present_v")]
    assert all(o.type.tensor_type.elem_type == F16 for o in y)   # the interface keeps its dtypes


def test_probabilities_cast_to_another_dtype_than_v_stay_unfused(h):
    """The Cast of the probabilities must meet v's dtype: cast to bfloat16 before a float16 v (a
    graph ORT would refuse anyway) is not an island the rule reads."""
    model = _gptj448_half(h)
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] == "pc":
            node.attribute[0].i = TensorProto.BFLOAT16
    assert "Softmax" in h.ops(h.fuse(model, "onnx"))


def _joined_keys(h):
    """softmax(q [g; k]^T) [vg; v] with the "past" g = a projection of the input (not a graph input)."""
    n = h.node
    nodes = [
        n("MatMul", ["x", "wg"], ["g"]), n("MatMul", ["x", "wv"], ["gv"]),
        n("Concat", ["g", "k"], ["kc"], axis=2), n("Concat", ["gv", "v"], ["vc"], axis=2),
        n("Transpose", ["kc"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
        n("Mul", ["sc", "scale"], ["ss"]), n("Softmax", ["ss"], ["p"], axis=-1), n("MatMul", ["p", "vc"], ["y"]),
    ]
    rng = np.random.default_rng(1)
    inits = {"wg": rng.standard_normal((D, D)).astype(np.float32),
             "wv": rng.standard_normal((D, D)).astype(np.float32), "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi(x, [B, H, S, D]) for x in ("q", "k", "v")] + [h.vi("x", [B, H, 5, D])]
    return h.make_model(nodes, inputs, [h.vi("y", [B, H, S, D])], inits, opset=18)


@pytest.mark.parametrize("target", ["onnx", "ort"])
def test_keys_joined_from_computed_sets_keep_a_valid_attention(h, target):
    """PEGASUS-X's global keys joined before its block keys read as a cache (attention-kv-cache),
    and its present outputs are read by nobody: the Attention-23 keeps them (dead-code, 5a56955),
    without which ONNX Runtime refuses a past_key with no present_key (onnx-O3 verify FAILED)."""
    import onnx_fuse

    model = _joined_keys(h)
    result = onnx_fuse.optimize(model, level=3, target=target, verify=True)
    out = result.to_proto()
    assert h.fired(out)[f"attention-kv-{target}"] >= 1 and "Softmax" not in h.ops(out), h.fired(out)
    assert result.report.verify["passed"], result.report.verify
    for node in out.graph.node:
        if node.op_type == "Attention" and len(node.input) > 4 and node.input[4]:
            assert len(node.output) == 3 and all(node.output), list(node.output)
