"""rotary_interleaved_complex.yaml rotary-interleaved-complex: the interleaved (complex-product) rotary
stack([x0*cos - x1*sin, x1*cos + x0*sin], -1).flatten(-2), x0 / x1 = x[..., ::2] / x[..., 1::2], with
tables computed in the graph, Cast?(Cos(f) * scale) unsqueezed at the head axis (OpenAI's privacy filter,
GPT-OSS's interleaved rotary, under dynamo dyn_mask and TorchScript; hold-out 19). Before, only
constant tables were taken (the static export) and rope stayed 0/4."""

from __future__ import annotations

import numpy as np
import pytest

import onnx_fuse

B, H, S, D = 2, 2, 5, 8


def _graph(h, *, same_angles=True):
    n = h.node
    nodes = [
        n("Cos", ["f"], ["co"]), n("Mul", ["co", "one"], ["com"]), n("Unsqueeze", ["com", "ax1"], ["cu"]),
        n("Sin", ["f" if same_angles else "g"], ["si"]), n("Mul", ["si", "one"], ["sim"]),
        n("Unsqueeze", ["sim", "ax1"], ["su"]),
        n("Slice", ["x", "zero", "big", "last", "two"], ["xe"]),
        n("Slice", ["x", "one_i", "big", "last", "two"], ["xo"]),
        n("Mul", ["xe", "cu"], ["a"]), n("Mul", ["xo", "su"], ["b"]), n("Sub", ["a", "b"], ["re"]),
        n("Mul", ["xo", "cu"], ["d"]), n("Mul", ["xe", "su"], ["e"]), n("Add", ["d", "e"], ["im"]),
        n("Unsqueeze", ["re", "last"], ["ru"]), n("Unsqueeze", ["im", "last"], ["iu"]),
        n("Concat", ["ru", "iu"], ["st"], axis=-1),
        n("Reshape", ["st", "shape"], ["y"]),
    ]
    inits = {"one": np.array(1.0, np.float32), "ax1": np.array([1], np.int64), "zero": np.array([0], np.int64),
             "one_i": np.array([1], np.int64), "two": np.array([2], np.int64), "last": np.array([-1], np.int64),
             "big": np.array([np.iinfo(np.int64).max], np.int64), "shape": np.array([0, H, 0, D], np.int64)}
    inputs = [h.vi("x", ["b", H, "s", D]), h.vi("f", ["b", "s", D // 2])]
    if not same_angles:
        inputs.append(h.vi("g", ["b", "s", D // 2]))
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", D])], inits)


def _feeds(h, same_angles=True):
    f = {"x": h.rng.standard_normal((B, H, S, D)).astype(np.float32),
         "f": (np.arange(S)[None, :, None] * 0.3 ** np.arange(D // 2)).repeat(B, 0).astype(np.float32)}
    if not same_angles:
        f["g"] = f["f"] * 0.5
    return f


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
def test_computed_tables_fuse(h, target, level):
    model = _graph(h)
    out = h.fuse(model, target, level)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] + ops["com.microsoft::RotaryEmbedding"] == 1 and "Slice" not in ops, ops
    h.assert_close(model, out, _feeds(h))
    assert onnx_fuse.optimize(model, level=level, target=target).report.rule_fires.get(
        "rotary-interleaved-complex") == 1


def test_cos_and_sin_of_different_angles_are_no_rotation(h):
    model = _graph(h, same_angles=False)
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _feeds(h, same_angles=False))
