"""PagedAttention's optional ``sinks`` input (GPT-OSS attention sinks) in the NumPy reference and
through ONNX Runtime (ort_ops): query head h's softmax rows get one more logit sinks[h] whose value
row is zero. Checked against the export's own formula written out independently (softmax over
[scores, sink], the sink column dropped) on a contiguous cache, with GQA, a window, chunks of new
tokens and an fp8 pool; -inf sinks are no sinks; an empty sequence stays zero."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_fuse.reference import attention as ref


def _pool(rng, B, Hkv, D, bs, lens):
    """Contiguous caches [B, L, Hkv, D] and the same tokens in a shuffled block pool."""
    Lmax = max(lens)
    k = rng.standard_normal((B, Lmax, Hkv, D))
    v = rng.standard_normal((B, Lmax, Hkv, D))
    per = [max(1, -(-L // bs)) for L in lens]
    nb = sum(per) + 2
    perm = rng.permutation(nb)
    kp, vp = np.full((nb, bs, Hkv, D), np.nan), np.full((nb, bs, Hkv, D), np.nan)
    tables = np.full((B, max(per)), -1, np.int32)
    i = 0
    for b, L in enumerate(lens):
        for j in range(per[b]):
            tables[b, j] = perm[i]
            i += 1
        for t in range(L):
            kp[tables[b, t // bs], t % bs], vp[tables[b, t // bs], t % bs] = k[b, t], v[b, t]
    return k, v, np.nan_to_num(kp), np.nan_to_num(vp), tables


def _export_formula(q, k, v, L, sinks, scale, window):
    """GPT-OSS's eager attention for one sequence: q [Sq, Hq, D] over k/v [L, Hkv, D]."""
    Sq, Hq, D = q.shape
    G = Hq // k.shape[1]
    kx, vx = np.repeat(k[:L], G, axis=1), np.repeat(v[:L], G, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kx) * scale
    pos = L - Sq + np.arange(Sq)
    keys = np.arange(L)
    ok = keys[None, :] <= pos[:, None]
    if window:
        ok &= keys[None, :] > pos[:, None] - window
    s = np.where(ok[None], s, -np.inf)
    cat = np.concatenate([s, np.broadcast_to(sinks[:, None, None], (Hq, Sq, 1))], axis=-1)
    p = np.exp(cat - cat.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p[..., :-1], vx)


@pytest.mark.parametrize("Hq, Hkv, Sq, window", [(4, 4, 1, 0), (8, 2, 1, 0), (8, 2, 3, 0), (4, 1, 5, 3),
                                                  (8, 2, 1, 6)])
def test_sinks_are_the_exports_extra_column(Hq, Hkv, Sq, window):
    rng = np.random.default_rng(Hq * 10 + Sq + window)
    B, D, bs, lens = 3, 16, 4, [11, Sq, 7]
    k, v, kp, vp, tables = _pool(rng, B, Hkv, D, bs, lens)
    q = rng.standard_normal((B, Sq, Hq, D))
    sinks = rng.standard_normal(Hq) * 2
    sinks[0] = 25.0   # takes nearly all of the mass: the max must include it
    got = ref.paged_attention(q, kp, vp, tables, np.array(lens, np.int32), window=window, sinks=sinks,
                              out_dtype=np.float64)
    for b, L in enumerate(lens):
        want = _export_formula(q[b], k[b], v[b], L, sinks, D ** -0.5, window)
        np.testing.assert_allclose(got[b], want, rtol=1e-10, atol=1e-12)
    plain = ref.paged_attention(q, kp, vp, tables, np.array(lens, np.int32), window=window, out_dtype=np.float64)
    assert np.abs(plain - got).max() > 1e-2   # the sinks matter
    none = ref.paged_attention(q, kp, vp, tables, np.array(lens, np.int32), window=window,
                               sinks=np.full(Hq, -np.inf), out_dtype=np.float64)
    np.testing.assert_allclose(none, plain, rtol=1e-12, atol=1e-14)


def test_empty_sequence_stays_zero_and_bad_shapes_are_refused():
    rng = np.random.default_rng(0)
    _, _, kp, vp, tables = _pool(rng, 2, 2, 16, 4, [5, 0])
    q = rng.standard_normal((2, 4, 16))
    out = ref.paged_attention(q, kp, vp, tables, np.array([5, 0], np.int32), sinks=np.ones(4))
    assert not out[1].any() and np.isfinite(out).all()
    with pytest.raises(ValueError, match="sinks"):
        ref.paged_attention(q, kp, vp, tables, np.array([5, 0], np.int32), sinks=np.ones(3))


def test_fp8_pool_takes_the_sinks():
    rng = np.random.default_rng(1)
    B, Hq, Hkv, D, bs, lens = 2, 4, 2, 16, 4, [9, 3]
    _, _, kp, vp, tables = _pool(rng, B, Hkv, D, bs, lens)
    scale = np.full(Hkv, 0.05, np.float32)
    k8, v8 = ref.quantize_e4m3(kp, scale), ref.quantize_e4m3(vp, scale)
    q = rng.standard_normal((B, 1, Hq * D)).astype(np.float32)
    kn, vn = (rng.standard_normal((B, 1, Hkv * D)).astype(np.float32) for _ in range(2))
    sinks = rng.standard_normal(Hq).astype(np.float32)
    out, kc, vc = ref.paged_attention_op(q, kn, vn, k8, v8, tables, np.array(lens, np.int32), scale, scale, sinks,
                                         num_heads=Hq, kv_num_heads=Hkv)
    want = ref.paged_attention(q.reshape(B, 1, Hq, D), ref.dequantize_e4m3(kc, scale), ref.dequantize_e4m3(vc, scale),
                               tables, np.array(lens, np.int32), sinks=sinks)
    np.testing.assert_allclose(out.reshape(B, 1, Hq, D), want, rtol=1e-5, atol=1e-6)


def _node_model(n_inputs: int, Hq=4, Hkv=2, D=16, nb=8, bs=4):
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("q", f, ["B", 1, Hq * D]),
           helper.make_tensor_value_info("k", f, ["B", 1, Hkv * D]),
           helper.make_tensor_value_info("v", f, ["B", 1, Hkv * D]),
           helper.make_tensor_value_info("kc", f, [nb, bs, Hkv, D]),
           helper.make_tensor_value_info("vc", f, [nb, bs, Hkv, D]),
           helper.make_tensor_value_info("bt", TensorProto.INT32, ["B", 2]),
           helper.make_tensor_value_info("sl", TensorProto.INT32, ["B"]),
           helper.make_tensor_value_info("sinks", f, [Hq])]
    names = ["q", "k", "v", "kc", "vc", "bt", "sl"] + (["", "", "sinks"] if n_inputs == 10 else [])
    node = helper.make_node("PagedAttention", names, ["y", "kco", "vco"], domain="onnx_fuse", num_heads=Hq,
                            kv_num_heads=Hkv, plugin_version="1", plugin_namespace="onnx_fuse")
    outs = [helper.make_tensor_value_info("y", f, ["B", 1, Hq * D])] + [
        helper.make_tensor_value_info(n, f, [nb, bs, Hkv, D]) for n in ("kco", "vco")]
    graph = helper.make_graph([node], "g", ins if n_inputs == 10 else ins[:-1], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("onnx_fuse", 1)])


def test_ort_runs_sinks_with_empty_scale_slots():
    """A 16-bit-pool node with sinks (inputs 7 and 8 empty) runs in ORT through the reference."""
    pytest.importorskip("onnxruntime_extensions")
    from onnx_fuse.verify import make_session

    rng = np.random.default_rng(2)
    Hq, Hkv, D, bs, lens = 4, 2, 16, 4, [6, 2]
    _, _, kp, vp, tables = _pool(rng, 2, Hkv, D, bs, lens)
    pad = np.zeros((8 - kp.shape[0], bs, Hkv, D))
    kp, vp = np.concatenate([kp, pad]).astype(np.float32), np.concatenate([vp, pad]).astype(np.float32)
    feeds = {"q": rng.standard_normal((2, 1, Hq * D)).astype(np.float32),
             "k": rng.standard_normal((2, 1, Hkv * D)).astype(np.float32),
             "v": rng.standard_normal((2, 1, Hkv * D)).astype(np.float32),
             "kc": kp, "vc": vp, "bt": tables[:, :2].copy(), "sl": np.array(lens, np.int32),
             "sinks": rng.standard_normal(Hq).astype(np.float32)}
    model = _node_model(10)
    onnx.checker.check_model(model)
    y = make_session(model).run(["y"], feeds)[0]
    want, _, _ = ref.paged_attention_op(*(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl")), None, None,
                                        feeds["sinks"], num_heads=Hq, kv_num_heads=Hkv)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    plain = make_session(_node_model(7)).run(["y"], {k: v for k, v in feeds.items() if k != "sinks"})[0]
    assert np.abs(plain - y).max() > 1e-3
