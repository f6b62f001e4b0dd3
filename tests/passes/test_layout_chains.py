"""FoldLayoutChainsPass: a Transpose sunk through layout-agnostic ops into the next Transpose, a Reshape
of a Reshape read from its source, a static Reshape / Transpose chain as at most three nodes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
from onnx_fuse.passes.layout_chains import FoldLayoutChainsPass
from pass_testing import apply, check_same, fold_layout, parse
from pass_testing import ops_but_constants as ops

_HEAD = '<ir_version: 9, opset_import: ["" : 17]>\n'


def _run(text: str):
    return fold_layout(text, opset=17, ir_version=9)


def _x(*shape):
    return {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}


def test_inverse_pair_through_elementwise_cancels():
    # the constants broadcast on the transposed layout: [S, 1] along axes 2, 3 and [H, 1, D] along 1..3
    proto, model, modified, p = _run("""
        g (float[B, S, H, D] x) => (float[B, S, H, D] y) {
            c1 = Constant <value = float[5, 1] {1., 2., 3., 4., 5.}> ()
            c2 = Constant <value = float[3, 1, 4] {1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.}> ()
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            a = Add (t, c1)
            r = Relu (a)
            m = Mul (c2, r)
            h = Cast <to = 10> (m)
            y16 = Transpose <perm = [0, 2, 1, 3]> (h)
            y = Cast <to = 1> (y16)
        }""")
    assert modified and p.stats["transpose-sunk"] == 1
    assert "Transpose" not in ops(model)
    check_same(proto, model, _x(2, 5, 3, 4))


def test_same_transpose_on_the_other_operand_is_read_from_before_it():
    proto = parse(_HEAD + """
        g (float[B, S, H, D] x, float[B, S, H, D] z) => (float[B, S, H, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            u = Transpose <perm = [0, 2, 1, 3]> (z)
            a = Sub (u, t)
            y = Transpose <perm = [0, 2, 1, 3]> (a)
        }""")
    model, modified, _ = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    assert modified and ops(model) == {"Sub": 1}
    rng = np.random.default_rng(0)
    check_same(proto, model, {k: rng.standard_normal((2, 5, 3, 4)).astype(np.float32) for k in "xz"})


def test_composed_permutation_stays_one_transpose():
    proto, model, modified, _ = _run("""
        g (float[A, B, C] x) => (float[C, A, B] y) {
            t = Transpose <perm = [1, 0, 2]> (x)
            e = Erf (t)
            y = Transpose <perm = [2, 1, 0]> (e)
        }""")
    assert modified and ops(model) == {"Erf": 1, "Transpose": 1}
    assert list(next(n for n in model.graph if n.op_type == "Transpose").attributes["perm"].value) == [2, 0, 1]
    check_same(proto, model, _x(2, 3, 4))


@pytest.mark.parametrize("blocker", ["second_reader", "graph_output", "input_operand"])
def test_blocked(blocker):
    extra = {"second_reader": "w = Neg (a)", "shape_reader": "w = Shape (a)",
             "graph_output": "w = Identity (x)", "input_operand": "w = Identity (x)"}[blocker]
    operand = "z" if blocker == "input_operand" else "c"
    out = "a" if blocker == "graph_output" else "w"
    w_type = "float[B, H, S, D]" if blocker == "graph_output" else "float[B, S, H, D]"
    proto = parse(_HEAD + f"""
        g (float[B, S, H, D] x, float[D] z) => (float[B, S, H, D] y, {w_type} {out}) {{
            c = Constant <value = float[4] {{1., 2., 3., 4.}}> ()
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            a = Add (t, {operand})
            {extra}
            y = Transpose <perm = [0, 2, 1, 3]> (a)
        }}""")
    model, modified, _ = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert not modified and ops(model)["Transpose"] == 2


def test_reshape_of_reshape_from_shape_reads_cancels():
    # a head split by a computed target, merged again by [0, 0, -1] (LayoutLM's TorchScript q / k)
    proto, model, modified, p = _run("""
        g (float[B, S, 32] x) => (float[B, S, 32] y) {
            s = Shape (x)
            i0 = Constant <value = int64[1] {0}> ()
            i1 = Constant <value = int64[1] {1}> ()
            b = Gather <axis = 0> (s, i0)
            n = Gather <axis = 0> (s, i1)
            hd = Constant <value = int64[2] {2, 16}> ()
            target = Concat <axis = 0> (b, n, hd)
            r = Reshape (x, target)
            merge = Constant <value = int64[3] {0, 0, -1}> ()
            y = Reshape (r, merge)
        }""")
    # the chain fold reads the computed target as [B, S, 2, 16] and takes it first
    assert modified and p.stats["layout-chain"] + p.stats["reshape-of-reshape"] == 1
    assert "Reshape" not in ops(model)
    check_same(proto, model, _x(2, 5, 32))


def test_reshape_of_reshape_copying_a_changed_dim_is_refused():
    # the 0 copies the middle value's B * S, not x's B
    proto = parse(_HEAD + """
        g (float[B, S, 32] x) => (float[M, 32] y) {
            flat = Constant <value = int64[3] {-1, 2, 16}> ()
            r = Reshape (x, flat)
            back = Constant <value = int64[2] {0, -1}> ()
            y = Reshape (r, back)
        }""")
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert p.stats["reshape-of-reshape"] == 0
    # the chain read on symbolic dims folds instead: one Reshape [-1, 32] (B * S is no dim of x)
    assert modified and p.stats["layout-chain"] == 1 and ops(model) == {"Reshape": 1}
    check_same(proto, model, _x(2, 5, 32))


def test_reshape_of_an_unsqueeze_reads_its_input():
    # einsum-to-matmul's Unsqueeze of v ([B, K, S, 8] -> [B, K, 1, S, 8]) under the grouped GQA body's
    # Reshape to [B, K, S, 8]: the Reshape reads v, and it is then one to v's own shape (gone)
    proto, model, modified, p = _run("""
        g (float[B, 2, S, 8] x) => (float[B, 2, S, 8] y) {
            ax = Constant <value = int64[1] {2}> ()
            u = Unsqueeze (x, ax)
            t = Constant <value = int64[4] {0, 2, -1, 8}> ()
            r = Reshape (u, t)
            y = Relu (r)
        }""")
    assert modified and p.stats["reshape-of-reshape"] == 1
    assert ops(model) == {"Relu": 1}, ops(model)
    check_same(proto, model, _x(3, 2, 5, 8))


def test_reshape_of_an_unsqueeze_copying_a_moved_dim_is_refused():
    # the 0 copies the Unsqueeze's new leading 1, which is B in x
    proto = parse(_HEAD + """
        g (float[B, 2, S, 8] x) => (float[1, M, 8] y) {
            ax = Constant <value = int64[1] {0}> ()
            u = Unsqueeze (x, ax)
            t = Constant <value = int64[3] {0, -1, 8}> ()
            y = Reshape (u, t)
        }""")
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert p.stats["reshape-of-reshape"] == 0 and ops(model)["Unsqueeze"] == 1


def test_static_chain_becomes_reshape_transpose_reshape():
    # PEGASUS-X's blocks: [B, S, H*D] -> heads -> [B, H, N, K, D] -> [B*H*N, K, D] -> back to [B, S, H*D]
    proto, model, modified, p = _run("""
        g (float[2, 12, 8] x) => (float[2, 12, 8] y, float[16, 3, 4] q) {
            s1 = Constant <value = int64[4] {2, 12, 2, 4}> ()
            v = Reshape (x, s1)
            t = Transpose <perm = [0, 2, 1, 3]> (v)
            s2 = Constant <value = int64[5] {0, 0, 4, 3, 4}> ()
            blocks = Reshape (t, s2)
            s3 = Constant <value = int64[3] {-1, 3, 4}> ()
            q = Reshape (blocks, s3)
            e = Exp (q)
            s4 = Constant <value = int64[4] {2, 2, 12, 4}> ()
            back = Reshape (e, s4)
            t2 = Transpose <perm = [0, 2, 1, 3]> (back)
            s5 = Constant <value = int64[3] {2, 12, 8}> ()
            y = Reshape (t2, s5)
        }""")
    assert modified and p.stats["layout-chain"] == 1
    # q: Reshape, Transpose, Reshape (was 4 nodes); y's chain is 3 nodes already: left
    assert ops(model) == {"Reshape": 4, "Transpose": 2, "Exp": 1}
    check_same(proto, model, _x(2, 12, 8))


def test_static_chain_that_only_moves_ones_is_one_reshape():
    proto, model, modified, _ = _run("""
        g (float[2, 1, 6] x) => (float[2, 6] y) {
            t = Transpose <perm = [1, 0, 2]> (x)
            s = Constant <value = int64[3] {2, 3, 2}> ()
            r = Reshape (t, s)
            s2 = Constant <value = int64[2] {2, 6}> ()
            y = Reshape (r, s2)
        }""")
    assert modified and ops(model) == {"Reshape": 1}
    check_same(proto, model, _x(2, 1, 6))


def test_static_chain_off_atom_boundaries_is_left():
    # [2, 6] -> [6, 2] (transposed) -> [4, 3]: 4 is no product of whole factors of the transposed axes
    proto = parse(_HEAD + """
        g (float[2, 6] x) => (float[4, 3] y) {
            t = Transpose <perm = [1, 0]> (x)
            s = Constant <value = int64[2] {4, 3}> ()
            y = Reshape (t, s)
        }""")
    model, modified, _ = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert not modified and ops(model) == {"Transpose": 1, "Reshape": 1}


_HIERA_KEY = """
    g (float[B, 4, 64, 16] x) => (float[B, 64, 64] y) {
        t1 = Transpose <perm = [0, 1, 3, 2]> (x)
        s1 = Constant <value = int64[4] {0, 4, 16, -1}> ()
        kt = Reshape <allowzero = AZ> (t1, s1)
        t2 = Transpose <perm = [0, 3, 1, 2]> (kt)
        s2 = Constant <value = int64[3] {0, 0, -1}> ()
        y = Reshape (t2, s2)
    }"""


@pytest.mark.parametrize("batch", [1, 3])
def test_chain_on_a_symbolic_batch_folds(batch):
    # Hiera's dynamic-batch key: K^T viewed, then turned back for [B, S, H*D]: 4 nodes -> Transpose,
    # Reshape; B never split (B = 1 at run time too: a size-1 atom is still moved right)
    proto, model, modified, p = _run(_HIERA_KEY.replace("AZ", "0"))
    assert modified and p.stats["layout-chain"] == 1
    assert ops(model) == {"Transpose": 1, "Reshape": 1}  # x already has [B, H, S, D]: no first Reshape
    check_same(proto, model, _x(batch, 4, 64, 16))


def test_chain_with_allowzero_reads_its_minus_one():
    # allowzero = 1 (a 0 would stay literal, so the export writes -1 for B): folds the same
    text = _HIERA_KEY.replace("AZ", "1").replace("{0, 4, 16, -1}", "{-1, 4, 16, 64}")
    proto, model, modified, p = _run(text)
    assert modified and p.stats["layout-chain"] == 1 and ops(model) == {"Transpose": 1, "Reshape": 1}
    check_same(proto, model, _x(3, 4, 64, 16))


def test_window_unpartition_on_symbolic_batch_is_one_reshape():
    # SAM / Hiera after attention: [4B, 16, 32] -> heads -> windows -> [4B, 4, 4, 32], read through a -1
    # and a symbolic product dim 4*B that stays whole
    proto, model, modified, p = _run("""
        g (float["4*B", 16, 32] x) => (float["4*B", 4, 4, 32] y) {
            s1 = Constant <value = int64[4] {0, 0, 2, 16}> ()
            a = Reshape (x, s1)
            t1 = Transpose <perm = [0, 2, 1, 3]> (a)
            s2 = Constant <value = int64[5] {-1, 2, 4, 4, 16}> ()
            b = Reshape (t1, s2)
            t2 = Transpose <perm = [0, 2, 3, 1, 4]> (b)
            s3 = Constant <value = int64[4] {-1, 4, 4, 32}> ()
            y = Reshape (t2, s3)
        }""")
    assert modified and p.stats["layout-chain"] == 1 and ops(model) == {"Reshape": 1}
    check_same(proto, model, _x(8, 16, 32))


def test_window_unpartition_with_computed_targets_is_one_reshape():
    # the same unpartition as TorchScript writes it: targets are Concats of Shape reads (B from x's
    # Shape, divided by the window count), read as dim products
    proto, model, modified, p = _run("""
        g (float[N, 16, 32] x) => (float[N, 4, 4, 32] y) {
            s = Shape (x)
            i0 = Constant <value = int64[1] {0}> ()
            n = Gather <axis = 0> (s, i0)
            heads = Constant <value = int64[2] {2, 16}> ()
            hw = Constant <value = int64[1] {16}> ()
            s1 = Concat <axis = 0> (n, hw, heads)
            a = Reshape (x, s1)
            t1 = Transpose <perm = [0, 2, 1, 3]> (a)
            w = Constant <value = int64[4] {2, 4, 4, 16}> ()
            s2 = Concat <axis = 0> (n, w)
            b = Reshape (t1, s2)
            t2 = Transpose <perm = [0, 2, 3, 1, 4]> (b)
            c = Constant <value = int64[3] {4, 4, 32}> ()
            s3 = Concat <axis = 0> (n, c)
            y = Reshape (t2, s3)
        }""")
    assert modified and p.stats["layout-chain"] == 1 and ops(model) == {"Reshape": 1}
    check_same(proto, model, _x(3, 16, 32))


def test_chain_splitting_a_symbolic_dim_is_left():
    # [B, 6] -> [B/2, 2, 6]: B / 2 is no product of x's dims, so no plan (static B = 4 would fold)
    proto = parse(_HEAD + """
        g (float[B, 6] x) => (float[M, 12] y) {
            s1 = Constant <value = int64[3] {-1, 2, 6}> ()
            a = Reshape (x, s1)
            s2 = Constant <value = int64[4] {-1, 2, 3, 2}> ()
            b = Reshape (a, s2)
            t = Transpose <perm = [0, 2, 1, 3]> (b)
            s3 = Constant <value = int64[2] {-1, 12}> ()
            y = Reshape (t, s3)
        }""")
    model, modified, p = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert p.stats["layout-chain"] == 0
    check_same(proto, model, _x(4, 6))


def test_symbolic_chain_stops_at_a_second_reader():
    # kt is read by the chain and by an output: the fold covers only what follows it
    proto, model, modified, p = _run("""
        g (float[B, 4, 64, 16] x) => (float[B, 64, 64] y, float[B, 4, 16, 64] k) {
            t1 = Transpose <perm = [0, 1, 3, 2]> (x)
            s1 = Constant <value = int64[4] {0, 4, 16, -1}> ()
            k = Reshape (t1, s1)
            t2 = Transpose <perm = [0, 3, 1, 2]> (k)
            s2 = Constant <value = int64[3] {0, 0, -1}> ()
            y = Reshape (t2, s2)
        }""")
    # x -> k is one Transpose (the Reshape keeps its shape); k -> y stays two nodes, not read from x
    assert p.stats["layout-chain"] == 1 and ops(model) == {"Transpose": 2, "Reshape": 1}, ops(model)
    check_same(proto, model, _x(3, 4, 64, 16))


def test_no_chain_is_not_modified():
    proto = parse(_HEAD + """
        g (float[B, S, H, D] x) => (float[B, H, S, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            y = Relu (t)
        }""")
    _, modified, _ = apply(FoldLayoutChainsPass, proto, shape_inference=True)
    assert not modified


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_pipeline_cancels_pairs_after_the_rules(target):
    # the rules' transpose-pair takes adjacent Transposes only; the cleanup after them takes this
    import onnx_fuse

    proto = parse(_HEAD + """
        g (float[B, S, H, D] x) => (float[B, S, H, D] y) {
            t = Transpose <perm = [0, 2, 1, 3]> (x)
            r = Relu (t)
            y = Transpose <perm = [0, 2, 1, 3]> (r)
        }""")
    result = onnx_fuse.optimize(proto, level=2, target=target, verify=True)
    assert result.report.passed and ops(result.model) == {"Relu": 1}
    kept = onnx_fuse.optimize(proto, level=2, target=target, disable="fold-layout-chains")
    assert ops(kept.model) == {"Transpose": 2, "Relu": 1}


def _hiera_unroll(rounds: int = 3, side: int = 16, channels: int = 4) -> onnx.ModelProto:
    """Hiera's unroll on a symbolic batch: [B, side*side, C] viewed [B', h, 2, w, 2, C], the 2s moved
    to the front, merged into the batch, `rounds` times (transformers' HieraUnroll)."""
    body, h = [f"r0 = Reshape (x, s0)"], side
    consts = [f"s0 = Constant <value = int64[4] {{-1, {side}, {side}, {channels}}}> ()"]
    for k in range(1, rounds + 1):
        h //= 2
        consts += [f"a{k} = Constant <value = int64[6] {{-1, {h}, 2, {h}, 2, {channels}}}> ()",
                   f"b{k} = Constant <value = int64[4] {{-1, {h}, {h}, {channels}}}> ()"]
        body += [f"ra{k} = Reshape (r{k - 1}, a{k})", f"t{k} = Transpose <perm = [0, 2, 4, 1, 3, 5]> (ra{k})",
                 f"r{k} = Reshape (t{k}, b{k})"]
    consts.append(f"sf = Constant <value = int64[3] {{-1, {side * side}, {channels}}}> ()")
    body.append(f"y = Reshape (r{rounds}, sf)")
    lines = "\n            ".join(consts + body)
    return parse(_HEAD + f"""
        g (float[B, {side * side}, {channels}] x) => (float[B, {side * side}, {channels}] y) {{
            {lines}
        }}""")


@pytest.mark.parametrize("max_rank, transposes", [(None, [10]), (8, [6, 6, 6])])
def test_hiera_unroll_above_eight_axes_folds_without_the_trt_cap(max_rank, transposes):
    # three rounds of [B', h, 2, w, 2, C] -> [0, 2, 4, 1, 3, 5] are one permutation of 10 atoms
    # (B, 2 x 4 per side, C): one Transpose of 10 axes where no cap holds (ort, onnx), the three
    # rounds of 6 under TensorRT's 8 (the default, and levels.py's at trt)
    proto = _hiera_unroll()
    model = ir.from_proto(proto)
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    ShapeInferencePass()(model)
    FoldLayoutChainsPass(max_rank=max_rank)(model)
    IdentityEliminationPass()(model)
    DeadCodeEliminationPass()(model)
    assert [len(n.attributes["perm"].value) for n in model.graph if n.op_type == "Transpose"] == transposes
    assert sum(ops(model).values()) == (3 if max_rank is None else 7)  # the unroll was 10 nodes
    for batch in (1, 3):
        check_same(proto, model, _x(batch, 256, 4))


@pytest.mark.parametrize("target, widest", [("ort", 10), ("onnx", 10), ("trt", 6)])
def test_levels_cap_the_chain_fold_at_trt_only(target, widest):
    from onnx_fuse import optimize

    result = optimize(_hiera_unroll().SerializeToString(), level=2, target=target, verify=True)
    assert result.report.passed
    assert max(len(n.attributes["perm"].value) for n in result.model.graph if n.op_type == "Transpose") == widest


# -- Flatten, exact symbolic splits, Shape side reads, computed targets (LongT5's block views) ------

def test_flatten_in_a_chain_is_read_as_a_reshape():
    # blocks attention's key view: [B, N, L, 2, 16] -> [B, N, 2, 16, L] -> [B*N, 32*L] -> [B*N, 2, 16, L]
    # -> [B*N, 2, L, 16]: one Transpose of x, then the merged rows kept by Flatten and a 0 (B*N and L
    # are both symbolic, so no Reshape alone can say it)
    proto, model, modified, p = _run("""
        g (float[B, N, L, 2, 16] x) => (float[Z, 2, L, 16] y) {
            t1 = Transpose <perm = [0, 1, 3, 4, 2]> (x)
            f = Flatten <axis = 2> (t1)
            s = Constant <value = int64[4] {0, 2, 16, -1}> ()
            r = Reshape (f, s)
            y = Transpose <perm = [0, 1, 3, 2]> (r)
        }""")
    assert modified and p.stats["layout-chain"] == 1
    assert ops(model) == {"Transpose": 1, "Flatten": 1, "Reshape": 1}, ops(model)
    check_same(proto, model, _x(2, 3, 5, 2, 16))


def test_flatten_then_reshape_back_cancels():
    proto, model, modified, p = _run("""
        g (float[B, 4, 8] x) => (float[B, 4, 8] y) {
            f = Flatten <axis = 1> (x)
            s = Constant <value = int64[3] {0, 4, 8}> ()
            y = Reshape (f, s)
        }""")
    assert modified and p.stats["layout-chain"] == 1
    assert "Flatten" not in ops(model), ops(model)
    check_same(proto, model, _x(3, 4, 8))


_BLOCKS = """
        g (float[B, n, 3, 32] x) => (float[B, M, 32] y) {
            s0 = Constant <value = int64[4] {0, -1, 2, 16}> ()
            r0 = Reshape (x, s0)
            a = Relu (r0)
            s1 = Constant <value = int64[5] {0, -1, 3, 2, 16}> ()
            q5 = Reshape (a, s1)
            qt = Transpose <perm = [0, 1, 3, 2, 4]> (q5)
            lead = Shape <start = 0, end = 2> (qt)
            s2 = Constant <value = int64[4] {-1, 2, 3, 16}> ()
            q4 = Reshape (qt, s2)
            qh = Transpose <perm = [0, 2, 1, 3]> (q4)
            s3 = Constant <value = int64[3] {0, 0, -1}> ()
            q3 = Reshape (qh, s3)
            o3 = Sigmoid (q3)
            s4 = Constant <value = int64[4] {0, 0, 2, 16}> ()
            o4 = Reshape (o3, s4)
            ot = Transpose <perm = [0, 2, 1, 3]> (o4)
            tail = Constant <value = int64[3] {2, -1, 16}> ()
            os = Concat <axis = 0> (lead, tail)
            o5 = Reshape (ot, os)
            ob = Transpose <perm = [0, 1, 3, 2, 4]> (o5)
            b = Shape <start = 0, end = 1> (x)
            last = Constant <value = int64[2] {-1, 32}> ()
            ys = Concat <axis = 0> (b, last)
            y = Reshape (ob, ys)
        }"""


def test_block_views_fold_around_the_fused_op():
    """LongT5's blocks (rules/attention/blocks_5d.yaml, the op a Sigmoid here): q [B, 3n, 2, 16] viewed
    [B, n, 3, 2, 16], heads moved, rows merged to [B*n, 3, 32] is one Reshape (3n split as n, 3; the
    Shape read of the moved view keeps the nodes before it); the output's way back to [B, 3n, 32]
    through a target computed from that Shape read is one Reshape to the chain's own last target.
    On the old code neither chain folded (a symbolic dim never split, a second reader, two
    symbolic entries)."""
    proto, model, modified, p = _run(_BLOCKS)
    assert modified and p.stats["layout-chain"] == 2, p.stats
    # x -> r0 -> Relu -> Reshape [B*n, 3, 32] -> Sigmoid -> Reshape(ys): the output no longer reads
    # the Shape of q's view, so that view and its read go too
    assert ops(model) == {"Reshape": 3, "Relu": 1, "Sigmoid": 1, "Shape": 1, "Concat": 1}, ops(model)
    check_same(proto, model, _x(2, 4, 3, 32))
