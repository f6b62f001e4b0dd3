"""Fuzz motifs for the idioms session 25 taught the optimizer, so that a regression in their proofs or
passes, or a rewrite that is wrong on one of their values, shows up in a fuzz pass:

  lengths_key_mask  a boolean [B, S] key mask computed from per-row lengths (``arange(S) < lengths[:, None]``:
                    AudioFlamingo 3, LASR; 7ba674d's computed key masks), fed to transformers 5's vmap-style
                    4-D mask: index grids over batch / head / query / key, GatherND of the key mask, then
                    Where(keep, 0, lowest) (or -inf) added to the scores; lengths of 0 (a fully masked row), S
                    and between. Near miss (a trap): the mask read on the query axis, each query keeping its own
                    key too (a query-row mask, no key padding)
  causal_pad_past   attention over a cache with causal + key padding (d04da49 / 8492762's
                    cache-key-padding-bias): keys Concat(past, new), attention_mask [B, P + S], the mask
                    Where(key j <= P + i and attention_mask[b, j], 0, lowest) as transformers 5 builds it
                    (grids and GatherND) or broadcast (Unsqueeze / And); presents are outputs; the past
                    left padded, a row fully padded sometimes. Near misses: a sliding window of 3; transformers 4's
                    _unmask_unattended (a row with no kept key attends every key: ff6839a)
  covering_writes   ScatterND writes that tile the first axis of a zero buffer, DeepSeek V3's key_states
                    (3d031e3 / 040e3fb's covering-writes): [B, S, H, d1] | [B, S, 1, d2] (expanded over the
                    heads) written into a [B, S, H, d1 + d2] buffer transposed [3, 1, 2, 0], in either order,
                    with negative indices, transposed back and forth between the writes or not; near misses
                    (traps): a gap left zero, an overlap, a run out of order, the first write also an output

Each is a motif on the hidden state [B, S, d] (tools/fuzz_motifs.py's signature: builder, hidden, shape, opset
-> hidden). fuzz_motifs.make_case draws a case of this family for S25_SHARE of the seeds from a side stream
of its own (S25_SALT), checked after the other families, under which no seed a test names moves.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from fuzz_idioms import _lowest, _merge, _to_heads
from fuzz_motifs import I64, Builder, Dim, _proj, hidden_start

BOOL = TensorProto.BOOL
#: share of the motif-graph seeds that are session-25 cases (a side stream of the seed decides)
S25_SHARE = 0.08
#: the side stream that picks them (no seed a test names, and no graph of the tests' fuzz() runs, becomes one)
S25_SALT = 0x7EA2


def _attend(b: Builder, q4: str, k4: str, v4: str, bias: str, dh: int) -> str:
    """softmax(q k^T * scale + bias) v on [B, H, S, dh] heads."""
    sc = b.op("MatMul", [q4, b.op("Transpose", [k4], perm=[0, 1, 3, 2])])
    sc = b.op("Mul", [sc, b.scalar(float(dh ** -0.5))])
    s = b.op("Add", [sc, bias] if b.p(0.7) else [bias, sc])
    p = b.op("Softmax", [s], axis=-1)
    b.maybe_expose(p, 0.03)
    return b.op("MatMul", [p, v4])


def _fill(b: Builder) -> float:
    if b.p(0.15):
        b.trap("fill-neg-inf")
        return -np.inf
    return _lowest(b)


def _dim_of(b: Builder, t: str, axis: int) -> str:
    """t's size on ``axis`` as a [1] int64 (read at run time)."""
    return b.op("Shape", [t], start=axis, end=axis + 1)


def _grid_gather(b: Builder, keep2: str, rows: str, cols: str) -> str:
    """transformers 5's vmap mask: keep2 [B, T] read at (b, j) over the grids b [B, 1, 1, 1] and
    j [1, 1, 1, T] (Max / Expand / Concat / GatherND): [B, 1, 1, T] bool."""
    bi = b.op("Unsqueeze", [b.op("Range", [b.const(np.array(0, np.int64)), b.op("Squeeze", [rows]),
                                            b.const(np.array(1, np.int64))]), b.ints([1, 2, 3])])
    kj = b.op("Unsqueeze", [b.op("Range", [b.const(np.array(0, np.int64)), b.op("Squeeze", [cols]),
                                            b.const(np.array(1, np.int64))]), b.ints([0, 1, 2])])
    shp = b.op("Shape", [b.op("Max", [bi, kj])])
    idx = b.op("Concat", [b.op("Unsqueeze", [b.op("Expand", [bi, shp]), b.ints([-1])]),
                          b.op("Unsqueeze", [b.op("Expand", [kj, shp]), b.ints([-1])])], axis=-1)
    return b.op("GatherND", [keep2, idx])


def motif_lengths_key_mask(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, seq, d = shape
    heads, dh = int(b.pick([1, 2, 4])), int(b.pick([8, 16]))
    q4, k4, v4 = (_to_heads(b, _proj(b, x, d, heads * dh, b.p(0.5)), heads, dh) for _ in range(3))
    name = b.name("lengths")
    b.inputs.append(oh.make_tensor_value_info(name, I64, [bsz]))
    n_b, n_s = b.rt(bsz), b.rt(seq)
    lengths = b.rng.integers(1, n_s + 1, n_b)
    if n_b > 1:
        lengths[-1] = n_s
    if b.p(0.3):
        lengths[0] = 0
        b.trap("length-0-row")
    b.feeds[name] = lengths.astype(np.int64)
    s = _dim_of(b, x, 1)
    ar = b.op("Range", [b.const(np.array(0, np.int64)), b.op("Squeeze", [s]), b.const(np.array(1, np.int64))])
    km = b.op("Less", [b.op("Unsqueeze", [ar, b.ints([0])]), b.op("Unsqueeze", [name, b.ints([1])])])
    b.trap("key-mask-from-lengths")
    if b.p(0.1):   # near miss: the mask on the query axis ([B, 1, S, 1]): no key padding; each query keeps its
        # own key too (a row with no kept key would differ under --precision by float16's absorption, which the
        # verdict cannot see from lengths: s25 fp16 seed 126)
        eye = b.op("Equal", [b.op("Unsqueeze", [ar, b.ints([1])]), b.op("Unsqueeze", [ar, b.ints([0])])])
        keep = b.op("Or", [b.op("Unsqueeze", [km, b.ints([1, 3])]), eye])
        b.trap("query-row-mask")
    elif b.p(0.6):
        keep = _grid_gather(b, km, _dim_of(b, x, 0), s)
        b.trap("vmap-gathernd-mask")
    else:
        keep = b.op("Unsqueeze", [km, b.ints([1, 2])])
    if b.p(0.5):   # the 4-D mask expanded over the query rows, as the vmap's q grid does
        keep = b.op("Expand", [keep, b.op("Concat", [_dim_of(b, x, 0), b.ints([1]), s, s], axis=0)])
    bias = b.op("Where", [keep, b.scalar(0.0), b.scalar(_fill(b))])
    return _merge(b, _attend(b, q4, k4, v4, bias, dh), heads * dh, d)


def motif_causal_pad_past(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, seq, d = shape
    heads, dh = int(b.pick([1, 2, 4])), int(b.pick([8, 16]))
    q4, k4, v4 = (_to_heads(b, _proj(b, x, d, heads * dh, b.p(0.5)), heads, dh) for _ in range(3))
    # a side stream for switches added later (the graphs of the seeds drawn before stay what they were)
    b.side = np.random.default_rng([getattr(b, "seed", 0), 0x5252])
    past = b.dim("past", (1, 2, 4, 6), 0.7)
    n_b, n_s, n_p = b.rt(bsz), b.rt(seq), b.rt(past)
    pk, pv = (b.input([bsz, heads, past, dh], stem=stem) for stem in ("past_key", "past_value"))
    total = b.name("total") if isinstance(past, str) or isinstance(seq, str) else n_p + n_s
    am = b.name("attention_mask")
    b.inputs.append(oh.make_tensor_value_info(am, I64, [bsz, total]))
    keep = np.ones((n_b, n_p + n_s), np.int64)
    side = b.pick(["right", "left", "inner"])   # the last batch row's padding
    if side == "left":
        keep[-1, :n_p // 2 + 1] = 0
    elif side == "right":
        keep[-1, -1] = 0
    else:
        keep[-1, n_p // 2] = 0
    if n_b > 1 and b.p(0.3):
        keep[0] = 0
        b.trap("mask-fully-masked-row")
    b.trap(f"padded-{side}")
    b.feeds[am] = keep
    kc, vc = b.op("Concat", [pk, k4], axis=2), b.op("Concat", [pv, v4], axis=2)
    b.output(kc)
    b.output(vc)
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    p_len = b.op("Squeeze", [_dim_of(b, pk, 2)])
    t_len = b.op("Add", [p_len, b.op("Squeeze", [_dim_of(b, x, 1)])])
    kj, qi = b.op("Range", [zero, t_len, one]), b.op("Range", [p_len, t_len, one])
    cz = b.op("LessOrEqual", [b.op("Unsqueeze", [kj, b.ints([0])]), b.op("Unsqueeze", [qi, b.ints([1])])])
    if b.p(0.1):   # near miss: a sliding window of 3 keys
        cz = b.op("And", [cz, b.op("Greater", [b.op("Unsqueeze", [kj, b.ints([0])]),
                                               b.op("Sub", [b.op("Unsqueeze", [qi, b.ints([1])]), b.ints([3])])])])
        b.trap("sliding-window-3")
    amb = b.op("Cast", [am], to=BOOL)
    if b.p(0.5):
        am4 = _grid_gather(b, amb, _dim_of(b, x, 0), _dim_of(b, am, 1))
        b.trap("vmap-gathernd-mask")
    else:
        am4 = b.op("Unsqueeze", [amb, b.ints([1, 2])])
    keep = b.op("And", [am4, cz])
    if b.side.random() < 0.15:   # near miss: transformers 4's _unmask_unattended (a row with no kept key attends all)
        ki = b.op("Cast", [keep], to=TensorProto.INT32)   # (axes an input from opset 18, an attribute before)
        anyk = (b.op("ReduceMax", [ki, b.ints([-1])], keepdims=1) if opset >= 18 else
                b.op("ReduceMax", [ki], axes=[-1], keepdims=1))
        dead = b.op("Not", [b.op("Cast", [anyk], to=BOOL)])
        keep = b.op("Or", [keep, dead])
        b.trap("unmask-unattended")
    bias = b.op("Where", [keep, b.scalar(0.0), b.scalar(_fill(b))])
    b.trap("causal-padding-over-past")
    return _merge(b, _attend(b, q4, kc, vc, bias, dh), heads * dh, d)


def _runs(b: Builder, d1: int, d2: int) -> tuple[list[int], list[int], str, bool]:
    """The indices the two writes name (first: the nope part's, second: the rope part's), the
    reduction, and whether the writes cover the axis (a trap says which near miss when not)."""
    n = d1 + d2
    first, second = list(range(d1)), list(range(d1, n))
    # (no reduction near miss: ORT's CPU ScatterND has no float16 reduction, so --precision fp16 runs of
    # it are ort-refused; tests/passes/test_covering_writes.py keeps reduction add)
    miss = b.pick(["gap", "overlap", "order", "mid-output"]) if b.p(0.2) else None
    if miss == "gap":
        second = second[1:]
    elif miss == "overlap":
        second = [d1 - 1, *second[:-1]]
    elif miss == "order" and d1 > 1:
        first[0], first[1] = first[1], first[0]
    if b.p(0.3):   # counted from the end
        second = [i - n for i in second]
        b.trap("negative-indices")
    if miss:
        b.trap(f"writes-{miss}")
    return first, second, "none", miss is None


def motif_covering_writes(b: Builder, x: str, shape: list[Dim], opset: int) -> str:
    bsz, seq, d = shape
    heads, d1, d2 = int(b.pick([1, 2, 4])), int(b.pick([4, 6, 8])), int(b.pick([2, 4]))
    n = d1 + d2
    first, second, reduction, covers = _runs(b, d1, d2)
    w2 = len(second)   # the rope part's width (one less with a gap)
    nope = b.op("Reshape", [_proj(b, x, d, heads * d1, b.p(0.5)), b.ints([0, 0, heads, d1])])
    pe = b.op("Reshape", [_proj(b, x, d, w2, False), b.ints([0, 0, 1, w2])])
    lead = b.op("Shape", [nope], start=0, end=3)
    pe = b.op("Expand", [pe, b.op("Concat", [lead, b.ints([w2])], axis=0)])
    buf = b.op("ConstantOfShape", [b.op("Concat", [lead, b.ints([n])], axis=0)],
               value=oh.make_tensor("z", b.dtype, [1], [0.0]))
    perm = [3, 1, 2, 0]
    writes = [(first, nope), (second, pe)]
    if b.p(0.3):
        writes.reverse()
        b.trap("rope-part-written-first")
    data = b.op("Transpose", [buf], perm=perm)
    for k, (idx, upd) in enumerate(writes):
        if k == 1 and b.p(0.3):   # dynamo: the first write's result transposed back and forth again
            data = b.op("Transpose", [b.op("Transpose", [data], perm=perm)], perm=perm)
            b.trap("writes-back-and-forth")
        ind = b.const(np.asarray(idx, np.int64).reshape(-1, 1), I64, stem="idx")
        data = b.op("ScatterND", [data, ind, b.op("Transpose", [upd], perm=perm)],
                    **({"reduction": reduction} if reduction != "none" or b.p(0.3) else {}))
        if k == 0 and b.p(0.1):
            b.output(data)
            b.trap("writes-mid-output")
    if not covers:
        b.trap("writes-not-covering")
    key = b.op("Transpose", [data], perm=perm)
    return _proj(b, b.op("Reshape", [key, b.ints([0, 0, heads * n])]), heads * n, d, b.p(0.5))


S25 = {"lengths_key_mask": motif_lengths_key_mask, "causal_pad_past": motif_causal_pad_past,
       "covering_writes": motif_covering_writes}
#: the rules / passes each motif is there to exercise (the tests check that its plain form fires them)
S25_FIRES = {"lengths_key_mask": ("key-padding-bias",), "causal_pad_past": ("cache-key-padding-bias",),
             "covering_writes": ()}


def build_s25(b: Builder, opset: int, name: str | None = None) -> list[str]:
    """A session-25 motif (drawn, or ``name``) on a fresh hidden state [B, S, d], sometimes after a
    norm; returns the motif names."""
    h, shape, motifs = hidden_start(b, opset, (1, 2, 3, 5, 8), [16, 32], norm=name is None)
    name = name if name is not None else b.pick(list(S25))
    motifs.append(name)
    b.output(S25[name](b, h, shape, opset))
    return motifs
