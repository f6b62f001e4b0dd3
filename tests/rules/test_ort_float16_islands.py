"""A float16 model that ONNX Runtime's offline optimizer rewrote first (hold-out 50, docs/holdout.md).

ORT_ENABLE_BASIC on the CPU provider gives the float16 ops without a CPU kernel float32 inputs through inserted
Casts, and inlines a float16 Softmax as its function body. So the rotation reads Cast(q) and Cast(Slice(q)) (two
values: RoPE lost), the Softmax is Exp(s - max(s)) / sum (softmax-written-out), and the NaN guard reads
IsNaN(Cast(p, float16)) beside the float32 p (isnan-of-float-cast). shared-cast-views
(optimizer/passes/shared_cast_views.py) reads the view of the Cast q already has. The ORT-optimized file is made by
ORT itself here; numerics against the original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto

from attention_testing import rotate_half_nodes, scores_merge_nodes
from head_block_testing import F16, S, head_feeds, head_inits, head_inputs, split_heads

ort = pytest.importorskip("onnxruntime")


def _half_block(h):
    """float16 q3 / k3 / v3 split into heads, rotate-half RoPE with float32 tables cast to float16, softmax(q k^T *
    scale + mask) with the sdpa NaN guard, v, merged back to y (float16 throughout)."""
    n = h.node
    nodes = split_heads(n, lambda x: [n("Identity", [f"{x}hf"], [f"{x}4"])])
    rot = rotate_half_nodes(n)
    for node in rot:   # the tables in the model's dtype, as a float16 export casts them
        node.input[:] = [{"cu": "cu16", "su": "su16"}.get(i, i) for i in node.input]
    rot += [n("Cast", ["cu"], ["cu16"], to=F16), n("Cast", ["su"], ["su16"], to=F16)]
    merge = scores_merge_nodes(n, "k4rot", "v4")
    merge[5].input[0] = "pz"   # MatMul(p, v) reads the guarded probabilities
    guard = [n("IsNaN", ["p"], ["isn"]), n("Where", ["isn", "zero", "p"], ["pz"])]
    inits = dict(head_inits(np.float16), zero=np.array(0.0, np.float16))
    return h.make_model(nodes + rot + merge + guard, head_inputs(h, F16), [h.vi("y", ["b", "s", 32], elem=F16)],
                        inits, opset=20)


def _ort_basic(model: onnx.ModelProto, tmp_path, level="ORT_ENABLE_BASIC") -> onnx.ModelProto:
    src, dst = tmp_path / "src.onnx", tmp_path / "ort1.onnx"
    onnx.save(model, src)
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return onnx.load(dst)


@pytest.mark.parametrize("target,level", [("ort", "ORT_ENABLE_BASIC"), ("onnx", "ORT_ENABLE_BASIC"),
                                          ("ort", "ORT_ENABLE_EXTENDED"), ("onnx", "ORT_ENABLE_EXTENDED")])
def test_ort_basic_float16_block_keeps_rope_and_softmax(h, tmp_path, target, level):
    """The old pipeline: no RoPE, no Softmax (Exp / ReduceSum / Div left) on the ORT-optimized block. EXTENDED
    writes rotate_half's two Slices as one Split, each half cast up (shared-cast-split)."""
    model = _half_block(h)
    pre = _ort_basic(model, tmp_path, level)
    before = h.ops(pre)
    assert "Softmax" not in before and before["Exp"] == 1 and before["Cast"] > 4, before  # ORT's islands
    assert level == "ORT_ENABLE_BASIC" or before["Split"] == 2, before
    out = h.fuse(pre, target, level=3)
    ops, fired = h.ops(out), h.fired(out)
    rope = ops["RotaryEmbedding"] + ops["com.microsoft::RotaryEmbedding"]
    assert rope == 2 and "Exp" not in ops and "ReduceMax" not in ops, ops
    assert fired["softmax-written-out"] >= 1 or "Softmax" not in ops, fired
    for s in (S, 6):
        h.assert_close(model, out, head_feeds(h, s), atol=3e-3, rtol=3e-3)


def _softmax_out(h, axis_sum=-1):
    n = h.node
    nodes = [n("ReduceMax", ["x", "ax"], ["mx"], keepdims=1), n("Sub", ["x", "mx"], ["d"]), n("Exp", ["d"], ["e"]),
             n("ReduceSum", ["e", "axs"], ["s"], keepdims=1), n("Div", ["e", "s"], ["y"])]
    inits = {"ax": np.array([-1], np.int64), "axs": np.array([axis_sum], np.int64)}
    return h.make_model(nodes, [h.vi("x", [2, 3, 5])], [h.vi("y", [2, 3, 5])], inits)


def test_softmax_written_out(h):
    model = _softmax_out(h)
    out = h.fuse(model, "onnx", level=3)
    assert h.ops(out) == {"Softmax": 1}, h.ops(out)
    x = (h.rng.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    x[0, 1, 2] = -np.inf
    h.assert_close(model, out, {"x": x})


def test_softmax_sum_over_another_axis_stays(h):
    model = _softmax_out(h, axis_sum=1)
    x = h.rng.standard_normal((2, 3, 5)).astype(np.float32)
    h.stays(model, "softmax-written-out", "the sum must run over the last axis", {"x": x}, op="Softmax",
            target="onnx", level=3)


def test_isnan_of_float_cast(h):
    """Where(IsNaN(Cast(p, float16)), 0, p) reads IsNaN(p): NaN stays NaN, a finite value past float16's range
    becomes inf (not NaN) either way."""
    n = h.node
    nodes = [n("Cast", ["p"], ["p16"], to=F16), n("IsNaN", ["p16"], ["isn"]), n("Where", ["isn", "zero", "p"], ["y"])]
    model = h.make_model(nodes, [h.vi("p", [2, 4])], [h.vi("y", [2, 4])], {"zero": np.array(0.0, np.float32)})
    out = h.fuse(model, "onnx", level=2)
    assert "Cast" not in h.ops(out) and h.fired(out)["isnan-of-float-cast"] == 1, h.ops(out)
    p = np.array([[1.0, np.nan, 1e6, -np.inf], [np.nan, 0.5, -7e4, 3.0]], np.float32)   # 1e6: inf in float16
    h.assert_close(model, out, {"p": p})


def test_shared_cast_view_pass(h):
    """Cast(Slice(x)) beside Cast(x): the Slice reads the Cast (one Cast left after CSE); a Cast of a view whose
    source has no Cast of that type, or whose view has another reader, stays."""
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
    from onnx_fuse.passes.shared_cast_views import SharedCastViewsPass

    n = h.node
    nodes = [n("Cast", ["x"], ["xf"], to=1), n("Slice", ["x", "s0", "s1", "ax"], ["xs"]),
             n("Cast", ["xs"], ["xsf"], to=1), n("Mul", ["xf", "xf"], ["m"]),
             n("Slice", ["x", "s0", "s1", "ax"], ["xs2"]), n("Cast", ["xs2"], ["xs2d"], to=11),
             n("Transpose", ["x"], ["xt"], perm=[1, 0]), n("Cast", ["xt"], ["xtf"], to=1)]
    inits = {"s0": np.array([0], np.int64), "s1": np.array([2], np.int64), "ax": np.array([1], np.int64)}
    outs = [h.vi("m", [3, 4]), h.vi("xsf", [3, 2]), h.vi("xs2d", [3, 2], elem=TensorProto.DOUBLE),
            h.vi("xtf", [4, 3]), h.vi("xt", [4, 3], elem=F16)]
    model = h.make_model(nodes, [h.vi("x", [3, 4], elem=F16)], outs, inits)
    work = ir.serde.deserialize_model(model)
    p = SharedCastViewsPass()
    assert p(work).modified and p.stats["shared-cast-view"] == 1
    DeadCodeEliminationPass()(work)
    got = ir.serde.serialize_model(work)
    by_out = {o: node for node in got.graph.node for o in node.output}
    assert by_out["xsf"].op_type == "Slice" and by_out[by_out["xsf"].input[0]].op_type == "Cast"
    assert by_out["xs2d"].op_type == "Cast" and by_out["xtf"].op_type == "Cast"   # no float32 twin / read elsewhere
    x = h.rng.standard_normal((3, 4)).astype(np.float16)
    h.assert_close(model, got, {"x": x}, atol=0, rtol=0)


@pytest.mark.parametrize("target,level", [("ort", "ORT_ENABLE_BASIC"), ("onnx", "ORT_ENABLE_BASIC"),
                                          ("trt", "ORT_ENABLE_BASIC"), ("onnx", "ORT_ENABLE_EXTENDED")])
def test_ort_float16_block_fuses_attention(h, tmp_path, target, level):
    """The ORT-optimized block's attention runs in float32 on q rotated there, with V a float16 value cast up
    after its views (cast-up-views moves the Cast above them) and the NaN guard on IsNaN(Cast(p)), which
    isnan-of-float-cast now reads before the recognizers: one fused attention (none before, in one run)."""
    model = _half_block(h)
    pre = _ort_basic(model, tmp_path, level)
    out = h.fuse(pre, target, level=3)
    ops = h.ops(out)
    attn = sum(c for op, c in ops.items() if "Attention" in op)
    assert attn == 1 and "Softmax" not in ops and "MatMul" not in ops, ops
    for s in (S, 6):
        h.assert_close(model, out, head_feeds(h, s), atol=3e-3, rtol=3e-3)
