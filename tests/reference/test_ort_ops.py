"""onnx_fuse.reference.ort_ops: onnx_fuse ops run in ORT through their NumPy references."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx_fuse.reference.attention import fused_attention_op
from onnx_fuse.reference.ort_ops import prepare_session
from onnx_fuse.verify import make_session

B, S, H, KV, D = 2, 5, 4, 2, 8


def _model(inputs, **attrs):
    node = h.make_node("FusedAttention", inputs, ["y"], domain="onnx_fuse", **attrs)
    vis = [h.make_tensor_value_info("q", T.FLOAT, ["b", "s", H * D]),
           h.make_tensor_value_info("k", T.FLOAT, ["b", "s", KV * D]),
           h.make_tensor_value_info("v", T.FLOAT, ["b", "s", KV * D])]
    if "lens" in inputs:
        vis.append(h.make_tensor_value_info("lens", T.INT32, ["b"]))
    graph = h.make_graph([node], "g", vis, [h.make_tensor_value_info("y", T.FLOAT, ["b", "s", H * D])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 20), h.make_opsetid("onnx_fuse", 1)])


@pytest.mark.parametrize("with_lens", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_fused_attention_runs_through_reference(with_lens, causal):
    inputs = ["q", "k", "v"] + (["lens"] if with_lens else [])
    model = _model(inputs, num_heads=H, kv_num_heads=KV, causal=causal, plugin_version="1",
                   plugin_namespace="onnx_fuse")
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((B, S, H * D), dtype=np.float32),
             "k": rng.standard_normal((B, S, KV * D), dtype=np.float32),
             "v": rng.standard_normal((B, S, KV * D), dtype=np.float32)}
    if with_lens:
        feeds["lens"] = np.array([5, 3], np.int32)
    got = make_session(model).run(None, feeds)[0]
    ref = fused_attention_op(feeds["q"], feeds["k"], feeds["v"], feeds.get("lens"), num_heads=H,
                             kv_num_heads=KV, causal=causal)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    if causal:  # the attribute really reaches the reference: causal differs from non-causal
        other = fused_attention_op(feeds["q"], feeds["k"], feeds["v"], feeds.get("lens"),
                                   num_heads=H, kv_num_heads=KV, causal=0)
        assert np.abs(got - other).max() > 1e-3


def test_prepare_session_leaves_input_alone_and_retargets():
    import onnxruntime as ort

    model = _model(["q", "k", "v"], num_heads=H, plugin_version="1", plugin_namespace="onnx_fuse")
    before = model.SerializeToString()
    out = prepare_session(model, ort.SessionOptions())
    assert model.SerializeToString() == before
    node = out.graph.node[0]
    assert node.domain == "ai.onnx.contrib" and node.op_type == "OnnxFuse_FusedAttention_3"
    assert {a.name for a in node.attribute} == {"num_heads", "kv_num_heads", "scale", "causal"}
    assert "onnx_fuse" not in {o.domain for o in out.opset_import}


def test_missing_required_attribute_and_unknown_arity_fail_clearly():
    import onnxruntime as ort

    with pytest.raises(ValueError, match="needs attribute 'num_heads'"):
        prepare_session(_model(["q", "k", "v"]), ort.SessionOptions())
    bad = _model(["q", "k"], num_heads=H)
    with pytest.raises(ValueError, match="no NumPy reference"):
        prepare_session(bad, ort.SessionOptions())
