"""fp8 pools in a model importing an opset before 19 (TorchScript exports at 17): ONNX's Cast takes
float8 only from opset 19 on, so onnx_fuse.reference.ort_ops raises the harness copy's opset (ONNX's
version converter) where it wraps float8 caches in Casts. Before, ORT refused that copy and verify
failed before comparing anything."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnx_fuse
from onnx_fuse.verify import make_session, verify
from tests.decode_models import static_decode

NB, BS, HQ, HKV, D = 8, 4, 4, 2, 16


def _paged_model_with_reduce(opset: int) -> onnx.ModelProto:
    """An fp8-pool PagedAttention beside a ReduceMean with the axes attribute (an input from
    opset 18 on): the raised copy must keep the reduction over the last axis only."""
    names = ["q", "k", "v", "kc", "vc", "bt", "sl", "ks", "vs"]
    nodes = [h.make_node("PagedAttention", names, ["y", "kc_out", "vc_out"], domain="onnx_fuse",
                         num_heads=HQ, kv_num_heads=HKV),
             h.make_node("ReduceMean", ["q"], ["q_mean"], axes=[-1], keepdims=1)]
    cache = [NB, BS, HKV, D]
    ins = [h.make_tensor_value_info("q", T.FLOAT, ["b", 1, HQ * D]),
           h.make_tensor_value_info("k", T.FLOAT, ["b", 1, HKV * D]),
           h.make_tensor_value_info("v", T.FLOAT, ["b", 1, HKV * D]),
           h.make_tensor_value_info("kc", T.FLOAT8E4M3FN, cache),
           h.make_tensor_value_info("vc", T.FLOAT8E4M3FN, cache),
           h.make_tensor_value_info("bt", T.INT32, ["b", 4]),
           h.make_tensor_value_info("sl", T.INT32, ["b"]),
           h.make_tensor_value_info("ks", T.FLOAT, [HKV]),
           h.make_tensor_value_info("vs", T.FLOAT, [HKV])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, ["b", 1, HQ * D]),
            h.make_tensor_value_info("kc_out", T.FLOAT8E4M3FN, cache),
            h.make_tensor_value_info("vc_out", T.FLOAT8E4M3FN, cache),
            h.make_tensor_value_info("q_mean", T.FLOAT, ["b", 1, 1])]
    model = h.make_model(h.make_graph(nodes, "g", ins, outs),
                         opset_imports=[h.make_opsetid("", opset), h.make_opsetid("onnx_fuse", 1)])
    model.ir_version = 9   # float8 types
    return model


def test_fp8_pool_runs_in_an_opset_17_model():
    import ml_dtypes
    import onnxruntime as ort

    from onnx_fuse.reference.attention import paged_attention_op

    rng = np.random.default_rng(17)
    pool = rng.integers(0, 256, (2, NB, BS, HKV, D), dtype=np.uint8)
    pool[(pool & 0x7F) == 0x7F] = 0x10   # no NaN bytes
    feeds = {"q": rng.standard_normal((2, 1, HQ * D), dtype=np.float32),
             "k": rng.standard_normal((2, 1, HKV * D), dtype=np.float32),
             "v": rng.standard_normal((2, 1, HKV * D), dtype=np.float32),
             "kc": pool[0].view(ml_dtypes.float8_e4m3fn), "vc": pool[1].view(ml_dtypes.float8_e4m3fn),
             "bt": np.array([[5, 0, 7, -1], [2, -1, -1, -1]], np.int32), "sl": np.array([10, 3], np.int32),
             "ks": np.array([0.01, 0.004], np.float32), "vs": np.array([0.02, 0.008], np.float32)}
    sess = make_session(_paged_model_with_reduce(17))
    values = {n: (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint8), T.FLOAT8E4M3FN)
                  if a.dtype == ml_dtypes.float8_e4m3fn else ort.OrtValue.ortvalue_from_numpy(a))
              for n, a in feeds.items()}
    y, kc, vc, q_mean = (o.numpy() for o in sess.run_with_ort_values(None, values))
    ref_y, ref_kc, ref_vc = paged_attention_op(*(feeds[n] for n in ("q", "k", "v", "kc", "vc", "bt", "sl",
                                                                     "ks", "vs")),
                                               num_heads=HQ, kv_num_heads=HKV)
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(kc, ref_kc.view(np.uint8))
    np.testing.assert_array_equal(vc, ref_vc.view(np.uint8))
    np.testing.assert_allclose(q_mean, feeds["q"].mean(axis=-1, keepdims=True), rtol=1e-6)



@pytest.mark.slow
def test_torchscript_opset_17_decoder_verifies_with_fp8_pools():
    """OPT (TorchScript, opset 17) paged with fp8 pools: verify compares and passes; the last
    layer's V scale 5 % off (a Mul on the op's v_scale input) fails that attention's own check."""
    original = static_decode("opt_hd64__torchscript_kv__trained")
    assert next(o.version for o in original.opset_import if o.domain == "") == 17
    result = onnx_fuse.optimize(original, level=4, target="trt", float32_plugins=True,
                                kv_cache_dtype="fp8", verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    rows = {o["name"] for o in result.report.verify["outputs"]}
    assert {"logits", "present.0.key", "present.1.value"} <= rows
    assert sum(r.endswith("(fp8 pools)") for r in rows) == 2   # each attention's own check ran
    wrong = result.to_proto()
    last = [n for n in wrong.graph.node if n.op_type == "PagedAttention"][-1]
    wrong.graph.initializer.append(onnx.numpy_helper.from_array(np.array(1.05, np.float32), "planted"))
    wrong.graph.node.insert(list(wrong.graph.node).index(last),
                            h.make_node("Mul", [last.input[8], "planted"], ["v_scale_planted"]))
    last.input[8] = "v_scale_planted"
    bad = verify(static_decode("opt_hd64__torchscript_kv__trained"), wrong)
    failed = [o["name"] for o in bad["outputs"] if not o["passed"]]
    assert failed == [f"attention {last.name} (fp8 pools)"], failed
