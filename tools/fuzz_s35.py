"""Fuzz motif for gated MLPs (SwiGLU / GeGLU) as exporters write them, which no other family draws (the motif
graphs put an activation on one projection only):

  gated_mlp  x [B, S, d] -> gate, up [B, S, I] -> act(gate) * up -> a down projection to [B, S, d] (a residual
             Add sometimes), the pair made as:
               slices       Phi-3 / GLM: one projection y of width 2I, gate = y[..., :I] and up = y[..., I:] (the
                            end INT64_MAX or 2I), or up = y[..., -I:] and gate = y[..., :-I]; axes -1, 2 or left out
                            (starts / ends then on every axis, the lead ones [0, INT64_MAX))
               chunk        torch.chunk(2): Split of the last axis (sizes as an input, or num_outputs=2 from opset 18)
               interleaved  gate and up as y's even and odd columns (step-2 Slices)
               two          Llama: gate_proj and up_proj, two MatMuls on x (a bias sometimes)
             act: SiLU (x * Sigmoid(x)), GELU (erf or tanh), quick GELU or Relu; in a float16 model, half the time
             computed in float32 (gate and up Cast up, the product Cast back, or the activation alone).

Near misses (traps) a rewrite must get right by value: gate and up overlapping by one column (up = y[..., I-1:2I-1],
the last column never read), up's columns reversed (a Slice with step -1 from the end to INT64_MIN), the activation
on up instead of gate, the product without the activation, a piece or the product also a graph output.

Each is a motif on the hidden state [B, S, d] (tools/fuzz_motifs.py's signature: builder, hidden, shape, opset ->
hidden). fuzz_motifs.make_case draws a case of this family for S35_SHARE of the seeds from a side stream of its own
(S35_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import Builder, Dim, build_family

#: share of the motif-graph seeds that are session-35 cases (a side stream of the seed decides)
S35_SHARE = 0.06
#: the side stream that picks them: under it no seed a test names becomes one, nor one of the seeds 0-119 whose
#: graphs have an If (test_fuzz_control_flow counts those)
S35_SALT = 0x3EA0
FORMS = ("slices", "chunk", "interleaved", "two")
ACTS = ("silu", "gelu_erf", "gelu_tanh", "quick", "relu")
BIG = np.iinfo(np.int64).max
SMALL = np.iinfo(np.int64).min
F32 = TensorProto.FLOAT


def _slice(b: Builder, y: str, start: int, end: int, step: int = 1) -> str:
    """y[..., start:end:step] of a rank-3 y, its axes written -1, 2 or left out (then on every axis)."""
    way = b.pick(["neg", "pos", "none"]) if step == 1 else b.pick(["neg", "pos"])
    if way == "none":
        return b.op("Slice", [y, b.ints([0, 0, start]), b.ints([BIG, BIG, end])])
    ins = [y, b.ints([start]), b.ints([end]), b.ints([-1 if way == "neg" else 2])]
    if step != 1 or b.p(0.3):
        ins.append(b.ints([step]))
    return b.op("Slice", ins)


def _pair(b: Builder, x: str, form: str, d: int, inter: int) -> tuple[str, str]:
    """(gate, up), each [B, S, inter]."""
    if form == "two":
        g, u = (b.op("MatMul", [x, b.weight([d, inter])]) for _ in range(2))
        if b.p(0.4):
            g, u = (b.op("Add", [t, b.const(0.1 * b.rng.standard_normal([inter]), stem="bias")]) for t in (g, u))
        return g, u
    y = b.op("MatMul", [x, b.weight([d, 2 * inter])])
    if b.p(0.3):
        y = b.op("Add", [y, b.const(0.1 * b.rng.standard_normal([2 * inter]), stem="bias")])
    b.maybe_expose(y, 0.04)
    if form == "chunk":
        if b.opset >= 18 and b.p(0.5):
            return tuple(b.op("Split", [y], n_out=2, axis=-1, num_outputs=2))
        return tuple(b.op("Split", [y, b.ints([inter, inter])], n_out=2, axis=b.pick([-1, 2])))
    if form == "interleaved":
        return _slice(b, y, 0, BIG if b.p(0.5) else 2 * inter, 2), _slice(b, y, 1, BIG if b.p(0.5) else 2 * inter, 2)
    near = b.pick(["none"] * 6 + ["overlap", "up-reversed"])
    if near == "overlap":
        b.trap("near-overlap")
        return _slice(b, y, 0, inter), _slice(b, y, inter - 1, 2 * inter - 1)
    if near == "up-reversed":
        b.trap("near-up-reversed")
        if b.p(0.5):   # torch.flip(y[..., I:], -1): the second Slice from the end to INT64_MIN
            return _slice(b, y, 0, inter), _slice(b, _slice(b, y, inter, BIG), -1, SMALL, -1)
        return _slice(b, y, 0, inter), _slice(b, y, -1, -inter - 1, -1)
    if b.p(0.3):   # counted from the end: y[..., :-I], y[..., -I:]
        return _slice(b, y, 0, -inter), _slice(b, y, -inter, BIG)
    return _slice(b, y, 0, inter), _slice(b, y, inter, BIG if b.p(0.5) else 2 * inter)


def _act(b: Builder, t: str, act: str, dt: int) -> str:
    """act(t), its constants of dtype ``dt``."""
    if act == "relu":
        return b.op("Relu", [t])
    if act == "silu":
        return b.op("Mul", [t, b.op("Sigmoid", [t])]) if b.p(0.7) else b.op("Mul", [b.op("Sigmoid", [t]), t])
    if act == "quick":
        return b.op("Mul", [t, b.op("Sigmoid", [b.op("Mul", [t, b.scalar(1.702, dt)])])])
    half = b.scalar(0.5, dt)
    if act == "gelu_erf":
        a = b.op("Add", [b.op("Erf", [b.op("Div", [t, b.scalar(1.4142135, dt)])]), b.scalar(1.0, dt)])
    else:
        p3 = b.op("Pow", [t, b.scalar(3.0, dt)])
        inner = b.op("Mul", [b.op("Add", [t, b.op("Mul", [p3, b.scalar(0.044715, dt)])]), b.scalar(0.7978845608, dt)])
        a = b.op("Add", [b.op("Tanh", [inner]), b.scalar(1.0, dt)])
    return b.op("Mul", [b.op("Mul", [t, half]), a])


def motif_gated_mlp(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    d = shape[-1]
    b.opset = opset
    form = b.pick(("slices", *FORMS))   # slices twice: its near misses
    act = b.pick(ACTS[:4] * 2 + ACTS[4:])
    inter = int(b.pick([8, 16, 24, 40]))
    b.trap(f"gated-{form}")
    b.trap(f"act-{act}")
    g, u = _pair(b, x, form, d, inter)
    b.maybe_expose(u, 0.04)
    island = b.dtype != F32 and b.p(0.5)
    dt = F32 if island else b.dtype
    if island:
        b.trap("float32-island")
        g, u = b.op("Cast", [g], to=F32), b.op("Cast", [u], to=F32)
    near = b.pick(["none"] * 10 + ["act-on-up", "no-act"])
    if near != "none":
        b.trap(f"near-{near}")
    if near == "act-on-up":
        g, u = u, g
    a = g if near == "no-act" else _act(b, g, act, dt)
    p = b.op("Mul", [a, u]) if b.p(0.7) else b.op("Mul", [u, a])
    if island:
        p = b.op("Cast", [p], to=b.dtype)
    b.maybe_expose(p, 0.04)
    out = b.op("MatMul", [p, b.weight([inter, d])])
    return b.op("Add", [x, out]) if b.p(0.5) else out


S35 = {"gated_mlp": motif_gated_mlp}


def build_s35(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A session-35 motif (drawn, or ``name``) on a fresh hidden state (fuzz_motifs.build_family)."""
    return build_family(b, opset, S35, name)
