"""gemm-view where the views only drop and restore size-1 axes (passes/_gemm_view.py).

torch nn.MultiheadAttention with a probe query (T = 1: SigLIP's pooling head, CLIP-like probes)
writes its out-projection on the attention's [B, 1, C] output viewed [B, C] (dynamo: a Reshape to
[0, C] once folded), a Gemm, and the view back [B, 1, C]. No Transpose is beside those views once
T = 1 folded the output's, so gemm-view (which waited for one) left the Gemm between two Reshapes;
the hand-written batch-first attention has MatMul + Add there. The views merge no two axes, so the
2-D form is the value itself: MatMul + Add on [B, 1, C]. A Gemm whose rows merge batch and sequence
with nothing beside it (GPT-2's Conv1D) stays as it was."""

from __future__ import annotations

import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same, normal_feeds, parse
from pass_testing import ops_but_constants as ops

C = 8
WO = ", ".join(f"{(i * 29 % 13 - 6) / 7:.3f}" for i in range(C * C))
BO = ", ".join(f"{(i % 3 - 1) / 10 + 0.05:.2f}" for i in range(C))
HEADER = '<ir_version: 10, opset_import: ["" : 18]>\n'


def _graph(x_dims: str, rows: str, back: str, y_dims: str) -> str:
    """LayerNorm'd x -> Reshape(rows) -> Gemm(transB) -> Reshape(back) -> Relu."""
    return HEADER + f"""
        g (float[{x_dims}] x) => (float[{y_dims}] y) {{
            wo = Constant <value = float[{C}, {C}] {{{WO}}}> ()
            bo = Constant <value = float[{C}] {{{BO}}}> ()
            rows = Constant <value = int64[2] {{{rows}}}> ()
            back = Constant <value = int64[3] {{{back}}}> ()
            h = Sigmoid (x)
            r = Reshape (h, rows)
            g2 = Gemm <transB = 1> (r, wo, bo)
            v = Reshape (g2, back)
            y = Relu (v)
        }}"""


def _run(text: str):
    proto = parse(text)
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    return proto, model, dict(p.stats)


@pytest.mark.parametrize("x_dims,rows,back,y_dims,shape", [
    (f"B, 1, {C}", f"0, {C}", f"-1, 1, {C}", f"B, 1, {C}", (3, 1, C)),      # the probe's out-projection
    (f"1, S, {C}", f"-1, {C}", f"1, -1, {C}", f"1, S, {C}", (1, 5, C)),      # a batch-1 export's rows
])
def test_gemm_between_unit_axis_views_is_a_matmul(x_dims, rows, back, y_dims, shape):
    proto, model, stats = _run(_graph(x_dims, rows, back, y_dims))
    assert stats.get("gemm-view") == 1, stats
    assert ops(model) == {"Sigmoid": 1, "MatMul": 1, "Add": 1, "Relu": 1}, ops(model)
    check_same(proto, model, normal_feeds(3, x=shape))


def test_rows_merging_batch_and_sequence_stay_a_gemm():
    # GPT-2's Conv1D: [B, S, C] viewed [B*S, C], no Transpose beside it: unchanged
    proto, model, stats = _run(_graph(f"B, 5, {C}", f"-1, {C}", f"-1, 5, {C}", f"B, 5, {C}"))
    assert "gemm-view" not in stats and ops(model)["Gemm"] == 1 and ops(model)["Reshape"] == 2, stats
    check_same(proto, model, normal_feeds(3, x=(2, 5, C)))


def test_unit_axis_views_back_to_another_order_are_refused():
    # [B, 1, C] viewed [B, C] and back as [1, B, C]: not the value's own dims (a Transpose's job)
    proto, model, stats = _run(_graph(f"B, 1, {C}", f"0, {C}", f"1, -1, {C}", f"1, B, {C}"))
    assert "gemm-view" not in stats and ops(model)["Gemm"] == 1, stats
    check_same(proto, model, normal_feeds(3, x=(3, 1, C)))
