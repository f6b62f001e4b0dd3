"""Idioms found on the sixth hold-out sweep, part A (tools/holdout_specs.py HOLDOUT6A: transformers 5.24
decoders, docs/holdout.md), each as a tiny graph that failed before its fix; numerics against the
original in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

D = 32


def _i64(*v):
    return np.array(v, np.int64)


# ---- L2 norm x * 1/sqrt(sum(x^2) + eps): Dory's nGPT norms (0 norms before) ---------------------------

def _l2(h, *, reduce="ReduceSum", axis=-1, gamma=False, div=False, shape=("b", "s", D), eps=1e-6):
    n = h.node
    nodes = [n("Pow", ["x", "two"], ["sq"]), n(reduce, ["sq", "ax"], ["ss"], keepdims=1),
             n("Add", ["ss", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"])]
    nodes += [n("Div", ["x", "sd"], ["nn" if gamma else "y"])] if div else \
        [n("Reciprocal", ["sd"], ["inv"]), n("Mul", ["x", "inv"], ["nn" if gamma else "y"])]
    inits = {"two": np.array(2.0, np.float32), "ax": _i64(axis), "eps": np.array(eps, np.float32)}
    if gamma:
        nodes.append(n("Mul", ["nn", "g"], ["y"]))
        inits["g"] = (1 + 0.1 * h.rng.standard_normal(D)).astype(np.float32)
    return h.make_model(nodes, [h.vi("x", list(shape))], [h.vi("y", list(shape))], inits)


def _x(h, shape=(2, 3, D)):
    return {"x": (3 * h.rng.standard_normal(shape)).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("gamma,div", [(False, False), (True, False), (False, True)])
def test_l2_norm_is_an_rms_norm(h, target, gamma, div):
    model = _l2(h, gamma=gamma, div=div)
    out = h.fuse(model, target, level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    assert h.fired(out)["l2-norm-scale" if gamma else "l2-norm"] == 1
    h.assert_close(model, out, _x(h))


def test_l2_norm_with_a_large_epsilon_keeps_it(h):
    """epsilon / D is what RMSNormalization adds to the mean: a tiny x shows whether the epsilon was
    carried (the norm of a near-zero row is x / sqrt(eps), not x / ||x||)."""
    model = _l2(h, eps=1e-2)
    out = h.fuse(model, "ort", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    tiny = {"x": (1e-3 * h.rng.standard_normal((2, 3, D))).astype(np.float32)}
    h.assert_close(model, out, tiny)


def test_l2_norm_of_heads(h):
    """q / k norms: [B, S, H, Dh] normalized over the head size."""
    model = _l2(h, shape=("b", "s", 2, D))
    out = h.fuse(model, "trt", level=2)
    assert h.ops(out) == {"RMSNormalization": 1}, h.ops(out)
    h.assert_close(model, out, _x(h, (2, 3, 2, D)))


def test_sum_over_another_axis_is_no_norm(h):
    """sum over the sequence axis is no per-vector norm: refused with the reason, graph unchanged."""
    model = _l2(h, axis=1)
    out = h.fuse(model, "ort", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    assert any("last axis" in r for r in h.reasons(model, "ort", "l2-norm")), h.reasons(model, "ort", "l2-norm")
    h.assert_close(model, out, _x(h))


def test_dynamic_last_axis_is_refused(h):
    model = _l2(h, shape=("b", "s", "d"))
    out = h.fuse(model, "ort", level=2)
    assert "RMSNormalization" not in h.ops(out), h.ops(out)
    assert any("static size" in r for r in h.reasons(model, "ort", "l2-norm"))


# ---- K^T as one Transpose of another layout: HY-V4's MLA key (0/2 attention before) -------------------

B, H, S, DH = 2, 2, 5, 8


def _permuted_key(h, *, sinks=False, perm=(3, 1, 0, 2)):
    """softmax(q @ Transpose(x, perm) * DH^-0.5 + mask [, sink column]) @ v with x the key stored
    [DH, H, S, B] (as HY-V4's slice-copied key is exported), perm taking it to [B, H, DH, S]."""
    n = h.node
    nodes = [n("Transpose", ["x"], ["kt"], perm=list(perm)), n("MatMul", ["q", "kt"], ["qk"]),
             n("Mul", ["qk", "scale"], ["sc"]), n("Add", ["sc", "mask"], ["s"])]
    inits = {"scale": np.array(DH ** -0.5, np.float32)}
    if sinks:
        nodes += [n("Shape", ["s"], ["sh"], start=0, end=3), n("Concat", ["sh", "one"], ["shc"], axis=0),
                  n("Expand", ["sink"], ["sk"]), n("Concat", ["s", "sk"], ["cat"], axis=-1),
                  n("Softmax", ["cat"], ["pp"], axis=-1), n("Slice", ["pp", "st", "en", "ax"], ["p"])]
        nodes[-4].input.append("shc")
        inits.update(one=_i64(1), st=_i64(0), en=_i64(-1), ax=_i64(-1),
                     sink=(0.1 * h.rng.standard_normal((1, H, 1, 1))).astype(np.float32))
    else:
        nodes.append(n("Softmax", ["s"], ["p"], axis=-1))
    nodes.append(n("MatMul", ["p", "v"], ["o"]))
    xs = [DH, H, None, None] if tuple(perm) == (3, 1, 0, 2) else [None, H, DH, None]
    inputs = [h.vi("q", [None, H, None, DH]), h.vi("x", xs), h.vi("v", [None, H, None, DH]),
              h.vi("mask", [None, 1, None, None])]
    return h.make_model(nodes, inputs, [h.vi("o", [None, H, None, DH])], inits)


def _attn_feeds(h, perm=(3, 1, 0, 2)):
    k = h.rng.standard_normal((B, H, S, DH)).astype(np.float32)  # [B, H, S, DH]
    # x such that Transpose(x, perm) == k^T [B, H, DH, S]
    kt = k.transpose(0, 1, 3, 2)
    x = np.ascontiguousarray(kt.transpose(np.argsort(perm)))
    return {"q": h.rng.standard_normal((B, H, S, DH)).astype(np.float32), "x": x,
            "v": h.rng.standard_normal((B, H, S, DH)).astype(np.float32),
            "mask": np.triu(np.full((S, S), -3.4e38, np.float32), k=1)[None, None].repeat(B, 0)}


def _attn(h, model):
    ops = h.ops(model)
    return sum(v for k, v in ops.items() if k.endswith("Attention"))


@pytest.mark.parametrize("target,level", [("ort", 3), ("onnx", 3), ("trt", 4)])
@pytest.mark.parametrize("sinks", [False, True])
def test_permuted_key_is_fused(h, target, level, sinks):
    model = _permuted_key(h, sinks=sinks)
    out = h.fuse(model, target, level)
    assert "Softmax" not in h.ops(out) and _attn(h, out) == 1, h.ops(out)
    # trt: fold-layout-chains' region sinking (a7b99c9) merges the key's permutation into the
    # layout Attention-23 needs first (no more Transposes than q, k, v in and o out), and the
    # attention rules fuse it without this one
    assert h.fired(out)["scores-key-permuted"] == 1 or (target == "trt" and h.ops(out)["Transpose"] <= 4), \
        (h.fired(out), h.ops(out))
    h.assert_close(model, out, _attn_feeds(h))


def test_probabilities_times_a_permuted_value_are_left_alone(h):
    """P @ Transpose(x, [0, 2, 1, 3]) is the value product: the rule must not split that Transpose (the
    left operand comes from a Softmax)."""
    n = h.node
    nodes = [n("Softmax", ["s"], ["p"], axis=-1), n("Transpose", ["x"], ["vt"], perm=[0, 2, 1, 3]),
             n("MatMul", ["p", "vt"], ["o"])]
    model = h.make_model(nodes, [h.vi("s", [B, H, S, S]), h.vi("x", [B, S, H, S])], [h.vi("o", [B, H, S, S])])
    assert any("probabilities" in r for r in h.reasons(model, "ort", "scores-key-permuted")), \
        h.reasons(model, "ort", "scores-key-permuted")


# ---- interleaved rope with the head axis added after the repeat: DeepSeek-V4 (RoPE 0 before) ----------

def _rope_3d(h, *, head_axis=1, repeat="Expand"):
    """x*U(ri(c)) + rotate_every_two(x)*U(ri(s)), c/s [1, S, DH/2] inputs, ri = repeat_interleave by 2
    (Unsqueeze(-1), Expand to 2 or Concat with itself, Reshape to [1, S, DH]), U = Unsqueeze(head_axis)."""
    n = h.node
    nodes = []
    for t in ("c", "s"):
        nodes.append(n("Unsqueeze", [t, "m1"], [t + "4"]))
        nodes.append(n("Expand", [t + "4", "pair"], [t + "x"]) if repeat == "Expand" else
                     n("Concat", [t + "4", t + "4"], [t + "x"], axis=-1))
        nodes += [n("Reshape", [t + "x", "rs"], [t + "r"]), n("Unsqueeze", [t + "r", "hax"], [t + "u"])]
    nodes += [n("Mul", ["x", "cu"], ["xc"]),
              n("Slice", ["x", "z", "big", "m1", "two"], ["xe"]), n("Slice", ["x", "one", "big", "m1", "two"], ["xo"]),
              n("Neg", ["xo"], ["ng"]), n("Unsqueeze", ["ng", "m1"], ["nu"]), n("Unsqueeze", ["xe", "m1"], ["eu"]),
              n("Concat", ["nu", "eu"], ["stk"], axis=-1), n("Reshape", ["stk", "xs"], ["r"]),
              n("Mul", ["r", "su"], ["xs2"]), n("Add", ["xc", "xs2"], ["y"])]
    inits = {"m1": _i64(-1), "pair": _i64(1, 1, 1, 2), "rs": _i64(1, -1, DH), "hax": _i64(head_axis),
             "z": _i64(0), "one": _i64(1), "two": _i64(2), "big": _i64(2 ** 62), "xs": _i64(0, H, -1, DH)}
    inputs = [h.vi("x", ["b", H, "s", DH]), h.vi("c", [1, "s", DH // 2]), h.vi("s", [1, "s", DH // 2])]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", DH])], inits)


def _rope_feeds(h):
    ang = h.rng.standard_normal((1, S, DH // 2)).astype(np.float32)
    return {"x": h.rng.standard_normal((B, H, S, DH)).astype(np.float32), "c": np.cos(ang), "s": -np.sin(ang)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
@pytest.mark.parametrize("repeat", ["Expand", "Concat"])
def test_interleaved_rope_unsqueezed_after_the_repeat(h, target, repeat):
    model = _rope_3d(h, repeat=repeat)
    out = h.fuse(model, target, level=2)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Neg" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _rope_feeds(h))


def test_tables_unsqueezed_on_another_axis_are_refused(h):
    """Unsqueeze(2) makes [1, S, 1, DH]: the rows would rotate by head, not by position."""
    model = _rope_3d(h, head_axis=2)
    out = h.fuse(model, "ort", level=2)
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)


# ---- rotated halves at the tail of a longer Concat: Youtu's TorchScript query (RoPE 2 of 4 before) ----

def _halves_after_pass(h, *, sub_first=True):
    """concat(p, a*c - b*s, b*c + a*s), a / b the even / odd columns of x [B, H, S, DH], c / s [1, S, DH/2]
    unsqueezed at the head axis, p a pass-through part [B, H, S, 4] (sub_first=False: the Add first,
    which is no rotation)."""
    n = h.node
    nodes = [n("Slice", ["x", "z", "big", "m1", "two"], ["a"]), n("Slice", ["x", "one", "big", "m1", "two"], ["b"]),
             n("Unsqueeze", ["c", "one"], ["cu"]), n("Unsqueeze", ["s", "one"], ["su"]),
             n("Mul", ["a", "cu"], ["m1v"]), n("Mul", ["b", "su"], ["m2v"]), n("Sub", ["m1v", "m2v"], ["lo"]),
             n("Mul", ["b", "cu"], ["m3v"]), n("Mul", ["a", "su"], ["m4v"]), n("Add", ["m3v", "m4v"], ["hi"]),
             n("Concat", ["p", "lo", "hi"] if sub_first else ["p", "hi", "lo"], ["y"], axis=-1)]
    inits = {"z": _i64(0), "one": _i64(1), "two": _i64(2), "m1": _i64(-1), "big": _i64(2 ** 62)}
    inputs = [h.vi("x", ["b", H, "s", DH]), h.vi("p", ["b", H, "s", 4]), h.vi("c", [1, "s", DH // 2]),
              h.vi("s", [1, "s", DH // 2])]
    return h.make_model(nodes, inputs, [h.vi("y", ["b", H, "s", DH + 4])], inits)


def _halves_feeds(h):
    ang = h.rng.standard_normal((1, S, DH // 2)).astype(np.float32)
    return {"x": h.rng.standard_normal((B, H, S, DH)).astype(np.float32),
            "p": h.rng.standard_normal((B, H, S, 4)).astype(np.float32), "c": np.cos(ang), "s": np.sin(ang)}


@pytest.mark.parametrize("target", ["ort", "onnx", "trt"])
def test_rotated_halves_after_a_pass_through_part(h, target):
    model = _halves_after_pass(h)
    out = h.fuse(model, target, level=2)
    assert h.ops(out)["RotaryEmbedding"] == 1 and "Sub" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _halves_feeds(h))


def test_halves_in_the_other_order_are_no_rotation(h):
    model = _halves_after_pass(h, sub_first=False)
    out = h.fuse(model, "ort", level=2)
    assert "RotaryEmbedding" not in h.ops(out), h.ops(out)
    h.assert_close(model, out, _halves_feeds(h))
