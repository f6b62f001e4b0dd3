"""torch nn.MultiheadAttention's batch_first layout glue (passes/_gemm_view.py, _packed_picks.py).

batch_first=True: torch transposes x to [S, B, C], views the packed in-projection [S, B, 3, C], moves
the 3 to the front (a Transpose by [2, 0, 1, 3]), picks q / k / v by index and transposes each back to
[B, S, C] for the fused attention; the out-projection is a Gemm on the [S*B, C] view, viewed back to
[S, B, C] and transposed to [B, S, C]. The picks become a Split of the projection and the Gemm a MatMul
on the 3-D value, so the transpose sink cancels every Transpose. The graphs are written as the dynamo
exporter writes them (views computed from Shape reads), the attention already fused."""

from __future__ import annotations


from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from onnx_fuse.passes.shape_inference import ShapeInferencePass
from pass_testing import apply, check_same, normal_feeds, parse
from pass_testing import ops_but_constants as ops

C = 8
W = ", ".join(f"{(i * 37 % 17 - 8) / 9:.3f}" for i in range(C * 3 * C))
WO = ", ".join(f"{(i * 29 % 13 - 6) / 7:.3f}" for i in range(C * C))
B3 = ", ".join(f"{(i % 5 - 2) / 10:.2f}" for i in range(3 * C))
BO = ", ".join(f"{(i % 3 - 1) / 10:.2f}" for i in range(C))
HEADER = '<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1]>\n'


def _run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    stats = dict(p.stats)
    for _ in range(6):  # the cleanup's fixed point
        IdentityEliminationPass()(model)
        DeadCodeEliminationPass()(model)
        ShapeInferencePass()(model)
        again = FoldLayoutChainsPass()
        if not again(model).modified:
            break
        for k, v in again.stats.items():
            stats[k] = stats.get(k, 0) + v
    return proto, model, modified, stats


def _feeds(**shapes):
    return normal_feeds(5, **shapes)


def _block(picks: str = "0, 1, 2", pick_axis: int = 0, bias_o: str = f"float[{C}] {{{BO}}}") -> str:
    i0, i1, i2 = picks.split(", ")
    return f"""
        g (float[B, S, {C}] x) => (float[B, S, {C}] y) {{
            w = Constant <value = float[{C}, {3 * C}] {{{W}}}> ()
            b = Constant <value = float[{3 * C}] {{{B3}}}> ()
            wo = Constant <value = float[{C}, {C}] {{{WO}}}> ()
            bo = Constant <value = {bias_o}> ()
            tail = Constant <value = int64[2] {{3, {C}}}> ()
            rows = Constant <value = int64[2] {{-1, {C}}}> ()
            last = Constant <value = int64[1] {{{C}}}> ()
            i0 = Constant <value = int64 {{{i0}}}> ()
            i1 = Constant <value = int64 {{{i1}}}> ()
            i2 = Constant <value = int64 {{{i2}}}> ()
            t = Transpose <perm = [1, 0, 2]> (x)
            m = MatMul (t, w)
            a = Add (m, b)
            sb = Shape <start = 0, end = 2> (t)
            tgt = Concat <axis = 0> (sb, tail)
            v = Reshape (a, tgt)
            p = Transpose <perm = [2, 0, 1, 3]> (v)
            q0 = Gather <axis = {pick_axis}> (p, i0)
            k0 = Gather <axis = {pick_axis}> (p, i1)
            v0 = Gather <axis = {pick_axis}> (p, i2)
            q = Transpose <perm = [1, 0, 2]> (q0)
            k = Transpose <perm = [1, 0, 2]> (k0)
            vv = Transpose <perm = [1, 0, 2]> (v0)
            o = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, vv)
            ot = Transpose <perm = [1, 0, 2]> (o)
            o2 = Reshape (ot, rows)
            g2 = Gemm <transB = 1> (o2, wo, bo)
            back = Concat <axis = 0> (sb, last)
            y3 = Reshape (g2, back)
            y = Transpose <perm = [1, 0, 2]> (y3)
        }}"""


def test_batch_first_mha_glue_cancels():
    proto, model, modified, stats = _run(_block())
    assert modified and stats.get("picks-as-split") == 1 and stats.get("gemm-view") == 1, stats
    got = ops(model)
    assert got == {"MatMul": 2, "Add": 2, "Split": 1, "MultiHeadAttention": 1}, got
    check_same(proto, model, _feeds(x=(2, 5, C)))
    check_same(proto, model, _feeds(x=(3, 1, C)))


def test_picks_out_of_order_and_repeated():
    # picks by negative / repeated indices are still parts of the packed axis
    proto, model, modified, stats = _run(_block(picks="-1, 1, -1"))
    assert "Transpose" not in ops(model) and ops(model)["Split"] == 1, ops(model)
    check_same(proto, model, _feeds(x=(2, 5, C)))


def test_picks_over_another_axis_or_with_other_readers_stay():
    # a Gather over the C axis is no pick of the packed axis; a view also read whole stays a view
    for reader in ("y = Gather <axis = -1> (v, i0)", "y0 = Gather <axis = 2> (v, i0)\n            y = Relu (v)"):
        proto, model, modified, stats = _run(f"""
            g (float[S, B, 24] x) => (float[S, B, 3, 8] y) {{
                tgt = Constant <value = int64[4] {{0, 0, 3, 8}}> ()
                i0 = Constant <value = int64 {{2}}> ()
                v = Reshape (x, tgt)
                {reader}
            }}""".replace("float[S, B, 3, 8] y", "float[S, B, 3] y" if "-1" in reader else "float[S, B, 3, 8] y"))
        assert "picks-as-split" not in stats and "Split" not in ops(model), stats
        check_same(proto, model, _feeds(x=(2, 5, 24)))


def test_gemm_bias_varying_over_rows_is_refused():
    # a [R, N] bias differs per row of the 2-D view: not a row-wise projection of the 3-D value
    rows_bias = ", ".join(f"{i / 50:.2f}" for i in range(10 * C))
    text = _block(bias_o=f"float[10, {C}] {{{rows_bias}}}")
    proto, model, modified, stats = _run(text)
    assert "gemm-view" not in stats and ops(model)["Gemm"] == 1, stats
    check_same(proto, model, _feeds(x=(2, 5, C)))


def test_gemm_view_back_to_other_rows_is_refused():
    # the 2-D rows viewed back as [B, S, C] from a [S, B, C] value: not the value's own leading dims
    proto, model, modified, stats = _run("""
        g (float[S, B, 8] x) => (float[B, S, 8] y) {
            wo = Constant <value = float[8, 8] {%s}> ()
            rows = Constant <value = int64[2] {-1, 8}> ()
            last = Constant <value = int64[1] {8}> ()
            t = Transpose <perm = [0, 1, 2]> (x)
            r = Reshape (t, rows)
            g2 = Gemm (r, wo)
            sb = Shape <start = 0, end = 2> (x)
            perm = Constant <value = int64[2] {1, 0}> ()
            bs = Gather (sb, perm)
            back = Concat <axis = 0> (bs, last)
            y = Reshape (g2, back)
        }""" % WO)
    assert "gemm-view" not in stats and ops(model)["Gemm"] == 1, stats


def test_picks_read_by_views_as_torchscript_writes_them():
    # TorchScript's key / value picks are read by the head views ([S, B*H, D]), not by Transposes:
    # the Transpose moved the picked axis alone, so each pick is the same value read from the view
    proto, model, modified, stats = _run("""
        g (float[6, B, 24] a) => (float[B2, 6, 4] q, float[6, B2, 4] k, float[6, B2, 4] v) {
            tgt = Constant <value = int64[4] {6, -1, 3, 8}> ()
            heads = Constant <value = int64[3] {6, -1, 4}> ()
            i0 = Constant <value = int64 {0}> ()
            i1 = Constant <value = int64 {1}> ()
            i2 = Constant <value = int64 {2}> ()
            r = Reshape (a, tgt)
            p = Transpose <perm = [2, 0, 1, 3]> (r)
            q0 = Gather <axis = 0> (p, i0)
            k0 = Gather <axis = 0> (p, i1)
            v0 = Gather <axis = 0> (p, i2)
            qh = Reshape (q0, heads)
            q = Transpose <perm = [1, 0, 2]> (qh)
            k = Reshape (k0, heads)
            v = Reshape (v0, heads)
        }""")
    assert stats.get("picks-through-transpose") == 1 and stats.get("picks-as-split") == 1, stats
    assert ops(model).get("Transpose") == 1 and "Gather" not in ops(model), ops(model)
    check_same(proto, model, _feeds(a=(6, 2, 24)))
