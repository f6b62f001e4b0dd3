"""transpose-sunk into a Reshape where the permutation moves only axes of size 1 (_transpose_region.py).

torch nn.MultiheadAttention(batch_first=True) with a probe query (SigLIP / CLIP-style pooling: one
learned query expanded to the batch) transposes the [B, 1, C] query to [1, B, C], projects it, and the
fused attention reads it back with a Reshape to [B, 1, C]. Moving a size-1 axis keeps the elements in
memory order, so the Reshape reads the projection of the untransposed query and the Transpose goes."""

from __future__ import annotations

import numpy as np
import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same, parse
from pass_testing import ops as _ops

W = ", ".join(f"{(i * 37 % 17 - 8) / 9:.3f}" for i in range(64))
BIAS = ", ".join(f"{(i % 5 - 2) / 10:.2f}" for i in range(8))


def _run(text: str):
    proto = parse('<ir_version: 10, opset_import: ["" : 18]>\n' + text)
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    return proto, model, modified


def _graph(q_shape: str, target: str, perm: str = "1, 0, 2") -> str:
    return f"""
        g (float[{q_shape}] x) => (float[{q_shape}] y) {{
            w = Constant <value = float[8, 8] {{{W}}}> ()
            b = Constant <value = float[8] {{{BIAS}}}> ()
            tgt = Constant <value = int64[3] {{{target}}}> ()
            t = Transpose <perm = [{perm}]> (x)
            m = MatMul (t, w)
            a = Add (m, b)
            y = Reshape (a, tgt)
        }}"""


def test_probe_query_reshape_reads_the_untransposed_projection():
    proto, model, modified = _run(_graph("B, 1, 8", "-1, 1, 8"))
    assert modified and "Transpose" not in _ops(model), _ops(model)
    rng = np.random.default_rng(3)
    check_same(proto, model, {"x": rng.standard_normal((3, 1, 8)).astype(np.float32)})


@pytest.mark.parametrize("case", ["copies_a_dim", "moves_a_long_axis"])
def test_reshape_reading_another_order_is_refused(case):
    # a 0 in the target copies the input's dim, which the layouts do not share; a moved axis of
    # length > 1 reorders the elements
    text = _graph("B, 1, 8", "0, 1, 8") if case == "copies_a_dim" else _graph("2, 3, 8", "2, 3, 8")
    proto, model, modified = _run(text)
    assert not modified and _ops(model)["Transpose"] == 1
