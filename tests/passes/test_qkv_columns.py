"""qkv-columns (passes/qkv_columns.py): a fused q / k / v projection whose heads interleave q, k and v,
picked per head after a view, becomes one projection with its weight (and bias) columns permuted and
one Split of its last axis, each piece viewed back as the pick was.

The graphs are written as the exporters write them (views from Shape reads, picks by Split / Gather /
Slice + Squeeze / GatherND), with the attention core left unfused (q @ k^T, Softmax, @ v), and
checked in ORT against the original."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.qkv_columns import QkvColumnsPass
from pass_testing import apply, check_same, normal_feeds, parse
from pass_testing import ops_but_constants as ops

HEADER = '<ir_version: 10, opset_import: ["" : 18]>\n'
C = 8


def _floats(n: int, seed: int, scale: float = 1.0) -> str:
    return ", ".join(f"{x:.4f}" for x in np.random.default_rng(seed).standard_normal(n) * scale)


def _run(text: str):
    proto = parse(HEADER + text)
    model, modified, p = apply(QkvColumnsPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return proto, model, modified, dict(p.stats)


def _feeds(seed: int = 5, b: int = 2, s: int = 5):
    return normal_feeds(seed, x=(b, s, C))


def _projection(n: int, bias: bool, out: str = "a") -> str:
    """x [B, S, C] @ w [C, n] (+ b): the fused projection, as ``out``."""
    text = f"""
            w = Constant <value = float[{C}, {n}] {{{_floats(C * n, 1, 0.3)}}}> ()
            {"m" if bias else out} = MatMul (x, w)"""
    if bias:
        text += f"""
            b = Constant <value = float[{n}] {{{_floats(n, 2, 0.5)}}}> ()
            {out} = Add (m, b)"""
    return text


def _heads_core() -> str:
    """q0 / k0 / v0 [B, S, 8] viewed as 2 heads of 4, head-transposed, then _core()."""
    return """
            hv = Constant <value = int64[4] {0, 0, 2, 4}> ()
            q1 = Reshape (q0, hv)
            k1 = Reshape (k0, hv)
            v1 = Reshape (v0, hv)
            q = Transpose <perm = [0, 2, 1, 3]> (q1)
            k = Transpose <perm = [0, 2, 1, 3]> (k1)
            v = Transpose <perm = [0, 2, 1, 3]> (v1)""" + _core()


def _core(q: str = "q", k: str = "k", v: str = "v") -> str:
    """softmax(q k^T) v on [B, H, S, D] tensors (no scale: the values are what is checked)."""
    return f"""
            kt = Transpose <perm = [0, 1, 3, 2]> ({k})
            sc = MatMul ({q}, kt)
            pr = Softmax <axis = -1> (sc)
            y = MatMul (pr, {v})"""


def _split_projection(model: ir.Model) -> ir.Node:
    """The one Split of the projection's last axis the pass made."""
    splits = [n for n in model.graph if n.op_type == "Split"]
    assert len(splits) == 1, [n.op_type for n in model.graph]
    src = splits[0].inputs[0].producer()
    assert src.op_type in ("Add", "MatMul"), src.op_type
    assert splits[0].attributes["axis"].value == -1
    return splits[0]


def gpt_neox(bias: bool = True, heads: int = 2, d: int = 4) -> str:
    """GPT-NeoX (dynamo): view [B, S, H, 3D], Transpose to [B, H, S, 3D], Split into q, k, v."""
    return f"""
        g (float[B, S, {C}] x) => (float[B, {heads}, S, {d}] y) {{
            {_projection(heads * 3 * d, bias)}
            sb = Shape <start = 0, end = 2> (x)
            tail = Constant <value = int64[2] {{{heads}, {3 * d}}}> ()
            tgt = Concat <axis = 0> (sb, tail)
            view = Reshape (a, tgt)
            t = Transpose <perm = [0, 2, 1, 3]> (view)
            q, k, v = Split <axis = 3, num_outputs = 3> (t)
            {_core()}
        }}"""


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("heads, d", [(2, 4), (4, 2), (1, 8)])
def test_gpt_neox_split_of_heads(bias, heads, d):
    # one head: q, k, v are column ranges of the projection in order, but picked from its [B, S, 1, 3D] view:
    # taken too (pieces of the projection itself, each viewed as the pick was; the attention then reads them 3-D)
    proto, model, modified, stats = _run(gpt_neox(bias, heads, d))
    assert modified and stats == {"projections": 1, "picks": 3}, stats
    split = _split_projection(model)
    assert [o.shape[-1] for o in split.outputs] == [heads * d] * 3
    got = ops(model)
    # the view and the heads Transpose are now per piece: Reshape [0, 0, H, D] and Transpose each (k's
    # composed with the scores' k^T)
    assert got.get("Reshape") == 3 and got.get("Transpose") == 3 and got.get("Concat") is None, got
    check_same(proto, model, _feeds())
    check_same(proto, model, _feeds(7, b=1, s=3))


def test_permuted_weight_columns():
    # q's columns are h * 3D + j (j < D): after the pass they are the first H*D columns, in head order
    proto, model, _, _ = _run(gpt_neox(True, 2, 4))
    w0 = ir.from_proto(proto).graph
    old = next(n for n in w0 if n.op_type == "Constant" and n.outputs[0].name == "w").attributes["value"].value.numpy()
    mm = next(n for n in model.graph if n.op_type == "MatMul" and n.inputs[0].name == "x")
    new = mm.inputs[1].const_value.numpy()
    q_cols = [h * 12 + j for h in range(2) for j in range(4)]
    np.testing.assert_array_equal(new[:, :8], old[:, q_cols])


def _bloom_gathers(iq: int, ik: int, iv: int, h: int = 2, d: int = 4) -> str:
    """BLOOM's view [B, S, H, 3, D] of the projection, q / k / v = Gather iq / ik / iv over axis 3, each
    transposed to [B, H, S, D]."""
    return f"""
        g (float[B, S, {C}] x) => (float[B, {h}, S, {d}] y) {{
            {_projection(h * 3 * d, True)}
            tgt = Constant <value = int64[5] {{0, 0, {h}, 3, {d}}}> ()
            view = Reshape (a, tgt)
            i0 = Constant <value = int64 {{{iq}}}> ()
            i1 = Constant <value = int64 {{{ik}}}> ()
            i2 = Constant <value = int64 {{{iv}}}> ()
            q0 = Gather <axis = 3> (view, i0)
            k0 = Gather <axis = 3> (view, i1)
            v0 = Gather <axis = 3> (view, i2)
            q = Transpose <perm = [0, 2, 1, 3]> (q0)
            k = Transpose <perm = [0, 2, 1, 3]> (k0)
            v = Transpose <perm = [0, 2, 1, 3]> (v0)
            {_core()}
        }}"""


def test_bloom_gather_of_the_qkv_axis():
    # BLOOM / Falcon (no multi-query): view [B, S, H, 3, D], q / k / v = Gather 0 / 1 / 2 over axis 3,
    # each transposed to [B, H, S, D]
    proto, model, modified, stats = _run(_bloom_gathers(0, 1, -1))
    assert modified and stats["picks"] == 3, stats
    _split_projection(model)
    assert "Gather" not in ops(model), ops(model)
    check_same(proto, model, _feeds())


def test_falcon_slice_and_squeeze():
    # falcon_seq: x[..., i, :] over the [B, S, H, 3, D] view written as Slice i:i+1 then Squeeze
    h, d = 2, 4
    picks = "\n".join(f"""
            s{i} = Constant <value = int64[1] {{{i}}}> ()
            e{i} = Constant <value = int64[1] {{{i + 1}}}> ()
            p{i} = Slice (view, s{i}, e{i}, ax)
            u{i} = Squeeze (p{i}, ax)
            {name} = Transpose <perm = [0, 2, 1, 3]> (u{i})""" for i, name in enumerate("qkv"))
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, {h}, S, {d}] y) {{
            {_projection(h * 3 * d, False)}
            tgt = Constant <value = int64[5] {{0, 0, {h}, 3, {d}}}> ()
            view = Reshape (a, tgt)
            ax = Constant <value = int64[1] {{3}}> ()
            {picks}
            {_core()}
        }}""")
    assert modified and stats["picks"] == 3, stats
    _split_projection(model)
    assert "Slice" not in ops(model) and "Squeeze" not in ops(model), ops(model)
    check_same(proto, model, _feeds())


def test_falcon_new_grouped_query():
    # Falcon's new decoder architecture: view [B, S, Hkv, G + 2, D]; q = the first G of each group viewed
    # [B, S, H, D], k / v the group's last two (Slice to a size-1 axis, GatherND over the moved axis)
    hkv, g, d = 2, 2, 2
    h = hkv * g
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, {h}, S, {d}] q, float[1, B, {hkv}, S, {d}] k,
                                    float[1, B, S, {hkv}, {d}] v) {{
            {_projection(hkv * (g + 2) * d, True)}
            tgt = Constant <value = int64[5] {{0, 0, {hkv}, {g + 2}, {d}}}> ()
            view = Reshape (a, tgt)
            s0 = Constant <value = int64[1] {{0}}> ()
            e0 = Constant <value = int64[1] {{-2}}> ()
            ax = Constant <value = int64[1] {{3}}> ()
            q0 = Slice (view, s0, e0, ax)
            qv = Constant <value = int64[4] {{0, 0, {h}, {d}}}> ()
            q1 = Reshape (q0, qv)
            q = Transpose <perm = [0, 2, 1, 3]> (q1)
            s1 = Constant <value = int64[1] {{-2}}> ()
            e1 = Constant <value = int64[1] {{-1}}> ()
            k0 = Slice (view, s1, e1, ax)
            k = Transpose <perm = [3, 0, 2, 1, 4]> (k0)
            vt = Transpose <perm = [3, 0, 1, 2, 4]> (view)
            iv = Constant <value = int64[1, 1] {{{g + 1}}}> ()
            v = GatherND (vt, iv)
        }}""")
    assert modified and stats["picks"] == 3, stats
    split = _split_projection(model)
    assert [o.shape[-1] for o in split.outputs] == [h * d, hkv * d, hkv * d]
    assert "Slice" not in ops(model) and "GatherND" not in ops(model), ops(model)
    check_same(proto, model, _feeds())


def test_codegen_mp_num_groups():
    # CodeGen: qkv viewed [B, S, mp, 3L] and split into q, v, k (L = H / mp * D each), then each viewed
    # [B, S, mp, H / mp, D] and [B, S, H, D]
    mp, h, d = 2, 4, 2
    local = h // mp * d
    parts = "\n".join(f"""
            {n}5 = Reshape ({n}0, sh5)
            {n}4 = Reshape ({n}5, sh4)
            {n} = Transpose <perm = [0, 2, 1, 3]> ({n}4)""" for n in "qvk")
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, {h}, S, {d}] y) {{
            {_projection(3 * h * d, False)}
            tgt = Constant <value = int64[4] {{0, 0, {mp}, -1}}> ()
            view = Reshape (a, tgt)
            sizes = Constant <value = int64[3] {{{local}, {local}, {local}}}> ()
            q0, v0, k0 = Split <axis = -1> (view, sizes)
            sh5 = Constant <value = int64[5] {{0, 0, {mp}, {h // mp}, {d}}}> ()
            sh4 = Constant <value = int64[4] {{0, 0, {h}, {d}}}> ()
            {parts}
            {_core()}
        }}""")
    assert modified and stats["picks"] == 3, stats
    _split_projection(model)
    got = ops(model)
    assert got.get("Reshape") == 3, got   # one view per piece, not two
    check_same(proto, model, _feeds())


def test_projection_read_whole_beside_the_picks_stays():
    # the projection's output also feeds another op: its columns must stay where they are
    text = gpt_neox().replace("=> (float[B, 2, S, 4] y)", "=> (float[B, 2, S, 4] y, float[B, S, 24] z)")
    text = text.replace("q, k, v = Split", "z = Relu (a)\n            q, k, v = Split")
    proto, model, modified, stats = _run(text)
    assert not modified and not stats, stats
    assert ops(model).get("Transpose") == 2 and ops(model).get("Split") == 1, ops(model)


def test_matmul_output_read_beside_the_bias_add_stays():
    # the MatMul's output read by the bias Add and by another op: the MatMul is read whole
    text = gpt_neox().replace("=> (float[B, 2, S, 4] y)", "=> (float[B, 2, S, 4] y, float[B, S, 24] z)")
    text = text.replace("q, k, v = Split", "z = Relu (m)\n            q, k, v = Split")
    _, _, modified, stats = _run(text)
    assert not modified, stats


def test_picked_piece_also_a_graph_output():
    # a pick that is also a model output is a leaf like any other: rewritten, the output keeps its name
    text = gpt_neox().replace("=> (float[B, 2, S, 4] y)", "=> (float[B, 2, S, 4] y, float[B, 2, S, 4] v)")
    proto, model, modified, stats = _run(text)
    assert modified, stats
    check_same(proto, model, _feeds())


def test_column_read_twice_or_pieces_rejoined_stay():
    h, d = 2, 4
    # k picked twice (no v): a column read twice and some never
    _, _, modified, stats = _run(_bloom_gathers(0, 1, 1))
    assert not modified, stats
    # GPT-J's partial rotation on a separate q projection: q[..., :rd] and q[..., rd:] per head are
    # interleaved columns too, but they meet again in a Concat: one tensor, not q / k / v
    rejoined = f"""
        g (float[B, S, {C}] x) => (float[B, S, {h}, {d}] y) {{
            {_projection(h * d, False)}
            tgt = Constant <value = int64[4] {{0, 0, {h}, {d}}}> ()
            view = Reshape (a, tgt)
            s0 = Constant <value = int64[1] {{0}}> ()
            e0 = Constant <value = int64[1] {{2}}> ()
            e1 = Constant <value = int64[1] {{{d}}}> ()
            ax = Constant <value = int64[1] {{3}}> ()
            rot = Slice (view, s0, e0, ax)
            rest = Slice (view, e0, e1, ax)
            r2 = Neg (rot)
            y = Concat <axis = -1> (r2, rest)
        }}"""
    _, _, modified, stats = _run(rejoined)
    assert not modified, stats


def test_pieces_already_in_order_stay():
    # the Llama form (one Split of the last axis, then per-piece views) is what the pass makes: no change
    _, _, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, 2, S, 4] y) {{
            {_projection(24, True)}
            q0, k0, v0 = Split <axis = -1, num_outputs = 3> (a)
            {_heads_core()}
        }}""")
    assert not modified and not stats, stats


def test_view_merging_a_lead_axis_stays():
    # a view of [B*S, H, 3D] merges the lead axes: the pass cannot say which rows a piece holds
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[N, 2, 4] q, float[N, 2, 4] k, float[N, 2, 4] v) {{
            {_projection(24, True)}
            tgt = Constant <value = int64[3] {{-1, 2, 12}}> ()
            view = Reshape (a, tgt)
            q, k, v = Split <axis = 2, num_outputs = 3> (view)
        }}""")
    assert not modified, stats


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_gpt_neox_block_fewer_nodes_end_to_end(target):
    # the whole pipeline at O3: the per-head split is gone, attention fused either way, same numbers
    import onnx_fuse

    text = gpt_neox().replace("=> (float[B, 2, S, 4] y)", "=> (float[B, S, 8] out)")
    text = text.replace("y = MatMul (pr, v)", """y = MatMul (pr, v)
            yt = Transpose <perm = [0, 2, 1, 3]> (y)
            back = Constant <value = int64[3] {0, 0, 8}> ()
            out = Reshape (yt, back)""").replace("pr = Softmax <axis = -1> (sc)", "sc2 = Mul (sc, half)\n            pr = Softmax <axis = -1> (sc2)")
    text = text.replace("kt = Transpose", "half = Constant <value = float {0.5}> ()\n            kt = Transpose")
    proto = parse(HEADER + text)
    new = onnx_fuse.optimize(proto, level=3, target=target, verify=True)
    old = onnx_fuse.optimize(proto, level=3, target=target, verify=True, disable=["qkv-columns"])
    assert new.report.passed and old.report.passed
    assert sum(new.report.ops_after.values()) < sum(old.report.ops_after.values()), \
        (new.report.ops_after, old.report.ops_after)


def test_piece_joined_to_more_head_dims_stays_and_cache_join_does_not_block():
    # DeepSeek's kv_b_proj: k_nope and v per head, k_nope then joined along the head dim to a rotated part of
    # another projection: k_nope is part of k, not k. A past joined over the sequence axis is a cache.
    h, d = 2, 4

    def block(widened: bool) -> str:
        wq = 2 * d if widened else d
        return f"""
        g (float[B, S, {C}] x, float[B, {h}, S, {d}] kpe, float[B, {h}, S, {wq}] qin, float[B, {h}, P, {d}] past)
            => (float[B, {h}, S, {d}] y, float[B, {h}, T, {d}] present) {{
            {_projection(h * 2 * d, False)}
            tgt = Constant <value = int64[4] {{0, 0, {h}, {2 * d}}}> ()
            view = Reshape (a, tgt)
            t = Transpose <perm = [0, 2, 1, 3]> (view)
            knope, v = Split <axis = 3, num_outputs = 2> (t)
            {"k = Concat <axis = 3> (knope, kpe)" if widened else "k = Add (knope, kpe)"}
            present = Concat <axis = 2> (past, v)
            kt = Transpose <perm = [0, 1, 3, 2]> (k)
            sc = MatMul (qin, kt)
            pr = Softmax <axis = -1> (sc)
            y = MatMul (pr, v)
        }}"""

    _, _, modified, stats = _run(block(True))
    assert not modified, stats
    proto, model, modified, stats = _run(block(False))
    assert modified and stats["picks"] == 2, stats
    rng = np.random.default_rng(3)
    feeds = {**_feeds(), "kpe": rng.standard_normal((2, h, 5, d)).astype(np.float32),
             "qin": rng.standard_normal((2, h, 5, d)).astype(np.float32),
             "past": rng.standard_normal((2, h, 3, d)).astype(np.float32)}
    check_same(proto, model, feeds)


@pytest.mark.parametrize("shape_read", [False, True])
def test_pieces_as_matmuls(shape_read):
    # as_matmuls (ort / onnx): one MatMul + bias Add per piece from the permuted columns; a Shape read of
    # the projection would keep the whole projection alive, so then the pass writes the Split instead
    text = gpt_neox(True, 2, 4)
    if shape_read:
        text = text.replace("sb = Shape <start = 0, end = 2> (x)", "sb = Shape <start = 0, end = 2> (a)")
    proto = parse(HEADER + text)
    model = ir.from_proto(proto)
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    ShapeInferencePass()(model)
    p = QkvColumnsPass(as_matmuls=True)
    assert p(model).modified
    DeadCodeEliminationPass()(model)
    got = ops(model)
    if shape_read:
        _split_projection(model)
    else:
        assert got.get("MatMul") == 5 and got.get("Add") == 3 and "Split" not in got, got
    check_same(proto, model, _feeds())


def gpt_bigcode(cache: bool = False, merged: bool = False) -> str:
    """GPT-BigCode's multi-query attention (dynamo): q (2 heads) | k | v (one head each) in column order, picked
    by a Split of the projection viewed [B, 1, S, N] (its Unsqueeze); q viewed [B, S, H, D] and transposed, k / v
    [B, 1, S, D] broadcast over q's heads; with ``cache`` each joined to a past over the sequence (present out),
    with ``merged`` the output's heads merged back to [B, S, H * D] after a scale (the end-to-end form)."""
    h, d = 2, 4
    past = f", float[B, 1, P, {d}] pk, float[B, 1, P, {d}] pv" if cache else ""
    outs = (f", float[B, 1, T, {d}] kc, float[B, 1, T, {d}] vc" if cache else "")
    out = f"float[B, S, {h * d}] out" if merged else f"float[B, {h}, S, {d}] y"
    core = _core("q", "kc" if cache else "k", "vc" if cache else "v")
    if merged:
        core = core.replace("pr = Softmax <axis = -1> (sc)", """half = Constant <value = float {0.5}> ()
            sc2 = Mul (sc, half)
            pr = Softmax <axis = -1> (sc2)""") + f"""
            yt = Transpose <perm = [0, 2, 1, 3]> (y)
            back = Constant <value = int64[3] {{0, 0, {h * d}}}> ()
            out = Reshape (yt, back)"""
    join = """kc = Concat <axis = 2> (pk, k)
            vc = Concat <axis = 2> (pv, v)""" if cache else ""
    return f"""
        g (float[B, S, {C}] x{past}) => ({out}{outs}) {{
            {_projection(h * d + 2 * d, True)}
            ax = Constant <value = int64[1] {{1}}> ()
            u = Unsqueeze (a, ax)
            sizes = Constant <value = int64[3] {{{h * d}, {d}, {d}}}> ()
            q0, k, v = Split <axis = 3> (u, sizes)
            hv = Constant <value = int64[4] {{0, -1, {h}, {d}}}> ()
            q1 = Reshape (q0, hv)
            q = Transpose <perm = [0, 2, 1, 3]> (q1)
            {join}
            {core}
        }}"""


def test_gpt_bigcode_pieces_in_order_of_a_view_taken():
    # q | k | v in column order, but picked from a view of the projection ([B, 1, S, N]): each piece is now
    # the projection's own column range (no Unsqueeze), viewed as the pick was
    proto, model, modified, stats = _run(gpt_bigcode())
    assert modified and stats == {"projections": 1, "picks": 3}, stats
    split = _split_projection(model)
    assert [o.shape[-1] for o in split.outputs] == [8, 4, 4]
    assert "Unsqueeze" not in ops(model), ops(model)
    check_same(proto, model, _feeds())
    check_same(proto, model, _feeds(7, b=1, s=3))


def test_gpt_bigcode_pieces_joined_to_a_cache_stay():
    # with a cache the attention stays heads-first 4-D: the export's one shared view is kept (kv / optimum)
    _, _, modified, stats = _run(gpt_bigcode(cache=True))
    assert not modified and not stats, stats


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_gpt_bigcode_fewer_nodes_end_to_end(target):
    # the whole pipeline at O3: fewer nodes than with the pieces left on the view, attention fused, verified
    import onnx_fuse

    proto = parse(HEADER + gpt_bigcode(merged=True))
    new = onnx_fuse.optimize(proto, level=3, target=target, verify=True)
    old = onnx_fuse.optimize(proto, level=3, target=target, verify=True, disable=["qkv-columns"])
    assert new.report.passed and old.report.passed
    attention = {"com.microsoft::GroupQueryAttention", "com.microsoft::MultiHeadAttention", "com.microsoft::Attention",
                 "Attention"}
    assert sum(new.report.ops_after.get(k, 0) for k in attention) == 1, new.report.ops_after
    assert sum(new.report.ops_after.values()) < sum(old.report.ops_after.values()), \
        (new.report.ops_after, old.report.ops_after)


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_replaced_projection_not_computed_again(target):
    # the pass removes the projection it replaced (and the views / picks): before, pack-matmul packed the dead
    # projection with its pieces, so the fused projection ran twice and one output of the packed Split was unread
    import onnx_fuse

    proto = parse(HEADER + gpt_neox(True, 2, 4))
    model = ir.from_proto(proto)
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    ShapeInferencePass()(model)
    assert QkvColumnsPass(as_matmuls=True)(model).modified
    read = {id(i) for n in model.graph for i in n.inputs if i is not None} | {id(o) for o in model.graph.outputs}
    dead = [n.op_type for n in model.graph if not any(id(o) in read for o in n.outputs)]
    assert not dead, dead
    out = onnx_fuse.optimize(proto, level=3, target=target, verify=True)
    assert out.report.passed
    proto_out = out.to_proto()
    read = {i for n in proto_out.graph.node for i in n.input} | {o.name for o in proto_out.graph.output}
    unread = [o for n in proto_out.graph.node for o in n.output if o and o not in read]
    assert not unread, unread
    widths = [w.dims[-1] for w in proto_out.graph.initializer if len(w.dims) == 2 and w.dims[0] == C]
    assert sum(widths) == 24, widths  # q | k | v once, not beside the old projection's 24 columns


def test_pieces_in_order_sliced_one_split():
    # Phi-3's qkv_proj / ModernBERT's MLP chunk in TorchScript: a Slice per piece of the last axis, in column
    # order: one Split instead (at ort / onnx MatMuls per piece, which pack-matmul packs into one Split again)
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, 2, S, 4] y) {{
            {_projection(24, True)}
            ax = Constant <value = int64[1] {{-1}}> ()
            s0 = Constant <value = int64[1] {{0}}> ()
            s1 = Constant <value = int64[1] {{8}}> ()
            s2 = Constant <value = int64[1] {{16}}> ()
            s3 = Constant <value = int64[1] {{24}}> ()
            q0 = Slice (a, s0, s1, ax)
            k0 = Slice (a, s1, s2, ax)
            v0 = Slice (a, s2, s3, ax)
            {_heads_core()}
        }}""")
    assert modified and stats == {"projections": 1, "picks": 3}, stats
    assert [o.shape[-1] for o in _split_projection(model).outputs] == [8, 8, 8]
    assert "Slice" not in ops(model), ops(model)
    check_same(proto, model, _feeds())


def _sliced_without_axes(lead_end: str) -> str:
    """Phi-3's three Slices of the projection's last axis written without axes: starts / ends on every axis, the
    batch axis cut to ``lead_end`` (INT64_MAX: whole)."""
    big = np.iinfo(np.int64).max
    cuts = "".join(f"""
            s{i} = Constant <value = int64[3] {{0, 0, {8 * i}}}> ()
            e{i} = Constant <value = int64[3] {{{lead_end}, {big}, {8 * i + 8 if i < 2 else big}}}> ()
            {n}0 = Slice (a, s{i}, e{i})""" for i, n in enumerate("qkv"))
    return f"""
        g (float[B, S, {C}] x) => (float[B, 2, S, 4] y) {{
            {_projection(24, True)}{cuts}
            {_heads_core()}
        }}"""


def test_pieces_sliced_without_axes_one_split():
    # a Slice without its axes input cuts every axis, each from its starts / ends: the lead axes [0, INT64_MAX)
    # whole (fuzz_s34's slices, seeds 4 / 35: the lead axes refused the picks, the pieces stayed three Slices)
    proto, model, modified, stats = _run(_sliced_without_axes(str(np.iinfo(np.int64).max)))
    assert modified and stats == {"projections": 1, "picks": 3}, stats
    assert [o.shape[-1] for o in _split_projection(model).outputs] == [8, 8, 8]
    assert "Slice" not in ops(model), ops(model)
    check_same(proto, model, _feeds())
    check_same(proto, model, _feeds(7, b=1, s=3))


def test_a_lead_axis_cut_short_stays():
    # the same Slices cutting the batch axis to its first row: a pick on a lead axis, not columns
    proto, model, modified, stats = _run(_sliced_without_axes("1"))
    assert not modified, stats


def mamba_in_proj(bias: bool = False) -> str:
    """Mamba-1's in_proj (falcon_mamba, jamba): ``in_proj(x).transpose(1, 2).chunk(2, dim=1)``, a MatMul, one
    Transpose(0, 2, 1) of the whole projection, one Split of the column axis into hidden_states and gate (in
    column order), hidden_states through a depthwise causal Conv, gate through SiLU, their product out."""
    i = C // 2
    return f"""
        g (float[B, S, {C}] x) => (float[B, {i}, S] out) {{
            {_projection(C, bias)}
            t = Transpose <perm = [0, 2, 1]> (a)
            hs, gate = Split <axis = 1, num_outputs = 2> (t)
            cw = Constant <value = float[{i}, 1, 3] {{{_floats(i * 3, 3, 0.5)}}}> ()
            conv = Conv <group = {i}, pads = [2, 0]> (hs, cw)
            sg = Sigmoid (gate)
            silu = Mul (gate, sg)
            out = Mul (conv, silu)
        }}"""


@pytest.mark.parametrize("bias", [False, True])
def test_mamba_in_proj_transpose_not_copied_per_piece(bias):
    # the pieces are in column order: the only change the pass could make is moving the shared Transpose into
    # each half (two Transposes for one, nothing gained; falcon_mamba / jamba +1 node per mixer after ec695f7)
    proto, model, modified, stats = _run(mamba_in_proj(bias))
    assert not modified and not stats, stats
    assert ops(model).get("Transpose") == 1, ops(model)
    check_same(proto, model, _feeds())


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_mamba_in_proj_one_transpose_end_to_end(target):
    # the whole pipeline at O3: one Transpose and no more nodes than with qkv-columns off, verified in ORT
    import onnx_fuse

    proto = parse(HEADER + mamba_in_proj())
    new = onnx_fuse.optimize(proto, level=3, target=target, verify=True)
    old = onnx_fuse.optimize(proto, level=3, target=target, verify=True, disable=["qkv-columns"])
    assert new.report.passed and old.report.passed
    assert new.report.ops_after.get("Transpose") == 1, new.report.ops_after
    assert sum(new.report.ops_after.values()) == sum(old.report.ops_after.values()), \
        (new.report.ops_after, old.report.ops_after)


def test_shared_transpose_undone_per_piece_taken():
    # the shared Transpose moves the column axis, but each piece moves it back: the pieces as column ranges of
    # the projection need no Transpose at all (fewer data moves than the region's three), so they are taken
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, S, 4] p, float[B, S, 4] q) {{
            {_projection(C, True)}
            t = Transpose <perm = [0, 2, 1]> (a)
            h0, h1 = Split <axis = 1, num_outputs = 2> (t)
            p = Transpose <perm = [0, 2, 1]> (h0)
            q = Transpose <perm = [0, 2, 1]> (h1)
        }}""")
    assert modified and stats == {"projections": 1, "picks": 2}, stats
    assert "Transpose" not in ops(model), ops(model)
    check_same(proto, model, _feeds())


def test_heads_first_pieces_in_order_taken():
    # ModernBERT (Optimum): q | k | v in column order viewed [B, S, 3, H, D], one Transpose to [B, H, 3, S, D],
    # split and squeezed. Each piece then needs its own heads-first Transpose (three for the region's one), but
    # after a head view that is the Llama form the attention rules read: the data-move count does not refuse it
    proto, model, modified, stats = _run(f"""
        g (float[B, S, {C}] x) => (float[B, 2, S, 4] y) {{
            {_projection(24, True)}
            hv = Constant <value = int64[5] {{0, 0, 3, 2, 4}}> ()
            view = Reshape (a, hv)
            t = Transpose <perm = [0, 3, 2, 1, 4]> (view)
            q0, k0, v0 = Split <axis = 2, num_outputs = 3> (t)
            ax = Constant <value = int64[1] {{2}}> ()
            q = Squeeze (q0, ax)
            k = Squeeze (k0, ax)
            v = Squeeze (v0, ax)
            {_core()}
        }}""")
    assert modified and stats == {"projections": 1, "picks": 3}, stats
    assert [o.shape[-1] for o in _split_projection(model).outputs] == [8, 8, 8]
    check_same(proto, model, _feeds())
