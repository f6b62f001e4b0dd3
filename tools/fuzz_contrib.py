"""Fuzz forms for what session 17 taught the optimizer (session 18, fuzz11):

  gqa_contrib   com.microsoft::GroupQueryAttention as onnxruntime-genai's builder writes it: packed
                or separate QKV projections, a KV cache (past_key_values.0.* in, present.0.* out),
                seqlens_k / total_sequence_length computed from attention_mask, sometimes RoPE inside
                (do_rotary: full or partial width, interleaved or not), a local window, softcap and
                scale (rules/attention/contrib_gqa.yaml lowers it at onnx / trt; ort keeps it). The
                feeds are the ones the lowering is exact on: a mask of ones with a past, right
                padding only on a prompt without one (batch 1 for a prefill over a past: ORT's CPU
                kernel refuses more)
  mha_contrib   com.microsoft::RotaryEmbedding on q and k [B, S, N*D] with [B, S] position ids (a
                graph input, or Range(0, S) + c) and com.microsoft::MultiHeadAttention over them,
                with an additive causal (and padding) attention_bias or none (contrib_mha.yaml,
                contrib_rotary.yaml)
  qdq_int8      attention whose projections read int8 Q -> DQ activations (zero point 0 or not)
                and int8 weights at opset 21..23, sometimes a Q -> DQ pair after the heads split
                (ORT's QDQ propagation moves a Q past Reshape / Transpose: the qdq-int8-to-uint8
                pass)
  flat_layout   attention on [B*H, S, D] views made by Flatten (Flatten(q4, axis=2) is [B*H, S*D],
                a Reshape [0, -1, D] copies the merged dim: LongT5's form), or heads merged by
                Flatten(axis=2) before a 2-D output projection (fold-layout-chains, _attention_3d.py)

fuzz_motifs.make_case draws a contrib case for CONTRIB_SHARE of the motif-graph seeds from a side
stream of its own (CONTRIB_SALT: no seed a test names and no other seed's graph moves).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from fuzz_motifs import F16, F32, Builder, Case, _declare_outputs, motif_rms_norm

I64, I32, BOOL, I8 = TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.INT8
#: share of the motif-graph seeds that are contrib cases (a side stream of the seed decides)
CONTRIB_SHARE = 0.10
#: under this salt no seed a test names, and no motif graph of the tests' fuzz() runs, becomes one
CONTRIB_SALT = 0xE4FF
MAXPOS = 64


def _graph_input(b: Builder, name: str, dtype: int, shape: list, value: np.ndarray) -> str:
    b.inputs.append(oh.make_tensor_value_info(name, dtype, shape))
    b.feeds[name] = value
    return name


def _caches(b: Builder, rot_dim: int) -> tuple[str, str]:
    """[MAXPOS, rot_dim / 2] cos / sin caches (genai's), in the graph's dtype."""
    inv = 1.0 / (10000.0 ** (np.arange(0, rot_dim, 2) / rot_dim))
    ang = np.outer(np.arange(MAXPOS), inv)
    return b.const(np.cos(ang), stem="cos_cache"), b.const(np.sin(ang), stem="sin_cache")


def _rotary_draw(b: Builder, dh: int) -> tuple[int, int]:
    """(rotary width, interleaved): the full head or, for dh >= 32, a partial width whose half is a
    multiple of 8 (ORT's CPU kernels)."""
    rd = dh if dh < 32 or not b.p(0.3) else int(b.pick([w for w in (16, 32) if w < dh]))
    if rd < dh:
        b.trap("contrib-partial-rotary")
    il = int(b.p(0.3))
    if il:
        b.trap("contrib-rotary-interleaved")
    return rd, il


def form_gqa_contrib(b: Builder, opset: int) -> list[str]:
    dh = int(b.pick([16, 32, 64, 64]))
    hkv = int(b.pick([1, 2, 2, 4]))
    heads = hkv * int(b.pick([1, 2, 4]))
    mode = b.pick(["decode", "decode", "prefill_past", "prompt"])
    bsz = 1 if mode == "prefill_past" else int(b.pick([1, 2]))
    seq = 1 if mode == "decode" else int(b.pick([2, 3, 5]))
    past = 0 if mode == "prompt" else int(b.pick([1, 3, 6]))
    b.trap(f"gqa-contrib-{mode.replace('_', '-')}")
    total = past + seq
    names = {"batch": bsz, "sequence_length": seq, "past_sequence_length": past, "total_sequence_length": total}
    b.syms.update(names)
    B, S, P, T = (("batch" if b.p(0.7) else bsz), "sequence_length", "past_sequence_length", "total_sequence_length")
    dm = heads * dh
    x = _graph_input(b, "hidden_states", b.dtype, [B, S, dm],
                     b.rng.standard_normal([bsz, seq, dm]).astype(b.np_dtype()))
    am = np.ones([bsz, total], np.int64)
    if mode == "prompt" and bsz > 1 and b.p(0.4):   # right padding: exact without a past
        am[-1, max(1, total - 2):] = 0
        b.trap("gqa-contrib-right-padding")
    _graph_input(b, "attention_mask", I64, [B, T], am)
    h = motif_rms_norm(b, x, [B, S, dm], opset) if b.p(0.4) else x
    packed = b.p(0.5)
    if packed:
        qkv = [b.op("MatMul", [h, b.weight([dm, dm + 2 * hkv * dh])]), "", ""]
        b.trap("gqa-contrib-packed")
    else:
        qkv = [b.op("MatMul", [h, b.weight([dm, dm])]), b.op("MatMul", [h, b.weight([dm, hkv * dh])]),
               b.op("MatMul", [h, b.weight([dm, hkv * dh])])]
    pk = _graph_input(b, "past_key_values.0.key", b.dtype, [B, hkv, P, dh],
                      b.rng.standard_normal([bsz, hkv, past, dh]).astype(b.np_dtype()))
    pv = _graph_input(b, "past_key_values.0.value", b.dtype, [B, hkv, P, dh],
                      b.rng.standard_normal([bsz, hkv, past, dh]).astype(b.np_dtype()))
    # genai: seqlens_k = sum(mask) - 1, total_sequence_length = mask's width, both int32
    ssum = b.op("ReduceSum", ["attention_mask", b.ints([1])], keepdims=0)
    sk = b.op("Cast", [b.op("Sub", [ssum, b.const(np.array(1, np.int64), I64)])], to=I32)
    tl = b.op("Cast", [b.op("Gather", [b.op("Shape", ["attention_mask"]), b.const(np.array(1, np.int64), I64)],
                            axis=0)], to=I32)
    attrs = {"num_heads": heads, "kv_num_heads": hkv}
    inputs = [*qkv, pk, pv, sk, tl]
    if b.p(0.65):
        rd, il = _rotary_draw(b, dh)
        inputs += list(_caches(b, rd))
        attrs.update(do_rotary=1, rotary_interleaved=il)
        b.trap("gqa-contrib-rotary")
    if b.p(0.2):
        attrs["local_window_size"] = int(b.pick([2, 3]))
        b.trap("gqa-contrib-window")
    if b.p(0.15):
        attrs["softcap"] = float(b.pick([2.0, 30.0]))
        b.trap("gqa-contrib-softcap")
    if b.p(0.2):
        attrs["scale"] = float(b.pick([0.1, 0.3]))
    y, pko, pvo = "gqa_out", "present.0.key", "present.0.value"
    b.nodes.append(oh.make_node("GroupQueryAttention", inputs, [y, pko, pvo], domain="com.microsoft", **attrs))
    b.output(b.op("Add", [x, b.op("MatMul", [y, b.weight([dm, dm])])]))
    b.output(pko)
    b.output(pvo)
    return ["gqa_contrib"]


def _causal_bias(b: Builder, seq_src: str, am: str | None) -> str:
    """[1 or B, 1, S, S] additive: causal, and the padding of ``am`` [B, S] when given."""
    s = b.op("Squeeze", [b.op("Shape", [seq_src], start=1, end=2)])
    pos = b.op("Range", [b.const(np.array(0, np.int64), I64), s, b.const(np.array(1, np.int64), I64)])
    keep = b.op("LessOrEqual", [b.op("Unsqueeze", [pos, b.ints([0])]), b.op("Unsqueeze", [pos, b.ints([1])])])
    keep = b.op("Unsqueeze", [keep, b.ints([0, 1])])
    if am is not None:
        keep = b.op("And", [keep, b.op("Cast", [b.op("Unsqueeze", [am, b.ints([1, 2])])], to=BOOL)])
    low = float(np.finfo(np.float16 if b.dtype == F16 else np.float32).min)
    return b.op("Where", [keep, b.const(np.zeros(()), stem="zero"), b.const(np.full((), low), stem="low")])


def form_mha_contrib(b: Builder, opset: int) -> list[str]:
    dh = int(b.pick([16, 32, 64]))
    heads = int(b.pick([1, 2, 4]))
    dm = heads * dh
    bsz, seq = int(b.pick([1, 2])), int(b.pick([1, 2, 3, 5]))
    b.syms.update(batch=bsz, seq=seq)
    B = "batch" if b.p(0.6) else bsz
    S = "seq"
    x = _graph_input(b, "hidden_states", b.dtype, [B, S, dm],
                     b.rng.standard_normal([bsz, seq, dm]).astype(b.np_dtype()))
    q = b.op("MatMul", [x, b.weight([dm, dm])])
    k = b.op("MatMul", [x, b.weight([dm, dm])])
    v = b.op("MatMul", [x, b.weight([dm, dm])])
    if b.p(0.8):
        shift = int(b.pick([0, 0, 1, 3]))
        if b.p(0.5):
            ids = np.broadcast_to(np.arange(shift, shift + seq), (bsz, seq)).astype(np.int64)
            pos = _graph_input(b, "position_ids", I64, [B, S], ids)
            b.trap("contrib-rotary-position-input")
        else:   # Range(0, S) + shift, expanded to [B, S]
            s = b.op("Squeeze", [b.op("Shape", [x], start=1, end=2)])
            r = b.op("Range", [b.const(np.array(0, np.int64), I64), s, b.const(np.array(1, np.int64), I64)])
            if shift:
                r = b.op("Add", [r, b.const(np.array(shift, np.int64), I64)])
                b.trap("contrib-rotary-shifted-positions")
            pos = b.op("Expand", [b.op("Unsqueeze", [r, b.ints([0])]), b.op("Shape", [x], start=0, end=2)])
        rd, il = _rotary_draw(b, dh)
        cc, sc = _caches(b, rd)
        nh = heads if rd < dh or b.p(0.4) else 0
        rattrs = {"interleaved": il, "num_heads": nh}
        if rd < dh:
            rattrs["rotary_embedding_dim"] = rd
        q = b.op("RotaryEmbedding", [q, pos, cc, sc], domain="com.microsoft", **rattrs)
        k = b.op("RotaryEmbedding", [k, pos, cc, sc], domain="com.microsoft", **rattrs)
        b.trap("contrib-rotary")
    mode = b.pick(["none", "causal", "causal", "causal_pad"])
    inputs = [q, k, v]
    if mode != "none":
        am = None
        if mode == "causal_pad":
            arr = np.ones([bsz, seq], np.int64)
            if seq > 2:
                arr[-1, seq - 1:] = 0   # right padding: every query keeps key 0
            am = _graph_input(b, "attention_mask", I64, [B, S], arr)
        inputs += ["", "", _causal_bias(b, x, am)]
        b.trap(f"mha-contrib-{mode.replace('_', '-')}")
    attrs = {"num_heads": heads}
    if b.p(0.3):
        attrs["scale"] = float(b.pick([0.1, 0.25]))
    y = b.op("MultiHeadAttention", inputs, domain="com.microsoft", **attrs)
    b.output(b.op("Add", [x, b.op("MatMul", [y, b.weight([dm, dm])])]))
    return ["mha_contrib"]


def _qdq_int8(b: Builder, x: str, nonzero_zp: bool) -> str:
    """QuantizeLinear -> DequantizeLinear with int8 activations (static QDQ, opset >= 21)."""
    scale = b.const(np.array(float(b.pick([0.02, 0.05]))), stem="xscale")
    zp = b.const(np.array(int(b.pick([-3, 5])) if nonzero_zp else 0, np.int8), I8, stem="xzp")
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, scale, zp]), scale, zp])


def form_qdq_int8(b: Builder, opset: int) -> list[str]:
    from fuzz_forms import quantized_weight
    from fuzz_sweeps import _attention

    bsz, seq = b.dim("batch", (1, 2), 0.6), b.dim("seq", (1, 3, 5), 0.6)
    d = int(b.pick([16, 32, 64]))
    x = b.input([bsz, seq, d], stem="hidden")
    nonzero = b.p(0.3)
    after_split = b.p(0.4)
    b.trap("qdq-int8-activation" + ("-zp" if nonzero else ""))

    def proj(b_: Builder, h: str, d_in: int, d_out: int, bias: bool) -> str:
        w = quantized_weight(b_, d_in, d_out, opset) if b_.p(0.7) else b_.weight([d_in, d_out])
        m = b_.op("MatMul", [_qdq_int8(b_, h, nonzero), w])
        if bias:
            m = b_.op("Add", [m, b_.const(0.1 * b_.rng.standard_normal([d_out]), stem="bias")])
        if after_split:   # Q -> DQ on the projection's output too, the heads Reshape after it
            b_.trap("qdq-int8-before-reshape")
            m = _qdq_int8(b_, m, nonzero)
        return m

    b.output(_attention(b, x, [bsz, seq, d], opset, {"gqa": None} if b.p(0.6) else {}, proj=proj))
    return ["qdq_int8"]


def form_flat_layout(b: Builder, opset: int) -> list[str]:
    bsz, seq = int(b.pick([1, 2])), int(b.pick([1, 2, 3, 5]))
    B = b.dim("batch", (bsz,), 0.6)
    S = b.dim("seq", (seq,), 0.6)
    dh = int(b.pick([8, 16, 32]))
    heads = int(b.pick([1, 2, 4]))
    dm = heads * dh
    x = b.input([B, S, dm], stem="hidden")
    q4, k4, v4 = (b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [x, b.weight([dm, dm])]),
                                                      b.ints([0, 0, heads, dh])])], perm=[0, 2, 1, 3])
                  for _ in range(3))
    flat_bmm = b.p(0.5)
    if flat_bmm:   # [B*H, S, D] views: Flatten(axis=2) then a Reshape copying the merged dim
        b.trap("flatten-bmm-views")
        q3, k3, v3 = (b.op("Reshape", [b.op("Flatten", [t], axis=2), b.ints([0, -1, dh])]) for t in (q4, k4, v4))
        s = b.op("MatMul", [q3, b.op("Transpose", [k3], perm=[0, 2, 1])])
    else:
        s = b.op("MatMul", [q4, b.op("Transpose", [k4], perm=[0, 1, 3, 2])])
    s = b.op("Mul", [s, b.scalar(float(dh ** -0.5))])
    if b.p(0.5):   # causal over the keys (same length)
        m = _causal_bias(b, x, None)
        if flat_bmm:
            m = b.op("Squeeze", [m, b.ints([0])])   # [1, S, S]: broadcast over B*H
        s = b.op("Add", [s, m])
        b.trap("flat-causal")
    o = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v3 if flat_bmm else v4])
    if flat_bmm:   # back to [B, H, S, D]: the batch and heads read from q4's shape
        o = b.op("Reshape", [o, b.op("Concat", [b.op("Shape", [q4], start=0, end=2), b.ints([-1, dh])], axis=0)])
    ot = b.op("Transpose", [o], perm=[0, 2, 1, 3])
    if b.p(0.5):   # heads merged by Flatten(axis=2): [B*S, H*D], a 2-D projection, back to [B, S, d]
        b.trap("flatten-heads-merge")
        y2 = b.op("MatMul", [b.op("Flatten", [ot], axis=2), b.weight([dm, dm])])
        y = b.op("Reshape", [y2, b.op("Concat", [b.op("Shape", [x], start=0, end=2), b.ints([dm])], axis=0)])
    else:
        y = b.op("MatMul", [b.op("Reshape", [ot, b.ints([0, 0, dm])]), b.weight([dm, dm])])
    b.output(b.op("Add", [x, y]))
    return ["flat_layout"]


FORMS = {"gqa_contrib": form_gqa_contrib, "mha_contrib": form_mha_contrib, "qdq_int8": form_qdq_int8,
         "flat_layout": form_flat_layout}
#: the default-domain opsets a case is written at (qdq_int8: 21..23, where ORT's int8 rewrite bites)
OPSETS = {"gqa_contrib": (17, 20, 21, 22, 23), "mha_contrib": (17, 20, 22, 23), "qdq_int8": (21, 22, 23),
          "flat_layout": (17, 18, 20, 23)}


def make_contrib_case(seed: int, name: str | None = None) -> Case:
    """A contrib / layout case (``name`` picks the form: tests); float16 one time in ten (not for
    qdq_int8, whose float16 scales ORT's int8 kernels take only from opset 19: kept float32)."""
    rng = np.random.default_rng([seed, 0xC019])
    name = name if name is not None else str(rng.choice(list(FORMS)))
    b = Builder(rng, F16 if name != "qdq_int8" and rng.random() < 0.1 else F32)
    opset = int(b.pick(list(OPSETS[name])))
    if b.dtype == F16:
        b.trap("fp16")
    motifs = FORMS[name](b, opset)
    outputs = [oh.make_tensor_value_info(o, 0, None) for o in b.outputs]
    graph = oh.make_graph(b.nodes, f"fuzz_contrib_{seed}", b.inputs, outputs, initializer=b.inits)
    imports = [oh.make_opsetid("", opset)]
    if any(n.domain == "com.microsoft" for n in b.nodes):
        imports.append(oh.make_opsetid("com.microsoft", 1))
    model = oh.make_model(graph, opset_imports=imports, ir_version=9 if opset < 21 else 10)
    model = _declare_outputs(model, b)
    _rank_only_outputs(model, b)
    return Case(seed, model, b.feeds, motifs, b.traps)


def _rank_only_outputs(model: onnx.ModelProto, b: Builder) -> None:
    """onnx's shape inference knows no com.microsoft op: an output it left without a shape gets the
    rank the original has at run time, its dims unknown (the checker wants a shape field)."""
    missing = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if not missing:
        return
    from onnx_fuse.verify import make_session

    sess = make_session(model, threads=1, ort_optimizations=False)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, b.feeds)))
    for o in missing:
        o.CopyFrom(oh.make_tensor_value_info(o.name, o.type.tensor_type.elem_type or b.dtype,
                                             [None] * got[o.name].ndim))
