"""total_length / new_tokens (optimizer/targets/paged_kv_feeds.py) where every pool's slot is a cropped
present (a sliding layer keeping its last n tokens): the present is shorter than the past fed, so
verify reads the new tokens' count S from the feeds, whichever token inputs the paged model takes
(ids, embeddings, positions only, a kept mask) and in whatever order; the original's mask when it
takes none. The end-to-end case: the corpus' cropped Mistral fed inputs_embeds, verified."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.targets.paged_kv_feeds import new_tokens, total_length

P, S, KEPT = 7, 2, 3
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def _paged(extra: list[tuple[str, int, list]]) -> onnx.ModelProto:
    """A paged model's interface (one PagedAttention, its pools in a cropped present's slot) with
    the token inputs ``extra`` (name, dtype, dims) first."""
    f32 = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, t, d) for n, t, d in extra] + [
        helper.make_tensor_value_info("kv_pool_k.0", f32, ["nb", 4, 2, 64]),
        helper.make_tensor_value_info("kv_pool_v.0", f32, ["nb", 4, 2, 64]),
        helper.make_tensor_value_info("block_tables", TensorProto.INT32, ["b", "mb"]),
        helper.make_tensor_value_info("seq_lens", TensorProto.INT32, ["b"])]
    node = helper.make_node("PagedAttention", ["q", "q", "q", "kv_pool_k.0", "kv_pool_v.0", "block_tables", "seq_lens"],
                            ["y", "kv_pool_k_out.0", "kv_pool_v_out.0"], domain="onnx_fuse")
    outs = [helper.make_tensor_value_info(n, f32, None) for n in ("y", "kv_pool_k_out.0", "kv_pool_v_out.0")]
    return helper.make_model(helper.make_graph([node], "paged", ins, outs))


def _feeds(**extra) -> dict:
    past = np.zeros((2, 2, P, 64), np.float32)
    return {"past_key_values.0.key": past, "past_key_values.0.value": past, **extra}


REF = [np.zeros((2, S, 8)), np.zeros((2, 2, KEPT, 64)), np.zeros((2, 2, KEPT, 64))]   # cropped presents
I64 = TensorProto.INT64
IDS = np.zeros((2, S), np.int64)


@pytest.mark.parametrize("inputs, feeds", [
    ([("input_ids", I64, ["b", "s"])], dict(input_ids=IDS)),
    ([("inputs_embeds", TensorProto.FLOAT, ["b", "s", 32])], dict(inputs_embeds=np.zeros((2, S, 32), np.float32))),
    ([("position_ids", I64, ["b", "s"])], dict(position_ids=IDS)),
    ([("cache_position", I64, ["s"])], dict(cache_position=np.arange(P, P + S))),
    # a mask the paged model kept, first: it spans P + S, not S
    ([("attention_mask", I64, ["b", "t"]), ("input_ids", I64, ["b", "s"])],
     dict(attention_mask=np.ones((2, P + S), np.int64), input_ids=IDS)),
    # no token input at all (ids folded away): the original's mask among the feeds
    ([], dict(attention_mask=np.ones((2, P + S), np.int64))),
], ids=["ids", "embeds", "position_ids", "cache_position", "kept_mask_first", "original_mask"])
def test_the_new_tokens_come_from_the_token_inputs(inputs, feeds):
    assert total_length(_paged(inputs), REF, _feeds(**feeds)) == P + S


def test_inputs_that_disagree_or_say_nothing_are_refused():
    model = _paged([("input_ids", I64, ["b", "s"]), ("position_ids", I64, ["b", "s2"])])
    with pytest.raises(ValueError, match="disagree on the new tokens' count"):
        new_tokens(model, _feeds(input_ids=IDS, position_ids=np.zeros((2, S + 1), np.int64)), P)
    model = _paged([("pixel_values", TensorProto.FLOAT, ["b", 3, 8, 8])])
    with pytest.raises(ValueError, match="no token input, positions or mask"):
        total_length(model, REF, _feeds(pixel_values=np.zeros((2, 3, 8, 8), np.float32)))


def test_a_cropped_model_fed_embeddings_is_verified(any_head_rule):
    """The corpus' cropped Mistral with its embedding Gather cut off (inputs_embeds in): paged
    with its windows and verified, S read from the embeddings."""
    path = CORPUS / "mistral__kv__trained.onnx"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    model = onnx.load(str(path))
    gather = next(n for n in model.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids")
    emb = gather.output[0]
    model.graph.node.remove(gather)
    del model.graph.input[0]
    model.graph.input.insert(0, helper.make_tensor_value_info(emb, TensorProto.FLOAT, ["batch", "sequence", 32]))
    model = onnx.shape_inference.infer_shapes(model)
    readers = [n for n in model.graph.node if "input_ids" in n.input]
    for n in readers:   # shape reads of the ids (batch, length) now read the embeddings
        n.input[:] = [emb if i == "input_ids" else i for i in n.input]
    result = onnx_fuse.optimize(model, level=4, target="trt", float32_plugins=True,
                                rules=[any_head_rule], verify=True)
    assert [n.attributes["window"].value for n in result.model.graph if n.op_type == "PagedAttention"] == [4, 4], \
        result.report.warnings
    assert result.report.status == "PASSED", result.report.status_reason
