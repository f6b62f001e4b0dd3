"""The fuzzer judges rows the original has NaN throughout with verify's rule (verify.nan_rows /
compare_arrays, the one source of it): such a row is undefined output and takes any value, which
the fuzzer lists as `nan-rows` (noted, not a failure); NaN anywhere else must still sit in the same
places. Before, the fuzzer had its own guess (a 2-D 0/1 feed named "mask" and the rows it keeps):
a row with no kept key made by any other mask was `wrong`, where verify passes it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import fuzz_differential as fd  # noqa: E402
from fuzz_motifs import Case  # noqa: E402

B, H, S, D = 2, 2, 4, 8


def _keep_mask_attention(keep_none: bool = False) -> Case:
    """softmax(where(keep, q k^T * scale, -inf)) v with a 4-D bool ``keep`` input (no 2-D padding
    mask): query 0 of sequence 1 keeps no key, so the original is 0/0 = NaN on that row of each
    head; Attention-23 (onnx, trt) gives 0 there, ORT's MultiHeadAttention keeps the NaN."""
    nodes = [oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), oh.make_node("MatMul", ["q", "kt"], ["sc"]),
             oh.make_node("Mul", ["sc", "scale"], ["ss"]), oh.make_node("Where", ["keep", "ss", "ninf"], ["w"]),
             oh.make_node("Softmax", ["w"], ["p"], axis=-1), oh.make_node("MatMul", ["p", "v"], ["y"])]
    inits = [oh.make_tensor("scale", TensorProto.FLOAT, [], [D ** -0.5]),
             oh.make_tensor("ninf", TensorProto.FLOAT, [], [-np.inf])]
    inputs = [oh.make_tensor_value_info(x, TensorProto.FLOAT, [B, H, S, D]) for x in "qkv"] + \
        [oh.make_tensor_value_info("keep", TensorProto.BOOL, [B, 1, S, S])]
    graph = oh.make_graph(nodes, "keep_mask", inputs, [oh.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, S, D])],
                          inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    rng = np.random.default_rng(0)
    keep = np.broadcast_to(np.tril(np.ones((S, S), bool)), (B, 1, S, S)).copy()
    keep[1, 0, 0, :] = False
    if keep_none:                           # no row keeps a key: the original is NaN everywhere
        keep[:] = False
    feeds = {x: rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv"}
    return Case(seed=0, model=model, feeds={**feeds, "keep": keep}, motifs=["keep_mask"], traps=[])


def test_rows_with_no_kept_key_under_any_mask_are_nan_rows_not_wrong():
    results, _, _ = fd.fuzz_case(_keep_mask_attention(), [3], ["ort", "onnx", "trt"])
    got = {r["target"]: (r["cls"], r["detail"], r["fires"]) for r in results}
    for target in ("onnx", "trt"):   # Attention-23: zeros on the NaN rows (was `wrong`)
        cls, detail, fires = got[target]
        assert fires.get("attention") == 1, (target, fires)
        assert cls == "nan-rows", (target, cls, detail)
        assert "2 of the 2 rows" in detail
    assert got["ort"][0] == "ok", got["ort"]   # MultiHeadAttention keeps the NaN: nothing to note
    assert "nan-rows" in fd.NOTED_CLASSES and "nan-rows" not in fd.FAIL_CLASSES


def test_only_rows_nan_throughout_take_any_value():
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ref[1, 2] = np.nan                      # a whole row: undefined
    zeros = np.where(np.isnan(ref), 0, ref)
    assert fd.compare(["y"], [ref], [zeros]) == ("ok", "")
    assert "1 of the 1 rows" in fd.nan_rows_given(["y"], [ref], [zeros])
    assert fd.nan_rows_given(["y"], [ref], [ref.copy()]) == ""   # NaN kept: plain ok

    partial = ref.copy()
    partial[0, 0, 1] = np.nan               # NaN in part of a row: must stay NaN
    cls, detail = fd.compare(["y"], [partial], [np.where(np.isnan(partial), 0, partial)])
    assert cls == "wrong" and "NaN positions differ" in detail

    new_nan = zeros.copy()
    new_nan[0, 1, 2] = np.nan               # a NaN the original does not have
    assert fd.compare(["y"], [ref], [new_nan])[0] == "wrong"

    off = zeros.copy()
    off[0, 0, 0] += 1.0                     # the defined rows still hold to the tolerance
    assert fd.compare(["y"], [ref], [off])[0] == "wrong"

    everywhere = np.full((2, 3), np.nan, np.float32)   # NaN throughout: nothing left, old rule
    assert fd.compare(["y"], [everywhere], [np.zeros_like(everywhere)])[0] == "wrong"


def test_an_output_nan_everywhere_is_all_nan_not_wrong():
    """A fully masked batch: the original's output is NaN everywhere, which verify refuses as
    nothing to compare (compare stays `wrong`); the fuzzer lists it as `all-nan` (noted), as
    long as every other output matches (fuzz9's run 16010: form seed 201748057 was `wrong`)."""
    results, _, _ = fd.fuzz_case(_keep_mask_attention(keep_none=True), [3], ["ort", "onnx", "trt"])
    got = {r["target"]: (r["cls"], r["detail"]) for r in results}
    for target in ("onnx", "trt"):   # Attention-23 gives zeros there
        assert got[target][0] == "all-nan", (target, got[target])
    assert got["ort"][0] == "ok", got["ort"]   # MultiHeadAttention keeps the NaN
    assert "all-nan" in fd.NOTED_CLASSES and "all-nan" not in fd.FAIL_CLASSES

    every = np.full((2, 3), np.nan, np.float32)
    other = np.ones((2, 3), np.float32)
    assert "NaN everywhere" in fd.all_nan_given(["y", "z"], [every, other], [np.zeros_like(every), other])
    assert fd.all_nan_given(["y", "z"], [every, other], [np.zeros_like(every), other + 1]) == ""  # z is wrong
    assert fd.all_nan_given(["z"], [other], [other + 1]) == ""   # no output NaN everywhere
