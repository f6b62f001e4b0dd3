"""Attention over frames whose count is only computed (SEW-D through TorchScript / Optimum, hold-out 4):
a strided conv and a pool set the frame count, the XSoftmax mask is sized by Shape(features)[2] // 2,
and every view is read from Shape of the value before it. With the computed sizes named by their
formula (passes/_dim_products.py floor_div) the views and the mask are proven, so the probabilities'
Shape read moves off them and the attention fuses; before, every dim there was invented."""

from __future__ import annotations

import numpy as np
import pytest

H, D = 2, 8
C = H * D


def _frames_attention(h):
    n, r = h.node, np.random.default_rng(1)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inits = {"w": (r.standard_normal((C, 1, 2)) * 0.5).astype(np.float32),
             "fill": np.array(np.finfo(np.float32).min, np.float32), "zero": np.array(0.0, np.float32),
             "scale": np.array(D ** -0.5, np.float32), "hd": i64(H, D), "m1": i64(-1), "m1h": i64(-1, H),
             "a0": i64(0), "a1": i64(1), "a2": i64(2), "a3": i64(3), "s0": np.array(0, np.int64),
             "s1": np.array(1, np.int64), "s2": np.array(2, np.int64), "s3": np.array(3, np.int64),
             "two": np.array(2, np.int64), "a12": i64(1, 2), "a13": i64(1, 3)}
    nodes = [n("Conv", ["x", "w"], ["c"], kernel_shape=[2], strides=[2]),
             n("AveragePool", ["c"], ["pl"], kernel_shape=[2], strides=[2]),
             n("Transpose", ["pl"], ["hs"], perm=[0, 2, 1])]

    def dim(value, axis, out):   # Unsqueeze(Gather(Shape(value), axis)): TorchScript's size(axis)
        nodes.extend([n("Shape", [value], [f"{out}_s"]), n("Gather", [f"{out}_s", f"s{axis}"], [f"{out}_g"]),
                      n("Unsqueeze", [f"{out}_g", "a0"], [out])])

    for x in "qkv":
        inits[f"w{x}"] = (r.standard_normal((C, C)) * 0.3).astype(np.float32)
        inits[f"b{x}"] = (r.standard_normal(C) * 0.1).astype(np.float32)
        nodes += [n("MatMul", ["hs", f"w{x}"], [f"{x}m"]), n("Add", [f"{x}m", f"b{x}"], [f"{x}l"])]
        dim(f"{x}l", 0, f"{x}_b")
        dim(f"{x}l", 1, f"{x}_n")
        nodes += [n("Concat", [f"{x}_b", f"{x}_n", "hd"], [f"{x}_t"], axis=0),
                  n("Reshape", [f"{x}l", f"{x}_t"], [f"{x}v"]),
                  n("Transpose", [f"{x}v"], [f"{x}4"], perm=[0, 2, 1, 3])]
        dim(f"{x}4", 2, f"{x}_s")
        dim(f"{x}4", 3, f"{x}_d")
        nodes += [n("Concat", ["m1", f"{x}_s", f"{x}_d"], [f"{x}_t3"], axis=0),
                  n("Reshape", [f"{x}4", f"{x}_t3"], [f"{x}3"])]
    nodes += [n("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["q3", "kt"], ["sc"]),
              n("Mul", ["sc", "scale"], ["ss"])]
    dim("ss", 1, "ss_q")
    dim("ss", 2, "ss_k")
    nodes += [n("Concat", ["m1h", "ss_q", "ss_k"], ["ss_t"], axis=0), n("Reshape", ["ss", "ss_t"], ["s4"])]
    # the mask: ones([batch, Shape(c)[2] // 2]) (the pool's frames, computed another way), outer product
    dim("x", 0, "x_b")
    nodes += [n("Shape", ["c"], ["c_s"]), n("Gather", ["c_s", "s2"], ["c_n"]), n("Div", ["c_n", "two"], ["c_h"]),
              n("Unsqueeze", ["c_h", "a0"], ["c_h1"]), n("Concat", ["x_b", "c_h1"], ["ones_t"], axis=0),
              n("ConstantOfShape", ["ones_t"], ["ones"]),
              n("Unsqueeze", ["ones", "a12"], ["row"]), n("Unsqueeze", ["ones", "a13"], ["col"]),
              n("Mul", ["row", "col"], ["mm"]), n("Cast", ["mm"], ["mb"], to=9), n("Not", ["mb"], ["rm"]),
              n("Where", ["rm", "fill", "s4"], ["sw"]), n("Softmax", ["sw"], ["p"], axis=-1),
              n("Where", ["rm", "zero", "p"], ["pz"])]
    dim("pz", 2, "pz_q")
    dim("pz", 3, "pz_k")
    nodes += [n("Concat", ["m1", "pz_q", "pz_k"], ["pz_t"], axis=0), n("Reshape", ["pz", "pz_t"], ["p3"]),
              n("MatMul", ["p3", "v3"], ["o3"])]
    dim("o3", 1, "o3_q")
    dim("o3", 2, "o3_d")
    nodes += [n("Concat", ["m1h", "o3_q", "o3_d"], ["o4_t"], axis=0), n("Reshape", ["o3", "o4_t"], ["o4"]),
              n("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3])]
    dim("ot", 0, "ot_b")
    dim("ot", 1, "ot_n")
    nodes += [n("Concat", ["ot_b", "ot_n", "m1"], ["o_t"], axis=0), n("Reshape", ["ot", "o_t"], ["y"])]
    return h.make_model(nodes, [h.vi("x", ["batch", 1, "samples"])], [h.vi("y", ["batch", None, C])], inits)


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_attention_over_computed_frames_fuses(h, target):
    model = _frames_attention(h)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert "Softmax" not in ops and sum(v for k, v in ops.items() if "Attention" in k) == 1, ops
    for samples in (36, 38, 41, 47):   # frame counts 9, 9, 10, 11: the names hold at each
        h.assert_close(model, out, {"x": h.rng.standard_normal((2, 1, samples)).astype(np.float32)})
