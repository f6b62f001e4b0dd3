"""Regressions found by the differential fuzzer (tools/fuzz_differential.py), as small explicit
graphs. Each is optimized and then run as users run it (ORT's default graph optimizations on)
against the original (ORT optimizations off): same output names, shapes, dtypes and values.

(a) attention whose additive mask has a symbolic query dim that is 1 at run time (it broadcasts
    over the queries): MultiHeadAttention / Attention-23 refused "attention_bias dimension 2
    should be same as sequence_length".
(b) GroupQueryAttention emitted with a head size that is not a multiple of 8 (ORT's CPU kernel
    refuses it), or for cross-attention without a past (key length != query length).
(c) GELU whose 'scalar' constants have a higher rank than x: the graph output of shape (1,) came
    back as () (and FastGelu refused a rank-0 input); and a rank-0 GELU that ORT cannot fuse,
    whose plain-formula fallback made it (1,) and was refused (a canonical Gelu left unlowered).
Plus the rewriter rule behind (c): a graph output may only be replaced by a value whose dtype
and rank are proven (schema inference or a `: like(...)` hint). Later finds: a no-op Reshape
bypass gave a graph output ONNX's bogus Attention-23 shape [1, s, 0]; an opset-18/20 model crashed
at O3 (canonical Attention left without a lowering: the opset trial thought the recognizer could
not fire because of its IsNaN statement, which only feeds an optional Where) -- the attention
tests here on opset 18 cover that.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper

import onnx_fuse
from onnx_fuse.verify import make_session

F32 = TensorProto.FLOAT


def _run(model: onnx.ModelProto, feeds: dict, *, ort_opt: bool) -> list[np.ndarray]:
    return make_session(model, threads=1, ort_optimizations=ort_opt).run(
        [o.name for o in model.graph.output], feeds)


def _same(ref: list[np.ndarray], got: list[np.ndarray]) -> None:
    for r, g in zip(ref, got):
        assert (g.shape, g.dtype) == (r.shape, r.dtype)
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4)


def _check_as_users_run(model: onnx.ModelProto, feeds: dict, level: int, target: str) -> onnx.ModelProto:
    """Optimized vs original, with ORT's optimizations off on the optimized side (our rewrite)
    and on (as users run it; raises if ORT refuses the model). The second comparison is skipped
    where ORT's own optimizations already change the original's outputs: ORT 1.32 fuses
    x*0.5*(1+erf(x/sqrt2)) with [1]-shaped constants into a Gelu of shape () itself."""
    onnx.checker.check_model(model, full_check=True)
    optimized = onnx_fuse.optimize(model, level=level, target=target).to_proto()
    assert [o.name for o in optimized.graph.output] == [o.name for o in model.graph.output]
    ref = _run(model, feeds, ort_opt=False)
    _same(ref, _run(optimized, feeds, ort_opt=False))
    got = _run(optimized, feeds, ort_opt=True)
    try:
        _same(ref, _run(model, feeds, ort_opt=True))
    except AssertionError:
        return optimized   # ORT's own bug, not ours
    _same(ref, got)
    return optimized


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def _init(name: str, arr) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def _i64(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def attention_model(*, heads: int, kv_heads: int, head: int, mask_shape, kv_len=None, seq="seq"):
    """q/k/v projections -> heads split -> softmax(q k^T / sqrt(d) + mask) v (K/V heads repeated
    for GQA) -> heads merged. x is [batch, seq, heads*head]; memory (K/V source) is x unless
    ``kv_len`` is given (cross-attention). The GQA rules prove the K/V head repetition
    from shapes, which needs a static ``seq``."""
    rng = np.random.default_rng(0)
    d = heads * head
    cross = kv_len is not None
    inits = [_init("wq", rng.standard_normal((d, d)) / np.sqrt(d)),
             _init("wk", rng.standard_normal((d, kv_heads * head)) / np.sqrt(d)),
             _init("wv", rng.standard_normal((d, kv_heads * head)) / np.sqrt(d)),
             _i64("qs", [0, 0, heads, head]), _i64("ks", [0, 0, kv_heads, head]),
             _i64("merge", [0, 0, d]), _init("scale", [np.sqrt(head)])]
    src = "mem" if cross else "x"
    nodes = [oh.make_node("MatMul", ["x", "wq"], ["q3"]), oh.make_node("MatMul", [src, "wk"], ["k3"]),
             oh.make_node("MatMul", [src, "wv"], ["v3"])]
    for t, shape in (("q", "qs"), ("k", "ks"), ("v", "ks")):
        nodes += [oh.make_node("Reshape", [f"{t}3", shape], [f"{t}r"]),
                  oh.make_node("Transpose", [f"{t}r"], [f"{t}4"], perm=[0, 2, 1, 3])]
    k, v = "k4", "v4"
    if kv_heads != heads:
        n = heads // kv_heads
        inits += [_i64("ax2", [2]), _i64("rep", [1, 1, n, 1, 1]), _i64("kvm", [0, heads, -1, head])]
        for t in ("k", "v"):
            nodes += [oh.make_node("Unsqueeze", [f"{t}4", "ax2"], [f"{t}u"]),
                      oh.make_node("Expand", [f"{t}u", "rep"], [f"{t}x"]),
                      oh.make_node("Reshape", [f"{t}x", "kvm"], [f"{t}r4"])]
        k, v = "kr4", "vr4"
    nodes += [oh.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]),
              oh.make_node("MatMul", ["q4", "kt"], ["sc"]), oh.make_node("Div", ["sc", "scale"], ["sd"]),
              oh.make_node("Add", ["sd", "mask"], ["sm"]), oh.make_node("Softmax", ["sm"], ["p"], axis=-1),
              oh.make_node("MatMul", ["p", v], ["o"]), oh.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              oh.make_node("Reshape", ["ot", "merge"], ["y"])]
    inputs = [oh.make_tensor_value_info("x", F32, ["batch", seq, d]),
              oh.make_tensor_value_info("mask", F32, mask_shape)]
    if cross:
        inputs.append(oh.make_tensor_value_info("mem", F32, ["batch", kv_len, d]))
    graph = oh.make_graph(nodes, "attn", inputs, [oh.make_tensor_value_info("y", F32, ["batch", seq, d])],
                          initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)


def _feeds(model, dims: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param]
                 for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_a_mask_query_dim_symbolic_and_one_at_run_time(target):
    # mask [batch, 1, q, seq] where q is its own symbol: 1 at run time, broadcast over 3 queries
    model = attention_model(heads=2, kv_heads=2, head=8, mask_shape=["batch", 1, "q", "seq"])
    feeds = _feeds(model, {"batch": 2, "seq": 3, "q": 1})
    optimized = _check_as_users_run(model, feeds, 3, target)
    assert "Softmax" not in _ops(optimized)   # still fused: the mask is broadcast explicitly


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_a_mask_key_dim_symbolic(target):
    # mask [batch, 1, seq, k] where k is its own symbol: equal to the key length at run time
    model = attention_model(heads=2, kv_heads=2, head=8, mask_shape=["batch", 1, "seq", "k"])
    feeds = _feeds(model, {"batch": 2, "seq": 3, "k": 3})
    _check_as_users_run(model, feeds, 3, target)


@pytest.mark.parametrize("m", [1, 2])
def test_a_mask_batch_dim_symbolic(m):
    # mask [m, 1, q, seq]: its own batch symbol (1 or batch at run time) and query symbol (1)
    model = attention_model(heads=2, kv_heads=2, head=8, mask_shape=["m", 1, "q", "seq"])
    feeds = _feeds(model, {"batch": 2, "seq": 3, "m": m, "q": 1})
    _check_as_users_run(model, feeds, 3, "ort")


@pytest.mark.parametrize("head", [4, 12])
def test_b_gqa_head_size_not_multiple_of_8(head):
    model = attention_model(heads=4, kv_heads=2, head=head, mask_shape=["batch", 1, 3, 3], seq=3)
    feeds = _feeds(model, {"batch": 2})
    optimized = _check_as_users_run(model, feeds, 3, "ort")
    assert "GroupQueryAttention" not in _ops(optimized)


def test_b_gqa_cross_attention_is_not_group_query_attention():
    model = attention_model(heads=4, kv_heads=2, head=8, mask_shape=["batch", 1, 2, 5], kv_len=5, seq=2)
    feeds = _feeds(model, {"batch": 2})
    optimized = _check_as_users_run(model, feeds, 3, "ort")
    assert "GroupQueryAttention" not in _ops(optimized)


def test_b_gqa_head_size_8_still_fuses():
    model = attention_model(heads=4, kv_heads=2, head=8, mask_shape=["batch", 1, 3, 3], seq=3)
    feeds = _feeds(model, {"batch": 2})
    optimized = _check_as_users_run(model, feeds, 3, "ort")
    assert "GroupQueryAttention" in _ops(optimized)


def gelu_model(form: str, x_shape, const_shape, elem: int = F32):
    """GELU (erf or tanh form) of x whose constants have ``const_shape`` (type ``elem``)."""
    def c(name, value):
        return numpy_helper.from_array(
            np.full(const_shape, value, onnx.helper.tensor_dtype_to_np_dtype(elem)), name)
    if form == "erf":
        inits = [c("sqrt2", 1.4142135), c("one", 1.0), c("half", 0.5)]
        nodes = [oh.make_node("Div", ["x", "sqrt2"], ["t"]), oh.make_node("Erf", ["t"], ["e"]),
                 oh.make_node("Add", ["e", "one"], ["a"]), oh.make_node("Mul", ["x", "a"], ["m"]),
                 oh.make_node("Mul", ["m", "half"], ["y"])]
    else:
        inits = [c("three", 3.0), c("coef", 0.044715), c("k", 0.7978845608), c("one", 1.0), c("half", 0.5)]
        nodes = [oh.make_node("Pow", ["x", "three"], ["p"]), oh.make_node("Mul", ["p", "coef"], ["pm"]),
                 oh.make_node("Add", ["x", "pm"], ["a"]), oh.make_node("Mul", ["a", "k"], ["s"]),
                 oh.make_node("Tanh", ["s"], ["t"]), oh.make_node("Add", ["t", "one"], ["a1"]),
                 oh.make_node("Mul", ["x", "half"], ["h"]), oh.make_node("Mul", ["h", "a1"], ["y"])]
    out_shape = list(np.broadcast_shapes(tuple(x_shape), tuple(const_shape)))
    graph = oh.make_graph(nodes, "gelu", [oh.make_tensor_value_info("x", elem, x_shape)],
                          [oh.make_tensor_value_info("y", elem, out_shape)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)], ir_version=9)


@pytest.mark.parametrize("target", ["ort", "onnx"])
@pytest.mark.parametrize("form", ["erf", "tanh"])
@pytest.mark.parametrize("x_shape,const_shape", [([], [1]), ([], [1, 1]), ([3], [1, 1])])
def test_c_gelu_constants_of_higher_rank_keep_the_output_shape(target, form, x_shape, const_shape):
    model = gelu_model(form, x_shape, const_shape)
    feeds = {"x": np.linspace(-2, 2, int(np.prod(x_shape))).astype(np.float32).reshape(x_shape)}
    optimized = _check_as_users_run(model, feeds, 2, target)
    dims = [d.dim_value for d in optimized.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_c_gelu_same_shape_constants_still_fuse(form):
    model = gelu_model(form, [2, 3], [1])
    feeds = {"x": np.linspace(-2, 2, 6).astype(np.float32).reshape(2, 3)}
    optimized = _check_as_users_run(model, feeds, 2, "ort")
    assert _ops(optimized) & {"Gelu", "FastGelu"}


@pytest.mark.parametrize("elem", [F32, TensorProto.DOUBLE])
def test_c_gelu_of_a_rank_0_x_that_ort_cannot_fuse_keeps_its_formula(elem):
    """Found by the fuzzer (seed 3122327281, O2-O4 ort): a rank-0 x whose tanh GELU ORT cannot
    take (FastGelu needs rank >= 1) crashed with a canonical Gelu left unlowered: the
    plain-formula fallback used [1]-shaped constants, which made y (1,), so its rewrite was
    refused. The fallback's constants are scalars now."""
    model = gelu_model("tanh", [], [], elem)
    feeds = {"x": np.array(0.7, onnx.helper.tensor_dtype_to_np_dtype(elem))}
    optimized = _check_as_users_run(model, feeds, 2, "ort")
    assert "Tanh" in _ops(optimized) and not _ops(optimized) & {"Gelu", "FastGelu"}
    assert optimized.graph.output[0].type.tensor_type.shape.dim == []


def test_c_double_erf_gelu_of_a_rank_0_x_keeps_its_formula():
    """The erf form's fallback (a double GELU: ORT's Gelu takes no double) had the same
    [1]-shaped constants. ORT's CPU provider has no double Erf, so this checks the graph only."""
    model = gelu_model("erf", [], [], TensorProto.DOUBLE)
    optimized = onnx_fuse.optimize(model, level=2, target="ort").to_proto()
    onnx.checker.check_model(optimized, full_check=True)
    assert "Erf" in _ops(optimized) and not _ops(optimized) & {"Gelu", "FastGelu"}
    assert optimized.graph.output[0].type.tensor_type.shape.dim == []
    assert all(list(i.dims) == [] for i in optimized.graph.initializer)


HINTLESS_RULE = """
rules:
  - name: relu-to-contrib-{hint}
    doc: test rule emitting a contrib op {hint}
    targets: [ort]
    match: |
      y = Relu(x)
    rewrite: |
      y = com.microsoft::Gelu(x){suffix}
"""


@pytest.mark.parametrize("hint", ["none", "like"])
def test_graph_output_replacement_needs_a_proven_type(tmp_path, hint):
    """A contrib op has no schema here: replacing a graph output with it needs a `like` hint."""
    rule = tmp_path / "r.yaml"
    rule.write_text(HINTLESS_RULE.format(hint=hint, suffix=" : like(x)" if hint == "like" else ""))
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", F32, [2, 3])], [oh.make_tensor_value_info("y", F32, [2, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=9)
    result = onnx_fuse.optimize(model, level=2, target="ort", rules=[str(rule)])
    fired = result.report.rule_fires.get(f"relu-to-contrib-{hint}", 0)
    assert fired == (1 if hint == "like" else 0)
    if hint == "none":
        assert any("graph output" in w for w in result.report.warnings)


def test_graph_output_keeps_its_declared_shape_when_a_noop_reshape_is_bypassed():
    """Found at O3 --target trt: the no-op Reshape feeding a graph output was removed and the
    output took the shape ONNX infers for Attention-23 with an unknown V width: [1, s, 0]."""
    nodes = [oh.make_node("Attention", ["q", "k", "v"], ["a"], q_num_heads=2, kv_num_heads=2),
             oh.make_node("Reshape", ["a", "shp"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("q", F32, [1, "s", 32]),
                                       oh.make_tensor_value_info("k", F32, [1, "s", 32]),
                                       oh.make_tensor_value_info("v", F32, [1, "s", None])],
                          [oh.make_tensor_value_info("y", F32, [1, "s", 32])], initializer=[_i64("shp", [0, 0, -1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)], ir_version=9)
    optimized = onnx_fuse.optimize(model, level=1).to_proto()
    dims = optimized.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims] == [1, "s", 32]
    feeds = {n: np.ones([1, 3, 32], np.float32) for n in ("q", "k", "v")}
    _same(_run(model, feeds, ort_opt=False), _run(optimized, feeds, ort_opt=True))
