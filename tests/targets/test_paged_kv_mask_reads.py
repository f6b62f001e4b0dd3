"""Paged KV (O4, trt) refuses a model that would still read its padding mask once paged.

A paged batch is ragged: each sequence's length is seq_lens[b], and there is no padding mask. A
graph input whose values make the attention mask goes with the lowered attentions (apply() keeps
its batch size from seq_lens); if anything else still reads it, the paged model would keep an
input that means something else: positions counted from its length (T - S, one value for the
whole batch) are wrong for every sequence shorter than the longest, and its zeros are ignored.
Found by the differential fuzzer's merged-decoder case (tools/fuzz_sweeps.py seeds 8 and 11: a
left-padded mask gave logits 0.8 off once paged). Before: paged, the mask kept as an input.
"""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
from onnx import helper as oh

import onnx_fuse

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _positions_from_mask_length() -> onnx.ModelProto:
    """tests/data/models/llama64_kv_dynamo.onnx with its past length read as
    Shape(attention_mask)[1] - Shape(input_ids)[1] instead of Shape(past)[2] (the same value on a
    batch of one length)."""
    proto = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    at, node = next((i, n) for i, n in enumerate(proto.graph.node) if n.op_type == "Shape"
                    and n.input[0] == "past_key_values.0.key" and any(a.name == "start" and a.i == 2 for a in n.attribute))
    new_len = next(n.output[0] for n in proto.graph.node if n.op_type == "Shape" and n.input[0] == "input_ids")
    proto.graph.node.remove(node)
    proto.graph.node.insert(at, oh.make_node("Shape", ["attention_mask"], ["mask_len"], start=1, end=2))
    proto.graph.node.insert(at + 1, oh.make_node("Sub", ["mask_len", new_len], [node.output[0]]))
    onnx.checker.check_model(proto)
    return proto


def test_positions_counted_from_the_mask_length_are_not_paged():
    proto = _positions_from_mask_length()
    result = onnx_fuse.optimize(proto, level=4, target="trt", float32_plugins=True, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["PagedAttention"] == 0 and ops["Attention"] + ops["FusedAttention"] == 2, ops
    assert [v.name for v in result.model.graph.inputs] == [v.name for v in proto.graph.input]
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and "the padding mask 'attention_mask' is still read by Shape" in notes[0], result.report.warnings


def test_the_mask_read_for_its_batch_size_only_still_goes():
    """Shape(attention_mask)[0:1] (the batch size) is no reason to refuse: it becomes Shape(seq_lens)."""
    proto = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    batch = next(n for n in proto.graph.node if n.op_type == "Shape" and n.input[0] == "past_key_values.0.key"
                 and any(a.name == "end" and a.i == 1 for a in n.attribute))
    batch.input[0] = "attention_mask"
    result = onnx_fuse.optimize(proto, level=4, target="trt", float32_plugins=True)
    assert collections.Counter(n.op_type for n in result.model.graph)["PagedAttention"] == 2
    assert "attention_mask" not in [v.name for v in result.model.graph.inputs]
