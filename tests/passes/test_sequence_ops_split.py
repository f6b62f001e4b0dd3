"""SequenceOpsPass on SplitToSequence: torch.split exported without the exporter's optimizer (noopt) keeps
SequenceAt(SplitToSequence(x, split), i); with split constant (sizes, or a chunk over an axis of known length) the
sequence is a Split's outputs and each SequenceAt one of them. Near misses: a split computed at run time, a chunk
over a dim of unknown length, a sequence read by an op the pass does not resolve."""

from __future__ import annotations

import numpy as np

from onnx_fuse.passes.sequence_ops import SequenceOpsPass
from pass_testing import apply, check_same, ops, parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def _model(split: str, dims: str = "B, 6", index1: str = "1", inputs: str = "") -> str:
    return HEADER + f'''
    g (float[{dims}] x{inputs}) => (float[B, 2] y0, float[B, M] y1)
    {{
        {split}
        seq = SplitToSequence<axis = -1>(x, s)
        i0 = Constant<value = int64 {{0}}>()
        i1 = Constant<value = int64 {{{index1}}}>()
        p0 = SequenceAt(seq, i0)
        p1 = SequenceAt(seq, i1)
        y0 = Neg(p0)
        y1 = Neg(p1)
    }}'''


SIZES = "s = Constant<value = int64[2] {2, 4}>()"


def test_constant_sizes_become_a_split():
    proto = parse(_model(SIZES))
    model, modified, p = apply(SequenceOpsPass, proto)
    assert modified and p.stats["SplitToSequence"] == 1 and p.stats["SequenceAt"] == 2
    assert {op for op in ops(model) if "Sequence" in op} == {"SequenceConstruct"}, ops(model)  # dead-code's
    split = next(n for n in model.graph if n.op_type == "Split")
    assert [v.name for v in model.graph.outputs] == ["y0", "y1"] and len(split.outputs) == 2
    check_same(proto, model, inputs={"x": np.random.default_rng(0).standard_normal((3, 6), np.float32)})


def test_chunk_over_a_known_length_and_a_negative_index():
    """torch.split(x, 3) over 7: pieces 3, 3, 1; SequenceAt(-1) is the short last one."""
    proto = parse(_model("s = Constant<value = int64 {3}>()", dims="B, 7", index1="-1").replace(
        "float[B, 2] y0", "float[B, 3] y0"))
    model, modified, _ = apply(SequenceOpsPass, proto)
    assert modified and {op for op in ops(model) if "Sequence" in op} == {"SequenceConstruct"}, ops(model)
    assert len(next(n for n in model.graph if n.op_type == "Split").outputs) == 3
    check_same(proto, model, inputs={"x": np.random.default_rng(1).standard_normal((2, 7), np.float32)})


def test_opset_12_writes_the_sizes_as_an_attribute():
    proto = parse(_model(SIZES).replace('"" : 18', '"" : 12'))
    model, modified, _ = apply(SequenceOpsPass, proto)
    split = next(n for n in model.graph if n.op_type == "Split")
    assert modified and len(split.inputs) == 1 and list(split.attributes["split"].value) == [2, 4]
    check_same(proto, model, inputs={"x": np.random.default_rng(2).standard_normal((2, 6), np.float32)})


def test_split_computed_at_run_time_stays():
    proto = parse(_model("", inputs=", int64[2] s"))
    _, modified, _ = apply(SequenceOpsPass, proto)
    assert not modified


def test_chunk_over_an_unknown_length_stays():
    proto = parse(_model("s = Constant<value = int64 {3}>()", dims="B, N"))
    _, modified, _ = apply(SequenceOpsPass, proto)
    assert not modified


def test_sequence_read_by_another_op_stays():
    """SequenceLength is not one of the ops the pass resolves: the SplitToSequence is left whole."""
    proto = parse(HEADER + """
    g (float[B, 6] x) => (float[B, 2] y0, int64 n)
    {
        s = Constant<value = int64[2] {2, 4}>()
        seq = SplitToSequence<axis = -1>(x, s)
        i0 = Constant<value = int64 {0}>()
        y0 = SequenceAt(seq, i0)
        n = SequenceLength(seq)
    }""")
    model, modified, _ = apply(SequenceOpsPass, proto)
    assert not modified and ops(model)["SplitToSequence"] == 1 and "Split" not in ops(model)


def test_a_scalar_chunk_with_keepdims_0_stays():
    """ORT squeezes the axis of a scalar split's pieces where keepdims = 0 (a chunk of 1 gives [B] pieces; a longer
    chunk fails), though the spec ignores keepdims once split is given: a Split would keep the axis ([B, 1]), so the
    node is left to the runtime (found by tools/fuzz_s40.py's split_seq, seed 4: a signature change)."""
    proto = parse(_model("s = Constant<value = int64 {1}>()").replace(
        "SplitToSequence<axis = -1>", "SplitToSequence<axis = -1, keepdims = 0>").replace(
        "float[B, 2] y0, float[B, M] y1", "float[B, 1] y0, float[B, 1] y1"))
    model, modified, _ = apply(SequenceOpsPass, proto)   # (ONNX's shape inference follows the spec: [B, 1])
    assert not modified and ops(model)["SplitToSequence"] == 1 and "Split" not in ops(model), ops(model)


def test_a_scalar_chunk_with_keepdims_1_still_becomes_a_split():
    proto = parse(_model("s = Constant<value = int64 {2}>()").replace(
        "SplitToSequence<axis = -1>", "SplitToSequence<axis = -1, keepdims = 1>"))
    model, modified, _ = apply(SequenceOpsPass, proto)
    assert modified and "SplitToSequence" not in ops(model), ops(model)
    check_same(proto, model, inputs={"x": np.random.default_rng(4).standard_normal((2, 6), np.float32)})
