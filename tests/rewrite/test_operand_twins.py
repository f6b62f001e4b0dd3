"""Canonical ops' operands computed twice by the fuse stage are merged before lowering
(rewrite/_operand_twins.py, called by RewritePass between the fuse and lower stages).

torch's opset-23 export feeds one boolean mask to every layer's Attention-23; attention-native-23
writes Where(mask, 0, -inf) per layer, each with its own constants. Before the merge each lowering's
net_nodes saw only its own Where die with the mask (the next layer's Where still read the bool mask),
so attention-trt kept the export's mask plus keep-masked-rows (qwen2_5_omni_talker latest_opset,
hold-out 43: 79 nodes at trt-O4 against its dyn_mask twin's 62); with the twins merged the mask is
one value read by both layers, as the float bias of the opset-18 export is, and the causal + key
padding rebuild pays.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from rw_testing import RELU_RELU, apply, builtin, model_from_text, rules_from_yaml, run
from onnx_fuse.rewrite._operand_twins import merge_operand_twins
from onnx_fuse.rewrite._rule import CANONICAL_DOMAIN

B, H, S, D = 2, 2, 5, 8

# two layers' Attention-23 over one boolean causal + key padding mask, as torch builds it at opset 23
SHARED_BOOL_MASK = f"""
<ir_version: 10, opset_import: ["" : 23]>
g (float[B,{H},S,{D}] q1, float[B,{H},S,{D}] k1, float[B,{H},S,{D}] v1, float[B,{H},S,{D}] q2,
   float[B,{H},S,{D}] k2, float[B,{H},S,{D}] v2, int64[B,S] attention_mask)
  => (float[B,{H},S,{D}] o1, float[B,{H},S,{D}] o2)
<int64 zero = {{0}}, int64 one = {{1}}, int64[1] ax0 = {{0}}, int64[1] ax1 = {{1}}, int64[2] ax12 = {{1, 2}}> {{
    shp = Shape <start = 1, end = 2> (attention_mask)
    s = Squeeze(shp)
    r = Range(zero, s, one)
    kj = Unsqueeze(r, ax0)
    qi = Unsqueeze(r, ax1)
    grid = LessOrEqual(kj, qi)
    g3 = Unsqueeze(grid, ax0)
    g4 = Unsqueeze(g3, ax0)
    amb = Cast <to = 9> (attention_mask)
    am4 = Unsqueeze(amb, ax12)
    mask = And(g4, am4)
    o1 = Attention(q1, k1, v1, mask)
    o2 = Attention(q2, k2, v2, mask)
}}"""


def _feeds(seed: int = 0) -> dict:
    r = np.random.default_rng(seed)
    feeds = {f"{x}{i}": r.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv" for i in (1, 2)}
    am = np.ones((B, S), np.int64)
    am[1, :2] = 0   # left padding: batch 1's first two query rows have no key to attend
    am[0, -1] = 0   # right padding
    feeds["attention_mask"] = am
    return feeds


@pytest.mark.parametrize("target, nodes", [("trt", 27), ("onnx", 11)])
def test_shared_bool_mask_rebuilt_once(target, nodes):
    # old code (each layer's Where counted alone): 33 nodes at trt, 17 at onnx, the export's
    # Unsqueeze chain and And kept with keep-masked-rows' Mul / Add / Max
    proto = model_from_text(SHARED_BOOL_MASK)
    res = onnx_fuse.optimize(proto, level=3, target=target)
    out = res.to_proto()
    onnx.checker.check_model(out, full_check=True)
    assert res.report.rule_fires["attention-native-23"] == 2
    kinds = [n.op_type for n in out.graph.node]
    assert len(kinds) == nodes, kinds
    assert "Max" not in kinds and kinds.count("Unsqueeze") == 2 and kinds.count("And") == 1
    att = [n for n in out.graph.node if n.op_type == "Attention"]
    assert len(att) == 2 and att[0].input[3] == att[1].input[3]   # one mask for both layers
    feeds = _feeds()
    for w, g in zip(run(proto, feeds), run(out, feeds)):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# --- the merge itself, on canonical ops built by hand (never run) ---------------------------------

def _canonical_graph(c2: float = 0.0, extra: str = "") -> ir.Graph:
    proto = onnx.parser.parse_model(f"""
        <ir_version: 10, opset_import: ["" : 18, "{CANONICAL_DOMAIN}" : 1]>
        g (float[N] x, bool[N] b) => (float[N] y1, float[N] y2{", float[N] w" if extra else ""})
        <float[1] z1 = {{0.0}}, float[1] f1 = {{-1.0}}, float[1] z2 = {{{c2}}}, float[1] f2 = {{-1.0}}> {{
            c1 = Cast <to = 9> (b)
            c2 = Cast <to = 9> (b)
            m1 = Where(c1, z1, f1)
            m2 = Where(c2, z2, f2)
            y1 = {CANONICAL_DOMAIN}.Attention(x, x, x, m1)
            y2 = {CANONICAL_DOMAIN}.Attention(x, x, x, m2)
            {extra}
        }}""")
    return ir.from_proto(proto).graph


def test_twins_merged_constants_by_value():
    # m2 = Where(Cast(b), 0, -1) with its own Cast and constants is m1: one Where left, read twice
    g = _canonical_graph()
    assert merge_operand_twins(g, CANONICAL_DOMAIN) == 1
    wheres = [n for n in g if n.op_type == "Where"]
    assert len(wheres) == 1 and wheres[0].outputs[0].name == "m1"
    att = [n for n in g if n.domain == CANONICAL_DOMAIN]
    assert att[0].inputs[3] is att[1].inputs[3]


def test_not_twins_where_a_constant_differs():
    g = _canonical_graph(c2=1.0)
    assert merge_operand_twins(g, CANONICAL_DOMAIN) == 0
    assert sum(n.op_type == "Where" for n in g) == 2


def test_other_readers_follow_the_kept_value():
    # a reader of the dropped twin outside the canonical ops reads the kept one
    g = _canonical_graph(extra="w = Relu(m2)")
    assert merge_operand_twins(g, CANONICAL_DOMAIN) == 1
    relu = [n for n in g if n.op_type == "Relu"][0]
    assert relu.inputs[0].name == "m1"


def test_rewrite_pass_reports_the_merge():
    # the pass's counter: the second layer's Where merged into the first's between the stages
    model, p, modified = apply(model_from_text(SHARED_BOOL_MASK), builtin("onnx", 3))
    assert modified and p.operand_twins == 1
    # and nothing (change flag false) on a graph with no canonical op
    proto = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[N] x) => (float[N] y) {
            y = Relu(x)
        }""")
    model, p, modified = apply(proto, rules_from_yaml(RELU_RELU))
    assert not modified and p.operand_twins == 0

