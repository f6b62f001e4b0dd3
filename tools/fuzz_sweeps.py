"""Fuzz motifs for the idioms the hold-out sweeps found after the fuzzer was written (session 15),
so that a regression in their rules, or a rewrite that is wrong on one of their values, shows up:

  mask_forms      attention under a run-time 0/1 attention_mask [B, S] of int64, bool or float,
                  padded on the right or on the left, sometimes with a fully masked batch row; alone
                  or with a causal mask, both ways round: where(causal, s, min) / d, then + padding
                  (GPT-J), or one mask built first (Where(causal, 0, min) + padding, or
                  Where(causal and padding, 0, min), HF's prepared 4-D mask)
  rope_forms      partial rotary (a prefix of the head rotated, the rest passed through) and
                  interleaved RoPE (rotate_every_two: stack(-x[1::2], x[::2]) flattened, over
                  repeat_interleave'd tables, cos before or after the repeat), and both (GPT-J)
  parallel_block  x + attn(norm(x)) + mlp(norm(x)) (GPT-J / NeoX / Falcon: one norm read by both
                  branches, or one each)
  qk_norm         RMS- or LayerNorm of q and k over the head (Qwen3, Cohere) or over the whole
                  projection before the head split (OLMo2)
  gqa_forms       K/V heads repeated by Unsqueeze -> Expand -> Reshape (repeat_kv), by
                  repeat_interleave as torchlib writes it (Unsqueeze -> Tile -> Reshape), or the near
                  miss k.repeat(1, n, 1, 1) (Tile of the head axis: head h reads kv head h % Hkv)
  score_bias      ALiBi (per-head slopes times key positions, constant or computed at run time) or
                  a T5-style relative position bias (a [2K+1, H] table gathered by clipped j - i)
                  added to the scaled scores
  softcap         tanh(s / c) * c on the scaled scores, before the mask (Gemma 2)
  sinks           a learned per-head logit joins each softmax row and its column is dropped (GPT-OSS)
  merged_decoder  Optimum's merged decoder: an If on use_cache_branch with a decoder layer in both
                  branches (Concat(past, new) K/V in one, the new K/V alone in the other), both
                  reading the same outer weights and naming their values alike; the case carries the
                  other value of the condition (an empty past, a mask of the new tokens) as a second
                  feed set, so both branches are checked

Every attention draws the other switches too (rarely), so they meet: softcap with ALiBi, sinks
under a left-padded mask, QK-norm before interleaved RoPE... Head sizes include 64, so FusedAttention
(trt -O4) sees them. fuzz_motifs.make_case draws a sweep case for SWEEP_SHARE of the seeds from a
side stream of its own (the other seeds' graphs stay what they were).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_idioms import _causal, _lowest, _merge, _to_heads
from fuzz_motifs import F16, I64, NP, Builder, Dim, _gelu_body, _proj, _reduce_mean, _rope, _rope_tables, \
    hidden_start, motif_layer_norm, motif_rms_norm

BOOL = TensorProto.BOOL
HEADS_DH = (8, 16, 64, 64)
MASK_FORMS = ("none", "pad", "pad", "causal", "causal_select_pad", "causal_add_pad", "combined")
ROPE_FORMS = ("none", "half", "partial", "interleaved", "interleaved_partial")
#: share of the motif-graph seeds that are sweep cases (a side stream of the seed decides)
SWEEP_SHARE = 0.2


# --- masks -----------------------------------------------------------------------------------


def _mask01(b: Builder, bsz: Dim, seq: Dim) -> tuple[str, str]:
    """A 0/1 attention_mask [B, S] input (int64, bool or float), the last row padded on the right
    or the left, sometimes a batch row fully masked; returns (name, kind)."""
    kind = b.pick(["int64", "int64", "bool", "float"])
    dtype = {"int64": I64, "bool": BOOL, "float": b.dtype}[kind]
    name = b.name("attention_mask")
    b.inputs.append(oh.make_tensor_value_info(name, dtype, [bsz, seq]))
    n_b, n_s = b.rt(bsz), b.rt(seq)
    keep = np.ones((n_b, n_s), bool)
    if n_s > 1:
        side = b.pick(["right", "left"])
        n = int(b.rng.integers(1, n_s))
        if side == "right":
            keep[-1, n_s - n:] = False
        else:
            keep[-1, :n] = False
        b.trap(f"mask-{side}-padded")
    if b.p(0.15):
        keep[0] = False
        b.trap("mask-fully-masked-row")
    b.trap(f"mask-{kind}")
    b.feeds[name] = keep.astype(NP[dtype])
    return name, kind


def _keep(b: Builder, am: str, kind: str) -> str:
    return am if kind == "bool" else b.op("Cast", [am], to=BOOL)


def _pad_additive(b: Builder, am: str, kind: str, fill: float | None = None) -> str:
    """[B, 1, 1, S]: 0 where kept, the dtype's lowest where padded (a select: ``fill`` if given;
    the arithmetic (1 - m) * lowest has no -inf form: 0 * -inf is NaN)."""
    low = b.scalar(_lowest(b))
    if kind == "bool" and b.p(0.5):
        sel = low if fill is None else b.scalar(fill)
        return b.op("Where", [b.op("Unsqueeze", [am, b.ints([1, 2])]), b.scalar(0.0), sel])
    if kind == "bool":
        inv = b.op("Cast", [b.op("Not", [am])], to=b.dtype)
    else:
        f = am if kind == "float" else b.op("Cast", [am], to=b.dtype)
        inv = b.op("Sub", [b.scalar(1.0), f])
    return b.op("Unsqueeze", [b.op("Mul", [inv, low]), b.ints([1, 2])])


# --- RoPE ------------------------------------------------------------------------------------


def _repeat2(b: Builder, t: str, rd: int) -> str:
    """repeat_interleave(t, 2) on the last axis of a rank-4 t (dynamo's Unsqueeze/Expand/Reshape)."""
    u = b.op("Unsqueeze", [t, b.ints([-1])])
    e = b.op("Expand", [u, b.ints([1, 1, 1, 1, 2])]) if b.p(0.5) else b.op("Concat", [u, u], axis=-1)
    return b.op("Reshape", [e, b.ints([0, 0, 0, rd])])


def _interleaved_tables(b: Builder, bsz: Dim, seq: Dim, rd: int) -> tuple[str, str]:
    """cos / sin [1|B, 1, S, rd] repeat_interleave'd from frequencies f [1|B, S, rd/2]."""
    f = b.op("Unsqueeze", [b.input([b.pick([1, bsz]), seq, rd // 2], stem="freqs"), b.ints([1])])
    if b.p(0.5):
        g = _repeat2(b, f, rd)
        return b.op("Cos", [g]), b.op("Sin", [g])
    return _repeat2(b, b.op("Cos", [f]), rd), _repeat2(b, b.op("Sin", [f]), rd)


def _rope_interleaved(b: Builder, x4: str, tables: tuple[str, str], dh: int, rd: int) -> str:
    """x*cos + rotate_every_two(x)*sin over the first rd dims of x4 [B, H, S, dh]."""
    cos, sin = tables
    xr = b.op("Slice", [x4, b.ints([0]), b.ints([rd]), b.ints([-1])]) if rd < dh else x4
    big = int(b.pick([rd, 2 ** 62]))
    x1 = b.op("Slice", [xr, b.ints([0]), b.ints([big]), b.ints([-1]), b.ints([2])])
    x2 = b.op("Slice", [xr, b.ints([1]), b.ints([big]), b.ints([-1]), b.ints([2])])
    st = b.op("Concat", [b.op("Unsqueeze", [b.op("Neg", [x2]), b.ints([-1])]),
                         b.op("Unsqueeze", [x1, b.ints([-1])])], axis=-1)
    r = b.op("Reshape", [st, b.ints([0, 0, 0, rd])])
    y = b.op("Add", [b.op("Mul", [xr, cos]), b.op("Mul", [r, sin] if b.p(0.5) else [sin, r])])
    if rd < dh:
        y = b.op("Concat", [y, b.op("Slice", [x4, b.ints([rd]), b.ints([dh]), b.ints([-1])])], axis=-1)
        b.trap("rope-partial")
    b.trap("rope-interleaved")
    return y


def _apply_rope(b: Builder, form: str, q4: str, k4: str, bsz: Dim, seq: Dim, dh: int) -> tuple[str, str]:
    if form == "none":
        return q4, k4
    partial = form.endswith("partial") and dh % 4 == 0
    rd = dh // 2 if partial else dh
    if form.startswith("interleaved"):
        tables = _interleaved_tables(b, bsz, seq, rd)
        return _rope_interleaved(b, q4, tables, dh, rd), _rope_interleaved(b, k4, tables, dh, rd)
    tables = _rope_tables(b, bsz, seq, rd)
    return _rope(b, q4, tables, dh, rd, False), _rope(b, k4, tables, dh, rd, False)


# --- score biases ----------------------------------------------------------------------------


def _alibi_slopes(heads: int) -> np.ndarray:
    return 2.0 ** (-8.0 * (np.arange(heads) + 1) / heads)


def _score_bias(b: Builder, form: str, x: str, seq: Dim, heads: int) -> str:
    slopes = _alibi_slopes(heads)
    if form == "alibi_const" and isinstance(seq, int):   # BLOOM's buffer: slopes * key positions
        b.trap("alibi-const")
        return b.const((slopes[:, None, None] * np.arange(seq)[None, None, :])[None], stem="alibi")
    slen = b.op("Shape", [x], start=1, end=2)
    zero, one = b.const(np.array(0, np.int64), I64), b.const(np.array(1, np.int64), I64)
    pos = b.op("Range", [zero, b.op("Squeeze", [slen]), one])
    if form in ("alibi", "alibi_const"):
        b.trap("alibi-computed")
        cols = b.op("Reshape", [b.op("Cast", [pos], to=b.dtype), b.ints([1, 1, 1, -1])])
        return b.op("Mul", [cols, b.const(slopes.reshape(1, heads, 1, 1), stem="slopes")])
    # T5-style: a learned bias per head for each clipped relative distance j - i
    k = 3
    rel = b.op("Sub", [b.op("Unsqueeze", [pos, b.ints([0])]), b.op("Unsqueeze", [pos, b.ints([1])])])
    idx = b.op("Add", [b.op("Max", [b.op("Min", [rel, b.ints([k])]), b.ints([-k])]), b.ints([k])])
    table = b.const(0.5 * b.rng.standard_normal([2 * k + 1, heads]), stem="rel_bias")
    g = b.op("Transpose", [b.op("Gather", [table, idx], axis=0)], perm=[2, 0, 1])   # [H, S, S]
    b.trap("relative-position-bias")
    return b.op("Unsqueeze", [g, b.ints([0])])


# --- attention -------------------------------------------------------------------------------


def _repeat_kv(b: Builder, form: str, t4: str, heads: int, hkv: int, dh: int) -> str:
    """t4 [B, Hkv, T, dh] -> [B, H, T, dh]. GQA's map, head h reads kv head h // n: expand / tile_ri
    / tile_bshd / gather / concat; the near misses tile_heads and gather_mod read h % Hkv."""
    n = heads // hkv
    if form == "tile_heads":   # k.repeat(1, n, 1, 1): head h reads kv head h % hkv (not GQA's h // n)
        b.trap("kv-tile-heads")
        return b.op("Tile", [t4, b.ints([1, n, 1, 1])])
    if form in ("gather", "gather_mod"):   # k[:, idx] with a constant head table
        idx = np.arange(heads) // n if form == "gather" else np.arange(heads) % hkv
        b.trap(f"kv-{form.replace('_', '-')}")
        return b.op("Gather", [t4, b.ints(idx)], axis=1)
    if form == "tile_bshd":    # keras-hub through tf2onnx: repeat on [B, T, Hkv, dh]'s heads axis
        b.trap("kv-tile-bshd")
        u = b.op("Unsqueeze", [b.op("Transpose", [t4], perm=[0, 2, 1, 3]), b.ints([3])])
        r = b.op("Reshape", [b.op("Tile", [u, b.ints([1, 1, 1, n, 1])]), b.ints([0, 0, heads, dh])])
        return b.op("Transpose", [r], perm=[0, 2, 1, 3])
    u = b.op("Unsqueeze", [t4, b.ints([2])])
    if form == "tile_ri":      # torchlib's repeat_interleave(k, n, dim=1)
        b.trap("kv-repeat-interleave-tile")
        e = b.op("Tile", [u, b.ints([1, 1, n, 1, 1])])
    elif form == "concat":     # torch.cat([k[:, :, None]] * n, 2): n copies on a new axis
        b.trap("kv-concat-copies")
        e = b.op("Concat", [u] * n, axis=2)
    else:
        e = b.op("Expand", [u, b.ints([1, 1, n, 1, 1])])
    return b.op("Reshape", [e, b.ints([0, heads, -1, dh])])


def _draw(b: Builder, force: dict) -> dict:
    f = {
        "mask": b.pick(MASK_FORMS),
        "rope": b.pick(ROPE_FORMS) if b.p(0.35) else "none",
        "qk_norm": b.pick(["head_rms", "head_ln", "proj_rms"]) if b.p(0.12) else None,
        "gqa": b.pick(["expand", "tile_ri", "tile_heads"]) if b.p(0.3) else None,
        "bias": b.pick(["alibi_const", "alibi", "relpos"]) if b.p(0.12) else None,
        "softcap": b.p(0.12),
        "sinks": b.p(0.1),
        "scale_mul": b.p(0.5),
        # selects fill -inf (sdpa's boolean masks): a row with no kept key is NaN in the original
        "inf_fill": b.p(0.15),
    }
    f.update(force)
    if f["softcap"] and f["mask"] in ("causal", "causal_select_pad"):
        f["mask"] = "combined"   # Gemma 2 caps the scores before an additive mask
    return f


def _scale(b: Builder, s: str, dh: int, mul: bool) -> str:
    if mul:
        return b.op("Mul", [s, b.scalar(float(dh ** -0.5))])
    return b.op("Div", [s, b.scalar(float(np.sqrt(dh)))])


def _attention(b: Builder, x: str, shape: list[Dim], opset: int, force: dict, proj=_proj) -> str:
    """Self-attention on x [B, S, d] with the switches ``force`` sets and the rest drawn; ``proj``
    makes the q / k / v projections (tools/fuzz_forms.py: quantized weights)."""
    bsz, seq, d = shape
    f = _draw(b, force)
    dh = int(b.pick(HEADS_DH))
    # a caller may fix the head counts (fuzz_forms: near misses whose h % Hkv differs from h // n)
    heads = f.get("heads") or (int(b.pick([2, 4])) if f["gqa"] else int(b.pick([1, 2, 4])))
    hkv = f.get("hkv") or (int(b.pick([h for h in (1, 2) if heads % h == 0 and h < heads])) if f["gqa"] else heads)
    bias = b.p(0.5)
    q = proj(b, x, d, heads * dh, bias)
    k = proj(b, x, d, hkv * dh, bias)
    v = proj(b, x, d, hkv * dh, bias)
    if f["qk_norm"] == "proj_rms":   # OLMo2: over the whole projection, before the head split
        q = motif_rms_norm(b, q, [bsz, seq, heads * dh], opset)
        k = motif_rms_norm(b, k, [bsz, seq, hkv * dh], opset)
        b.trap("qk-norm-projection")
    q4, k4, v4 = _to_heads(b, q, heads, dh), _to_heads(b, k, hkv, dh), _to_heads(b, v, hkv, dh)
    if f["qk_norm"] in ("head_rms", "head_ln"):
        norm = motif_rms_norm if f["qk_norm"] == "head_rms" else \
            (lambda b_, t, s, o: motif_layer_norm(b_, t, s, o, True))
        q4 = norm(b, q4, [bsz, heads, seq, dh], opset)
        k4 = norm(b, k4, [bsz, hkv, seq, dh], opset)
        b.trap("qk-norm-head")
    q4, k4 = _apply_rope(b, f["rope"], q4, k4, bsz, seq, dh)
    if hkv != heads:
        k4, v4 = _repeat_kv(b, f["gqa"], k4, heads, hkv, dh), _repeat_kv(b, f["gqa"], v4, heads, hkv, dh)
    qk = b.op("MatMul", [q4, b.op("Transpose", [k4], perm=[0, 1, 3, 2])])
    fill = -np.inf if f["inf_fill"] else _lowest(b)
    if f["inf_fill"]:
        b.trap("fill-neg-inf")
    low = b.scalar(fill)
    am, kind = _mask01(b, bsz, seq) if f["mask"] in ("pad", "causal_select_pad", "causal_add_pad", "combined") \
        else (None, None)
    if f["mask"] in ("causal", "causal_select_pad"):
        causal = _causal(b, seq, x)
        if f["mask"] == "causal_select_pad":   # GPT-J: select, then scale, then the padding
            s = b.op("Add", [_scale(b, b.op("Where", [causal, qk, low]), dh, f["scale_mul"]), _pad_additive(b, am, kind, fill)])
        else:
            s = b.op("Where", [causal, _scale(b, qk, dh, f["scale_mul"]), low])
        b.trap("causal-select")
    else:
        s = _scale(b, qk, dh, f["scale_mul"])
    if f["softcap"]:
        cap = float(b.pick([20.0, 50.0]))
        c1, c2 = b.scalar(cap), b.scalar(cap)
        s = b.op("Mul", [b.op("Tanh", [b.op("Div", [s, c1])]), c2])
        b.trap("softcap")
    if f["bias"]:
        s = b.op("Add", [s, _score_bias(b, f["bias"], x, seq, heads)])
    if f["mask"] == "pad":
        s = b.op("Add", [s, _pad_additive(b, am, kind, fill)])
    elif f["mask"] == "causal_add_pad":   # the causal mask and the padding added first
        m = b.op("Add", [b.op("Where", [_causal(b, seq, x), b.scalar(0.0), low]), _pad_additive(b, am, kind, fill)])
        s = b.op("Add", [s, m])
        b.trap("causal-plus-padding")
    elif f["mask"] == "combined":         # one boolean mask: causal and kept
        keep = b.op("Unsqueeze", [_keep(b, am, kind), b.ints([1, 2])])
        both = b.op("And", [_causal(b, seq, x), keep])
        s = b.op("Add", [s, b.op("Where", [both, b.scalar(0.0), low])])
        b.trap("causal-and-padding")
    if f["sinks"]:
        sink = b.const(b.rng.standard_normal([1, heads, 1, 1]), stem="sinks")
        shape4 = b.op("Concat", [b.op("Shape", [s], start=0, end=3), b.ints([1])], axis=0)
        cat = b.op("Concat", [s, b.op("Expand", [sink, shape4])], axis=-1)
        p = b.op("Softmax", [cat], axis=-1)
        p = b.op("Slice", [p, b.ints([0]), b.ints([-1]), b.ints([-1])])
        b.trap("attention-sinks")
    else:
        p = b.op("Softmax", [s], axis=-1)
    b.maybe_expose(p, 0.03)
    return _merge(b, b.op("MatMul", [p, v4]), heads * dh, d)


def _sweep(force: dict):
    def motif(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
        return _attention(b, x, shape, opset, {k: (v(b) if callable(v) else v) for k, v in force.items()})
    return motif


def idiom_parallel_block(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    """x + attn(norm1(x)) + mlp(norm2(x)), norm2 being norm1 half the time."""
    norm = motif_layer_norm if b.p(0.6) else motif_rms_norm
    n1 = norm(b, x, shape, opset)
    n2 = n1 if b.p(0.5) else norm(b, x, shape, opset)
    b.trap("parallel-residual" + ("-shared-norm" if n1 == n2 else ""))
    a = _attention(b, n1, shape, opset, {})
    d = shape[-1]
    m = _proj(b, _gelu_body(b, _proj(b, n2, d, 2 * d, True), b.pick(["erf", "tanh"]), False), 2 * d, d, True)
    if b.p(0.5):
        return b.op("Add", [b.op("Add", [x, a]), m])
    return b.op("Add", [x, b.op("Add", [a, m])])


SWEEPS = {
    "mask_forms": _sweep({"mask": lambda b: b.pick(MASK_FORMS[1:])}),
    "rope_forms": _sweep({"rope": lambda b: b.pick(ROPE_FORMS[1:])}),
    "parallel_block": idiom_parallel_block,
    "qk_norm": _sweep({"qk_norm": lambda b: b.pick(["head_rms", "head_ln", "proj_rms"]),
                       "rope": lambda b: b.pick(ROPE_FORMS)}),
    "gqa_forms": _sweep({"gqa": lambda b: b.pick(["expand", "tile_ri", "tile_heads"])}),
    "score_bias": _sweep({"bias": lambda b: b.pick(["alibi_const", "alibi", "relpos"])}),
    "softcap": _sweep({"softcap": True}),
    # GPT-OSS's form: a Mul scale, one additive mask (or none)
    "sinks": _sweep({"sinks": True, "softcap": False, "bias": None, "scale_mul": lambda b: b.p(0.8),
                     "mask": lambda b: b.pick(["none", "pad", "combined", "causal_add_pad"])}),
}


def build_sweep(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A sweep motif (drawn, or ``name``) on a fresh hidden state [B, S, d], sometimes after a
    norm; returns the motif names."""
    h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 5, 8), [16, 32, 64], norm=name is None)
    name = name if name is not None else b.pick(list(SWEEPS) + ["merged_decoder"])
    if name == "merged_decoder":
        return motifs + build_merged(b, opset)
    motifs.append(name)
    b.output(SWEEPS[name](b, h, shape, opset))
    return motifs


# --- merged decoder --------------------------------------------------------------------------


def _branch_ops(b: Builder):
    """Name a branch's node outputs from a counter of its own, so both branches name alike."""
    count = [0]

    def op(op_type: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs):
        outs = []
        for _ in range(n_out):
            count[0] += 1
            outs.append(f"{op_type.lower()}_br{count[0]}")
        b.nodes.append(oh.make_node(op_type, inputs, outs, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs
    return op


def _decoder_layer(b: Builder, w: dict, x: str, am: str, past: tuple[str, str] | None, dims: dict,
                   opset: int) -> list[str]:
    """One decoder layer: [y, present_k, present_v]; ``past`` (names) joins K/V in front."""
    from fuzz_decoder import _mask, _rope_tables as _step_tables

    heads, hkv, dh = dims["heads"], dims["hkv"], dims["dh"]
    s = b.op("Shape", [x], start=1, end=2)
    t = b.op("Shape", [am], start=1, end=2)
    p = b.op("Sub", [t, s])
    zero, one = b.const(np.array(0, np.int64), I64), b.const(np.array(1, np.int64), I64)
    qpos = b.op("Range", [b.op("Squeeze", [p]), b.op("Squeeze", [t]), one])
    kpos = b.op("Range", [zero, b.op("Squeeze", [t]), one])
    mask = _mask(b, {"window": 0}, am, p, s, qpos, kpos)
    tables = _step_tables(b, {"head": dh, "fp16": b.dtype == F16}, qpos)
    sq = b.op("Mul", [x, x])
    rms = b.op("Sqrt", [b.op("Add", [_reduce_mean(b, sq, opset), b.scalar(1e-6)])])
    h = b.op("Mul", [b.op("Div", [x, rms]), w["gamma"]])
    q = _to_heads(b, b.op("MatMul", [h, w["q"]]), heads, dh)
    k = _to_heads(b, b.op("MatMul", [h, w["k"]]), hkv, dh)
    v = _to_heads(b, b.op("MatMul", [h, w["v"]]), hkv, dh)
    q, k = _rope(b, q, tables, dh, dh, False), _rope(b, k, tables, dh, dh, False)
    if past is not None:
        k, v = b.op("Concat", [past[0], k], axis=2), b.op("Concat", [past[1], v], axis=2)
    kc, vc = k, v
    if hkv != heads:
        kc, vc = (_repeat_kv(b, "expand", t4, heads, hkv, dh) for t4 in (k, v))
    sc = b.op("Add", [b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [kc], perm=[0, 1, 3, 2])]),
                                   b.scalar(1.0 / np.sqrt(dh))]), mask])
    o = b.op("MatMul", [b.op("Softmax", [sc], axis=-1), vc])
    y = b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]), b.ints([0, 0, heads * dh])])
    return [b.op("Add", [x, b.op("MatMul", [y, w["o"]])]), k, v]


def build_merged(b: Builder, opset: int) -> list[str]:
    """The merged decoder case: inputs, the If, outputs, and the alternate feeds (b.alt_feeds)."""
    dh = int(b.pick([16, 64]))
    hkv = int(b.pick([1, 2]))
    heads = hkv * int(b.pick([1, 2]))
    dm = heads * dh
    n_b, n_s, n_p = int(b.pick([1, 2])), int(b.pick([1, 2, 3])), int(b.pick([1, 3, 4]))
    b.syms.update(batch_size=n_b, sequence_length=n_s, past_sequence_length=n_p,
                  total_sequence_length=n_p + n_s)
    bsz, seq, past, total = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"
    x = b.input([bsz, seq, dm], stem="hidden")
    am = "attention_mask"
    b.inputs.append(oh.make_tensor_value_info(am, I64, [bsz, total]))
    mask = np.ones((n_b, n_p + n_s), np.int64)
    if b.p(0.4):
        mask[-1, :max(1, n_p // 2)] = 0     # left padding in the past
        b.trap("mask-left-padded")
    b.feeds[am] = mask
    pk, pv = "past_key_values.0.key", "past_key_values.0.value"
    for name in (pk, pv):
        b.inputs.append(oh.make_tensor_value_info(name, b.dtype, [bsz, hkv, past, dh]))
        b.feeds[name] = b.rng.standard_normal([n_b, hkv, n_p, dh]).astype(b.np_dtype())
    cond = "use_cache_branch"
    b.inputs.append(oh.make_tensor_value_info(cond, BOOL, [1]))
    b.feeds[cond] = np.array([True])
    # the outer weights both branches read
    w = {"q": b.weight([dm, dm]), "k": b.weight([dm, hkv * dh]), "v": b.weight([dm, hkv * dh]),
         "o": b.weight([dm, dm]), "gamma": b.const(1.0 + 0.1 * b.rng.standard_normal([dm]), stem="gamma")}
    dims = {"heads": heads, "hkv": hkv, "dh": dh}
    state = b.rng.bit_generator.state
    bodies = []
    saved_nodes, saved_op = b.nodes, b.op
    try:
        for with_past in (True, False):
            b.rng.bit_generator.state = state   # both branches draw alike: the same constants' forms
            b.nodes, b.op = [], _branch_ops(b)
            outs = _decoder_layer(b, w, x, am, (pk, pv) if with_past else None, dims, opset)
            bodies.append(oh.make_graph(b.nodes, b.name("then" if with_past else "else"), [],
                                        [oh.make_tensor_value_info(o, b.dtype, [None] * r) for o, r in zip(outs, (3, 4, 4))]))
    finally:
        b.nodes, b.op = saved_nodes, saved_op
    out = ["logits_hidden", "present.0.key", "present.0.value"]
    b.nodes.append(oh.make_node("If", [cond], out,
                                then_branch=bodies[0], else_branch=bodies[1]))
    for o in out:
        b.output(o)
    b.trap("merged-decoder-if")
    # the other branch: no past (length 0), a mask of the new tokens alone
    alt = dict(b.feeds)
    alt[cond] = np.array([False])
    alt[am] = np.ones((n_b, n_s), np.int64)
    for name in (pk, pv):
        alt[name] = np.zeros((n_b, hkv, 0, dh), b.np_dtype())
    b.alt_feeds = [alt]
    return ["merged_decoder"]
