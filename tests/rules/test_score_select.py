"""Selects on attention scores as transformers 4.3x wrote them:
- scores-scale-before-mask (rules/attention/score_scale.yaml): where(causal, q k^T, finfo.min) / d
  (GPT-J and CodeGen eager attention, the scale after the select) becomes where(c, s / d, fill / d),
  which the attention recognizer fuses; a select that fills a finite value, or scores that are not a
  MatMul's, stay as they are;
- scores.masked_fill(mask.expand_as(scores), min) (DistilBERT), the expanded mask shared by both layers
  after CSE, becomes where(mask, min, scores) in each (identity-elimination: a broadcasting reader with
  another input of the Expand's dims reads its input; the where-expanded-mask rule did it until session
  42): both layers fuse (the Shape read no longer keeps the first layer's scores alive); an Expand to
  other dims stays."""

from __future__ import annotations

import numpy as np
import pytest

B, H, S, D = 2, 2, 5, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}
LOWEST = float(np.finfo(np.float32).min)


def _block(h, *, fill=LOWEST, scores="matmul", op="Div"):
    n = h.node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"])]
    if scores != "matmul":  # a select over values that are not attention scores
        nodes = [n("Relu", ["q"], ["r"]), n("ReduceSum", ["r", "ax"], ["sc"], keepdims=1)]
    nodes += [n("Where", ["causal", "sc", "fill"], ["w"]), n(op, ["w", "scale"], ["sd"]),
              n("Add", ["sd", "mask"], ["sm"]), n("Softmax", ["sm"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    scale = np.sqrt(D) if op == "Div" else 1.0 / np.sqrt(D)
    inits = {"fill": np.array(fill, np.float32), "scale": np.array(scale, np.float32),
             "ax": np.array([3], np.int64)}
    inputs = [h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")]
    inputs += [h.vi("causal", [1, 1, "s", "s"], 9), h.vi("mask", ["b", 1, 1, "s"])]
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)


def _feeds(h):
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., S - 2:] = LOWEST  # batch 1 padded
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    return {**feeds, "causal": np.tril(np.ones((S, S), bool))[None, None], "mask": mask}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("op", ["Div", "Mul"])   # Mul: 1 / sqrt(D), the fuzzer's select_scale idiom
def test_scale_after_the_causal_select_fuses(h, target, op):
    model = _block(h, op=op)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops and "MatMul" not in ops, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("op", ["Div", "Mul"])
def test_finite_fill_is_not_moved(h, op):
    model = _block(h, fill=-1.0, op=op)
    assert "Softmax" in h.ops(h.fuse(model, "ort"))
    assert any("must fill (nearly) -inf" in r for r in h.reasons(model, "ort", "scores-scale-before-mask"))


def test_select_over_non_scores_is_not_moved(h):
    model = _block(h, scores="reduce")
    assert h.fired(h.fuse(model, "ort"))["scores-scale-before-mask"] == 0
    assert any("must be attention scores" in r for r in h.reasons(model, "ort", "scores-scale-before-mask"))


def _two_layers(h, *, target_dims=("b", H, "s", "s"), negated=False, not_out=False):
    """Two attention blocks whose masked_fill reads one Expand(mask, Shape(layer 0's scores)), as
    CSE leaves DistilBERT's expand_as(scores); target_dims: the dims of the tensor whose Shape sizes it;
    negated: m marks the kept keys, each layer fills Not(expanded m) (masked_fill(~m.expand_as(s))); not_out:
    layer 0's Not also a graph output (it needs the expanded form)."""
    n = h.node
    own = target_dims == ("b", H, "s", "s")  # the Expand reads layer 0's scores, else an input t
    nodes, inputs = [], [h.vi("m", ["b", 1, 1, "s"], 9)] + ([] if own else [h.vi("t", list(target_dims))])
    for i in (0, 1):
        sel = [n("Not", ["me"], [f"nm{i}"]), n("Where", [f"nm{i}", "fill", f"sd{i}"], [f"w{i}"])] if negated else \
            [n("Where", ["me", "fill", f"sd{i}"], [f"w{i}"])]
        nodes += [n("Transpose", [f"k{i}"], [f"kt{i}"], perm=[0, 1, 3, 2]), n("MatMul", [f"q{i}", f"kt{i}"], [f"s{i}"]),
                  n("Div", [f"s{i}", "scale"], [f"sd{i}"]), *sel,
                  n("Softmax", [f"w{i}"], [f"p{i}"], axis=-1), n("MatMul", [f"p{i}", f"v{i}"], [f"y{i}"])]
        inputs += [h.vi(f"{x}{i}", ["b", H, "s", D]) for x in "qkv"]
    nodes[3:3] = [n("Shape", ["sd0" if own else "t"], ["sh"]), n("Expand", ["m", "sh"], ["me"])]  # after sd0
    nodes.append(n("Add", ["y0", "y1"], ["y"]))
    inits = {"fill": np.array(LOWEST, np.float32), "scale": np.array(np.sqrt(D), np.float32)}
    outputs = [h.vi("y", None)] + ([h.vi("nm0", None, 9)] if not_out else [])
    return h.make_model(nodes, inputs, outputs, inits, opset=18)


def _two_feeds(h, t_shape=(B, H, S, S), negated=False):
    m = np.zeros((B, 1, 1, S), bool)
    m[1, ..., S - 2:] = True  # batch 1 padded
    if negated:
        m = ~m
    feeds = {f"{x}{i}": h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in "qkv" for i in (0, 1)}
    return {**feeds, "m": m, "t": np.zeros(t_shape, np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_shared_expanded_mask_fuses_both_layers(h, target):
    model = _two_layers(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 2 and "Softmax" not in ops, ops
    feeds = _two_feeds(h)
    del feeds["t"]
    h.assert_close(model, out, feeds)


def _shape_reads(model) -> list[str]:
    return [n.input[0] for n in model.graph.node if n.op_type == "Shape"]


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_shared_expanded_mask_is_read_by_each_select_itself(h, target):
    # the select reads the mask; what Shape is left reads the mask (the fused attention's bias built from
    # it), not layer 0's scores or their dims' source
    out = h.fuse(_two_layers(h), target)
    assert set(_shape_reads(out)) <= {"m"}, _shape_reads(out)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_mask_expanded_by_another_tensor_of_wider_broadcast_fuses(h, target):
    # t [b, H, s, 1] sizes the Expand: Expand(m [b, 1, 1, s], Shape(t)) is [b, H, s, s] (each dim the larger),
    # the scores' own dims, so each select may read the mask itself (the where-expanded-mask rule left it:
    # it asked for t of the scores' dims); t is read no more
    model = _two_layers(h, target_dims=("b", H, "s", 1))
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 2 and "Softmax" not in ops and "t" not in _shape_reads(out), ops
    h.assert_close(model, out, _two_feeds(h, t_shape=(B, H, S, 1)))


def test_mask_expanded_to_other_dims_stays(h):
    # t [b, H, u, s]: the Expand's output [b, H, u, s] is not provably of the scores' dims [b, H, s, s] (u is
    # another name, equal to s at run time here), so the selects keep reading it (-O2: identity elimination); at
    # -O3 the ort lowering proves the mask m's key padding by its values (a [b, 1, 1, s] bool input, the Expand
    # only broadcasting it wherever the model runs) and passes m as the key_padding_mask, the Expand dead
    model = _two_layers(h, target_dims=("b", H, "u", "s"))
    assert "Expand" in h.ops(h.fuse(model, "ort", level=2))
    out = h.fuse(model, "ort")
    feeds = _two_feeds(h, t_shape=(B, H, S, S))
    h.assert_close(model, out, feeds)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_shared_expanded_mask_read_through_a_not_fuses_both_layers(h, target):
    # masked_fill(~mask.expand_as(scores), min): each layer's Where reads Not(Expand(m, Shape(layer 0's scores)));
    # the Not commutes with the Expand, so the Expand (and the Shape keeping layer 0's scores) goes and both fuse
    model = _two_layers(h, negated=True)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 2 and "Softmax" not in ops and set(_shape_reads(out)) <= {"m"}, ops
    feeds = _two_feeds(h, negated=True)
    del feeds["t"]
    h.assert_close(model, out, feeds)


def test_a_not_of_the_expanded_mask_that_is_a_graph_output_keeps_the_expand(h):
    # layer 0's Not(expanded mask) is also an output: it needs the [b, H, s, s] form, so the Expand stays
    model = _two_layers(h, negated=True, not_out=True)
    out = h.fuse(model, "ort")
    assert "Expand" in h.ops(out)
    feeds = _two_feeds(h, negated=True)
    del feeds["t"]
    h.assert_close(model, out, feeds)
