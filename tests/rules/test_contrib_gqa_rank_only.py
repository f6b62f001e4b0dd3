"""com.microsoft::GroupQueryAttention whose outputs are declared rank-only (dims unknown: onnx's shape
inference knows no contrib op, so an export or a tool may leave them so) at trt: attention-kv-trt
joined the cache in place of the present outputs, the joined K/V kept the present's dimless type,
and attention-trt could not read the kv heads or the head size (kv_num_heads '?'): the canonical
Attention was left over (CanonicalLeftover, a crash). Found by the fuzzer's gqa_contrib cases
(tools/fuzz_contrib.py, session 18); the joined caches are now new values typed by their Concat."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import onnx_fuse  # noqa: E402

H, HKV, D = 4, 2, 32


def _model(opset: int):
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, ["batch", "seq", H * D]),
              helper.make_tensor_value_info("k", f, ["batch", "seq", HKV * D]),
              helper.make_tensor_value_info("v", f, ["batch", "seq", HKV * D]),
              helper.make_tensor_value_info("past_key", f, ["batch", HKV, "past", D]),
              helper.make_tensor_value_info("past_value", f, ["batch", HKV, "past", D]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    node = helper.make_node("GroupQueryAttention", [i.name for i in inputs], ["y", "present_key", "present_value"],
                            domain="com.microsoft", num_heads=H, kv_num_heads=HKV)
    outputs = [helper.make_tensor_value_info("y", f, [None] * 3),
               helper.make_tensor_value_info("present_key", f, [None] * 4),
               helper.make_tensor_value_info("present_value", f, [None] * 4)]
    graph = helper.make_graph([node], "gqa", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])


def _feeds(batch, seq, past):
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((batch, seq, H * D)), "k": rng.standard_normal((batch, seq, HKV * D)),
             "v": rng.standard_normal((batch, seq, HKV * D)), "past_key": rng.standard_normal((batch, HKV, past, D)),
             "past_value": rng.standard_normal((batch, HKV, past, D))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["seqlens_k"] = np.full((batch,), past + seq - 1, np.int32)
    feeds["total_sequence_length"] = np.array(past + seq, np.int32)
    return feeds


@pytest.mark.parametrize("opset", [20, 23])
@pytest.mark.parametrize("level", [3, 4])
def test_rank_only_outputs_lower_at_trt(opset, level):
    result = onnx_fuse.optimize(_model(opset), level=level, target="trt", verify=True, verify_inputs=_feeds(2, 1, 5))
    ops = [n.op_type for n in result.to_proto().graph.node]
    assert "GroupQueryAttention" not in ops and ops.count("Attention") == 1, ops
    assert result.report.passed, result.report.verify_failure
    assert [len(o.type.tensor_type.shape.dim) for o in result.to_proto().graph.output] == [3, 4, 4]


def test_fuzzer_gqa_contrib_seed():
    """The fuzzer's case (seed 4: a decode step, separate QKV, opset 20)."""
    import fuzz_differential as fd
    from fuzz_contrib import make_contrib_case

    results, _, _ = fd.fuzz_case(make_contrib_case(4, "gqa_contrib"), [3], ["trt"])
    assert [r["cls"] for r in results] == ["ok"], [(r["cls"], r["detail"][:200]) for r in results]
