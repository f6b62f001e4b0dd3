"""cast-between-views (passes/_cast_between_views.py, fold-layout-chains): Reshape(Cast(view(x)), s2) is
Cast(Reshape(x, s2)) where the views would merge without the Cast.

A float16 export whose residual stream is float32 (Voxtral Realtime's TorchScript export) casts the fused
attention's [B, S, H, D] output view up before merging it back to [B, S, H*D]: the Cast keeps two
Reshapes a layer apart. The Cast converts each element alone and the views only move elements, so the
rewrite is exact: outputs are compared bit for bit in ONNX Runtime. Near misses: the view or the Cast
read elsewhere, a 0 of s2 copying a dim the view changed, a Transpose after the Cast."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from pass_testing import fold_layout
from pass_testing import ops_but_constants as ops

import onnx_ir as ir

GRAPH = """
    g ({xt}[B, S, 64] x) => ({yt}[B, S, 64] y{extra_out}) {{
        split = Constant <value = int64[4] {{0, 0, 4, 16}}> ()
        merge = Constant <value = int64[3] {{{merge}}}> ()
        r = Reshape (x, split)
        c = Cast <to = {to}> (r)
        y = Reshape (c, merge)
    }}"""

FLOAT, FLOAT16, INT64 = 1, 10, 7


def _graph(xt="float16", yt="float", to=FLOAT, merge="0, 0, 64", extra_out=""):
    return GRAPH.format(xt=xt, yt=yt, to=to, merge=merge, extra_out=extra_out)


def _run(proto: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _bit_equal(proto: onnx.ModelProto, model: ir.Model, feeds: dict) -> None:
    new = ir.to_proto(model)
    onnx.checker.check_model(new, full_check=True)
    assert [o.name for o in new.graph.output] == [o.name for o in proto.graph.output]
    for a, b in zip(_run(proto, feeds), _run(new, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _x(dtype, seed=0, shape=(2, 3, 64)):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape) * 300
    return {"x": v.astype(dtype)}


@pytest.mark.parametrize("xt,yt,to,dtype", [
    ("float16", "float", FLOAT, np.float16),      # a float32 island's entry (Voxtral Realtime)
    ("float", "float16", FLOAT16, np.float32),    # its exit: a rounding Cast commutes with a view too
    ("float", "int64", INT64, np.float32),        # truncation, elementwise as well
])
@pytest.mark.parametrize("merge", ["0, 0, 64", "0, 0, -1", "2, 3, 64"])
def test_cast_between_a_head_view_and_its_merge(xt, yt, to, dtype, merge):
    proto, model, modified, p = fold_layout(_graph(xt=xt, yt=yt, to=to, merge=merge))
    assert modified and p.stats["cast-between-views"] == 1, p.stats
    # the merged Reshape gives x's own dims (or, with a literal shape, stays one Reshape of x)
    assert ops(model).get("Reshape", 0) == (1 if merge == "2, 3, 64" else 0), ops(model)
    assert ops(model)["Cast"] == 1
    _bit_equal(proto, model, _x(dtype))


def test_unsqueeze_before_the_cast():
    graph = """
    g (float16[B, S, 64] x) => (float[B, S, 64] y) {
        ax = Constant <value = int64[1] {1}> ()
        merge = Constant <value = int64[3] {0, -1, 64}> ()
        u = Unsqueeze (x, ax)
        c = Cast <to = 1> (u)
        y = Reshape (c, merge)
    }"""
    proto, model, modified, p = fold_layout(graph)
    assert modified and p.stats["cast-between-views"] == 1, p.stats
    assert "Unsqueeze" not in ops(model) and ops(model)["Cast"] == 1, ops(model)
    _bit_equal(proto, model, _x(np.float16, 1))


def test_view_read_elsewhere_stays():
    # the split view r is an output too: moving the Cast would keep both Reshapes and add one
    proto, model, modified, p = fold_layout(_graph(extra_out=", float16[B, S, 4, 16] r"))
    assert p.stats["cast-between-views"] == 0 and ops(model)["Reshape"] == 2, ops(model)


def test_cast_read_elsewhere_stays():
    proto, model, modified, p = fold_layout(_graph(extra_out=", float[B, S, 4, 16] c"))
    assert p.stats["cast-between-views"] == 0 and ops(model)["Reshape"] == 2, ops(model)


def test_zero_copying_a_dim_the_view_changed_stays():
    # the view is [B, 4, S*16]: merge [0, 0, 2, -1] copies its 4, which x's own axis 1 (S) is not
    graph = """
    g (float16[B, S, 64] x) => (float[B, 4, 2, N] y) {
        split = Constant <value = int64[3] {0, 4, -1}> ()
        merge = Constant <value = int64[4] {0, 0, 2, -1}> ()
        r = Reshape (x, split)
        c = Cast <to = 1> (r)
        y = Reshape (c, merge)
    }"""
    proto, model, modified, p = fold_layout(graph)
    assert p.stats["cast-between-views"] == 0 and ops(model)["Reshape"] == 2, ops(model)
    _bit_equal(proto, model, _x(np.float16, 2, (2, 5, 64)))


def test_transpose_after_the_cast_stays():
    graph = """
    g (float16[B, S, 64] x) => (float[B, 4, S, 16] y) {
        split = Constant <value = int64[4] {0, 0, 4, 16}> ()
        r = Reshape (x, split)
        c = Cast <to = 1> (r)
        y = Transpose <perm = [0, 2, 1, 3]> (c)
    }"""
    proto, model, modified, p = fold_layout(graph)
    assert p.stats["cast-between-views"] == 0 and ops(model)["Cast"] == 1, ops(model)
