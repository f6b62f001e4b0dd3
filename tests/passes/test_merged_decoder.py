"""Optimum's merged decoder declares its mask as the no-past decoder's [batch, sequence_length]
(optimum.onnx.merge_decoders); the cache branch reads it over past + new tokens. The passes must
not take the false declaration as a fact (passes/merged_decoder.py)."""

from __future__ import annotations

import onnx_ir as ir

import onnx_fuse
from onnx_fuse.passes.merged_decoder import restate_merged_mask
from onnx_fuse.verify import verify
from pass_testing import parse

HEADER = '<ir_version: 9, opset_import: ["" : 18]>'


def merged(mask_len: str = "sequence_length", cond: str = "bool[1] use_cache_branch"):
    """The cache branch counts the mask's and the new tokens' lengths (as HF's mask code does
    before it pads the causal mask to the keys); the no-cache branch reads no past."""
    return parse(HEADER + f'''
    g (int64[batch_size, sequence_length] input_ids, int64[batch_size, {mask_len}] attention_mask,
       float[batch_size, 2, past_sequence_length, 4] past, {cond}) => (int64[N] y)
    <int64[1] one = {{1}}, int64 zero = {{0}}, int64 step = {{1}}>
    {{
        y = If(use_cache_branch) <
            then_branch = w () => (int64[N] wy) {{
                sm = Shape(attention_mask)
                lm = Gather<axis=0>(sm, one)
                si = Shape(input_ids)
                li = Gather<axis=0>(si, one)
                lms = Squeeze(lm)
                lis = Squeeze(li)
                rm = Range(zero, lms, step)
                ri = Range(zero, lis, step)
                wy = Concat<axis=0>(rm, ri)
            }},
            else_branch = n () => (int64[N] ny) {{
                si = Shape(input_ids)
                li = Gather<axis=0>(si, one)
                lis = Squeeze(li)
                ri = Range(zero, lis, step)
                ny = Concat<axis=0>(ri, ri)
            }}
        >
    }}''')


def test_the_cache_branch_keeps_the_mask_length_apart_from_the_new_tokens():
    proto = merged()
    for level in (1, 3):
        optimized = onnx_fuse.optimize(proto, level=level, target="ort").to_proto()
        result = verify(proto, optimized)
        assert result["passed"] and result["cases"] == ["use_cache_branch=1", "use_cache_branch=0", "padded-row"], result
        mask = next(v for v in optimized.graph.input if v.name == "attention_mask")
        assert mask.type.tensor_type.shape.dim[1].dim_param == "past_sequence_length + sequence_length"


def test_only_a_merged_decoders_mask_is_restated():
    assert restate_merged_mask(ir.from_proto(merged())) == 1
    # a mask with a length of its own, or no If on a bool input: nothing to restate
    assert restate_merged_mask(ir.from_proto(merged(mask_len="total"))) == 0
