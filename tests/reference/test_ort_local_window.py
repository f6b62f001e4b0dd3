"""ORT's GroupQueryAttention `local_window_size` against our `window` (docs/ops.md): on ORT 1.32's
CPU kernel local_window_size = L attends exactly L keys (the query's own included), i.e. our
window = L, in prefill and in a decode step over a past. Recorded because the lowerings do not use
it (the banded mask goes to attention_bias) and the off-by-one is easy to get wrong."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnx_fuse.reference.attention import fused_attention

B, H, KV, D = 1, 4, 2, 16


def _gqa(lws: int, past: int, s: int):
    vi = h.make_tensor_value_info
    ins = ["q", "k", "v", "pk" if past else "", "pv" if past else "", "sl", "tot"]
    node = h.make_node("GroupQueryAttention", ins, ["y", "ok", "ov"], domain="com.microsoft",
                       num_heads=H, kv_num_heads=KV, local_window_size=lws)
    inputs = [vi("q", T.FLOAT, [B, s, H * D]), vi("k", T.FLOAT, [B, s, KV * D]), vi("v", T.FLOAT, [B, s, KV * D])]
    if past:
        inputs += [vi("pk", T.FLOAT, [B, KV, past, D]), vi("pv", T.FLOAT, [B, KV, past, D])]
    inputs += [vi("sl", T.INT32, [B]), vi("tot", T.INT32, [])]
    g = h.make_graph([node], "g", inputs, [vi(n, T.FLOAT, None) for n in ("y", "ok", "ov")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("com.microsoft", 1)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("past, s", [(0, 10), (8, 1)])
@pytest.mark.parametrize("lws", [1, 3, 5])
def test_local_window_size_is_our_window(lws, past, s):
    r = np.random.default_rng(lws + past)
    n = past + s
    q = r.standard_normal((B, n, H * D)).astype(np.float32)
    k = r.standard_normal((B, n, KV * D)).astype(np.float32)
    v = r.standard_normal((B, n, KV * D)).astype(np.float32)
    feeds = {"q": q[:, past:], "k": k[:, past:], "v": v[:, past:],
             "sl": np.array([n - 1], np.int32), "tot": np.array(n, np.int32)}
    if past:
        feeds["pk"] = k[:, :past].reshape(B, past, KV, D).transpose(0, 2, 1, 3).copy()
        feeds["pv"] = v[:, :past].reshape(B, past, KV, D).transpose(0, 2, 1, 3).copy()
    y = _gqa(lws, past, s).run(None, feeds)[0]

    def ref(w):
        return fused_attention(q, k, v, causal=True, window=w, layout="bsh", num_heads=H,
                               num_kv_heads=KV)[:, past:]

    np.testing.assert_allclose(y, ref(lws), rtol=1e-5, atol=1e-5)
    assert np.abs(y - ref(lws + 1)).max() > 1e-2
