"""MergeLinearBranchesPass: an affine value of one activation built from several constant-weight MatMuls
(PEFT's unmerged LoRA / DoRA / LoKr branches beside a projection) becomes one MatMul (+ bias Add)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.linear_branches import MergeLinearBranchesPass
from pass_testing import apply, check_same, ops

F = onnx.TensorProto.FLOAT
K, N, R = 16, 12, 4


def _model(nodes, inits, outputs=("y",), extra_inputs=(), ints=None):
    rng = np.random.default_rng(0)
    arrays = {name: (0.3 * rng.standard_normal(shape)).astype(np.float32) for name, shape in inits.items()}
    arrays.update(ints or {})
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, ["b", "s", K]), *extra_inputs],
                          [oh.make_tensor_value_info(o, F, ["b", "s", R if o.endswith("_a") else N if o != "y" or
                                                             "Wsq" not in inits else K])
                           for o in outputs],
                          [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def _lora(x="x", out="lora", a="A", b="B", s="s"):
    """PEFT's LoRA branch: (x @ A) @ B * scaling (dropout is the identity at eval)."""
    return [oh.make_node("MatMul", [x, a], [f"{out}_a"]), oh.make_node("MatMul", [f"{out}_a", b], [f"{out}_b"]),
            oh.make_node("Mul", [f"{out}_b", s], [out])]


LORA_INITS = {"W": (K, N), "bias": (N,), "A": (K, R), "B": (R, N), "s": ()}


def _run(proto):
    model, modified, p = apply(MergeLinearBranchesPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def _feeds(**more):
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((2, 5, K)).astype(np.float32), **more}


def test_lora_beside_a_biased_projection():
    """x @ W + b + (x @ A) @ B * s -> x @ M + c: one MatMul and its bias, as the plain export."""
    proto = _model([oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Add", ["xw", "bias"], ["base"]),
                    *_lora(), oh.make_node("Add", ["base", "lora"], ["y"])], LORA_INITS)
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Add": 1}
    assert p.stats["merged"] == 1 and p.stats["MatMul"] == 3
    check_same(proto, model, _feeds())


def test_dora_rescale_of_base_and_lora():
    """DoRA: base + (m - 1) * base + m * lora * s, m a per-column constant (the base read twice)."""
    nodes = [oh.make_node("MatMul", ["x", "W"], ["base"]), *_lora(),
             oh.make_node("Mul", ["m1", "base"], ["scaled_base"]), oh.make_node("Mul", ["m", "lora"], ["scaled_lora"]),
             oh.make_node("Add", ["scaled_base", "scaled_lora"], ["delta"]), oh.make_node("Add", ["base", "delta"], ["y"])]
    proto = _model(nodes, {**LORA_INITS, "m1": (1, N), "m": (1, N)})
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"MatMul": 1}   # no bias: no Add
    check_same(proto, model, _feeds())


def test_dora_bias_taken_off_and_put_back():
    """DoRA on a biased Linear: (base - b) rescaled, b added back; and a LoKr-like dense delta x @ dW."""
    nodes = [oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Add", ["bias", "xw"], ["base"]),
             oh.make_node("Sub", ["base", "bias"], ["nobias"]), oh.make_node("Mul", ["nobias", "m"], ["res"]),
             oh.make_node("MatMul", ["x", "dW"], ["delta"]), oh.make_node("Div", ["delta", "d"], ["deltas"]),
             oh.make_node("Add", ["res", "deltas"], ["sum"]), oh.make_node("Add", ["sum", "bias"], ["y"])]
    proto = _model(nodes, {**LORA_INITS, "m": (N,), "dW": (K, N), "d": (1, 1, N)})
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Add": 1}
    check_same(proto, model, _feeds())


def test_conv1d_form_keeps_reshape_gemm_reshape():
    """GPT-2's Conv1D (rows flattened, Gemm, leading dims back) with LoRA on the same x: one Gemm."""
    nodes = [oh.make_node("Shape", ["x"], ["xs"], end=2), oh.make_node("Concat", ["xs", "n"], ["back"], axis=0),
             oh.make_node("Reshape", ["x", "flat"], ["rows"]), oh.make_node("Gemm", ["rows", "W", "bias"], ["g"]),
             oh.make_node("Reshape", ["g", "back"], ["base"]), *_lora(), oh.make_node("Add", ["base", "lora"], ["y"])]
    proto = _model(nodes, LORA_INITS, ints={"flat": np.array([-1, K], np.int64), "n": np.array([N], np.int64)})
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Shape": 1, "Concat": 1, "Reshape": 2, "Gemm": 1}
    check_same(proto, model, _feeds())


def test_one_matmul_with_its_scale_stays():
    """One projection, its bias and a per-column scale (BART's q * scaling): nothing to merge, untouched."""
    proto = _model([oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Add", ["xw", "bias"], ["b1"]),
                    oh.make_node("Mul", ["b1", "s"], ["y"])], LORA_INITS)
    _, modified, _ = _run(proto)
    assert not modified


def test_near_misses_are_refused():
    """A branch value read elsewhere (a graph output), two activations (and the low-rank chain over x2 alone:
    merged it would be larger than A and B), a constant varying along the rows, and an identity path
    (x + x @ W, a residual) stay as they are."""
    lora_out = _model([oh.make_node("MatMul", ["x", "W"], ["base"]), *_lora(),
                       oh.make_node("Add", ["base", "lora"], ["y"])], LORA_INITS, outputs=("y", "lora_a"))
    two_inputs = _model([oh.make_node("MatMul", ["x", "W"], ["base"]), *_lora(x="x2"),
                         oh.make_node("Add", ["base", "lora"], ["y"])], LORA_INITS,
                        extra_inputs=[oh.make_tensor_value_info("x2", F, ["b", "s", K])])
    row_scale = _model([oh.make_node("MatMul", ["x", "W"], ["base"]), *_lora(), oh.make_node("Mul", ["lora", "r"], ["lr"]),
                        oh.make_node("Add", ["base", "lr"], ["y"])], {**LORA_INITS, "r": (5, 1)})
    residual = _model([oh.make_node("MatMul", ["x", "Wsq"], ["a"]), oh.make_node("MatMul", ["a", "Wsq2"], ["b"]),
                       oh.make_node("Add", ["x", "b"], ["y"])], {"Wsq": (K, K), "Wsq2": (K, K)})
    for proto in (lora_out, two_inputs, row_scale, residual):
        _, modified, _ = _run(proto)
        assert not modified


def test_ia3_per_column_scale_joins_the_weight():
    """IA3 on k / v: (x @ W + b) * l with l a per-column vector is x @ (W * l) + b * l."""
    proto = _model([oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Add", ["xw", "bias"], ["b1"]),
                    oh.make_node("Mul", ["l", "b1"], ["y"])], {**LORA_INITS, "l": (N,)})
    model, modified, p = _run(proto)
    assert modified and ops(model) == {"MatMul": 1, "Add": 1} and p.stats["MatMul"] == 1
    check_same(proto, model, _feeds())


def test_uniform_vector_scale_stays():
    """A scale whose entries are all equal reads as the attention's 1 / sqrt(d): not merged."""
    proto = _model([oh.make_node("MatMul", ["x", "W"], ["xw"]), oh.make_node("Mul", ["xw", "u"], ["y"])],
                   {"W": (K, N)}, ints={"u": np.full(N, 0.25, np.float32)})
    _, modified, _ = _run(proto)
    assert not modified


def test_lora_beside_a_tied_weight_stays():
    """W also read by an embedding Gather (a tied lm_head): merging would add a second [K, N] weight."""
    proto = _model([oh.make_node("MatMul", ["x", "W"], ["base"]), *_lora(), oh.make_node("Add", ["base", "lora"], ["y"]),
                    oh.make_node("Gather", ["W", "ids"], ["rows"])], LORA_INITS, outputs=("y", "rows"),
                   extra_inputs=[oh.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["b", "s"])])
    _, modified, _ = _run(proto)
    assert not modified


def test_input_scale_after_the_rules_only():
    """IA3's feed-forward scale, (a * l) @ W: the instance after the rules (pre_scales) merges it into
    diag(l) W; the one before them leaves it (there it may be a norm's gamma before one projection)."""
    import functools

    proto = _model([oh.make_node("Mul", ["x", "l"], ["xl"]), oh.make_node("MatMul", ["xl", "W"], ["y"])],
                   {"W": (K, N), "l": (K,)})
    _, modified, _ = _run(proto)
    assert not modified
    model, modified, _ = apply(functools.partial(MergeLinearBranchesPass, pre_scales=True), proto,
                               shape_inference=True)
    DeadCodeEliminationPass()(model)
    assert modified and ops(model) == {"MatMul": 1}
    check_same(proto, model, _feeds())


def test_rms_norm_gamma_before_one_projection_still_fuses():
    """An RMSNorm whose only reader is one projection (a final norm before lm_head): the norm fuses at O3
    and its gamma is not taken into the weight before the rules."""
    import onnx_fuse

    nodes = [oh.make_node("Pow", ["x", "two"], ["sq"]), oh.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
             oh.make_node("Add", ["ms", "eps"], ["mse"]), oh.make_node("Sqrt", ["mse"], ["rms"]),
             oh.make_node("Reciprocal", ["rms"], ["inv"]), oh.make_node("Mul", ["x", "inv"], ["normed"]),
             oh.make_node("Mul", ["g", "normed"], ["xn"]), oh.make_node("MatMul", ["xn", "W"], ["y"])]
    proto = _model(nodes, {"W": (K, N)}, ints={"two": np.array(2.0, np.float32),
                                               "eps": np.array(1e-6, np.float32),
                                               "g": (1 + 0.1 * np.arange(K)).astype(np.float32)})
    out = onnx_fuse.optimize(proto, level=3, target="onnx").model
    got = ops(out)
    assert got.get("RMSNormalization") == 1 and got.get("MatMul") == 1, got
    check_same(proto, out, _feeds())
