"""Paged KV (trt-O4) refuses a mask that changes with an integer input that is neither a mask nor
positions, and still pages when such an input does not change the mask.

Gemma 3's decoder with a cache reads ``token_type_ids`` [batch, past + new] into its mask: the
tokens of one image attend to each other both ways. PagedAttention attends causally (or in one
sliding window) and takes no mask, so paging that model drops the image blocks' bidirectional
attention. The mask probe (rewrite/_mask_probe.py) knows no values for such an input and fed it
zeros, which show a causal band; it now also feeds it all ones and runs of 0s and 1s and refuses a
mask that differs, whatever the input is called. Before, the probe sized the input to the new
tokens (not past + new, as its declared dim says) and, once sized right, would have paged
(tools/holdout_specs.py HOLDOUT10C, gemma3_kv_hd64). Here tests/data/models/llama64_kv_dynamo.onnx
gains such an input: read into the mask by its values (refused), by its length only or not at all
(paged, verified against the contiguous original)."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh

import onnx_fuse

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def _with_token_types(how: str, name: str = "token_type_ids") -> onnx.ModelProto:
    """llama64_kv_dynamo.onnx with an int64 input ``name`` [batch, total_sequence]. ``how``:
    "image": key j and new token i both typed 1 -> kept (Gemma 3's bidirectional image block);
    "length": the mask's rows sliced by Shape(name) (its length only); "unread": only added to the
    hidden state's type embedding, never near the mask."""
    proto = onnx.load(str(MODELS / "llama64_kv_dynamo.onnx"))
    g = proto.graph
    g.input.append(oh.make_tensor_value_info(name, onnx.TensorProto.INT64, ["batch", "total_sequence"]))
    where = next(n for n in g.node if n.op_type == "Where" and n.output[0] == "val_160")
    keep = where.input[0]   # bool [B, 1, S, T]: True where a key is kept
    c = lambda arr, n: g.initializer.append(onnx.numpy_helper.from_array(np.asarray(arr, np.int64), n))  # noqa: E731
    c(1, "tt_one"), c([1, 2], "tt_ax12"), c([1, 3], "tt_ax13"), c([1], "tt_s1"), c([2], "tt_ax2"), c([3], "tt_ax3")
    c([np.iinfo(np.int64).max], "tt_end")
    nodes = []
    if how == "image":
        nodes = [oh.make_node("Equal", [name, "tt_one"], ["tt_img"]),
                 oh.make_node("Unsqueeze", ["tt_img", "tt_ax12"], ["tt_key"]),
                 oh.make_node("Unsqueeze", ["tt_img", "tt_ax13"], ["tt_col"]),
                 oh.make_node("Shape", ["input_ids"], ["tt_new"], start=1, end=2),
                 oh.make_node("Neg", ["tt_new"], ["tt_from"]),
                 oh.make_node("Slice", ["tt_col", "tt_from", "tt_end", "tt_ax2"], ["tt_query"]),
                 oh.make_node("And", ["tt_query", "tt_key"], ["tt_both"]),
                 oh.make_node("Or", [keep, "tt_both"], ["tt_keep"])]
        where.input[0] = "tt_keep"
    elif how == "length":   # keep[:, :, :, -T:] with T = Shape(name)[1]: the same mask
        nodes = [oh.make_node("Shape", [name], ["tt_len"], start=1, end=2),
                 oh.make_node("Neg", ["tt_len"], ["tt_from"]),
                 oh.make_node("Slice", [keep, "tt_from", "tt_end", "tt_ax3"], ["tt_keep"])]
        where.input[0] = "tt_keep"
    else:
        emb = next(n for n in g.node if n.op_type == "Gather")   # the token embedding
        g.initializer.append(onnx.numpy_helper.from_array(
            np.random.default_rng(0).standard_normal((2, 128)).astype(np.float32) * 0.1, "tt_table"))
        nodes = [oh.make_node("Shape", ["input_ids"], ["tt_new"], start=1, end=2),
                 oh.make_node("Neg", ["tt_new"], ["tt_from"]),
                 oh.make_node("Slice", [name, "tt_from", "tt_end", "tt_s1"], ["tt_mine"]),
                 oh.make_node("Mod", ["tt_mine", "tt_two"], ["tt_type"]),   # verify feeds any ints
                 oh.make_node("Gather", ["tt_table", "tt_type"], ["tt_emb"]),
                 oh.make_node("Add", [emb.output[0] + "_raw", "tt_emb"], [emb.output[0]])]
        c(2, "tt_two")
        emb.output[0] = emb.output[0] + "_raw"   # the Add gives the embedding's old name
    at = list(g.node).index(where) if how != "unread" else list(g.node).index(emb) + 1
    for i, n in enumerate(nodes):
        g.node.insert(at + i, n)
    onnx.checker.check_model(proto)
    return proto


def _optimize(proto: onnx.ModelProto):
    result = onnx_fuse.optimize(proto, level=4, target="trt", float32_plugins=True, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    return result, collections.Counter(n.op_type for n in result.model.graph)


@pytest.mark.parametrize("name", ["token_type_ids", "segments"])
def test_mask_read_by_token_types_is_not_paged(name):
    result, ops = _optimize(_with_token_types("image", name))
    assert ops["PagedAttention"] == 0 and ops["Attention"] + ops["FusedAttention"] == 2, ops
    notes = [w for w in result.report.warnings if "trt-paged-kv: not rewritten" in w]
    assert notes and f"the mask changes with the values of the integer input '{name}'" in notes[0], \
        result.report.warnings


@pytest.mark.parametrize("how", ["length", "unread"])
def test_token_types_that_do_not_change_the_mask_still_page(how):
    result, ops = _optimize(_with_token_types(how))
    assert ops["PagedAttention"] == 2, (ops, result.report.warnings)
