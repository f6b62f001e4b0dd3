"""view-chain: views back to the chain's start's own dims read the start (passes/_view_chain.py).

torch nn.MultiheadAttention's weights path with a key padding mask: the [B, 1, 1, S] mask expanded over
the H heads and merged [B*H, 1, S] for baddbmm, then viewed back [B, H, 1, S] for the fused attention by
an Unsqueeze and a Reshape whose 0 entries copy dims of the unsqueezed value, written as the recognizer
and the dynamo exporter write them (the merge target computed from the mask's shape)."""

from __future__ import annotations

import numpy as np
from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same, parse
from pass_testing import ops as _ops


def _run(back: str):
    proto = parse(f"""<ir_version: 10, opset_import: ["" : 18]>
        g (float[B, S] m, float[B, 4, 1, S] s) => (float[B, 4, 1, S] y) {{
            one = Constant <value = int64[1] {{1}}> ()
            four = Constant <value = int64 {{4}}> ()
            heads = Constant <value = int64[4] {{1, 4, 1, 1}}> ()
            ax0 = Constant <value = int64[1] {{0}}> ()
            back = Constant <value = int64[4] {{{back}}}> ()
            b = Shape <start = 0, end = 1> (m)
            sl = Shape <start = 1, end = 2> (m)
            t4 = Concat <axis = 0> (b, one, one, sl)
            v4 = Reshape (m, t4)
            e = Expand (v4, heads)
            b0 = Squeeze (b)
            bh0 = Mul (b0, four)
            bh = Unsqueeze (bh0, ax0)
            t3 = Concat <axis = 0> (bh, one, sl)
            merged = Reshape (e, t3)
            u = Unsqueeze (merged, ax0)
            full = Reshape (u, back)
            y = Add (full, s)
        }}""")
    return _fold(proto)


def _fold(proto):
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, p


def _feeds():
    rng = np.random.default_rng(2)
    return {"m": rng.standard_normal((2, 5)).astype(np.float32),
            "s": rng.standard_normal((2, 4, 1, 5)).astype(np.float32)}


def test_merged_mask_viewed_back_reads_the_expanded_mask():
    proto, model, modified, p = _run("-1, 4, 0, 0")
    assert modified and p.stats["view-chain"] == 1, dict(p.stats)
    got = _ops(model)
    assert "Unsqueeze" not in got or got["Unsqueeze"] <= 1 and got.get("Reshape") == 1, got
    assert not any(n.op_type == "Reshape" and n.inputs[0].producer() is not None
                   and n.inputs[0].producer().op_type == "Unsqueeze" for n in model.graph), got
    check_same(proto, model, _feeds())


def test_view_to_other_dims_stays():
    # heads first: [4, B, 1, S] is other dims than the start's [B, 4, 1, S] (unless B is 4)
    proto, model, modified, p = _run("4, -1, 0, 0")
    assert "view-chain" not in p.stats


def _one_head(view: str, end: str, out_shape: str):
    """MultiHeadAttention's one-head output [N, S, D] (here x) viewed and taken back by a Squeeze /
    Unsqueeze, as the ort lowering of the one-head rules leaves it."""
    proto = parse(f"""<ir_version: 10, opset_import: ["" : 18]>
        g (float[N, 6, 4] x) => (float[{out_shape}] y) {{
            view = Constant <value = int64[{len(view.split(','))}] {{{view}}}> ()
            ax = Constant <value = int64[1] {{1}}> ()
            r = Reshape (x, view)
            s = {end} (r, ax)
            y = Relu (s)
        }}""")
    return _fold(proto)


def test_one_head_output_viewed_and_squeezed_back_is_the_output():
    proto, model, modified, p = _one_head("0, 1, 6, 4", "Squeeze", "N, 6, 4")
    assert modified and p.stats["view-chain"] == 1, dict(p.stats)
    assert _ops(model) == {"Relu": 1}, _ops(model)
    check_same(proto, model, {"x": np.random.default_rng(1).standard_normal((3, 6, 4)).astype(np.float32)})


def test_view_unsqueezed_back_is_the_start():
    # [N, 1, 4] viewed [N, 4] and unsqueezed back at -2: the start's dims, so the start
    proto = parse("""<ir_version: 10, opset_import: ["" : 18]>
        g (float[N, 1, 4] x) => (float[N, 1, 4] y) {
            view = Constant <value = int64[2] {0, 4}> ()
            ax = Constant <value = int64[1] {-2}> ()
            r = Reshape (x, view)
            s = Unsqueeze (r, ax)
            y = Relu (s)
        }""")
    proto, model, modified, p = _fold(proto)
    assert modified and p.stats["view-chain"] == 1, dict(p.stats)
    assert _ops(model) == {"Relu": 1}, _ops(model)
    check_same(proto, model, {"x": np.random.default_rng(1).standard_normal((3, 1, 4)).astype(np.float32)})


def test_squeeze_to_other_dims_stays():
    # [N, 6, 4] viewed [N, 1, 4, 6] and squeezed: [N, 4, 6] is not the start's [N, 6, 4]
    proto, model, modified, p = _one_head("0, 1, 4, 6", "Squeeze", "N, 4, 6")
    assert "view-chain" not in p.stats
    assert _ops(model).get("Squeeze") == 1
    check_same(proto, model, {"x": np.random.default_rng(1).standard_normal((3, 6, 4)).astype(np.float32)})
