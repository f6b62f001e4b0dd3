"""rules/rope/rotary.yaml: rotate-half RoPE -> RotaryEmbedding-23 on a tiny [B,H,S,D] graph."""

from __future__ import annotations

import numpy as np
import pytest

H, D = 2, 8
BIG = np.iinfo(np.int64).max


def _rope_graph(h, *, dup=True, scaling=None, half=D // 2, step=1, two_inputs=False, bshd=False):
    """x [B,H,S,D] (or [B,S,H,D] with cos/sin unsqueezed at axis 2); f [1,S,D/2] from positions;
    y = x*cos + rotate_half(x)*sin (HF LLaMA)."""
    n = h.node
    nodes = [
        n("Shape", ["x"], ["xs"], start=1 if bshd else 2, end=2 if bshd else 3),   # S
        n("Squeeze", ["xs"], ["s0"]),
        n("Range", ["zero", "s0", "one_i"], ["pos"]),
        n("Unsqueeze", ["pos", "ax02"], ["pos3"]),                    # [1,S,1]
        n("Cast", ["pos3"], ["posf"], to=1),
        n("Mul", ["posf", "inv_freq"], ["f"]),                         # [1,S,D/2]
        n("Concat", ["f", "f" if dup else "f2"], ["cat"], axis=-1),
        n("Cos", ["cat"], ["co"]),
        n("Sin", ["cat"], ["si"]),
    ]
    co, si = "co", "si"
    if scaling is not None:
        nodes += [n("Mul", ["co", "scal"], ["com"]), n("Mul", ["si", "scal"], ["sim"])]
        co, si = "com", "sim"
    nodes += [
        n("Unsqueeze", [co, "ax1"], ["cu"]),
        n("Unsqueeze", [si, "ax1"], ["su"]),
        n("Mul", ["x", "cu"], ["c"]),
        n("Slice", ["x", "s_0", "s_half", "s_ax", "s_step"], ["x1"]),
        n("Slice", ["x", "s_half", "s_end", "s_ax", "s_step"], ["x2"]),
        n("Neg", ["x2"], ["nx2"]),
        n("Concat", ["nx2", "x1"], ["r"], axis=-1),
        n("Mul", ["r", "su"], ["s"]),
        n("Add", ["c", "s"], ["y"]),
    ]
    xshape = ["b", "s", H, D] if bshd else ["b", H, "s", D]
    outputs = [h.vi("y", xshape)]
    inputs = [h.vi("x", xshape)]
    if two_inputs:  # k shares the caches: a second RoPE on another tensor
        nodes += [n("Mul", ["k", "cu"], ["kc"]),
                  n("Slice", ["k", "s_0", "s_half", "s_ax", "s_step"], ["k1"]),
                  n("Slice", ["k", "s_half", "s_end", "s_ax", "s_step"], ["k2"]),
                  n("Neg", ["k2"], ["nk2"]), n("Concat", ["nk2", "k1"], ["kr"], axis=-1),
                  n("Mul", ["kr", "su"], ["ks"]), n("Add", ["kc", "ks"], ["yk"])]
        outputs.append(h.vi("yk", ["b", H, "s", D]))
        inputs.append(h.vi("k", ["b", H, "s", D]))
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    inits = {"zero": np.array(0, np.int64), "one_i": np.array(1, np.int64),
             "ax02": np.array([0, 2], np.int64), "ax1": np.array([2 if bshd else 1], np.int64),
             "inv_freq": inv, "s_0": np.array([0], np.int64), "s_half": np.array([half], np.int64),
             "s_end": np.array([BIG], np.int64), "s_ax": np.array([3], np.int64),
             "s_step": np.array([step], np.int64)}
    if scaling is not None:
        inits["scal"] = np.array(scaling, np.float32)
    if not dup:
        nodes.insert(6, n("Mul", ["f", "two"], ["f2"]))
        inits["two"] = np.array(2.0, np.float32)
    return h.make_model(nodes, inputs, outputs, inits)


def _feeds(h, two=False, bshd=False):
    f = {"x": h.rng.standard_normal((2, 5, H, D) if bshd else (2, H, 5, D)).astype(np.float32)}
    if two:
        f["k"] = h.rng.standard_normal((2, H, 5, D)).astype(np.float32)
    return f


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("scaling", [None, 1.0, 1.1386])  # 1.1386: YaRN's attention factor at 4x
def test_rotate_half_fuses(h, target, scaling):
    model = _rope_graph(h, scaling=scaling)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1, ops
    assert "Neg" not in ops and "Slice" not in ops, ops
    h.assert_close(model, out, _feeds(h))


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rotate_half_before_head_transpose_fuses_3d(h, target):
    """[B,S,H,D] layout (cos/sin unsqueezed at axis 2): RotaryEmbedding's 3-D form, num_heads=H."""
    model = _rope_graph(h, bshd=True)
    out = h.fuse(model, target)
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 1 and "Neg" not in ops and ops["Reshape"] == 2, ops
    rot = next(x for x in out.graph.node if x.op_type == "RotaryEmbedding")
    assert next(a.i for a in rot.attribute if a.name == "num_heads") == H
    assert "rotary-rotate-half-tables" in h.fired(out)   # rotary-rotate-half-bshd until session 37
    h.assert_close(model, out, _feeds(h, bshd=True))


def test_rotate_half_shared_caches_q_and_k(h):
    model = _rope_graph(h, two_inputs=True)
    out = h.fuse(model, "onnx")
    ops = h.ops(out)
    assert ops["RotaryEmbedding"] == 2 and "Neg" not in ops
    assert ops["Cos"] == 1 and ops["Sin"] == 1, ops  # CSE merged the per-use cache nodes
    h.assert_close(model, out, _feeds(h, two=True))


@pytest.mark.parametrize("kw,why", [
    ({"dup": False}, "no match|not the same"),                 # cos of concat(f, 2f): halves differ
    ({"scaling": np.linspace(0.5, 1.5, D)}, "one number"),      # a per-frequency scale vector
    ({"half": 3}, "halves"),                                    # uneven split
    ({"step": 2}, "step 1"),                                    # strided slice
])
def test_rotate_half_near_misses(h, kw, why):
    import re

    model = _rope_graph(h, **kw)
    out = h.fuse(model, "onnx")
    assert "RotaryEmbedding" not in h.ops(out)
    rs = h.reasons(model, "onnx", "rotary-rotate-half")
    assert any(re.search(why, r) for r in rs), rs
