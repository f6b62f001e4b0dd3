"""identity-elimination: a Slice from 0 of an Expand that gives the expanded value's shape back is that value.

PEFT's prompt encoders (P-tuning, prompt tuning exported with the PeftModel) expand the virtual-token ids
[1, P] to the batch, take [:1] of it, embed (P-tuning: and run an MLP over) the tokens and repeat them to
the batch: once the Slice reads the constant ids, folding computes the prompts and only the Tile to the
batch stays. Before, the embedding Gather and the encoder's MatMuls ran on every call."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_fuse
from onnx import helper as oh
from onnx import numpy_helper

from pass_testing import check_same, ops

P, E, V = 4, 8, 16


def _model(starts=(0,), ends=(1,), axes=(0,)):
    """ids [B, S] -> prompts: Expand(tokens [1, P], [B, P]) sliced -> embedding -> Linear + Relu ->
    Tile to [B, P, E]; output: prompts before the ids' own embeddings, [B, P + S, E]."""
    rng = np.random.default_rng(0)
    inits = {"tokens": np.arange(P, dtype=np.int64)[None], "emb": rng.standard_normal((P, E)).astype(np.float32),
             "w": rng.standard_normal((E, E)).astype(np.float32), "words": rng.standard_normal((V, E)).astype(np.float32),
             "p": np.array([P], np.int64), "one": np.array([1], np.int64), "zero": np.array(starts, np.int64),
             "end": np.array(ends, np.int64), "axis": np.array(axes, np.int64)}
    n = oh.make_node
    nodes = [n("Shape", ["ids"], ["b"], end=1), n("Concat", ["b", "p"], ["bp"], axis=0),
             n("Expand", ["tokens", "bp"], ["expanded"]), n("Slice", ["expanded", "zero", "end", "axis"], ["first"]),
             n("Gather", ["emb", "first"], ["pe"]), n("MatMul", ["pe", "w"], ["pm"]), n("Relu", ["pm"], ["pr"]),
             n("Concat", ["b", "one", "one"], ["reps"], axis=0), n("Tile", ["pr", "reps"], ["prompts"]),
             n("Gather", ["words", "ids"], ["we"]), n("Concat", ["prompts", "we"], ["y"], axis=1)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["b", "s"])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["b", "t", E])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _feeds(batch=3):
    return {"ids": np.random.default_rng(1).integers(0, V, (batch, 5)).astype(np.int64)}


def test_prompt_encoder_folds_once_the_slice_reads_the_tokens():
    proto = _model()
    model = onnx_fuse.optimize(proto, level=2).model
    got = ops(model)
    assert "MatMul" not in got and "Relu" not in got and "Slice" not in got and got["Tile"] == 1, got
    check_same(proto, model, _feeds())
    check_same(proto, model, _feeds(batch=1))


def test_slices_that_do_not_give_the_value_back_stay():
    """From row 1 of the batch (empty at batch 1: not the tokens), or row 0 and the first two of the P tokens:
    the Slice and the encoder stay."""
    for cut in (((1,), (2,), (0,)), ((0, 0), (1, 2), (0, 1))):
        proto = _model(*cut)
        model = onnx_fuse.optimize(proto, level=2).model
        got = ops(model)
        assert got.get("Slice") == 1 and got.get("MatMul") == 1, (cut, got)
        check_same(proto, model, _feeds())
