"""KV-cache decoder graphs for the differential fuzzer (tools/fuzz_motifs.py draws them).

A decoder step as HF exports it: ``past_key_values.{i}.key/value`` [B, Hkv, P, D] inputs,
``present.{i}.key/value`` = Concat(past, new) outputs, the causal mask computed from
``attention_mask`` [B, P + S] and the past length (Shape(past)[2]), RoPE positions counted from
the past length, so the paged-KV rewrite (trt O4, docs/paged_kv.md) can fire. The spec's switches
(``Case.spec``, written to every saved case's info.json):

  window      a sliding-window band in the mask (0: none): the paged rewrite carries it as
              PagedAttention(window=W), ort/onnx keep the mask; the past is longer than the
              window so a lost band shows
  sinks       GPT-OSS attention sinks: a learned logit per head joins each softmax row, its
              column is dropped (rules/attention/recognize.yaml 'attention-sinks'); sink_shape:
              the sink expanded to GPT-OSS's export shape [B, 1, S, 1] or to Shape(scores)[0:3]
  padded      left padding in the last sequence's past (attention_mask zeros)
  fp16        float16 weights and I/O with HF's upcasts: RMSNorm and (optionally) softmax in a
              float32 island, RoPE tables computed in float32 and cast down (rules/rope/*.yaml;
              the Cast round trips identity elimination folds)
  upcast      whether softmax is upcast (fp16 only)
  decode      query length fixed at 1 (the fp8 kernels' case), else symbolic
  kv_fp8      also run O4 trt with kv_cache_dtype="fp8" (only where it applies: decode, head size
              in the fp8 kernels' sizes; with or without sinks)
  head, heads, kv_heads, layers, positions ("range": Range(P, P + S); "offset": Range(0, S) + P),
  repeat      GQA's K/V head repetition: HF's repeat_kv (shapes read at run time) or static Expand;
              from a side stream (REPEAT_FORM_SHARE of the GQA steps) the forms of tools/fuzz_forms.py:
              Tile on a new axis (tile_ri), Tile on [B, T, Hkv, D] (tile_bshd), Gather(h // n),
              Concat of n copies, and the near misses that read kv head h % Hkv (tile_heads,
              gather_mod), which no rewrite may take for GQA's map
  pos_shift   (a side stream of the seed, POS_SHIFT_SHARE) RoPE positions Range(P, P + S) + 1 or 2,
              the mask on the unshifted ones (PaliGemma's 1-based cache_position + 1)
  present_dims  present outputs declared [batch, Hkv, total, D] (else as shape inference finds)
  dim_names   the symbols: Optimum's (batch_size, sequence_length, past_sequence_length,
              total_sequence_length) or short ones (b, s, p, t) no convention names
  merged      (a side stream of the seed, MERGED_SHARE) the step written as Optimum's merged decoder
              (``as_merged``): an If on use_cache_branch, the step in one branch, the same nodes
              over an empty past in the other; checked on both values of the condition (the
              second feed set: an empty past, a mask of the new tokens). At O4 trt the If is
              resolved to its cache branch where that branch is paged (targets/trt_merged_decoder.py)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

F32, F16, I64, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL
FP8_HEADS = (64, 96, 128, 256)   # optimizer/passes/kv_cache_fp8.py FP8_HEAD_DIMS


def draw_spec(b) -> dict:
    head = int(b.pick([64, 64, 64, 64, 128, 128, 16]))   # 16: a head size the paged kernels refuse
    kv_heads = int(b.pick([1, 2]))
    spec = {
        "head": head, "kv_heads": kv_heads, "heads": kv_heads * int(b.pick([1, 2])),
        "layers": int(b.pick([1, 1, 2])),
        "window": int(b.pick([0] * 8 + [2, 3])),
        "sinks": b.p(0.15),
        "fp16": b.p(0.3),
        "decode": b.p(0.5),
        "positions": b.pick(["range", "offset"]),
        "padded": b.p(0.3),
        "sink_shape": b.pick(["export", "export", "scores"]),
        "dim_names": b.pick(["optimum", "optimum", "optimum", "short"]),
        "repeat": b.pick(["hf", "static"]),
        "present_dims": b.p(0.7),
    }
    spec["upcast"] = spec["fp16"] and b.p(0.7)
    # sinks too: every fp8 decode body reads PagedAttention's input 9
    spec["kv_fp8"] = spec["decode"] and head in FP8_HEADS and b.p(0.6)
    return spec


def _graph_input(b, name: str, dtype: int, shape: list, value: np.ndarray) -> str:
    b.inputs.append(oh.make_tensor_value_info(name, dtype, shape))
    b.feeds[name] = value
    return name


def _mask(b, spec: dict, am: str, p: str, s: str, qpos: str, kpos: str) -> str:
    """additive [B, 1, S, T]: key j visible to query i iff j <= P + i (and j > P + i - W), and
    attention_mask[j] == 1."""
    rows = b.op("Unsqueeze", [qpos, b.ints([1])])            # [S, 1]
    cols = b.op("Unsqueeze", [kpos, b.ints([0])])            # [1, T]
    allowed = b.op("LessOrEqual", [cols, rows])
    if spec["window"]:
        lo = b.op("Sub", [rows, b.const(np.array(spec["window"], np.int64), I64)])
        allowed = b.op("And", [allowed, b.op("Greater", [cols, lo])])
        b.trap("sliding-window")
    pad = b.op("Cast", [b.op("Unsqueeze", [am, b.ints([1, 2])])], to=BOOL)   # [B, 1, 1, T]
    allowed = b.op("And", [b.op("Unsqueeze", [allowed, b.ints([0, 1])]), pad])
    dt = b.dtype
    low = float(np.finfo(np.float16 if dt == F16 else np.float32).min)
    return b.op("Where", [allowed, b.const(np.zeros(()), dt), b.const(np.full((), low), dt)])


def _rope_tables(b, spec: dict, qpos: str) -> tuple[str, str]:
    """HF's rotary: inv_freq x positions in float32, cos/sin cast to the model's type."""
    d = spec["head"]
    inv = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))
    pos = b.op("Cast", [b.op("Unsqueeze", [qpos, b.ints([0, 2])])], to=F32)   # [1, S, 1]
    freqs = b.op("Mul", [pos, b.const(inv, F32, stem="inv_freq")])              # [1, S, d/2]
    emb = b.op("Concat", [freqs, freqs], axis=-1)
    cos, sin = b.op("Cos", [emb]), b.op("Sin", [emb])
    if spec["fp16"]:
        cos, sin = b.op("Cast", [cos], to=F16), b.op("Cast", [sin], to=F16)
    return b.op("Unsqueeze", [cos, b.ints([1])]), b.op("Unsqueeze", [sin, b.ints([1])])


def _softmax(b, spec: dict, sc: str, heads: int, opset: int) -> str:
    if spec["sinks"]:
        sink = b.const(b.rng.standard_normal([1, heads, 1, 1]), stem="sinks")
        if spec["sink_shape"] == "scores":   # Shape(scores)[0:3] + [1]
            shape = b.op("Concat", [b.op("Shape", [sc], start=0, end=3), b.ints([1])], axis=0)
        else:   # GPT-OSS's export: [B (from attention_mask), 1, S (from the hidden state), 1]
            shape = b.op("Concat", [b.op("Shape", ["attention_mask"], start=0, end=1), b.ints([1]),
                                    b.op("Shape", [spec["_x"]], start=1, end=2), b.ints([1])], axis=0)
        cat = b.op("Concat", [sc, b.op("Expand", [sink, shape])], axis=-1)
        mx = b.op("ReduceMax", [cat, b.ints([-1])], keepdims=1) if opset >= 18 else \
            b.op("ReduceMax", [cat], axes=[-1], keepdims=1)
        p = b.op("Softmax", [b.op("Sub", [cat, mx])], axis=-1)
        b.trap("attention-sinks")
        return b.op("Slice", [p, b.ints([0]), b.ints([-1]), b.ints([-1]), b.ints([1])])
    if spec["upcast"]:
        p = b.op("Softmax", [b.op("Cast", [sc], to=F32)], axis=-1)
        b.trap("softmax-upcast")
        return b.op("Cast", [p], to=F16)
    return b.op("Softmax", [sc], axis=-1)


def _layer(b, spec: dict, i: int, x: str, mask: str, tables, dims, opset: int) -> str:
    from fuzz_motifs import _rope, motif_rms_norm

    bsz, seq, past, total = dims
    dh, heads, hkv = spec["head"], spec["heads"], spec["kv_heads"]
    dm = heads * dh
    h = motif_rms_norm(b, x, [bsz, seq, dm], opset)
    q = b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, b.weight([dm, dm])]), b.ints([0, 0, heads, dh])])],
             perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, b.weight([dm, hkv * dh])]), b.ints([0, 0, hkv, dh])])],
             perm=[0, 2, 1, 3])
    v = b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, b.weight([dm, hkv * dh])]), b.ints([0, 0, hkv, dh])])],
             perm=[0, 2, 1, 3])
    q, k = _rope(b, q, tables, dh, dh, False), _rope(b, k, tables, dh, dh, False)
    kc, vc = [], []
    for kind, new in (("key", k), ("value", v)):
        name = f"past_key_values.{i}.{kind}"
        arr = b.rng.standard_normal([b.rt(bsz), hkv, b.rt(past), dh]).astype(b.np_dtype())
        _graph_input(b, name, b.dtype, [bsz, hkv, past, dh], arr)
        cat = b.op("Concat", [name, new], axis=2)
        b.nodes[-1].output[0] = f"present.{i}.{kind}"
        b.output(f"present.{i}.{kind}")
        (kc if kind == "key" else vc).append(f"present.{i}.{kind}")
    kc, vc = kc[0], vc[0]
    if hkv != heads:
        def repeat(t4):
            if spec["repeat"] not in ("hf", "static"):   # the forms of tools/fuzz_forms.py
                from fuzz_sweeps import _repeat_kv

                return _repeat_kv(b, spec["repeat"], t4, heads, hkv, dh)
            u = b.op("Unsqueeze", [t4, b.ints([2])])
            if spec["repeat"] == "static":
                e = b.op("Expand", [u, b.ints([1, 1, heads // hkv, 1, 1])])
                return b.op("Reshape", [e, b.ints([0, heads, -1, dh])])
            # HF's repeat_kv: expand to [B, Hkv, n, T, D] and reshape to [B, H, T, D], shapes read
            sh = b.op("Shape", [t4])
            bt = b.op("Slice", [sh, b.ints([0]), b.ints([1])])
            td = b.op("Slice", [sh, b.ints([2]), b.ints([4])])
            e = b.op("Expand", [u, b.op("Concat", [bt, b.ints([hkv, heads // hkv]), td], axis=0)])
            return b.op("Reshape", [e, b.op("Concat", [bt, b.ints([heads]), td], axis=0)])
        kc, vc = repeat(kc), repeat(vc)
    sc = b.op("MatMul", [q, b.op("Transpose", [kc], perm=[0, 1, 3, 2])])
    sc = b.op("Add", [b.op("Mul", [sc, b.scalar(1.0 / np.sqrt(dh))]), mask])
    o = b.op("MatMul", [_softmax(b, spec, sc, heads, opset), vc])
    y = b.op("Reshape", [b.op("Transpose", [o], perm=[0, 2, 1, 3]), b.ints([0, 0, dm])])
    return b.op("Add", [x, b.op("MatMul", [y, b.weight([dm, dm])])])


def build_decoder(b, opset: int, spec: dict) -> None:
    """The decoder step's nodes, inputs and feeds into builder ``b`` (its dtype set by the spec)."""
    dm = spec["heads"] * spec["head"]
    names = ("batch_size", "sequence_length", "past_sequence_length", "total_sequence_length") \
        if spec["dim_names"] == "optimum" else ("b", "s", "p", "t")
    bsz = int(b.pick([1, 2]))
    if b.p(0.7):
        b.syms[names[0]] = bsz
        bsz = names[0]
    seq = 1
    if not spec["decode"]:
        seq = names[1]
        b.syms[seq] = int(b.pick([1, 2, 3]))
    # the past reaches beyond the window, so a lost band shows
    past = names[2]
    b.syms[past] = int(b.pick((spec["window"] + 2, spec["window"] + 4) if spec["window"] else (1, 3, 5)))
    total = names[3]
    b.syms[total] = b.rt(past) + b.rt(seq)
    spec["_present"] = [bsz, spec["kv_heads"], total, spec["head"]]
    x = b.name("hidden_states")
    spec["_x"] = x
    _graph_input(b, x, b.dtype, [bsz, seq, dm],
                 b.rng.standard_normal([b.rt(bsz), b.rt(seq), dm]).astype(b.np_dtype()))
    am = np.ones([b.rt(bsz), b.syms[total]], np.int64)
    if spec["padded"] and b.syms[total] > 2:
        am[-1, :b.rt(past) // 2] = 0     # left padding in the past of the last sequence
        b.trap("padded-past")
    _graph_input(b, "attention_mask", I64, [bsz, total], am)
    # the past length and the positions, read from past_key_values.0.key (declared below)
    p = b.op("Shape", ["past_key_values.0.key"], start=2, end=3)
    s = b.op("Shape", [x], start=1, end=2)
    t = b.op("Add", [p, s])
    p0, t0 = b.op("Squeeze", [p]), b.op("Squeeze", [t])
    one, zero = b.const(np.array(1, np.int64), I64), b.const(np.array(0, np.int64), I64)
    if spec["positions"] == "range":
        qpos = b.op("Range", [p0, t0, one])
    else:
        qpos = b.op("Add", [b.op("Range", [zero, b.op("Squeeze", [s]), one]), p0])
    kpos = b.op("Range", [zero, t0, one])
    mask = _mask(b, spec, "attention_mask", p, s, qpos, kpos)
    rpos = qpos
    if spec.get("pos_shift"):   # the rotary positions only: the mask keeps the cache's own
        rpos = b.op("Add", [qpos, b.const(np.array(spec["pos_shift"], np.int64), I64)])
        b.trap("positions-shifted")
    tables = _rope_tables(b, spec, rpos)
    h = x
    for i in range(spec["layers"]):
        h = _layer(b, spec, i, h, mask, tables, (bsz, seq, past, total), opset)
    b.output(h)
    del spec["_x"]


#: share of the decoder steps written as a merged decoder (``as_merged``), drawn from a side stream
MERGED_SHARE = 0.25
#: share of the decoder steps written at a LOW_OPSETS opset (a side stream of the seed): below
#: the 18 / 20 / 23 of the main draw, so that the fuzzer's pinned runs (tools/fuzz_opset.py) reach
#: opsets 15..17 too (Shape(start, end) needs 15)
LOW_OPSET_SHARE = 0.3
LOW_OPSETS = (15, 16, 17)
#: share of the decoder steps whose RoPE positions are shifted by a constant 1 or 2 (``pos_shift``,
#: a side stream of the seed; PaliGemma's 1-based positions): trt-paged-kv follows ids + c
POS_SHIFT_SHARE = 0.25
#: share of the GQA steps whose K/V repeat is one of REPEAT_FORMS (a side stream of the seed)
REPEAT_FORM_SHARE = 0.6
#: tools/fuzz_forms.py's GQA forms and near misses (tools/fuzz_sweeps._repeat_kv writes them)
REPEAT_FORMS = ("tile_ri", "tile_bshd", "gather", "concat", "tile_ri", "gather", "tile_heads", "gather_mod")


def as_merged(model: onnx.ModelProto, feeds: dict, hidden: str) -> tuple[onnx.ModelProto, dict, dict]:
    """The step as Optimum's merged decoder (tools/merged_decoder.py: the empty past made in the
    else branch from ``hidden``'s batch). Returns (model, feeds with use_cache_branch true, the
    other branch's feeds: an empty past, an all-ones mask over the new tokens)."""
    from merged_decoder import merged_decoder

    merged = merged_decoder(model, hidden)
    pasts = [i for i in model.graph.input if i.name.startswith("past_key_values.")]
    feeds = dict(feeds, use_cache_branch=np.array([True]))
    alt = dict(feeds, use_cache_branch=np.array([False]),
               attention_mask=np.ones((feeds[hidden].shape[0], feeds[hidden].shape[1]), np.int64))
    alt.update({p.name: feeds[p.name][:, :, :0] for p in pasts})
    return merged, feeds, alt
