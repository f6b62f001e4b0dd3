"""Attention on [B*H, S, D] views made by Flatten: ``Reshape(Flatten(q [B, H, S, D], axis=2), [0, -1, D])``
(rules/attention/batched_heads.yaml, Flatten? before each view; passes/_dim_source.py names Flatten's
merged dims, so the view's -1 is solved to S also when S is symbolic).

Before: with a static S the views fused as one head per B*H slice (attention-bmm-single-head, with its
Unsqueeze / Squeeze glue); with a symbolic S onnx left Flatten's dims unknown and nothing fused (the
differential fuzzer's flat_layout form, docs/PERF.md "Session-18 pass")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes.shape_inference import ShapeInferencePass

H, D = 2, 8
DM = H * D
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _flat_block(h, *, seq="s", axis=2, causal=False, flat_merge=False):
    """x [B, S, DM] -> q / k / v projections split to [B, H, S, D], viewed [B*H, S, D] through Flatten
    (``axis``), softmax(q k^T / sqrt(D) (+ causal [1, S, S])) v, viewed back to [B, H, S, D] from q's
    shape, heads merged (a Reshape, or ``flat_merge``: Flatten(axis=2) and a 2-D projection)."""
    n, rng = h.node, np.random.default_rng(7)
    w = {f"w{t}": (rng.standard_normal((DM, DM)) * 0.3).astype(np.float32) for t in "qkvo"}
    nodes = []
    for t in "qkv":
        nodes += [n("MatMul", ["x", f"w{t}"], [f"{t}p"]), n("Reshape", [f"{t}p", "heads"], [f"{t}r"]),
                  n("Transpose", [f"{t}r"], [f"{t}4"], perm=[0, 2, 1, 3]),
                  n("Flatten", [f"{t}4"], [f"{t}f"], axis=axis), n("Reshape", [f"{t}f", "view3"], [f"{t}3"])]
    nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["s0"]),
              n("Mul", ["s0", "scale"], ["s1"])]
    last = "s1"
    if causal:   # [1, 1, S, S] from the sequence length, squeezed to [1, S, S] (broadcast over B*H)
        nodes += [n("Shape", ["x"], ["xs"], start=1, end=2), n("Concat", ["xs", "xs"], ["ss"], axis=0),
                  n("ConstantOfShape", ["ss"], ["ones"], value=h.numpy_helper.from_array(np.array([1.0], np.float32))),
                  n("Trilu", ["ones"], ["tri"], upper=0), n("Sub", ["tri", "one"], ["neg"]),
                  n("Mul", ["neg", "big"], ["bias2"]), n("Unsqueeze", ["bias2", "ax0"], ["bias3"]),
                  n("Add", ["s1", "bias3"], ["s2"])]
        last = "s2"
    nodes += [n("Softmax", [last], ["p"], axis=-1), n("MatMul", ["p", "v3"], ["o3"]),
              n("Shape", ["q4"], ["q4s"], start=0, end=2), n("Concat", ["q4s", "tail"], ["os"], axis=0),
              n("Reshape", ["o3", "os"], ["o4"]), n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3])]
    if flat_merge:
        nodes += [n("Flatten", ["ot"], ["o2"], axis=2), n("MatMul", ["o2", "wo"], ["y2"]),
                  n("Shape", ["x"], ["bs"], start=0, end=2), n("Concat", ["bs", "dm"], ["ys"], axis=0),
                  n("Reshape", ["y2", "ys"], ["y0"])]
    else:
        nodes += [n("Reshape", ["ot", "merge"], ["om"]), n("MatMul", ["om", "wo"], ["y0"])]
    nodes += [n("Add", ["x", "y0"], ["y"])]
    inits = {**w, "heads": np.array([0, 0, H, D], np.int64), "view3": np.array([0, -1, D], np.int64),
             "tail": np.array([-1, D], np.int64), "merge": np.array([0, 0, DM], np.int64),
             "dm": np.array([DM], np.int64), "scale": np.array(D ** -0.5, np.float32),
             "one": np.array(1.0, np.float32), "big": np.array(1e9, np.float32), "ax0": np.array([0], np.int64)}
    return h.make_model(nodes, [h.vi("x", ["b", seq, DM])], [h.vi("y", ["b", seq, DM])], inits, opset=18)


def _feeds(b=2, s=5):
    return {"x": np.random.default_rng(3).standard_normal((b, s, DM)).astype(np.float32)}


@pytest.fixture
def hn(h):
    from onnx import numpy_helper
    h.numpy_helper = numpy_helper
    return h


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("seq", ["s", 5])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("flat_merge", [False, True])
def test_flatten_made_views_are_one_multi_head_attention(hn, target, seq, causal, flat_merge):
    model = _flat_block(hn, seq=seq, causal=causal, flat_merge=flat_merge)
    out = hn.fuse(model, target, level=4 if target == "trt" else 3)
    ops = hn.ops(out)
    fused = sum(v for k, v in ops.items() if k.endswith("Attention"))
    assert fused == 1 and "Softmax" not in ops, ops
    # the heads are proven: no per-slice glue (attention-bmm-single-head's Unsqueeze / Squeeze), no view left
    assert not {"Flatten", "Squeeze"} & set(ops) and ops["Unsqueeze"] <= int(causal), ops
    hn.assert_close(model, out, _feeds(s=5))
    if seq == "s":
        hn.assert_close(model, out, _feeds(b=1, s=3))


def test_a_flatten_that_merges_other_axes_is_not_heads(hn):
    # Flatten(axis=1): [B, H*S*D] viewed [B, H*S, D] is one attention over all heads' rows, not B*H
    # slices; the batched-heads rules refuse it (the single-head form may take it, exactly)
    model = _flat_block(hn, axis=1)
    assert any("q3 must be q [B,H,S,D] viewed as [B*H,S,D]" in r
               for r in hn.reasons(model, "ort", "attention-batched-heads-3d"))
    out = hn.fuse(model, "ort")
    assert "attention-batched-heads-3d" not in hn.fired(out)
    hn.assert_close(model, out, _feeds())


@pytest.mark.parametrize("axis, dims", [(2, ["2*b", "8*s"]), (-2, ["2*b", "8*s"]), (1, ["b", "16*s"]),
                                        (3, ["2*b*s", 8]), (0, [1, "16*b*s"])])
def test_flatten_dims_are_named(hn, axis, dims):
    n = hn.node
    model = hn.make_model([n("Flatten", ["x"], ["y"], axis=axis)], [hn.vi("x", ["b", 2, "s", 8])],
                          [hn.vi("y", None)], opset=18)
    work = ir.serde.deserialize_model(model)
    ShapeInferencePass()(work)
    got = [d if isinstance(d, int) else str(d.value) for d in work.graph.outputs[0].shape]
    assert got == dims


def test_flatten_of_an_unknown_dim_stays_unknown(hn):
    n = hn.node
    model = hn.make_model([n("Flatten", ["x"], ["y"], axis=2)], [hn.vi("x", ["b", None, "s", 8])],
                          [hn.vi("y", None)], opset=18)
    work = ir.serde.deserialize_model(model)
    ShapeInferencePass()(work)
    d0 = work.graph.outputs[0].shape[0]
    assert not isinstance(d0, int) and (d0.value is None or str(d0.value).startswith("unk__")), d0
