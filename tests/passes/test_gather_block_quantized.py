"""com.microsoft::GatherBlockQuantized (onnxruntime-genai's int4 Gemma: the tied embedding read from
the LM head's 4-bit weight) becomes Gather + Cast + Mul of an int8 table at the onnx and trt targets
(passes/gather_block_quantized.py), bit-exact against ORT's contrib kernel. Before, both targets
kept the contrib op, which neither runs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_fuse

V, K, BS = 12, 64, 32


def _model(*, zero_points=False, fp16=False, k=K, bits=4):
    rng = np.random.default_rng(3)
    blocks = -(-k // BS)
    if bits == 4:
        q = rng.integers(0, 16, (V, blocks * BS), dtype=np.uint8)
        data = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)[:, : -(-k // 2)]
    else:
        data = rng.integers(100, 156, (V, k), dtype=np.uint8)
    sdt = np.float16 if fp16 else np.float32
    scales = (rng.random((V, blocks)) * 0.1 + 0.01).astype(sdt)
    inits = [numpy_helper.from_array(data, "table"), numpy_helper.from_array(scales, "scales")]
    ins = ["table", "ids", "scales"]
    if zero_points:
        zp = rng.integers(0, 16, (V, blocks), dtype=np.uint8)
        zp = np.pad(zp, ((0, 0), (0, blocks % 2)))
        inits.append(numpy_helper.from_array((zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8), "zp"))
        ins.append("zp")
    node = helper.make_node("GatherBlockQuantized", ins, ["emb"], domain="com.microsoft", bits=bits,
                            block_size=BS, gather_axis=0, quantize_axis=1)
    # the builder scales the embedding (Gemma's sqrt(hidden)): something reads the rows
    mul = helper.make_node("Mul", ["emb", "two"], ["y"])
    two = numpy_helper.from_array(np.array(2.0, sdt), "two")
    et = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    graph = helper.make_graph([node, mul], "gbq", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("y", et, ["b", "s", k])], [*inits, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def _run(model, ids):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"ids": ids})[0]


CASES = {"default-zp": {}, "zero-points": {"zero_points": True}, "fp16": {"fp16": True},
         "partial-block": {"k": 48, "zero_points": True}, "8-bit": {"bits": 8}}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("target", ["onnx", "trt"])
def test_gather_block_quantized_is_lowered_bit_exact(tmp_path, case, target):
    model = _model(**CASES[case])
    path = tmp_path / "gbq.onnx"
    onnx.save(model, path)
    result = onnx_fuse.optimize(str(path), level=3, target=target, verify=True)
    proto = result.to_proto()
    ops = [n.op_type for n in proto.graph.node]
    assert "GatherBlockQuantized" not in ops and not [n for n in proto.graph.node if n.domain], ops
    assert result.report.passed, result.report.verify_failure
    # the table stays integer (int8 q - zp), never a float copy of the embedding
    tables = [i for i in proto.graph.initializer if i.data_type == TensorProto.INT8]
    assert tables and not [i for i in proto.graph.initializer if np.prod(i.dims) >= V * 32 and i.data_type
                           in (TensorProto.FLOAT, TensorProto.FLOAT16)]
    ids = np.array([[0, 5, 11], [7, 7, 2]], np.int64)
    assert np.array_equal(_run(model, ids), _run(proto, ids))   # bit-exact, not merely close


def test_ort_keeps_the_contrib_op(tmp_path):
    path = tmp_path / "gbq.onnx"
    onnx.save(_model(), path)
    result = onnx_fuse.optimize(str(path), level=3, target="ort", verify=True)
    assert [n.op_type for n in result.to_proto().graph.node].count("GatherBlockQuantized") == 1


def test_other_axes_stay_with_a_reason(tmp_path):
    model = _model()
    model.graph.node[0].attribute[-1].i = 0   # quantize_axis 0: blocks down the rows
    path = tmp_path / "gbq.onnx"
    onnx.save(model, path)
    result = onnx_fuse.optimize(str(path), level=3, target="onnx", verify=False)
    assert "GatherBlockQuantized" in [n.op_type for n in result.to_proto().graph.node]
    assert any("kept GatherBlockQuantized" in w for w in result.report.warnings), result.report.warnings
