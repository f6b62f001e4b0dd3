"""rms-norm-channel-scale / layer-norm-channel-scale: a constant per-channel scale after a norm joins its
gamma (TimesFM 2.5's per-dim query scale softplus(s)[D] * c after q_norm), at every target."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper as oh, numpy_helper

B, S, D = 2, 5, 16


def _model(kind, c_shape=(1, 1, D), extra_nodes=(), extra_outputs=(), c_input=False):
    """x -> RMSNorm (the HF pattern) or LayerNormalization -> Mul(., c) -> y."""
    rng = np.random.default_rng(0)
    g = (1.0 + 0.2 * rng.standard_normal(D)).astype(np.float32)   # trained-like gamma
    inits = {"g": g}
    if kind == "rms":
        nodes = [oh.make_node("Pow", ["x", "two"], ["sq"]),
                 oh.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
                 oh.make_node("Add", ["ms", "eps"], ["ve"]), oh.make_node("Sqrt", ["ve"], ["sd"]),
                 oh.make_node("Reciprocal", ["sd"], ["inv"]), oh.make_node("Mul", ["x", "inv"], ["nx"]),
                 oh.make_node("Mul", ["nx", "g"], ["n"])]
        inits.update(two=np.array(2.0, np.float32), axes=np.array([-1], np.int64), eps=np.array(1e-6, np.float32))
    else:
        inputs = ["x", "g"] + (["b"] if kind == "ln" else [])
        nodes = [oh.make_node("LayerNormalization", inputs, ["n"], axis=-1, epsilon=1e-5)]
        inits["b"] = (0.1 * rng.standard_normal(D)).astype(np.float32)
        if kind != "ln":
            del inits["b"]
    s = rng.standard_normal(c_shape)
    if not c_input:
        inits["c"] = (np.log1p(np.exp(s)) * 0.36).astype(np.float32)   # softplus(s) * 1.4427 / sqrt(D)
    nodes += [oh.make_node("Mul", ["n", "c"], ["y"]), *extra_nodes]
    ins = [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", D])]
    if c_input:
        ins.append(oh.make_tensor_value_info("c", TensorProto.FLOAT, list(c_shape)))
    y_dims = ["batch", "seq", D] if len(c_shape) <= 3 else [1, "batch", "seq", D]
    graph = oh.make_graph(nodes, "g", ins, [oh.make_tensor_value_info("y", TensorProto.FLOAT, y_dims),
                                            *extra_outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(**more):
    return {"x": (3.0 * np.random.default_rng(1).standard_normal((B, S, D)) + 0.5).astype(np.float32), **more}


RULE = {"rms": "rms-norm-channel-scale", "ln": "layer-norm-channel-scale", "ln_nobias": "layer-norm-channel-scale-no-bias"}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("kind", ["rms", "ln", "ln_nobias"])
def test_channel_scale_joins_gamma(h, kind, target):
    model = _model(kind)
    out = h.fuse(model, target, level=2)
    assert h.fired(out)[RULE[kind]] == 1
    assert h.ops(out)["Mul"] == 0, h.ops(out)
    h.assert_close(model, out, _feeds())


@pytest.mark.parametrize("c_shape", [(D,), (1, 1, 1, D)])
def test_scale_shapes_on_the_last_axis(h, c_shape):
    """[D] folds; a rank-4 [1, 1, 1, D] widens the rank-3 output: refused (the Mul stays)."""
    model = _model("rms", c_shape=c_shape)
    out = h.fuse(model, "onnx", level=2)
    assert (h.fired(out)["rms-norm-channel-scale"] == 1) == (len(c_shape) <= 3)
    h.assert_close(model, out, _feeds())


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_scale_along_another_axis_stays(h, kind):
    """A per-position scale [S, 1] is not a per-channel one."""
    model = _model(kind, c_shape=(S, 1))
    out = h.fuse(model, "onnx", level=2)
    assert h.fired(out)[RULE[kind]] == 0 and h.ops(out)["Mul"] == 1
    h.assert_close(model, out, _feeds())


def test_scale_fed_at_run_time_stays(h):
    model = _model("rms", c_shape=(D,), c_input=True)
    out = h.fuse(model, "onnx", level=2)
    assert h.fired(out)["rms-norm-channel-scale"] == 0 and h.ops(out)["Mul"] == 1
    c = np.random.default_rng(4).standard_normal(D).astype(np.float32)
    h.assert_close(model, out, _feeds(c=c))


def test_norm_output_read_elsewhere_stays(h):
    """The unscaled norm output is a graph output too: folding would scale it."""
    model = _model("ln", extra_nodes=[oh.make_node("Identity", ["n"], ["z"])],
                   extra_outputs=[oh.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", D])])
    out = h.fuse(model, "onnx", level=2)
    assert h.fired(out)["layer-norm-channel-scale"] == 0
    h.assert_close(model, out, _feeds())


@pytest.mark.parametrize("kind", ["rms", "ln", "ln_nobias"])
def test_gamma_times_scale_past_the_dtypes_max_stays(h, kind):
    """gamma * c past float32's max at one channel (2e19 * 2e19): folded, that channel's gamma is inf and a
    normalized 0 there gives 0 * inf = NaN, while the original's n * gamma * c is 0 (and finite for |n| < 0.85).
    fuzz_s42 chan_scale seed 37 (near-overflow: wrong at O2-O4, every target). Refused; the other channels' scale
    stays a Mul with it."""
    model = _model(kind)
    inits = {t.name: t for t in model.graph.initializer}
    g, c = numpy_helper.to_array(inits["g"]).copy(), numpy_helper.to_array(inits["c"]).copy()
    g[0], c.reshape(-1)[0] = 2e19, 2e19
    inits["g"].CopyFrom(numpy_helper.from_array(g, "g"))
    inits["c"].CopyFrom(numpy_helper.from_array(c, "c"))
    out = h.fuse(model, "onnx", level=2)
    assert h.fired(out)[RULE[kind]] == 0 and h.ops(out)["Mul"] >= 1, h.ops(out)
    x = _feeds()["x"]
    x[..., 0] = 0.0
    x[..., 1:] -= x[..., 1:].mean(-1, keepdims=True)   # mean 0: channel 0 normalizes to 0 (rms: x = 0)
    h.assert_close(model, out, {"x": x})
