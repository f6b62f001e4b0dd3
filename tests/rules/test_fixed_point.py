"""onnx-fuse's own output is a fixed point: optimized again (same settings, another target, or
without the --opset pin) it keeps every fusion and still matches the original.

- rules/attention/grouped_5d.yaml (attention-grouped-5d): the 5-D grouped GQA chain that
  attention-plain-grouped writes below opset 23 (q [B,K,G,T,D] @ K^T [B,K,1,D,S]) is read back into
  the canonical attention with K kv heads; on the old code nothing read it (unpinned: no Attention).
- passes/identity_elimination.py: Squeeze(Unsqueeze(a, A), A) is a,
  so the same pinned run twice leaves no view glue behind (the graph does not grow).
- tools/fixed_point.py's check on two small corpus files (the full spread: run the tool).
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from tests.rules import test_attention as prefill
from tests.rules.test_attention_plain import _at

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import fixed_point  # noqa: E402

B, K, G, T, D = 2, 2, 3, 5, 8


def _ops(result) -> collections.Counter:
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in result.model.graph)


def _attention(result) -> int:
    ops = _ops(result)
    return ops["Attention"] + ops["com.microsoft::GroupQueryAttention"] + ops["com.microsoft::MultiHeadAttention"]


def _grouped_chain(mask_rank: int | str | None = 5, guard: str | None = None, opset: int = 20,
                   softcap: float = 0.0) -> onnx.ModelProto:
    """softmax(q5 @ k5^T * s [+ mask]) @ v5 on q5 [B,K,G,T,D], k5 / v5 [B,K,1,S,D] (S = T), viewed
    [B, K*G, T, D] and merged to [B, T, K*G*D] as a decoder's attention output is."""
    nodes = [
        helper.make_node("Reshape", ["q", "qshape"], ["q5"]),
        helper.make_node("Mul", ["q5", "scale"], ["qs"]),
        helper.make_node("Reshape", ["k", "kshape"], ["k5"]),
        helper.make_node("Reshape", ["v", "kshape"], ["v5"]),
        helper.make_node("Transpose", ["k5"], ["kt5"], perm=[0, 1, 2, 4, 3]),
        helper.make_node("MatMul", ["qs", "kt5"], ["sc"]),
    ]
    inits = [helper.make_tensor("qshape", TensorProto.INT64, [5], [0, K, G, -1, D]),
             helper.make_tensor("kshape", TensorProto.INT64, [5], [0, K, 1, -1, D]),
             helper.make_tensor("scale", TensorProto.FLOAT, [1], [D ** -0.5]),
             helper.make_tensor("oshape", TensorProto.INT64, [4], [0, K * G, -1, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, K * G * D])]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", K * G, "seq", D]),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", K, "seq", D]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", K, "seq", D])]
    scores = "sc"
    if softcap:  # c * tanh(s / c), as lower_plain writes it
        inits.append(helper.make_tensor("cap", TensorProto.FLOAT, [1], [softcap]))
        nodes += [helper.make_node("Div", ["sc", "cap"], ["sd"]), helper.make_node("Tanh", ["sd"], ["st"]),
                  helper.make_node("Mul", ["st", "cap"], ["scap"])]
        scores = "scap"
    if mask_rank is not None:
        # an additive padding mask, one row for all heads: [B, 1, T, S] (viewed 5-D where rank 5)
        # rank 4 lines up with [K, G, T, S]: one mask [1, 1, T, S] for every batch row
        lead = ["batch", K, G] if mask_rank == "heads" else [1, 1] if mask_rank == 4 else ["batch", 1]
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [*lead, "seq", "seq"]))
        mask = "mask"
        if mask_rank == 5:
            inits.append(helper.make_tensor("ax2", TensorProto.INT64, [1], [2]))
            nodes.append(helper.make_node("Unsqueeze", ["mask", "ax2"], ["mask5"]))
            mask = "mask5"
        nodes.append(helper.make_node("Add", [scores, mask], ["sm"]))
        scores = "sm"
    nodes.append(helper.make_node("Softmax", [scores], ["p"], axis=-1))
    probs = "p"
    if guard:  # the export's NaN guard on the probabilities ("p") or, as lower_plain writes it, the output
        inits.append(helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))
    if guard == "p":
        nodes += [helper.make_node("IsNaN", ["p"], ["isn"]), helper.make_node("Where", ["isn", "zero", "p"], ["pz"])]
        probs = "pz"
    nodes.append(helper.make_node("MatMul", [probs, "v5"], ["o5" if guard != "out" else "y5"]))
    if guard == "out":
        nodes += [helper.make_node("IsNaN", ["y5"], ["isn"]), helper.make_node("Where", ["isn", "zero", "y5"], ["o5"])]
    nodes += [helper.make_node("Reshape", ["o5", "oshape"], ["o4"]),
              helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "grouped5d", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", K * G * D])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _feeds(mask, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"q": rng.standard_normal((B, K * G, T, D), dtype=np.float32),
             "k": rng.standard_normal((B, K, T, D), dtype=np.float32),
             "v": rng.standard_normal((B, K, T, D), dtype=np.float32)}
    if mask is not None:
        m = np.zeros((B, 1, T, T), np.float32)
        m[1, :, :, 3:] = -1e9  # the second row padded after 3 keys
        feeds["mask"] = m[:1] if mask == 4 else m
    return feeds


def _verified(model, **kw):
    result = onnx_fuse.optimize(model, verify=True, **kw)
    assert result.report.status == "PASSED", result.report.status_reason
    return result


@pytest.mark.parametrize("mask_rank", [None, 4, 5])
@pytest.mark.parametrize("target,level", [("onnx", 3), ("ort", 3), ("trt", 4)])
def test_grouped_5d_chain_is_read_as_gqa(h, mask_rank, target, level):
    model = _grouped_chain(mask_rank)
    result = _verified(model, level=level, target=target, **({"float32_plugins": True} if level == 4 else {}))
    assert result.report.rule_fires.get("attention-grouped-5d") == 1, result.report.rule_fires
    assert result.report.rule_fires.get("attention-repeat-kv") == 1, result.report.rule_fires
    ops = _ops(result)
    # no K / V copy left (ORT's GroupQueryAttention takes kv heads; its sequence lengths may Expand)
    assert _attention(result) + ops["onnx_fuse::FusedAttention"] == 1 and ops["Softmax"] == 0, ops
    assert target == "ort" or ops["Expand"] == 0, ops
    h.assert_close(model, result.to_proto(), _feeds(mask_rank))


@pytest.mark.parametrize("guard", ["p", "out"])
def test_grouped_5d_with_the_nan_guard(h, guard):
    """The guard on p (the sdpa exports') or on the output (lower_plain's) goes into the fused op;
    the second batch row has padded keys, so a fully masked row would show a difference."""
    model = _grouped_chain(5, guard=guard)
    result = _verified(model, level=3, target="onnx")
    assert _ops(result)["Attention"] == 1 and _ops(result)["IsNaN"] == 0, _ops(result)
    feeds = _feeds(5)
    feeds["mask"][1, :, 2, :] = -np.inf  # query 2 of row 1 keeps no key: NaN, zeroed by the guard
    h.assert_close(model, result.to_proto(), feeds)


@pytest.mark.parametrize("mask_rank", [None, 5])
def test_grouped_5d_with_a_softcap(h, mask_rank):
    model = _grouped_chain(mask_rank, softcap=0.7)
    result = _verified(model, level=3, target="onnx")
    assert result.report.rule_fires.get("attention-grouped-5d-softcap") == 1, result.report.rule_fires
    ops = _ops(result)
    assert ops["Attention"] == 1 and ops["Tanh"] == 0 and ops["Softmax"] == 0, ops
    h.assert_close(model, result.to_proto(), _feeds(mask_rank))


def test_grouped_5d_leaves_a_mask_with_a_row_per_head():
    """A mask [B, K, G, T, S] (a row per query head) is not one mask for the K*G heads: left alone."""
    model = _grouped_chain("heads")
    result = _verified(model, level=3, target="onnx")
    assert not result.report.rule_fires.get("attention-grouped-5d"), result.report.rule_fires


@pytest.mark.parametrize("again", [("onnx", None), ("ort", None), ("onnx", 20)])
def test_pinned_gqa_output_optimized_again(h, again):
    """A GQA decoder block pinned to opset 20 at onnx-O3 (the 5-D grouped chain), optimized again:
    unpinned it becomes Attention-23 / GroupQueryAttention; pinned the same it is the same chain."""
    model = _at(prefill._block(h, form="sdpa", kv_heads=2), 20)
    one = _verified(model, level=3, target="onnx", opset=20)
    assert one.report.rule_fires.get("attention-plain-grouped") == 1 and _attention(one) == 0
    target, opset = again
    two = _verified(one.to_proto(), level=3, target=target, opset=opset)
    if opset is None:
        assert _attention(two) == 1, _ops(two)
    else:  # the same chain, no op more (view glue may fold further)
        a, b = _ops(one), _ops(two)
        assert all(b[op] <= a[op] for op in b) and a["Softmax"] == b["Softmax"] == 1, (a, b)
    h.assert_close(model, two.to_proto(), prefill._feeds(h, kv_heads=2))


def test_squeeze_unsqueeze_round_trip_is_dropped():
    """Squeeze(Unsqueeze(x, A), A) is x; Unsqueeze(Squeeze(x, A), A) stays (the interleaved-RoPE
    rules read unbind-pairs' Squeeze -> Unsqueeze picks: tests/rules/test_rotary_interleaved_paired)."""
    nodes = [helper.make_node("Squeeze", ["x", "ax"], ["s"]), helper.make_node("Unsqueeze", ["s", "ax"], ["u"]),
             helper.make_node("Unsqueeze", ["x", "ax0"], ["w"]), helper.make_node("Squeeze", ["w", "ax0"], ["z"]),
             helper.make_node("Unsqueeze", ["s", "ax0"], ["other"]),  # another axis: kept
             helper.make_node("Add", ["u", "z"], ["a"])]
    graph = helper.make_graph(
        nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 1, 4])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 1, 4]),
         helper.make_tensor_value_info("other", TensorProto.FLOAT, [1, 2, 3, 4])],
        initializer=[helper.make_tensor("ax", TensorProto.INT64, [1], [-2]),
                     helper.make_tensor("ax0", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = onnx_fuse.optimize(model, level=1, target="onnx", verify=True)
    ops = _ops(result)
    assert result.report.status == "PASSED"
    assert ops["Squeeze"] == 1 and ops["Unsqueeze"] == 2 and ops["Add"] == 1, ops   # s; u, other


@pytest.mark.parametrize("name,spec", [
    ("qwen2__kv__trained", "onnx-O3@22:ort-O3"),
    ("qwen2__kv__trained", "onnx-O3@22"),
    ("qwen2__optimum__trained", "onnx-O3@18:onnx-O3"),
    ("gemma2__dyn_mask__trained", "onnx-O3@22:onnx-O3"),
    ("gpt2__kv__trained", "ort-O3:onnx-O3"),
    ("gpt2__kv__trained", "trt-O4"),
])
def test_corpus_files_are_a_fixed_point(name, spec):
    path = ROOT / "tests/data/corpus" / f"{name}.onnx"
    row = fixed_point.check(path, spec)
    assert row["ok"], row


def _native_attention(scale: bool = True) -> onnx.ModelProto:
    """Attention-23 over [B, H, S, D] with a float bias (torch opset-23 export's form)."""
    attrs = {"scale": D ** -0.5} if scale else {}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 2, "seq", D]) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 1, "seq", "seq"]))
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], **attrs)], "native", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "seq", D])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def test_keep_masked_rows_map_is_not_stacked(h):
    """onnx-O3 maps a float bias for ORT's Attention-23 (keep-masked-rows: one Max); optimized again,
    attention-native-23 reads the map back instead of mapping the mapped bias again (2 Max before)."""
    model = _native_attention()
    one = _verified(model, level=3, target="onnx")
    two = _verified(one.to_proto(), level=3, target="onnx")
    assert _ops(one)["Max"] == 1 and _ops(two) == _ops(one), (_ops(one), _ops(two))
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((B, 2, T, D), dtype=np.float32) for n in "qkv"}
    mask = np.zeros((B, 1, T, T), np.float32)
    mask[1, :, :, 3:] = np.finfo(np.float32).min
    feeds["mask"] = mask
    h.assert_close(model, two.to_proto(), feeds)


def test_native_attention_without_a_scale_attribute(h):
    """Attention-23 with no scale attribute (its default 1 / sqrt(D)) is read as the canonical op too;
    before, the rewrite failed on float(None) and the node stayed."""
    model = _native_attention(scale=False)
    result = _verified(model, level=3, target="ort")
    assert _ops(result)["com.microsoft::MultiHeadAttention"] == 1, _ops(result)
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((B, 2, T, D), dtype=np.float32) for n in "qkv"}
    feeds["mask"] = np.zeros((B, 1, T, T), np.float32)
    h.assert_close(model, result.to_proto(), feeds)
