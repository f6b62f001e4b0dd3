"""DeadCodeEliminationPass: drops what nothing reaches, keeps inputs, outputs and live subgraphs."""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def test_removes_dead_chain_and_unused_initializer_keeps_graph_input_initializer():
    proto = parse(HEADER + '''
    g (float[N, 3] x, float[3] w) => (float[N, 3] y)
    <float[3] w = {1.0, 2.0, 3.0}, float[3] dead = {1.0, 1.0, 1.0}>
    {
        a = Relu(x)
        b = Add(a, dead)
        c = Exp(b)
        y = Neg(x)
    }''')
    model, modified, p = apply(DeadCodeEliminationPass, proto)
    assert modified
    assert p.stats == {"nodes-removed": 3, "initializers-removed": 1}
    assert ops(model) == {"Neg": 1}
    assert set(model.graph.initializers) == {"w"}
    assert [v.name for v in model.graph.inputs] == ["x", "w"]
    check_same(proto, model)


def test_intermediate_that_is_graph_output_is_kept():
    proto = parse(HEADER + '''
    g (float[3] x) => (float[3] a)
    {
        a = Relu(x)
        b = Exp(a)
    }''')
    model, modified, _ = apply(DeadCodeEliminationPass, proto)
    assert modified and ops(model) == {"Relu": 1}
    check_same(proto, model)


def test_dead_code_inside_subgraph_removed_live_if_kept():
    proto = parse(HEADER + '''
    g (bool c, float[2] x) => (float[2] y)
    {
        y = If(c) <
            then_branch = t () => (float[2] ty) {
                unused = Exp(x)
                ty = Neg(x)
            },
            else_branch = e () => (float[2] ey) { ey = Abs(x) }
        >
    }''')
    model, modified, _ = apply(DeadCodeEliminationPass, proto)
    assert modified and ops(model) == {"If": 1, "Neg": 1, "Abs": 1}
    for cond in (True, False):
        check_same(proto, model, inputs={"c": np.array(cond), "x": np.array([1.0, -2.0], np.float32)})


def test_live_model_reports_unmodified():
    proto = parse(HEADER + '''
    g (float[N, 3] x) => (float[N, 3] y)
    <float[3] b = {1.0, 2.0, 3.0}>
    {
        t = Relu(x)
        y = Add(t, b)
    }''')
    model, modified, p = apply(DeadCodeEliminationPass, proto)
    assert not modified and not p.stats


def test_attention_fed_a_past_keeps_its_present_outputs():
    """onnx-ir drops unused optional outputs; ORT's Attention-23 then refuses the model ("does
    not support past_key provided and present_key being null"). Found by the fuzzer's control-flow
    graphs (seed 2019: a KV-cache attention inside an If branch, present not returned) at O3/O4
    onnx. Attention without a past still loses its unused outputs."""
    proto = parse('<ir_version: 10, opset_import: ["" : 23]>' + '''
    g (float[1, 2, 3, 4] q, float[1, 2, 3, 4] k, float[1, 2, 3, 4] v, float[1, 2, 5, 4] pk,
       float[1, 2, 5, 4] pv) => (float[1, 2, 3, 4] y, float[1, 2, 3, 4] y2)
    {
        y, pko, pvo = Attention(q, k, v, , pk, pv)
        y2, pk2, pv2 = Attention(q, k, v)
    }''')
    model, _, _ = apply(DeadCodeEliminationPass, proto)
    with_past, without = [n for n in model.graph]
    assert len(with_past.outputs) == 3 and all(o.name for o in with_past.outputs)
    assert len(without.outputs) == 1
    check_same(proto, model)
