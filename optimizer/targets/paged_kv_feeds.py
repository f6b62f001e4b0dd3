"""Verification harness of the paged-KV lowering (rule trt-paged-kv, docs/paged_kv.md), shared by
verify (optimizer/verify.py) and the differential fuzzer (tools/fuzz_paged.py).

The rewrite replaces each contiguous past input with a block pool ``kv_pool_{k,v}.X`` (X: the
layer index of ``past_key_values.X.key``-style names, else the past's whole name), adds
``block_tables`` and ``seq_lens``, and puts ``kv_pool_{k,v}_out.X`` in the present outputs' slots;
``kv_cache_dtype="fp8"`` makes the pools float8e4m3fn with ``kv_scale_{k,v}.X`` inputs. Here: the
original's feeds -> the paged model's (the past written into shuffled, non-contiguous pool blocks,
NaN in every unused slot so a stray read shows; fp8: the past rounded to e4m3 at a per-head scale
first, the reference then runs on the rounded past), running it, and its outputs paired slot by
slot with the original's, each pool read back in the ``present.*`` layout.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

__all__ = ["paged_inputs_from_contiguous", "gather_pool", "is_paged_rewrite", "pool_name", "past_input",
           "pools", "is_fp8", "round_e4m3", "paged_feeds", "total_length", "new_tokens", "run_paged", "paired_outputs",
           "FP8_TOL", "E4M3_U", "fp8_tolerance",
           "fp8_pool_tolerance", "pool_scales"]

F8 = onnx.TensorProto.FLOAT8E4M3FN
#: e4m3's unit roundoff: 3 mantissa bits, round to nearest, so |e4m3(x) - x| <= 2^-4 |x| (normal x)
E4M3_U = 2.0 ** -4
#: relative and absolute (x the output's magnitude, at least 1) tolerance of a model on fp8 pools:
#: the op rounds the new tokens' K/V to e4m3 (the past is exact); 0.1 >= E4M3_U with room for
#: what that rounding does to the outputs computed from them
FP8_TOL = (0.1, 0.1)
_NAN_E4M3 = 0x7F


def fp8_tolerance(ref, base: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(atol, rtol) of an output ``ref`` of a model on fp8 pools: a pair passes where
    ``|got - ref| <= atol + rtol * |ref|``, with atol FP8_TOL's absolute part times the output's
    magnitude (its largest finite |value|, at least 1). ``base`` (atol, rtol): the bound the model
    has without fp8 pools (--precision's); e4m3 then rounds values that already carry that error,
    so the bounds add: |e4m3(y) - x| <= E4M3_U |y| + |y - x| with |y - x| <= a + r |x| gives
    (FP8_TOL[1] mag + (1 + E4M3_U) a, FP8_TOL[0] + (1 + E4M3_U) r)."""
    r = np.asarray(ref, np.float64)
    mag = max(1.0, float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)))
    grow = 1.0 + E4M3_U
    return FP8_TOL[1] * mag + grow * base[0], FP8_TOL[0] + grow * base[1]


def fp8_pool_tolerance(scales, base: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(atol, rtol) of a present output read back out of an fp8 pool with kv scales ``scales``:
    the past there is the original's own (rounded before it ran), and the op rounds each new
    token's y (within ``base`` of the original's x) to e4m3 x scale, at most E4M3_U |y| off for a
    normal e4m3 and half its subnormal step, 2^-10 x scale, below 2^-6 x scale. So
    |got - x| <= 2^-10 s + E4M3_U |y| + |y - x| <= (2^-10 s + (1 + E4M3_U) a) + (E4M3_U + (1 +
    E4M3_U) r) |x|. A value past 448 x scale saturates and fails it (round_e4m3 leaves 16x
    headroom over the past's amax)."""
    smax = float(np.max(np.asarray(scales, np.float64), initial=0.0))
    grow = 1.0 + E4M3_U
    return 2.0 ** -10 * smax + grow * base[0], E4M3_U + grow * base[1]


def _after_paged(optimized: onnx.ModelProto) -> list[bool]:
    """Per PagedAttention node, in graph order: whether its new K or V (inputs 1, 2) depend on
    another PagedAttention's output (a later layer: its new tokens carry the earlier ones' fp8
    error)."""
    made = {o: n for n in optimized.graph.node for o in n.output}
    paged = [n for n in optimized.graph.node if n.op_type == "PagedAttention" and n.domain == "onnx_fuse"]
    ids = {id(n) for n in paged}
    flags = []
    for n in paged:
        seen, todo, late = set(), [v for v in n.input[1:3] if v], False
        while todo and not late:
            m = made.get(todo.pop())
            if m is None or id(m) in seen:
                continue
            seen.add(id(m))
            late = id(m) in ids
            todo += [v for v in m.input if v]
        flags.append(late)
    return flags


def pool_scales(original: onnx.ModelProto, optimized: onnx.ModelProto, run_feeds: dict) -> dict:
    """{original output name: its pool's kv scales [Hkv]} for the present slots holding an fp8
    pool whose new tokens no other fp8 attention computed (the first layer's: fp8_pool_tolerance
    holds there); empty on 16-bit pools. ``run_feeds`` from paged_feeds."""
    late = [flag for flag in _after_paged(optimized) for _ in "kv"]   # pools() lists K then V per node
    outs = {o: i for (i, o), flag in zip(pools(optimized), late) if not flag}
    found = {}
    for a, b in zip(original.graph.output, optimized.graph.output):
        if b.name in outs:
            kind, _, x = outs[b.name].partition(".")
            key = f"kv_scale_{kind[-1]}.{x}"
            if key in run_feeds:
                found[a.name] = np.asarray(run_feeds[key], np.float32)
    return found


def pool_name(past: str, tag: str) -> str:
    """The pool that replaces past input ``past`` (``tag``: "k" or "v"), as rule trt-paged-kv
    names it: the middle part of a three-part name (past_key_values.3.key -> kv_pool_k.3), else
    the whole name."""
    parts = past.split(".")
    return f"kv_pool_{tag}.{parts[1] if len(parts) == 3 else past}"


def past_input(pool: str, original_inputs) -> str:
    """The original's past input that pool input ``pool`` replaces (pool_name's inverse)."""
    kind, _, x = pool.partition(".")
    tag = kind[-1]
    names = list(original_inputs)
    if x in names and pool_name(x, tag) == pool:
        return x
    three = [n for n in names if len(n.split(".")) == 3 and n.split(".")[1] == x]
    if len(three) > 1:   # past.3.key and past.3.value: the one whose last part names the tag
        three = [n for n in three if n.split(".")[2].lower().startswith(tag)] or three
    return three[0] if three else f"past_key_values.{x}.{'key' if tag == 'k' else 'value'}"


def round_e4m3(past: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``past`` [B, Hkv, P, D] rounded to e4m3 x scale, in its own dtype; the float32 per kv head
    scales). The scale leaves 16x headroom over the past's amax: the new tokens' K/V saturate at
    448 x scale."""
    from onnx_fuse.reference.attention import dequantize_e4m3, quantize_e4m3

    hkv = past.shape[1]
    amax = np.abs(past).max(axis=(0, 2, 3)) if past.size else np.ones(hkv)
    scale = (np.maximum(amax, 0.25) / 28.0).astype(np.float32)
    q = quantize_e4m3(past.astype(np.float32).transpose(0, 2, 1, 3), scale)
    return dequantize_e4m3(q, scale).transpose(0, 2, 1, 3).astype(past.dtype), scale


def paged_inputs_from_contiguous(feeds: dict, block_size: int, *, past_lens=None, new_tokens: int = 1,
                                 spare_blocks: int = 3, seed: int = 0, fill=np.nan,
                                 layers: list[str] | None = None, pool_map: dict | None = None,
                                 scales: dict | None = None) -> dict:
    """Feeds for the rewritten model from the original model's feeds.

    ``pool_map`` {pool input: past input} names the pasts [B, Hkv, P, D] (default: every
    ``past_key_values.{i}.key/.value`` of ``layers``, all by default, as ``kv_pool_{k,v}.{i}``);
    the other feeds pass through except the pasts and ``attention_mask``. Sequence ``b`` uses
    its first ``past_lens[b]`` past positions (default: all P) and gets
    ``ceil((past_lens[b] + new_tokens) / block_size)`` blocks, drawn shuffled from a pool with
    ``spare_blocks`` extra blocks, so the tables are non-contiguous and out of order; unused slots
    hold ``fill`` (NaN: a read of them shows). ``seq_lens = past_lens + new_tokens`` (the contract
    counts the new tokens). ``scales`` {pool input: float32 [Hkv]}: those pools hold the e4m3
    bytes (uint8) of ``past / scale`` (NaN's byte where ``fill`` is NaN), their scales fed as
    ``kv_scale_{k,v}.X``.
    """
    if pool_map is None:
        layers = layers or sorted({k.split(".")[1] for k in feeds if k.startswith("past_key_values.")}, key=int)
        pool_map = {f"kv_pool_{kv[0]}.{i}": f"past_key_values.{i}.{kv}" for i in layers for kv in ("key", "value")}
    scales = scales or {}
    rng = np.random.default_rng(seed)
    B, _, P, _ = np.asarray(feeds[next(iter(pool_map.values()))]).shape
    lens = np.full(B, P, np.int64) if past_lens is None else np.asarray(past_lens, np.int64)
    if np.any(lens > P) or np.any(lens < 0):
        raise ValueError(f"past_lens {lens} outside [0, {P}]")
    need = [max(1, math.ceil((int(n) + new_tokens) / block_size)) for n in lens]
    num_blocks = sum(need) + spare_blocks
    perm = rng.permutation(num_blocks)
    tables = np.full((B, max(need)), -1, np.int32)
    at = 0
    for b in range(B):
        tables[b, :need[b]] = perm[at:at + need[b]]
        at += need[b]
    retired = set(pool_map.values()) | {"attention_mask"}
    out = {k: v for k, v in feeds.items() if k not in retired and not k.startswith("past_key_values.")}
    for pool, past_name in pool_map.items():
        past = np.asarray(feeds[past_name])
        arr = np.full((num_blocks, block_size, past.shape[1], past.shape[3]), fill, past.dtype)
        for b in range(B):
            for pos in range(int(lens[b])):
                arr[tables[b, pos // block_size], pos % block_size] = past[b, :, pos]
        if pool in scales:
            from onnx_fuse.reference.attention import quantize_e4m3

            raw = quantize_e4m3(np.nan_to_num(arr).astype(np.float32), scales[pool]).view(np.uint8).copy()
            raw[np.isnan(arr)] = _NAN_E4M3
            arr = raw
            kind, _, x = pool.partition(".")
            out[f"kv_scale_{kind[-1]}.{x}"] = np.asarray(scales[pool], np.float32)
        out[pool] = arr
    out["block_tables"] = tables
    out["seq_lens"] = (lens + new_tokens).astype(np.int32)
    return out


def gather_pool(pool: np.ndarray, table_row: np.ndarray, length: int) -> np.ndarray:
    """Logical positions [0, length) of one sequence as [Hkv, length, D] (present.* layout)."""
    bs = pool.shape[1]
    pos = np.arange(length)
    return pool[np.asarray(table_row)[pos // bs], pos % bs].transpose(1, 0, 2)


def is_paged_rewrite(original_inputs: set[str], optimized_inputs: set[str]) -> bool:
    """True when ``optimized`` is the paged-KV rewrite of ``original`` (docs/paged_kv.md):
    contiguous past inputs in, block tables, sequence lengths and pools out."""
    pooled = [n for n in optimized_inputs if n.startswith("kv_pool_k.")]
    return ({"block_tables", "seq_lens"} <= optimized_inputs and bool(pooled)
            and all(past_input(p, original_inputs) in original_inputs for p in pooled))


_PASS = ("Cast", "Identity")   # what may sit between a pool and the graph's I/O (bf16 emulation)


def pools(optimized: onnx.ModelProto) -> list[tuple[str, str]]:
    """(pool graph input, pool graph output) of every PagedAttention, K then V: its inputs 3 and
    4 and outputs 1 and 2, followed through Cast / Identity to the graph's I/O (bf16's emulation
    puts Casts there)."""
    made = {o: n for n in optimized.graph.node for o in n.output}
    reads: dict[str, list] = {}
    for n in optimized.graph.node:
        for i in n.input:
            reads.setdefault(i, []).append(n)
    outputs = {o.name for o in optimized.graph.output}

    def back(v: str) -> str:
        while v in made and made[v].op_type in _PASS:
            v = made[v].input[0]
        return v

    def forward(v: str) -> str:
        while v not in outputs and len(reads.get(v, ())) == 1 and reads[v][0].op_type in _PASS:
            v = reads[v][0].output[0]
        return v

    out = []
    for n in optimized.graph.node:
        if n.op_type == "PagedAttention" and n.domain == "onnx_fuse":
            out += [(back(n.input[3]), forward(n.output[1])), (back(n.input[4]), forward(n.output[2]))]
    return out


def is_fp8(optimized: onnx.ModelProto) -> bool:
    """Whether the pools are float8e4m3fn (kv_cache_dtype="fp8")."""
    names = {p for p, _ in pools(optimized)}
    return any(vi.name in names and vi.type.tensor_type.elem_type == F8 for vi in optimized.graph.input)


def _retired_masks(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict) -> dict:
    """The original's feeds with each integer padding mask the rewrite retired set to ones (the
    contract has no padding: seq_lens says each sequence's length)."""
    kept = {i.name for i in optimized.graph.input}
    out = dict(feeds)
    for vi in original.graph.input:
        x = feeds.get(vi.name)
        if vi.name not in kept and x is not None and x.dtype.kind in "iub" and not np.all(x == 1):
            out[vi.name] = np.ones_like(x)
    return out


def total_length(optimized: onnx.ModelProto, ref_out: list, feeds: dict | None = None) -> int:
    """Cached + new positions: the sequence dim of the original's output in a pool's slot. A
    cropped cache's present (a sliding layer keeping its last n tokens) is shorter than the past
    fed (``feeds``): where every pool's slot is cropped, P + S (new_tokens)."""
    outs = {o for _, o in pools(optimized)}
    lens = [int(np.asarray(ref_out[k]).shape[2]) for k, o in enumerate(optimized.graph.output) if o.name in outs]
    if feeds is None:
        return lens[0]
    past = {past_input(p, list(feeds)) for p, _ in pools(optimized)}
    P = max(int(np.asarray(feeds[n]).shape[2]) for n in past if n in feeds)
    if max(lens) > P:
        return max(lens)
    return P + new_tokens(optimized, feeds, P)


# inputs that carry one entry per new token (HF's names): input_ids, inputs_embeds, position_ids,
# cache_position, token_type_ids
_TOKEN_WORDS = ("ids", "embeds", "position")


def new_tokens(optimized: onnx.ModelProto, feeds: dict, past: int) -> int:
    """S, the new tokens' count in ``feeds`` (P = ``past`` cached ones), read from the token inputs
    the paged model takes: [B, S] ids and positions, [B, S, hidden] embeddings, [S] cache
    positions, or a mask it kept ([B, P + S]); where it takes none of these (the paged model
    retires attention_mask), the original's mask among ``feeds``. Every input read must agree."""
    skip = {p for p, _ in pools(optimized)} | {"block_tables", "seq_lens"}
    got: dict[str, int] = {}

    def read(name: str, x: np.ndarray) -> None:
        low = name.lower()
        if "mask" in low:
            if x.ndim >= 2 and x.shape[-1] > past:
                got[name] = int(x.shape[-1]) - past
        elif any(w in low for w in _TOKEN_WORDS) and (x.ndim in (1, 2) or (x.ndim == 3 and "embeds" in low)):
            got[name] = int(x.shape[0 if x.ndim == 1 else 1])

    for vi in optimized.graph.input:
        if vi.name not in skip and not vi.name.startswith("kv_scale_") and vi.name in feeds:
            read(vi.name, np.asarray(feeds[vi.name]))
    if not got:
        for name, x in feeds.items():
            if "mask" in name.lower():
                read(name, np.asarray(x))
    if not got:
        raise ValueError("every present is cropped and no token input, positions or mask tells the new tokens' count")
    if len(set(got.values())) > 1:
        raise ValueError(f"the inputs disagree on the new tokens' count: {got}")
    return next(iter(got.values()))


def paged_feeds(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict, *, total: int,
                block_size: int = 4, seed: int = 0, fp8: bool | None = None) -> tuple[dict, dict]:
    """(the original's feeds, the paged model's) for one comparison. The original's: ``feeds``
    with retired padding masks set to ones and, on fp8 pools (``fp8`` None: the pools' type
    says), each past rounded to e4m3 (round_e4m3); the paged model's: those pasts in pools
    (paged_inputs_from_contiguous), then every other input of ``optimized.graph.input`` found in
    ``feeds`` (the graph's inputs: an initializer that is also an input takes the user's feed),
    cast to float16 where that input is float16 (precision's pools)."""
    names = [i.name for i in original.graph.input]
    pool_map = {p: past_input(p, names) for p, _ in pools(optimized)}
    fp8 = is_fp8(optimized) if fp8 is None else fp8
    ref = _retired_masks(original, optimized, feeds)
    scales = {}
    if fp8:
        for pool, past in pool_map.items():
            ref[past], scales[pool] = round_e4m3(np.asarray(ref[past]))
    P = np.asarray(ref[next(iter(pool_map.values()))]).shape[2]
    run = paged_inputs_from_contiguous(ref, block_size, new_tokens=total - P, seed=seed,
                                       pool_map=pool_map, scales=scales)
    f16 = onnx.TensorProto.FLOAT16
    for vi in optimized.graph.input:
        if vi.name not in run and vi.name in ref:
            run[vi.name] = ref[vi.name]
        if vi.name in run and vi.type.tensor_type.elem_type == f16 and run[vi.name].dtype == np.float32:
            run[vi.name] = run[vi.name].astype(np.float16)
    wanted = {i.name for i in optimized.graph.input}
    return ref, {k: v for k, v in run.items() if k in wanted}


def run_paged(sess, optimized: onnx.ModelProto, run_feeds: dict) -> dict:
    """The paged model's outputs by name; fp8 pools fed as FLOAT8E4M3FN OrtValues."""
    import onnxruntime as ort

    f8 = {v.name for v in optimized.graph.input if v.type.tensor_type.elem_type == F8}
    vals = {k: (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(v, F8) if k in f8
                else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)))
            for k, v in run_feeds.items()}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, [o.numpy() for o in sess.run_with_ort_values(names, vals)]))


def paired_outputs(original: onnx.ModelProto, optimized: onnx.ModelProto, ref_out: list, got: dict,
                   run_feeds: dict, total: int) -> tuple[list, list, list] | str:
    """(names, original values, paged values) slot by slot, each pool in a present output's slot
    read back (fp8: dequantized) as [B, Hkv, total, D]; or what does not line up."""
    from onnx_fuse.reference.attention import dequantize_e4m3

    a = [o.name for o in original.graph.output]
    b = [o.name for o in optimized.graph.output]
    if len(a) != len(b):
        return f"output count {len(a)} -> {len(b)}"
    outs = {o: i for i, o in pools(optimized)}
    names, refs, gots = [], [], []
    for name, r, new in zip(a, ref_out, b):
        g = got[new]
        if new != name:
            if new not in outs:
                return f"output slot {name!r} holds {new!r}, not a pool"
            pool_in = outs[new]
            if g.dtype == np.uint8 or run_feeds[pool_in].dtype == np.uint8:
                kind, _, x = pool_in.partition(".")
                g = dequantize_e4m3(g.view(np.uint8), run_feeds[f"kv_scale_{kind[-1]}.{x}"])
            g = np.stack([gather_pool(g, row, total) for row in run_feeds["block_tables"]]).astype(r.dtype)
            if np.ndim(r) == 4 and 0 < r.shape[2] < total:   # a cropped cache's present: its last tokens
                g = g[:, :, total - r.shape[2]:]
        names.append(name)
        refs.append(r)
        gots.append(g)
    return names, refs, gots
