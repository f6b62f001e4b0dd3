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


def _plain_softcap_model(scale, cap):
    """The same attention in plain ONNX ops: heads split, kv heads repeated (repeat_kv), scores
    cap * tanh(scale * q k^T / cap) + mask, Softmax, heads merged."""
    G = H // KV
    c = {"split_q": np.array([0, 0, H, D], np.int64), "split_kv": np.array([0, 0, KV, D], np.int64),
         "ax2": np.array([2], np.int64), "rep": np.array([1, 1, G, 1, 1], np.int64),
         "heads": np.array([0, H, -1, D], np.int64), "merge": np.array([0, 0, H * D], np.int64),
         "scale": np.array(scale, np.float32), "cap": np.array(cap, np.float32)}
    nodes = [h.make_node("Reshape", ["q", "split_q"], ["q4"]),
             h.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3])]
    for x in "kv":
        nodes += [h.make_node("Reshape", [x, "split_kv"], [f"{x}4"]),
                  h.make_node("Transpose", [f"{x}4"], [f"{x}h"], perm=[0, 2, 1, 3]),
                  h.make_node("Unsqueeze", [f"{x}h", "ax2"], [f"{x}u"]),
                  h.make_node("Expand", [f"{x}u", "rep"], [f"{x}e"]),
                  h.make_node("Reshape", [f"{x}e", "heads"], [f"{x}r"])]
    nodes += [h.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
              h.make_node("MatMul", ["qh", "kt"], ["s"]),
              h.make_node("Mul", ["s", "scale"], ["ss"]),
              h.make_node("Div", ["ss", "cap"], ["sd"]),
              h.make_node("Tanh", ["sd"], ["st"]),
              h.make_node("Mul", ["st", "cap"], ["sc"]),
              h.make_node("Add", ["sc", "mask"], ["sm"]),
              h.make_node("Softmax", ["sm"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "vr"], ["o"]),
              h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ot", "merge"], ["y"])]
    ins = [h.make_tensor_value_info("q", T.FLOAT, ["b", "s", H * D]),
           h.make_tensor_value_info("k", T.FLOAT, ["b", "s", KV * D]),
           h.make_tensor_value_info("v", T.FLOAT, ["b", "s", KV * D]),
           h.make_tensor_value_info("mask", T.FLOAT, ["b", 1, "s", "s"])]
    graph = h.make_graph(nodes, "plain", ins, [h.make_tensor_value_info("y", T.FLOAT, ["b", "s", H * D])],
                         initializer=[onnx.numpy_helper.from_array(v, k) for k, v in c.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 20)])


@pytest.mark.parametrize("causal", [0, 1])
def test_fused_attention_softcap_matches_the_plain_ops_in_ort(causal):
    """FusedAttention(softcap) through the reference equals Gemma 2's softcapped attention written
    in plain ops, run by ORT itself, on trained-like values (scores well past the cap)."""
    rng = np.random.default_rng(1)
    scale, cap = 0.3, 2.5
    feeds = {"q": (3.0 * rng.standard_normal((B, S, H * D))).astype(np.float32),
             "k": (1.5 * rng.standard_normal((B, S, KV * D))).astype(np.float32),
             "v": rng.standard_normal((B, S, KV * D)).astype(np.float32)}
    lens = np.array([S, 3], np.int32)
    pos = np.arange(S)
    visible = (pos[None, :] < lens[:, None])[:, None, None, :] & ((pos[None, :] <= pos[:, None]) | (not causal))
    mask = np.where(visible, 0.0, -np.inf).astype(np.float32)
    plain = make_session(_plain_softcap_model(scale, cap)).run(None, {**feeds, "mask": mask})[0]
    model = _model(["q", "k", "v", "lens"], num_heads=H, kv_num_heads=KV, causal=causal, scale=scale,
                   softcap=cap, plugin_version="1", plugin_namespace="onnx_fuse")
    got = make_session(model).run(None, {**feeds, "lens": lens})[0]
    valid = pos[None, :] < lens[:, None]  # rows past seq_lens are zeros by contract
    np.testing.assert_allclose(got[valid], plain[valid], rtol=1e-5, atol=1e-5)
    assert np.count_nonzero(got[~valid]) == 0
    # the softcap reaches the reference: without it the result is far off
    uncapped = fused_attention_op(feeds["q"], feeds["k"], feeds["v"], lens, num_heads=H, kv_num_heads=KV,
                                  causal=causal, scale=scale)
    assert np.abs(got - uncapped)[valid].max() > 0.1


def test_prepare_session_leaves_input_alone_and_retargets():
    import onnxruntime as ort

    model = _model(["q", "k", "v"], num_heads=H, plugin_version="1", plugin_namespace="onnx_fuse")
    before = model.SerializeToString()
    out = prepare_session(model, ort.SessionOptions())
    assert model.SerializeToString() == before
    node = out.graph.node[0]
    assert node.domain == "ai.onnx.contrib" and node.op_type == "OnnxFuse_FusedAttention_3"
    assert {a.name for a in node.attribute} == {"num_heads", "kv_num_heads", "scale", "causal", "softcap",
                                                "window"}
    assert "onnx_fuse" not in {o.domain for o in out.opset_import}


def test_missing_required_attribute_and_unknown_arity_fail_clearly():
    import onnxruntime as ort

    with pytest.raises(ValueError, match="needs attribute 'num_heads'"):
        prepare_session(_model(["q", "k", "v"]), ort.SessionOptions())
    bad = _model(["q", "k"], num_heads=H)
    with pytest.raises(ValueError, match="no NumPy reference"):
        prepare_session(bad, ort.SessionOptions())


# ---------------------------------------------------------------- PagedAttention: 9-input forms

PB, PHQ, PHKV, PD, BS, NB = 2, 4, 2, 16, 4, 9


def _paged_model(cache_type, q_type=T.FLOAT, n_inputs=9):
    names = ["q", "k", "v", "kc", "vc", "bt", "sl", "ks", "vs"][:n_inputs]
    node = h.make_node("PagedAttention", names, ["y", "kc_out", "vc_out"], domain="onnx_fuse",
                       num_heads=PHQ, kv_num_heads=PHKV, plugin_version="1",
                       plugin_namespace="onnx_fuse")
    cache = [NB, BS, PHKV, PD]
    vis = [h.make_tensor_value_info("q", q_type, ["b", 1, PHQ * PD]),
           h.make_tensor_value_info("k", q_type, ["b", 1, PHKV * PD]),
           h.make_tensor_value_info("v", q_type, ["b", 1, PHKV * PD]),
           h.make_tensor_value_info("kc", cache_type, cache),
           h.make_tensor_value_info("vc", cache_type, cache),
           h.make_tensor_value_info("bt", T.INT32, ["b", 4]),
           h.make_tensor_value_info("sl", T.INT32, ["b"]),
           h.make_tensor_value_info("ks", T.FLOAT, [PHKV]),
           h.make_tensor_value_info("vs", T.FLOAT, [PHKV])][:n_inputs]
    outs = [h.make_tensor_value_info("y", q_type, ["b", 1, PHQ * PD]),
            h.make_tensor_value_info("kc_out", cache_type, cache),
            h.make_tensor_value_info("vc_out", cache_type, cache)]
    graph = h.make_graph([node], "g", vis, outs)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("onnx_fuse", 1)])


def _paged_feeds(rng, fp8):
    """Decode step: sequence 0 holds 10 tokens (the 10th new), sequence 1 holds 3; e4m3 pools
    (every byte but the NaN ones 0x7F / 0xFF, in the unused slots too) or float32 pools."""
    import ml_dtypes

    feeds = {"q": rng.standard_normal((PB, 1, PHQ * PD), dtype=np.float32),
             "k": rng.standard_normal((PB, 1, PHKV * PD), dtype=np.float32),
             "v": rng.standard_normal((PB, 1, PHKV * PD), dtype=np.float32),
             "bt": np.array([[5, 0, 7, -1], [2, -1, -1, -1]], np.int32),
             "sl": np.array([10, 3], np.int32),
             "ks": np.array([0.01, 0.004], np.float32), "vs": np.array([0.02, 0.008], np.float32)}
    for name in ("kc", "vc"):
        if fp8:
            b = rng.integers(0, 256, (NB, BS, PHKV, PD), dtype=np.uint8)
            b[(b & 0x7F) == 0x7F] = 0x10
            feeds[name] = b.view(ml_dtypes.float8_e4m3fn)
        else:
            feeds[name] = rng.standard_normal((NB, BS, PHKV, PD), dtype=np.float32)
    return feeds


def _run_with_fp8(model, feeds):
    """ORT's Python API takes float8 tensors only as OrtValues built from their bytes."""
    import ml_dtypes
    import onnxruntime as ort

    sess = make_session(model)
    values = {}
    for name, arr in feeds.items():
        if arr.dtype == ml_dtypes.float8_e4m3fn:
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                arr.view(np.uint8), T.FLOAT8E4M3FN)
        else:
            values[name] = ort.OrtValue.ortvalue_from_numpy(arr)
    outs = sess.run_with_ort_values(None, values)
    return [o.numpy() for o in outs]   # float8 outputs come back as their uint8 bytes


def test_paged_attention_fp8_pool_runs_through_reference():
    """float8e4m3fn caches + scales in ORT: the output against paged_attention_op (numpy, on the
    same e4m3 pool) and the returned pools byte for byte (only the new tokens' slots change)."""
    from onnx_fuse.reference.attention import paged_attention_op

    feeds = _paged_feeds(np.random.default_rng(1), fp8=True)
    y, kc, vc = _run_with_fp8(_paged_model(T.FLOAT8E4M3FN), feeds)
    ref_y, ref_kc, ref_vc = paged_attention_op(
        feeds["q"], feeds["k"], feeds["v"], feeds["kc"], feeds["vc"], feeds["bt"], feeds["sl"],
        feeds["ks"], feeds["vs"], num_heads=PHQ, kv_num_heads=PHKV)
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kc, ref_kc.view(np.uint8))
    np.testing.assert_array_equal(vc, ref_vc.view(np.uint8))
    changed = np.argwhere((kc != feeds["kc"].view(np.uint8)).any(axis=(2, 3)))
    assert {tuple(x) for x in changed} <= {(7, 1), (2, 2)}   # position 9 of seq 0, 2 of seq 1
    assert changed.size   # the new tokens were written (not all quantize to the old bytes)
    # The scales reach the op: other scales, other output.
    other = paged_attention_op(feeds["q"], feeds["k"], feeds["v"], feeds["kc"], feeds["vc"],
                               feeds["bt"], feeds["sl"], feeds["ks"] * 2, feeds["vs"],
                               num_heads=PHQ, kv_num_heads=PHKV)[0]
    assert np.abs(y - other).max() > 1e-3


def test_paged_attention_fp8_pool_with_float16_query():
    """fp16 query / new tokens over an fp8 pool: both wrapped (Casts to float32 and back)."""
    from onnx_fuse.reference.attention import paged_attention_op

    feeds = _paged_feeds(np.random.default_rng(2), fp8=True)
    for n in ("q", "k", "v"):
        feeds[n] = feeds[n].astype(np.float16)
    model = _paged_model(T.FLOAT8E4M3FN, q_type=T.FLOAT16)
    y, kc, _ = _run_with_fp8(model, feeds)
    assert y.dtype == np.float16
    ref_y, ref_kc, _ = paged_attention_op(
        *(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl", "ks", "vs")),
        num_heads=PHQ, kv_num_heads=PHKV)
    np.testing.assert_allclose(y.astype(np.float32), ref_y, rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(kc, ref_kc.view(np.uint8))


def test_paged_attention_nine_inputs_with_float_pool_ignores_the_scales():
    from onnx_fuse.reference.attention import paged_attention_op

    feeds = _paged_feeds(np.random.default_rng(3), fp8=False)
    y, kc, vc = make_session(_paged_model(T.FLOAT)).run(None, feeds)
    ref = paged_attention_op(*(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl")),
                             num_heads=PHQ, kv_num_heads=PHKV)
    for got, want in zip((y, kc, vc), ref):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_fp8_pool_registration_and_refusal_without_scales():
    import onnxruntime as ort

    out = prepare_session(_paged_model(T.FLOAT8E4M3FN), ort.SessionOptions())
    ops = [n.op_type for n in out.graph.node]
    assert ops == ["Cast", "Cast", "OnnxFuse_PagedAttention_9_fp8", "Cast", "Cast"]
    assert ([n.op_type for n in prepare_session(_paged_model(T.FLOAT), ort.SessionOptions())
             .graph.node] == ["OnnxFuse_PagedAttention_9"])
    with pytest.raises(ValueError, match="needs k_scale and v_scale"):
        prepare_session(_paged_model(T.FLOAT8E4M3FN, n_inputs=7), ort.SessionOptions())


@pytest.mark.parametrize("W", [1, 3, S])
def test_fused_attention_window_with_softcap_matches_the_plain_ops_in_ort(W):
    """Gemma 2's sliding layers (softcap + window) through the reference equal the plain ops with
    the banded causal mask (kv_idx > q_idx - W and kv_idx <= q_idx, padding hidden) in ORT."""
    rng = np.random.default_rng(7)
    scale, cap = 0.3, 2.5
    feeds = {"q": (3.0 * rng.standard_normal((B, S, H * D))).astype(np.float32),
             "k": (1.5 * rng.standard_normal((B, S, KV * D))).astype(np.float32),
             "v": rng.standard_normal((B, S, KV * D)).astype(np.float32)}
    lens = np.array([S, 4], np.int32)
    pos = np.arange(S)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - W)
    visible = (pos[None, :] < lens[:, None])[:, None, None, :] & band
    mask = np.where(visible, 0.0, -np.inf).astype(np.float32)
    plain = make_session(_plain_softcap_model(scale, cap)).run(None, {**feeds, "mask": mask})[0]
    model = _model(["q", "k", "v", "lens"], num_heads=H, kv_num_heads=KV, causal=1, scale=scale,
                   softcap=cap, window=W, plugin_version="1", plugin_namespace="onnx_fuse")
    got = make_session(model).run(None, {**feeds, "lens": lens})[0]
    valid = pos[None, :] < lens[:, None]
    np.testing.assert_allclose(got[valid], plain[valid], rtol=1e-5, atol=1e-5)
    if W < S:   # the window reaches the reference
        nowin = fused_attention_op(feeds["q"], feeds["k"], feeds["v"], lens, num_heads=H,
                                   kv_num_heads=KV, causal=1, scale=scale, softcap=cap)
        assert np.abs(got - nowin)[valid].max() > 1e-2


def test_paged_attention_window_runs_through_reference():
    from onnx_fuse.reference.attention import paged_attention_op

    feeds = _paged_feeds(np.random.default_rng(4), fp8=False)
    model = _paged_model(T.FLOAT, n_inputs=7)
    model.graph.node[0].attribute.append(h.make_attribute("window", 4))
    feeds = {k: v for k, v in feeds.items() if k not in ("ks", "vs")}
    y, kc, vc = make_session(model).run(None, feeds)
    want = paged_attention_op(*(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl")),
                              num_heads=PHQ, kv_num_heads=PHKV, window=4)
    for got, w in zip((y, kc, vc), want):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)
    nowin = paged_attention_op(*(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl")),
                               num_heads=PHQ, kv_num_heads=PHKV)[0]
    assert np.abs(y - nowin).max() > 1e-3   # sequence 0 (10 tokens) sees only its last 4


def test_a_python_op_session_survives_later_registrations():
    """A FusedAttention session made before the first PagedAttention one, then destroyed after
    other allocations: segfaulted inside ORT while each op was registered on first use (the later
    registration left the earlier session's op dangling). Run in a subprocess: a crash is its exit
    code, not this test run's end."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(f"""
        import gc, sys
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_ort_ops import _model, _paged_model, _paged_feeds, H, KV, T
        from onnx_fuse.verify import make_session
        a = make_session(_model(["q", "k", "v"], num_heads=H, kv_num_heads=KV, causal=1,
                                plugin_version="1", plugin_namespace="onnx_fuse"), threads=1)
        b = make_session(_paged_model(T.FLOAT, n_inputs=7))
        feeds = [_paged_feeds(np.random.default_rng(i), fp8=False) for i in range(8)]
        del a
        gc.collect()
        print("alive")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "alive" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
