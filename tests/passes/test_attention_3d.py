"""fold-layout-chains' attention-3d (passes/_attention_3d.py): Attention-23 on [B, H, S, D] views of
[B, S, H*D] tensors read in its 3-D form, so the Transposes around it cancel; past keys / values
whose presents nobody reads joined to k / v first (SD3's joint attention)."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_fuse
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same
from pass_testing import ops as _ops

B, S, P, H, D = 2, 5, 3, 2, 8


def _heads_view(nodes: list, inits: list, rng, src: str, name: str) -> str:
    """src [B, S, H*D] times a random weight ``w_<name>``, viewed as heads [B, H, S, D] (Reshape by the
    graph's ``split`` initializer, then Transpose); appends to ``nodes`` / ``inits``, returns the view."""
    w = f"w_{name}"
    inits.append(helper.make_tensor(w, TensorProto.FLOAT, [H * D, H * D],
                                    (rng.standard_normal((H * D, H * D)) / 4).ravel().tolist()))
    nodes.extend([helper.make_node("MatMul", [src, w], [f"{name}_p"]),
                  helper.make_node("Reshape", [f"{name}_p", "split"], [f"{name}_s"]),
                  helper.make_node("Transpose", [f"{name}_s"], [f"{name}_t"], perm=[0, 2, 1, 3])])
    return f"{name}_t"


def _graph(*, norm: bool = True, past: bool = False, presents_read: bool = False, rope_q: bool = False,
           merge_out: bool = True) -> onnx.ModelProto:
    """x [B, S, H*D] -> q / k / v views [B, H, S, D] (RMSNorm on q and k in that layout, as SD3) ->
    Attention-23 -> [B, S, H*D]; ``past``: a second stream's k / v [B, H, P, D] as past_key /
    past_value (what the lowering of a Concat over S recognized as a cache writes)."""
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, H, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, H * D]),
             helper.make_tensor("g", TensorProto.FLOAT, [D], rng.uniform(0.5, 1.5, D).tolist())]
    nodes, inputs = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H * D])]

    def heads(src, name, normed):
        t = _heads_view(nodes, inits, rng, src, name)
        if not normed:
            return t
        nodes.append(helper.make_node("RMSNormalization", [t, "g"], [f"{name}_n"], epsilon=1e-6))
        return f"{name}_n"

    q, k, v = heads("x", "q", norm), heads("x", "k", norm), heads("x", "v", False)
    if rope_q:  # q read through an op no Transpose sinks through
        nodes.append(helper.make_node("Softplus", [q], ["q_sp"]))
        nodes.append(helper.make_node("ReduceMax", ["q_sp"], ["q_m"], keepdims=1))
        nodes.append(helper.make_node("Sub", ["q_sp", "q_m"], ["q_r"]))
        q = "q_r"
    att_in = [q, k, v]
    outs = ["o4"]
    if past:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [B, P, H * D]))
        att_in += ["", heads("c", "pk", norm), heads("c", "pv", False)]
        outs += ["present_k", "present_v"]
    nodes.append(helper.make_node("Attention", att_in, outs, scale=D ** -0.5))
    out_name = "o4"
    if merge_out:
        nodes += [helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["ot", "merge"], ["y"])]
        out_name = "y"
    seq = S + P if past else S
    outputs = [helper.make_tensor_value_info(out_name, TensorProto.FLOAT,
                                             [B, S, H * D] if merge_out else [B, H, S, D])]
    if presents_read:
        outputs.append(helper.make_tensor_value_info("present_k", TensorProto.FLOAT, [B, H, seq, D]))
    graph = helper.make_graph(nodes, "att", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds():
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((B, S, H * D), dtype=np.float32),
            "c": rng.standard_normal((B, P, H * D), dtype=np.float32)}


def _run(model, attention_3d=True):
    ir_model, modified, p = apply(lambda: FoldLayoutChainsPass(max_rank=None, attention_3d=attention_3d), model,
                                  shape_inference=True)
    for _ in range(3):  # the cleanup's fixed point: the sunk Transposes' identities, the dead glue
        FoldLayoutChainsPass(max_rank=None)(ir_model)
        IdentityEliminationPass()(ir_model)
        DeadCodeEliminationPass()(ir_model)
    return ir_model, modified, p


def _attention(ir_model):
    return next(n for n in ir_model.graph if n.op_type == "Attention")


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("norm", [False, True])
def test_heads_first_attention_is_read_3d(norm, past):
    model = _graph(norm=norm, past=past)
    ir_model, modified, p = _run(model)
    got = {k: v for k, v in _ops(ir_model).items() if k != "Constant"}
    assert modified and p.stats["attention-3d"] == 1
    att = _attention(ir_model)
    assert att.attributes["q_num_heads"].value == H and att.attributes["kv_num_heads"].value == H
    assert "Transpose" not in got, got  # every head split / merge Transpose cancelled
    check_same(model, ir_model, {k: v for k, v in _feeds().items() if past or k != "c"})


def test_three_of_four_is_enough():
    """q read through ops no Transpose sinks through (its split's Transpose stays, a new one
    follows them): 4 Transposes -> 2."""
    model = _graph(rope_q=True)
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 1
    assert _ops(ir_model).get("Transpose") == 2, _ops(ir_model)
    check_same(model, ir_model, {"x": _feeds()["x"]})


def test_left_4d_where_it_saves_nothing():
    """q through other ops and the output not merged: two of four meet a Transpose, left alone."""
    model = _graph(rope_q=True, merge_out=False)
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 0 and "q_num_heads" not in _attention(ir_model).attributes


def test_a_read_present_keeps_the_cache_4d():
    """A present that is read makes the past a real cache: q / k / v and the output go 3-D (three of four
    meet a Transpose), the past and present stay 4-D where they are (not joined to k / v: the present
    must hold them); the old code left the whole attention 4-D."""
    model = _graph(past=True, presents_read=True)
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 1
    att = _attention(ir_model)
    assert att.attributes["q_num_heads"].value == H and len(att.inputs) == 6 and len(att.outputs) == 3
    assert [v.name for v in ir_model.graph.outputs] == ["y", "present_k"]
    assert att.outputs[1] is ir_model.graph.outputs[1] and "Concat" not in _ops(ir_model)
    assert _ops(ir_model).get("Transpose") == 2, _ops(ir_model)   # the past's own head views only
    check_same(model, ir_model, _feeds())


def _decoder(*, causal: int, mask: bool = False, norm: bool = True, rope_q: bool = False) -> onnx.ModelProto:
    """A decoder layer with a KV cache: q / k / v heads-first views of x (RMSNorm on q and k in that
    layout: EXAONE 4's / Gemma 3's layers without a rotation), past_key / past_value graph inputs
    [B, H, P, D], Attention-23 (is_causal ``causal``, a [B, 1, S, P+S] additive mask if ``mask``) whose
    presents are graph outputs; the output merged back to [B, S, H*D]."""
    rng = np.random.default_rng(5)
    inits = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, H, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, H * D]),
             helper.make_tensor("g", TensorProto.FLOAT, [D], rng.uniform(0.5, 1.5, D).tolist())]
    nodes = []

    def heads(name, normed):
        t = _heads_view(nodes, inits, rng, "x", name)
        if not normed:
            return t
        nodes.append(helper.make_node("RMSNormalization", [t, "g"], [f"{name}_n"], epsilon=1e-6))
        return f"{name}_n"

    q, k, v = heads("q", norm), heads("k", norm), heads("v", False)
    if rope_q:  # q read through an op no Transpose sinks through
        nodes += [helper.make_node("ReduceMax", [q], ["q_m"], keepdims=1), helper.make_node("Sub", [q, "q_m"], ["q_r"])]
        q = "q_r"
    seq = ["batch", H, "past", D]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", H * D]),
              helper.make_tensor_value_info("past_key", TensorProto.FLOAT, seq),
              helper.make_tensor_value_info("past_value", TensorProto.FLOAT, seq)]
    if mask:
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 1, "seq", "total"]))
    nodes += [helper.make_node("Attention", [q, k, v, "m" if mask else "", "past_key", "past_value"],
                               ["o4", "present_key", "present_value"], scale=D ** -0.5, is_causal=causal),
              helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    total = ["batch", H, "total", D]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", H * D]),
               helper.make_tensor_value_info("present_key", TensorProto.FLOAT, total),
               helper.make_tensor_value_info("present_value", TensorProto.FLOAT, total)]
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def _decoder_feeds(b=B, s=S, past=P, mask=False):
    rng = np.random.default_rng(b * 100 + s * 10 + past)
    feeds = {"x": rng.standard_normal((b, s, H * D), dtype=np.float32),
             "past_key": rng.standard_normal((b, H, past, D), dtype=np.float32),
             "past_value": rng.standard_normal((b, H, past, D), dtype=np.float32)}
    if mask:
        m = np.where(rng.random((b, 1, s, past + s)) < 0.2, -1e4, 0.0).astype(np.float32)
        m[..., -1] = 0.0
        feeds["m"] = m
    return feeds


@pytest.mark.parametrize("causal,mask", [(1, False), (0, True), (0, False)])
def test_a_decoder_cache_stays_4d_and_the_rest_goes_3d(causal, mask):
    """The cache's past / present graph values stay 4-D and keep their names; the q / k norms sink with
    the head Transposes: no Transpose left (the old code kept all four and the norms heads-first)."""
    model = _decoder(causal=causal, mask=mask)
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 1
    assert "Transpose" not in _ops(ir_model), _ops(ir_model)
    att = _attention(ir_model)
    assert att.attributes["q_num_heads"].value == H and att.attributes["is_causal"].value == causal
    assert [v.name for v in att.inputs[4:6]] == ["past_key", "past_value"]
    assert [v.name for v in att.outputs[1:3]] == ["present_key", "present_value"]
    for b, s, past in ((B, S, P), (1, 1, 7), (3, 4, 0)):
        check_same(model, ir_model, _decoder_feeds(b, s, past, mask))


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_a_decoder_cache_end_to_end(target):
    model = _decoder(causal=1)
    result = onnx_fuse.optimize(model, target=target, level=3, verify=True,
                                shapes={"x": (B, S, H * D), "past_key": (B, H, P, D), "past_value": (B, H, P, D)})
    assert result.report.passed
    assert "Transpose" not in _ops(result.model), _ops(result.model)
    check_same(model, result.model, _decoder_feeds(1, 3, 5))


def test_a_decoder_cache_where_q_meets_nothing_and_the_output_is_not_merged_stays_4d():
    """q through ops no Transpose sinks through and the output read heads-first: two of four meet a
    Transpose (k, v), left 4-D."""
    model = _decoder(causal=1, rope_q=True)
    nodes = [n for n in model.graph.node if n.output[0] not in ("ot", "y")]   # the output read heads-first
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("o4", TensorProto.FLOAT, ["batch", H, "seq", D]))
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 0 and "q_num_heads" not in _attention(ir_model).attributes
    check_same(model, ir_model, _decoder_feeds())


def test_off_by_default():
    ir_model, modified, p = _run(_graph(), attention_3d=False)
    assert p.stats["attention-3d"] == 0 and "q_num_heads" not in _attention(ir_model).attributes


def _joint_sdpa(opset: int = 18) -> onnx.ModelProto:
    """SD3's joint attention as exported: image and text q / k / v split to [B, H, ., D], QK RMSNorm
    written out (x * rsqrt(mean(x^2) + eps) * g) in that layout, Concat over the sequence, softmax
    attention, merged back to [B, S+P, H*D]."""
    rng = np.random.default_rng(2)
    inits = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, H, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, H * D]),
             helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6]),
             helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("scale", TensorProto.FLOAT, [], [D ** -0.5]),
             helper.make_tensor("last", TensorProto.INT64, [1], [-1])]
    nodes = []

    def proj(src, name, normed):
        t = _heads_view(nodes, inits, rng, src, name)
        if not normed:
            return t
        g = f"g_{name}"
        inits.append(helper.make_tensor(g, TensorProto.FLOAT, [D], rng.uniform(0.5, 1.5, D).tolist()))
        nodes.extend([helper.make_node("Pow", [t, "two"], [f"{name}_sq"]),
                      helper.make_node("ReduceMean", [f"{name}_sq", "last"], [f"{name}_ms"], keepdims=1),
                      helper.make_node("Add", [f"{name}_ms", "eps"], [f"{name}_e"]),
                      helper.make_node("Sqrt", [f"{name}_e"], [f"{name}_r"]),
                      helper.make_node("Div", [t, f"{name}_r"], [f"{name}_d"]),
                      helper.make_node("Mul", [f"{name}_d", g], [f"{name}_n"])])
        return f"{name}_n"

    parts = {}
    for stream in ("x", "c"):
        parts[stream] = [proj(stream, f"{stream}{t}", t != "v") for t in "qkv"]
    for i, t in enumerate("qkv"):
        nodes.append(helper.make_node("Concat", [parts["c"][i], parts["x"][i]], [f"j{t}"], axis=2))
    nodes += [helper.make_node("Transpose", ["jk"], ["jkt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["jq", "jkt"], ["sc"]),
              helper.make_node("Mul", ["sc", "scale"], ["ss"]),
              helper.make_node("Softmax", ["ss"], ["pr"], axis=-1),
              helper.make_node("MatMul", ["pr", "jv"], ["o4"]),
              helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(
        nodes, "joint", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", S, H * D]),
                         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", P, H * D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", S + P, H * D])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_joint_attention_at_onnx_keeps_no_transpose():
    """SD3 / SD 3.5's joint attention at onnx-O3: Attention-23 3-D, no Transpose left (the old code
    kept the 4-D form: 2 QK-norm Transposes x 2 streams, the values', the past's and the merge)."""
    model = _joint_sdpa()
    result = onnx_fuse.optimize(model, target="onnx", level=3, verify=True)
    assert result.report.status == "PASSED", result.report.status_reason
    ops = collections.Counter(n.op_type for n in result.model.graph)
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, ops
    att = next(n for n in result.model.graph if n.op_type == "Attention")
    assert att.attributes["q_num_heads"].value == H, att
    assert ops["Transpose"] == 0, ops
    check_same(model, result.model, _feeds())


def _blocks(n_blocks: int = 3, t: int = 4, keys: int = 6) -> onnx.ModelProto:
    """LongT5's local blocks: q [B, N, T, H*D] viewed [B*N, T, H, D] and split into heads; k / v
    [B, N, L, H, D] (the blocks with their neighbours, gathered 5-D) moved to [B, N, H, L, D] and
    merged to [B*N, H, L, D] (Transpose, Flatten(2), Reshape: no head-split Transpose of their own);
    the output merged back to [B, N*T, H*D]."""
    inits = [helper.make_tensor("qsplit", TensorProto.INT64, [4], [-1, t, H, D]),
             helper.make_tensor("kview", TensorProto.INT64, [4], [0, H, -1, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [-1, n_blocks * t, H * D])]
    nodes = [helper.make_node("Reshape", ["q", "qsplit"], ["qs"]),
             helper.make_node("Transpose", ["qs"], ["q4"], perm=[0, 2, 1, 3])]
    for name in ("k", "v"):
        nodes += [helper.make_node("Transpose", [name], [f"{name}t"], perm=[0, 1, 3, 2, 4]),
                  helper.make_node("Flatten", [f"{name}t"], [f"{name}f"], axis=2),
                  helper.make_node("Reshape", [f"{name}f", "kview"], [f"{name}4"])]
    nodes += [helper.make_node("Attention", ["q4", "k4", "v4"], ["o4"], scale=D ** -0.5),
              helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(
        nodes, "blocks", [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch", n_blocks, t, H * D]),
                          helper.make_tensor_value_info("k", TensorProto.FLOAT, ["batch", n_blocks, keys, H, D]),
                          helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", n_blocks, keys, H, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n_blocks * t, H * D])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_keys_from_a_layout_chain_meet_the_heads_transpose():
    """LongT5's blocks at onnx-O3: k / v's Transpose + Flatten + Reshape chain takes the 3-D form's
    Transpose into its own (read 3-D they are [B, N, L, H, D] merged, no Transpose), so all four
    meet one: 4 Transposes -> 0. The old code counted only q and the output (2 of 4) and left it 4-D."""
    model = _blocks()
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 1
    assert "Transpose" not in _ops(ir_model), _ops(ir_model)
    rng = np.random.default_rng(4)
    check_same(model, ir_model, {"q": rng.standard_normal((B, 3, 4, H * D), dtype=np.float32),
                                 "k": rng.standard_normal((B, 3, 6, H, D), dtype=np.float32),
                                 "v": rng.standard_normal((B, 3, 6, H, D), dtype=np.float32)})


def test_keys_from_a_chain_without_a_transpose_do_not_count():
    """k / v merged to heads-first without moving an axis (no Transpose in their chain to take the new
    one): the 3-D form would add a Transpose to each, so with q and the output it is 2 of 4: left 4-D."""
    model = _blocks()
    for node in model.graph.node:
        if node.op_type == "Transpose" and node.input[0] in ("k", "v"):
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("perm", [0, 1, 2, 3, 4]))
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 0


def _per_head_norms(escape: bool = False) -> onnx.ModelProto:
    """StableLM's qk_layernorm: q / k heads-first views split into their H heads (Split over axis 1), a
    LayerNorm with its own weights per head, joined back (Concat over axis 1); ``escape``: each Split's
    first part is also a graph output (read outside the attention)."""
    rng = np.random.default_rng(6)
    inits = [helper.make_tensor("split", TensorProto.INT64, [4], [0, 0, H, D]),
             helper.make_tensor("merge", TensorProto.INT64, [3], [0, 0, H * D])]
    nodes, extra = [], []

    def heads(name, normed):
        t = _heads_view(nodes, inits, rng, "x", name)
        if not normed:
            return t
        parts = [f"{name}_h{i}" for i in range(H)]
        nodes.append(helper.make_node("Split", [t], parts, axis=1, num_outputs=H))
        normed_parts = []
        for i, part in enumerate(parts):
            for w, lo in (("g", 0.5), ("b", -0.2)):
                inits.append(helper.make_tensor(f"{w}_{name}{i}", TensorProto.FLOAT, [D],
                                                rng.uniform(lo, lo + 1.0, D).tolist()))
            nodes.append(helper.make_node("LayerNormalization", [part, f"g_{name}{i}", f"b_{name}{i}"],
                                          [f"{part}_n"], axis=-1, epsilon=1e-5))
            normed_parts.append(f"{part}_n")
        if escape:
            extra.append(helper.make_tensor_value_info(parts[0], TensorProto.FLOAT, [B, 1, S, D]))
        nodes.append(helper.make_node("Concat", normed_parts, [f"{name}_n"], axis=1))
        return f"{name}_n"

    q, k, v = heads("q", True), heads("k", True), heads("v", False)
    nodes += [helper.make_node("Attention", [q, k, v], ["o4"], scale=D ** -0.5, is_causal=1),
              helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "per_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H * D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H * D]), *extra],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_per_head_norms_through_a_split_meet_the_heads_transpose():
    """q / k split over the heads, normed per head and joined: the walk passes the Split (each part read
    once), so all four meet a Transpose: 4 Transposes -> 0 (the old code stopped at the Split: 2 of 4,
    left 4-D; StableLM at onnx-O3)."""
    model = _per_head_norms()
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 1
    assert "Transpose" not in _ops(ir_model), _ops(ir_model)
    check_same(model, ir_model, {"x": _feeds()["x"]})


def test_per_head_norms_with_a_part_read_elsewhere_stay_4d():
    """A Split part that is also a graph output: the Transpose cannot sink through that Split, q and k
    do not count (2 of 4), left 4-D."""
    model = _per_head_norms(escape=True)
    ir_model, modified, p = _run(model)
    assert p.stats["attention-3d"] == 0 and "q_num_heads" not in _attention(ir_model).attributes
    check_same(model, ir_model, {"x": _feeds()["x"]})
