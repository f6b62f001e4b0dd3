"""Hold-out sweep 8A (attention written by hand in PyTorch; tools/handwritten_models.py): graphs built
here with onnx.helper as torch.onnx writes those idioms, numerics checked in ONNX Runtime.
- scores-masked-fill-pair (rules/attention/score_select.yaml): nanoGPT's tril-buffer masked_fill then
  a padding masked_fill, two Wheres of one -inf fill, become one Where of either mask, which the
  recognizer takes; two different fills stay apart;
- split_sizes reads opset 18's Split(num_outputs=2) (torch's x.chunk(2, -1) under dynamo) so
  split-rotate-half turns a chunked rotate_half into the two Slices the RoPE rules read;
- sequence-ops (optimizer/passes/sequence_ops.py): torch.hstack's SequenceConstruct -> SequenceMap
  (atleast_1d) -> SequenceAt -> Concat, and ConcatFromSequence, as plain tensor ops; a SequenceConstruct
  of constants no longer crashes constant folding."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

B, H, S, D = 2, 2, 5, 8
MHA_OP = {"ort": "com.microsoft::MultiHeadAttention", "onnx": "Attention", "trt": "Attention"}


def _gpt_tril(h, *, pad_fill=-np.inf):
    """scores.masked_fill(tril[:, :, :S, :S] == 0, -inf).masked_fill(~pad[:, None, None, :], fill)."""
    n = h.node
    tril = np.tril(np.ones((16, 16), np.float32))[None, None]
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["sc"]),
             n("Mul", ["sc", "scale"], ["ss"]),
             n("Shape", ["q"], ["qs"], start=2, end=3),
             n("Slice", ["tril", "zero", "qs", "ax2"], ["t1"]), n("Slice", ["t1", "zero", "qs", "ax3"], ["t2"]),
             n("Equal", ["t2", "fzero"], ["causal"]), n("Where", ["causal", "ninf", "ss"], ["w1"]),
             n("Cast", ["pad"], ["padb"], to=TensorProto.BOOL), n("Unsqueeze", ["padb", "ax12"], ["padu"]),
             n("Not", ["padu"], ["padn"]), n("Where", ["padn", "pfill", "w1"], ["w2"]),
             n("Softmax", ["w2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["y"])]
    inits = {"tril": tril, "zero": np.array([0], np.int64), "ax2": np.array([2], np.int64),
             "ax3": np.array([3], np.int64), "ax12": np.array([1, 2], np.int64),
             "fzero": np.array(0.0, np.float32), "ninf": np.array(-np.inf, np.float32),
             "pfill": np.array(pad_fill, np.float32), "scale": np.array(D ** -0.5, np.float32)}
    inputs = [h.vi(x, ["b", H, "s", D]) for x in ("q", "k", "v")] + [h.vi("pad", ["b", "s"], TensorProto.INT64)]
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=18)


def _feeds(h):
    feeds = {x: h.rng.standard_normal((B, H, S, D)).astype(np.float32) for x in ("q", "k", "v")}
    return {**feeds, "pad": np.ones((B, S), np.int64)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_tril_buffer_then_padding_masked_fill_fuses(h, target):
    model = _gpt_tril(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops[MHA_OP[target]] == 1 and "Softmax" not in ops, ops
    if target == "ort":   # onnx / trt: the mask probe proves causal + key padding and rebuilds it (d04da49)
        assert "scores-masked-fill-pair" in h.fired(out), h.fired(out)
    h.assert_close(model, out, _feeds(h))


def test_two_different_fills_stay_apart(h):
    """-inf then finfo.min: one Where of either mask would change the padded positions' value."""
    model = _gpt_tril(h, pad_fill=float(np.finfo(np.float32).min))
    out = h.fuse(model, "ort")
    assert "scores-masked-fill-pair" not in h.fired(out), h.fired(out)
    assert any("fill one and the same number" in r for r in h.reasons(model, "ort", "scores-masked-fill-pair"))
    h.assert_close(model, out, _feeds(h))


def _chunk_rope(h):
    """q * cos + cat(-x2, x1) * sin with x1, x2 = q.chunk(2, -1): Split(num_outputs=2), opset 18."""
    n = h.node
    ang = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(0, D, 2) / D))
    cos, sin = (np.concatenate([f(ang), f(ang)], -1)[None, None].astype(np.float32) for f in (np.cos, np.sin))
    nodes = [n("Mul", ["x", "cos"], ["a"]), n("Split", ["x"], ["x1", "x2"], axis=-1, num_outputs=2),
             n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             n("Mul", ["rot", "sin"], ["b"]), n("Add", ["a", "b"], ["y"])]
    return h.make_model(nodes, [h.vi("x", [B, H, S, D])], [h.vi("y", None)], {"cos": cos, "sin": sin}, opset=18)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_chunked_rotate_half_fuses(h, target):
    model = _chunk_rope(h)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1 and "Split" not in ops, ops
    h.assert_close(model, out, {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32)})


def test_split_sizes_of_num_outputs():
    import onnx_ir as ir

    from onnx_fuse.passes.ort_contrib import split_sizes

    def sizes(dim, n, axis=-1):
        x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, dim]))
        node = ir.Node("", "Split", [x], attributes=[ir.AttrInt64("axis", axis), ir.AttrInt64("num_outputs", n)],
                       num_outputs=n)
        return split_sizes(node)

    assert sizes(16, 2) == [8, 8]
    assert sizes(7, 3) == [3, 3, 1]  # ONNX: ceil-sized parts, the last one smaller
    assert sizes(4, 3) is None  # [2, 2, 0]: no part may be empty
    assert sizes("d", 2) is None  # a symbolic dim gives no sizes


def _atleast_1d_body():
    """SequenceMap body as the dynamo exporter writes atleast_1d: Reshape to [1] when the rank is 0."""
    n = helper.make_node
    then = helper.make_graph([n("Reshape", ["t", "one"], ["r"])], "then", [], [helper.make_tensor_value_info("r", 1, [4, 3])],
                             [helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    other = helper.make_graph([n("Identity", ["t"], ["i"])], "else", [], [helper.make_tensor_value_info("i", 1, [4, 3])])
    nodes = [n("Shape", ["t"], ["sh"]), n("Size", ["sh"], ["rank"]), n("Equal", ["rank", "zero"], ["cond"]),
             n("If", ["cond"], ["o"], then_branch=then, else_branch=other)]
    return helper.make_graph(nodes, "atleast_1d", [helper.make_tensor_value_info("t", 1, [4, 3])],
                             [helper.make_tensor_value_info("o", 1, [4, 3])])


def _hstack(h, *, const_parts=False, new_axis=1):
    """torch.hstack([zeros(T, P), triu(full(T, T, -inf), 1)]) as dynamo writes it, + x."""
    n = h.node
    nodes = [n("SequenceConstruct", ["a", "b"], ["seq"]), n("SequenceMap", ["seq"], ["mapped"], body=_atleast_1d_body()),
             n("SequenceAt", ["mapped", "i0"], ["a1"]), n("SequenceAt", ["mapped", "i1"], ["b1"]),
             n("Concat", ["a1", "b1"], ["m"], axis=1), n("Add", ["x", "m"], ["y"]),
             n("SequenceConstruct", ["a", "b"], ["seq2"]), n("ConcatFromSequence", ["seq2"], ["y2"], axis=-1, new_axis=new_axis)]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(-1, np.int64), "zero": np.array(0, np.int64)}
    if const_parts:
        inits.update(a=np.zeros((4, 3), np.float32), b=np.triu(np.full((4, 3), -1.5, np.float32), 1))
        inputs = [h.vi("x", [4, 6])]
    else:
        inputs = [h.vi("x", [4, 6]), h.vi("a", [4, 3]), h.vi("b", [4, 3])]
    return h.make_model(nodes, inputs, [h.vi("y", None), h.vi("y2", None)], inits, opset=18)


@pytest.mark.parametrize("const_parts,new_axis", [(False, 1), (True, 1), (False, 0)])
def test_sequence_ops_become_tensor_ops(h, const_parts, new_axis):
    model = _hstack(h, const_parts=const_parts, new_axis=new_axis)
    out = h.fuse(model, "trt", level=1)  # TensorRT runs no sequence op; constants used to crash folding
    assert not any("Sequence" in k for k in h.ops(out)), h.ops(out)
    feeds = {"x": h.rng.standard_normal((4, 6)).astype(np.float32)}
    if not const_parts:
        feeds.update(a=h.rng.standard_normal((4, 3)).astype(np.float32),
                     b=h.rng.standard_normal((4, 3)).astype(np.float32))
    h.assert_close(model, out, feeds)


def test_sequence_of_a_graph_input_stays(h):
    """A sequence that is not a SequenceConstruct here (a graph input) is left alone."""
    n = h.node
    seq_type = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [4, 3])
    model = h.make_model([n("SequenceAt", ["s", "i0"], ["y"])], [seq_type], [h.vi("y", None)],
                         {"i0": np.array(0, np.int64)}, opset=18)
    out = h.fuse(model, "ort", level=1)
    assert h.ops(out)["SequenceAt"] == 1, h.ops(out)


def _complex_rope(h, *, cut=False, same_sin=True, opset=18):
    """Reference-Llama RoPE in real arithmetic on x [B, S, H, D]: x0, x1 = x[..., ::2], x[..., 1::2],
    stack([x0 c - x1 s, x0 s + x1 c], -1).flatten(-2), c / s half-width [1, S, 1, D/2] (constants, or
    rows [P:P+S] cut from [rows, D/2] buffers with P read from a past input's length)."""
    n = h.node
    rows = 16
    ang = np.outer(np.arange(rows), 1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    inits = {"z": np.array([0], np.int64), "o": np.array([1], np.int64), "big": np.array([1 << 30], np.int64),
             "m1": np.array([-1], np.int64), "two": np.array([2], np.int64), "ax02": np.array([0, 2], np.int64),
             "shp": np.array([0, 0, H, D], np.int64)}
    nodes, inputs = [], [h.vi("x", ["b", "s", H, D])]
    if cut:
        inits.update(ct=np.cos(ang), stb=np.sin(ang) if same_sin else np.sin(ang) * 0.5, ax0=np.array([0], np.int64))
        inputs.append(h.vi("past", ["b", H, "p", D]))
        nodes += [n("Shape", ["past"], ["p"], start=2, end=3), n("Shape", ["x"], ["sl"], start=1, end=2),
                  n("Add", ["p", "sl"], ["pe"]),
                  n("Slice", ["ct", "p", "pe", "ax0"], ["cs"]), n("Unsqueeze", ["cs", "ax02"], ["c"]),
                  n("Slice", ["stb", "p", "pe", "ax0"], ["ss"]), n("Unsqueeze", ["ss", "ax02"], ["s"])]
    else:
        inits.update(c=np.cos(ang[:S])[None, :, None], s=np.sin(ang[:S])[None, :, None])
        inputs = [h.vi("x", [B, S, H, D])]
    nodes += [n("Slice", ["x", "z", "big", "m1", "two"], ["x0"]), n("Slice", ["x", "o", "big", "m1", "two"], ["x1"]),
              n("Mul", ["x0", "c"], ["a"]), n("Mul", ["x1", "s"], ["b_"]), n("Sub", ["a", "b_"], ["re"]),
              n("Mul", ["x0", "s"], ["d"]), n("Mul", ["x1", "c"], ["e"]), n("Add", ["d", "e"], ["im"]),
              n("Unsqueeze", ["re", "m1"], ["ru"]), n("Unsqueeze", ["im", "m1"], ["iu"]),
              n("Concat", ["ru", "iu"], ["st"], axis=-1), n("Reshape", ["st", "shp"], ["y"])]
    return h.make_model(nodes, inputs, [h.vi("y", None)], inits, opset=opset)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("cut,rule", [(False, "rotary-interleaved-complex"),
                                      (True, "rotary-interleaved-complex")])
def test_complex_product_rope_fuses(h, target, cut, rule):
    model = _complex_rope(h, cut=cut)
    out = h.fuse(model, target, level=2)
    ops = h.ops(out)
    assert sum(v for k, v in ops.items() if k.endswith("RotaryEmbedding")) == 1 and "Sub" not in ops, ops
    assert rule in h.fired(out), h.fired(out)
    feeds = {"x": h.rng.standard_normal((B, S, H, D)).astype(np.float32)}
    if cut:
        feeds["past"] = np.zeros((B, H, 3, D), np.float32)  # rows 3..3+S of the tables
    h.assert_close(model, out, feeds)


def test_complex_product_rope_not_a_rotation_stays(h):
    """sin scaled by 0.5: cos^2 + sin^2 is not one number, not a rotation: left as written."""
    model = _complex_rope(h, cut=True, same_sin=False, opset=23)  # explain matches at the rule's opset
    out = h.fuse(model, "ort", level=2)
    assert not any(k.endswith("RotaryEmbedding") for k in h.ops(out)), h.ops(out)
    assert any("not a (scaled) rotation" in r for r in h.reasons(model, "ort", "rotary-interleaved-complex"))


def test_sequence_at_graph_output_of_an_input_keeps_the_names(h):
    """SequenceAt(SequenceConstruct(a, b), 0) as a graph output: a is a graph input, whose name the
    output cannot take; the interface stays as it was and the values hold."""
    n = h.node
    model = h.make_model([n("SequenceConstruct", ["a", "b"], ["s"]), n("SequenceAt", ["s", "i0"], ["y"])],
                         [h.vi("a", [4, 3]), h.vi("b", [4, 3])], [h.vi("y", None)],
                         {"i0": np.array(0, np.int64)}, opset=18)
    out = h.fuse(model, "ort", level=1)
    assert [i.name for i in out.graph.input] == ["a", "b"] and [o.name for o in out.graph.output] == ["y"]
    feeds = {k: h.rng.standard_normal((4, 3)).astype(np.float32) for k in ("a", "b")}
    h.assert_close(model, out, feeds)
