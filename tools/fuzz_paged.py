"""The differential fuzzer's check of the paged-KV rewrite (trt O4, docs/paged_kv.md).

The rewrite replaces the contiguous past inputs with block pools (``kv_pool_{k,v}.X``, one per
PagedAttention, X the layer index of ``past_key_values.X.*`` or the past's whole name),
``block_tables`` and ``seq_lens``, and puts ``kv_pool_{k,v}_out.X`` in the output slots of the
present outputs. As verify does (optimizer/verify.py ``_run_paged``), the original's past is
written into shuffled blocks of a pool (NaN in every unused slot: a stray read shows), the paged
model runs on that, the other outputs are compared as they are and each present output with its
sequences read back out of the returned pool. The contract has no padding (seq_lens says each
sequence's length), so the reference runs with every input the rewrite retired that is an int
padding mask set to ones.

fp8 pools (``kv_cache_dtype="fp8"``): the past is first rounded to e4m3 at a per-head scale, the
original runs on the rounded past and the fp8 model on its bytes; the new tokens' K/V are rounded
by the op, so outputs are compared at e4m3's tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

F8 = onnx.TensorProto.FLOAT8E4M3FN
BLOCK = 4   # not a divisor of most P + S: a sequence ends inside a partial block
#: relative and absolute (x the output's magnitude) tolerance of a run on fp8 pools: e4m3 keeps
#: 3 mantissa bits, the new token's K/V are rounded to it (the past is exact in both)
FP8_TOL = (0.1, 0.1)


def is_paged(model: onnx.ModelProto) -> bool:
    inputs = {i.name for i in model.graph.input}
    return {"block_tables", "seq_lens"} <= inputs and any(
        n.op_type == "PagedAttention" and n.domain == "onnx_fuse" for n in model.graph.node)


def _past_name(pool: str, original_inputs: set[str]) -> str:
    """kv_pool_k.X -> the original's past input: X itself, else past_key_values.X.key/value."""
    kind, _, layer = pool.partition(".")
    if layer in original_inputs:
        return layer
    return f"past_key_values.{layer}.{'key' if kind.endswith('_k') else 'value'}"


def pools(optimized: onnx.ModelProto) -> list[tuple[str, str]]:
    """(pool input, pool output) of every PagedAttention, K then V."""
    out = []
    for n in optimized.graph.node:
        if n.op_type == "PagedAttention" and n.domain == "onnx_fuse":
            out += [(n.input[3], n.output[1]), (n.input[4], n.output[2])]
    return out


def reference_feeds(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict) -> dict:
    """The original's feeds with the padding masks the rewrite retired set to ones."""
    kept = {i.name for i in optimized.graph.input}
    out = dict(feeds)
    for vi in original.graph.input:
        if vi.name not in kept and vi.name in feeds and feeds[vi.name].dtype.kind in "iub":
            out[vi.name] = np.ones_like(feeds[vi.name])
    return out


def paged_feeds(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict, new_tokens: int,
                seed: int, fp8: bool = False) -> tuple[dict, dict]:
    """(the original's feeds, the paged model's feeds). With ``fp8`` the original's past is
    rounded to e4m3 (per kv head scale) and the pools hold its bytes, plus kv_scale_{k,v}.X."""
    rng = np.random.default_rng(seed)
    ref = reference_feeds(original, optimized, feeds)
    names = {i.name for i in original.graph.input}
    pairs = pools(optimized)
    first = ref[_past_name(pairs[0][0], names)]
    B, _, P, _ = first.shape
    need = max(1, math.ceil((P + new_tokens) / BLOCK))
    num_blocks = B * need + 3
    perm = rng.permutation(num_blocks)
    tables = perm[:B * need].reshape(B, need).astype(np.int32)
    run = {}
    if fp8:
        from onnx_fuse.reference.attention import dequantize_e4m3, quantize_e4m3
    for pool, _ in pairs:
        past = np.asarray(ref[_past_name(pool, names)])
        hkv, d = past.shape[1], past.shape[3]
        if fp8:
            # headroom over the past's amax: the new token's K/V saturate past 448 * scale
            scale = np.maximum(np.abs(past).max(axis=(0, 2, 3)) if P else np.ones(hkv), 0.25) / 28.0
            scale = scale.astype(np.float32)
            q = quantize_e4m3(past.astype(np.float32).transpose(0, 2, 1, 3), scale)
            past = dequantize_e4m3(q, scale).transpose(0, 2, 1, 3).astype(past.dtype)
            ref[_past_name(pool, names)] = past
            kind, _, layer = pool.partition(".")
            run[f"kv_scale_{kind[-1]}.{layer}"] = scale
        arr = np.full((num_blocks, BLOCK, hkv, d), np.nan, past.dtype)
        for b in range(B):
            for pos in range(P):
                arr[tables[b, pos // BLOCK], pos % BLOCK] = past[b, :, pos]
        if fp8:
            raw = quantize_e4m3(np.nan_to_num(arr).astype(np.float32), scale).view(np.uint8).copy()
            raw[np.isnan(arr)] = 0x7F
            arr = raw
        run[pool] = arr
    run["block_tables"] = tables
    run["seq_lens"] = np.full(B, P + new_tokens, np.int32)
    for vi in optimized.graph.input:
        if vi.name not in run and vi.name in ref:
            run[vi.name] = ref[vi.name]
        if vi.name in run and vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 \
                and run[vi.name].dtype == np.float32:
            run[vi.name] = run[vi.name].astype(np.float16)
    return ref, run


def run_paged(sess, optimized: onnx.ModelProto, run_feeds: dict) -> dict:
    """Outputs by name; fp8 pools fed as FLOAT8E4M3FN OrtValues."""
    import onnxruntime as ort

    f8 = {v.name for v in optimized.graph.input if v.type.tensor_type.elem_type == F8}
    # the graph's inputs, not sess.get_inputs(): that leaves out initializers that are also
    # inputs, whose feeds (the user's override) must still reach the model
    wanted = {i.name for i in optimized.graph.input}
    vals = {k: (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(v, F8) if k in f8
                else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)))
            for k, v in run_feeds.items() if k in wanted}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, [o.numpy() for o in sess.run_with_ort_values(names, vals)]))


def paired_outputs(original: onnx.ModelProto, optimized: onnx.ModelProto, ref_out: list, got: dict,
                   run_feeds: dict, total: int) -> tuple[list, list, list] | str:
    """(names, original values, paged values) slot by slot, pools read back as present.*; or
    what does not line up (a signature failure)."""
    from onnx_fuse.reference.attention import dequantize_e4m3
    from onnx_fuse.targets.paged_kv_feeds import gather_pool

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
                kind, _, layer = pool_in.partition(".")
                g = dequantize_e4m3(g.view(np.uint8), run_feeds[f"kv_scale_{kind[-1]}.{layer}"])
            g = np.stack([gather_pool(g, row, total) for row in run_feeds["block_tables"]]).astype(r.dtype)
        names.append(name)
        refs.append(r)
        gots.append(g)
    return names, refs, gots


def compare_fp8(names, ref, got) -> tuple[str, str]:
    for name, r, g in zip(names, ref, got):
        r64, g64 = np.asarray(r, np.float64), np.asarray(g, np.float64)
        if r64.shape != g64.shape:
            return "signature", f"output {name!r}: run-time {list(g64.shape)}, original {list(r64.shape)}"
        if not np.all(np.isfinite(g64) == np.isfinite(r64)):
            return "wrong", f"output {name!r}: non-finite positions differ (fp8 pools)"
        ok = np.isfinite(r64)
        scale = max(1.0, float(np.max(np.abs(r64[ok]), initial=0.0)))
        err = np.abs(g64[ok] - r64[ok])
        rtol, atol = FP8_TOL
        if err.size and not np.all(err <= atol * scale + rtol * np.abs(r64[ok])):
            return "wrong", f"output {name!r}: max abs diff {float(err.max()):.3g} (scale {scale:.3g}, fp8 pools)"
    return "ok", ""
