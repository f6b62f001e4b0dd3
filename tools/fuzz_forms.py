"""Fuzz motifs for what the session-16 sweeps brought: grouped-query attention written with Tile,
Gather or Concat, quantized projections, and the opsets between 17 and 23 (19, 21 and 22 were never
drawn before), so that every target's opset handling (onnx / trt convert up to 23 on demand) meets
them:

  gqa_tile     attention whose K / V heads are repeated by one of: Unsqueeze -> Tile -> Reshape on a
               new axis after the heads (torchlib's repeat_interleave), the same on [B, T, Hkv, dh]
               (keras-hub through tf2onnx), Gather with the table h // n, Concat of n copies on a new
               axis, Expand (repeat_kv); all compute k[:, h // n]. The near misses read kv head
               h % Hkv instead: Tile of the heads axis itself (k.repeat(1, n, 1, 1)) and Gather with
               h % Hkv; a rewrite that takes them for GQA's map is wrong on their values
  quant_proj   attention whose q / k / v projections read int8 / uint8 weights through
               DequantizeLinear (per tensor, per output channel, or blocked from opset 21; a zero
               point or none; sometimes a Transpose of a [out, in] weight, as torch's Linear), and
               sometimes a QuantizeLinear -> DequantizeLinear pair on the raw hidden input (static
               QDQ); below opset 19 the scales are float32 (DequantizeLinear-13), so a float16 graph
               casts around them
  quant_after  (drawn by a side stream of the seed, QUANT_AFTER_SHARE of the form cases, so that every
               other form case stays what it was) a float MatMul (a bias sometimes, after an attention
               or a norm sometimes) whose result is quantized and dequantized, the DequantizeLinear a
               graph output: under --precision the MatMul is 16-bit and no DequantizeLinear feeds it,
               so the quantizer rounds a value one low-type rounding off and the output may be one
               step off (docs/precision.md's known limit, the fuzzer's and verify's one-step
               tolerance, verify.dequantized_output_steps); per tensor or per output channel, uint8 or
               int8; in a float16 graph below opset 19 the scale and the output are float32 (a Cast
               up before the quantizer, none after: the output stays the DequantizeLinear's)

Every attention draws the mask, RoPE, bias, softcap... switches of tools/fuzz_sweeps.py too.
fuzz_motifs.make_case draws a form case for FORM_SHARE of the motif-graph seeds from a side stream
of its own (every other seed's graph stays what it was).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from fuzz_motifs import F16, Builder, Dim, hidden_start
from fuzz_sweeps import _attention

F32 = TensorProto.FLOAT
#: the K / V repeats: GQA's map (h // n) and the near misses (h % Hkv)
GQA_FORMS = ("tile_ri", "tile_bshd", "gather", "concat", "expand")
NEAR_MISSES = ("tile_heads", "gather_mod")
#: share of the motif-graph seeds that are form cases (a side stream of the seed decides)
FORM_SHARE = 0.12
#: the opsets a form case is written at
OPSETS = (17, 18, 19, 20, 21, 22, 23)
#: share of the form cases that are quant_after (a side stream of the seed decides)
QUANT_AFTER_SHARE = 0.3
QUANT_AFTER_SALT = 0x0A58   # under it no form seed a test names (1356464380) becomes one


def _scale_dtype(b: Builder, opset: int) -> int:
    """DequantizeLinear-13 takes float32 scales only; from 19 the scale may be the graph's float16."""
    return b.dtype if opset >= 19 else F32


def _to_graph_dtype(b: Builder, t: str, dtype: int) -> str:
    return t if dtype == b.dtype else b.op("Cast", [t], to=b.dtype)


def quantized_weight(b: Builder, d_in: int, d_out: int, opset: int) -> str:
    """A [d_in, d_out] weight stored as int8 / uint8 and dequantized at run time."""
    w = b.rng.standard_normal([d_in, d_out]) / np.sqrt(d_in)
    transposed = b.p(0.3)   # torch's Linear: the weight kept [out, in], transposed after dequantizing
    if transposed:
        w = w.T
    out_axis = 0 if transposed else 1
    kinds = ["tensor", "channel"] + (["block"] if opset >= 21 else [])
    kind = b.pick(kinds)
    signed = b.p(0.6)
    qmax, zp_value = (127, 0) if signed else (255, 128)
    if kind == "tensor":
        scale, attrs = np.array(np.abs(w).max() / 127), {}
    elif kind == "channel":
        scale, attrs = np.abs(w).max(axis=1 - out_axis) / 127, {"axis": out_axis}
    else:   # blocks of the input axis, one scale per block and output channel
        in_axis = 1 - out_axis
        size = int(b.pick([s for s in (4, 8, 16) if w.shape[in_axis] % s == 0]))
        blocks = np.abs(w).reshape(*((w.shape[0] // size, size, w.shape[1]) if in_axis == 0
                                     else (w.shape[0], w.shape[1] // size, size))).max(axis=1 if in_axis == 0 else 2)
        scale, attrs = blocks / 127, {"axis": in_axis, "block_size": size}
    scale = np.maximum(scale, 1e-6)
    full = scale if kind == "tensor" else (np.expand_dims(scale, 1 - out_axis) if kind == "channel"
                                           else np.repeat(scale, attrs["block_size"], axis=attrs["axis"]))
    zp = np.full(np.shape(scale), zp_value)
    q = np.clip(np.round(w / full) + zp_value, -128 if signed else 0, qmax)
    qtype, np_q = (TensorProto.INT8, np.int8) if signed else (TensorProto.UINT8, np.uint8)
    b.trap(f"dq-weight-{kind}")
    sdt = _scale_dtype(b, opset)
    inputs = [b.const(q.astype(np_q), qtype, stem="wq"), b.const(scale, sdt, stem="wscale")]
    if not signed or b.p(0.5):   # int8's zero point is 0 and often left out
        inputs.append(b.const(zp.astype(np_q), qtype, stem="wzp"))
    wt = b.op("DequantizeLinear", inputs, **attrs)
    if transposed:
        wt = b.op("Transpose", [wt], perm=[1, 0])
    return _to_graph_dtype(b, wt, sdt)


def quantized_proj(opset: int, share: float):
    """``_proj`` with a DequantizeLinear weight ``share`` of the time."""
    def proj(b: Builder, x: str, d_in: int, d_out: int, bias: bool) -> str:
        w = quantized_weight(b, d_in, d_out, opset) if b.p(share) else b.weight([d_in, d_out])
        m = b.op("MatMul", [x, w])
        return b.op("Add", [m, b.const(0.1 * b.rng.standard_normal([d_out]), stem="bias")]) if bias else m
    return proj


def qdq_activation(b: Builder, x: str, opset: int) -> str:
    """QuantizeLinear -> DequantizeLinear (uint8, zero point 128) on x, as static QDQ writes around
    an activation; float32 on the way below opset 19."""
    sdt = _scale_dtype(b, opset)
    xs = x if sdt == b.dtype else b.op("Cast", [x], to=sdt)
    scale, zp = b.const(np.array(float(b.pick([0.02, 0.05]))), sdt, stem="xscale"), \
        b.const(np.array(128, np.uint8), TensorProto.UINT8, stem="xzp")
    q = b.op("QuantizeLinear", [xs, scale, zp])
    b.trap("qdq-activation")
    return _to_graph_dtype(b, b.op("DequantizeLinear", [q, scale, zp]), sdt)


def form_gqa_tile(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    form = b.pick(GQA_FORMS + NEAR_MISSES)
    force = {"gqa": form}
    if b.p(0.7):   # Hkv > 1 and n > 1: h % Hkv and h // n differ (with Hkv = 1 both read head 0)
        force["hkv"] = int(b.pick([2, 4]))
        force["heads"] = force["hkv"] * int(b.pick([2, 4]))
    return _attention(b, x, shape, opset, force, proj=quantized_proj(opset, 0.2))


def form_quant_proj(b: Builder, x: str, shape: list[Dim], opset: int, raw: bool = False) -> str:
    if raw and b.p(0.4):   # only on the graph's input: a fused norm before it could move a rounding step
        x = qdq_activation(b, x, opset)
    gqa = b.pick(GQA_FORMS) if b.p(0.3) else None
    return _attention(b, x, shape, opset, {"gqa": gqa}, proj=quantized_proj(opset, 0.85))


def form_quant_after(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """A float MatMul (+ bias), its result quantized and dequantized: the DequantizeLinear is the output
    (module docstring: past further ops a step is not bounded, so nothing reads it)."""
    if b.p(0.3):
        x = _attention(b, x, shape, opset, {})
    d_out = int(b.pick([8, 16, 32]))
    y = b.op("MatMul", [x, b.weight([shape[-1], d_out])])
    if b.p(0.5):
        y = b.op("Add", [y, b.const(0.1 * b.rng.standard_normal([d_out]), stem="bias")])
    sdt = _scale_dtype(b, opset)
    ys = y if sdt == b.dtype else b.op("Cast", [y], to=sdt)
    signed = b.p(0.5)
    qtype, np_q, zp_value = (TensorProto.INT8, np.int8, 0) if signed else (TensorProto.UINT8, np.uint8, 128)
    if b.p(0.3):   # one scale per output channel (the last axis)
        scale = b.const(b.rng.uniform(0.01, 0.05, [d_out]), sdt, stem="yscale")
        zp, attrs = b.const(np.full([d_out], zp_value, np_q), qtype, stem="yzp"), {"axis": -1}
        b.trap("quant-after-channel")
    else:
        scale = b.const(np.array(float(b.pick([0.01, 0.02, 0.05]))), sdt, stem="yscale")
        zp, attrs = b.const(np.array(zp_value, np_q), qtype, stem="yzp"), {}
    q = b.op("QuantizeLinear", [ys, scale, zp], **attrs)
    b.trap("quant-after-compute")
    return b.op("DequantizeLinear", [q, scale, zp], **attrs)   # float32 in a float16 graph below 19


FORMS = {"gqa_tile": form_gqa_tile, "quant_proj": form_quant_proj, "quant_after": form_quant_after}


def build_form(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A form motif (drawn, or ``name``) on a fresh hidden state [B, S, d], sometimes after a norm."""
    if name is None and hasattr(b, "seed") and \
            np.random.default_rng([b.seed, QUANT_AFTER_SALT]).random() < QUANT_AFTER_SHARE:
        name = "quant_after"   # decided aside: the other seeds draw from b.rng as before
        h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 5, 8), [16, 32, 64], norm=True)
    else:
        h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 5, 8), [16, 32, 64], norm=name is None)
    name = name if name is not None else b.pick(["gqa_tile", "quant_proj"])
    motifs.append(name)
    fn = FORMS[name]
    b.output(fn(b, h, shape, opset, raw=not motifs[:-1]) if name == "quant_proj" else fn(b, h, shape, opset))
    return motifs
